// Package vfs is the storage engine's filesystem seam.
//
// Everything the engine does to disk goes through FS, so tests can swap the real
// filesystem (OS) for an in-memory one (Mem) that simulates crashes — dropping
// every byte and directory entry that was not made durable by Sync/SyncDir,
// optionally tearing the last unsynced write at a random byte — and injects
// I/O errors (EIO, ENOSPC) on write and on sync.
//
// The interface is deliberately small: files are written at explicit offsets
// (WriteAt), read at explicit offsets (ReadAt), synced, truncated and closed;
// directories are created, listed, synced and removed.
//
// Direct writes. OpenDirect opens an existing file with O_DIRECT (OS, Linux only) so that its
// writes bypass the page cache: the data goes from the caller's buffer to the device, and no
// page-cache page is allocated for it (on a virtual machine whose free memory returns to the host,
// new page-cache pages are the dearest part of a buffered write; docs/storage.md, "Page cache"). Every WriteAt and ReadAt through a direct handle
// must have its file offset, its length and its buffer's address aligned to DirectAlign (4096):
// AlignedBuffer makes such buffers, and a partial last block is written whole, zero-padded past
// the logical end, and rewritten by the next write (then Truncate sets the logical size). The
// kernel refuses a misaligned call with EINVAL; it checks alignment per extent, so a misaligned
// length spanning several blocks may fail after writing its aligned leading blocks (and os.File
// then reports 0 bytes written). Mem refuses any misalignment up front with ErrMisaligned, which
// wraps EINVAL, and is stricter than ext4 (which takes multiples of the 512-byte logical block
// size), so code that passes on Mem is aligned for any device. Where O_DIRECT is unavailable
// (open fails with EINVAL: a file system without direct I/O, such as tmpfs before Linux 6.6;
// other OSes; a Mem after SetDirectUnsupported; a FS without DirectOpener) OpenDirect returns an
// error wrapping ErrDirectUnsupported and the caller falls back to buffered writes. Direct and
// buffered handles of one file may be open together: before a direct write the kernel writes back
// and invalidates the cached pages of its range, so a buffered handle reads the new data (from the
// device) afterwards. A direct write is not durable when it returns: it may sit in the device's
// volatile write cache (/sys/block/vda/queue/write_cache says "write back"), and a new block or a
// grown size is file metadata. Durability still needs DataSync (or Sync), exactly as for buffered
// writes; Mem's direct files model that (Crash drops or tears unsynced direct writes).
package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
)

// File is an open file.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Sync makes the file's contents and size durable (fsync).
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Size reports the current size, including unsynced writes.
	Size() (int64, error)
	Close() error
}

// Flags for OpenFile (a subset of os.O_*).
const (
	ReadOnly  = os.O_RDONLY
	ReadWrite = os.O_RDWR
	Create    = os.O_CREATE
	Excl      = os.O_EXCL
	Trunc     = os.O_TRUNC
)

// FileInfo describes a directory entry.
type FileInfo struct {
	Name  string
	Size  int64
	IsDir bool
}

// FS is a filesystem.
type FS interface {
	// OpenFile opens name with flags from ReadOnly, ReadWrite, Create, Excl, Trunc.
	OpenFile(name string, flag int) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a directory tree; no error if absent.
	RemoveAll(name string) error
	// Rename atomically replaces newname with oldname (after SyncDir of the parent).
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(name string) error
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]FileInfo, error)
	// Stat describes one path.
	Stat(name string) (FileInfo, error)
	// SyncDir makes the directory's entries (creations, renames, removals) durable.
	SyncDir(name string) error
}

// MkdirAllDurable creates dir and whatever of its path is missing, and fsyncs the parent of every
// directory on the path, dir's included, so that a power loss cannot take the directories (and what
// is later made durable in them) with an unsynced entry. The parents of directories that existed
// before the call are synced too: an earlier call may have created them and failed, or died, before
// its syncs (a directory sync of an unchanged directory writes nothing). When the child existed
// before the call, only an I/O error syncing its parent fails the call: a parent this process may
// not open, or on a file system that does not sync directories (a read-only root, squashfs), was
// not written here and nothing here can sync it. dir itself is not fsynced: its entries are its
// creator's to sync.
func MkdirAllDurable(fsys FS, dir string) error {
	dir = path.Clean(dir)
	type step struct {
		parent  string
		existed bool // the child of parent on the path existed before the call
	}
	var steps []step
	for d := dir; d != path.Dir(d); d = path.Dir(d) {
		_, err := fsys.Stat(d)
		if err != nil && !IsNotExist(err) {
			return err
		}
		steps = append(steps, step{parent: path.Dir(d), existed: err == nil})
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return err
	}
	for _, s := range steps {
		if err := fsys.SyncDir(s.parent); err != nil {
			if s.existed && !errors.Is(err, EIO) {
				continue
			}
			return fmt.Errorf("sync %s: %w", s.parent, err)
		}
	}
	return nil
}

// ErrNotExist is returned (wrapped) for a missing path; errors.Is(err, fs.ErrNotExist) also holds.
var ErrNotExist = fs.ErrNotExist

// IsNotExist reports whether err says a path is missing.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// OS is the real filesystem.
type OS struct{}

var _ FS = OS{}

type osFile struct{ *os.File }

// DataSyncer is implemented by files that can make their data durable without the metadata
// that is not needed to read it back (fdatasync: no mtime, but a changed size is included).
type DataSyncer interface {
	DataSync() error
}

// DataSync makes f's data durable: fdatasync where f supports it, else Sync.
func DataSync(f File) error {
	if d, ok := f.(DataSyncer); ok {
		return d.DataSync()
	}
	return f.Sync()
}

// WritebackStarter is implemented by files that can start writing a range of their dirty pages to
// the device without waiting for it (Linux sync_file_range with SYNC_FILE_RANGE_WRITE). It makes
// nothing durable: only an fsync does. Its use is pacing: data written through the page cache and
// fsynced much later reaches the device in small steps instead of one burst at the fsync.
type WritebackStarter interface {
	StartWriteback(off, n int64) error
}

// StartWriteback starts writeback of f's bytes [off, off+n) where f supports it; elsewhere it does
// nothing and returns nil.
func StartWriteback(f File, off, n int64) error {
	if w, ok := f.(WritebackStarter); ok {
		return w.StartWriteback(off, n)
	}
	return nil
}

// WritebackWaiter is implemented by files that can write all their dirty pages to the device and
// wait for that, reporting a writeback error the way fsync does (once per open file description),
// without making anything durable: no metadata, no flush of the device's cache (Linux
// sync_file_range with WAIT_BEFORE|WRITE|WAIT_AFTER over the whole file). Its use is learning about
// a failed writeback of data written through a descriptor before closing it, at the cost of the
// data writes alone.
type WritebackWaiter interface {
	WaitWriteback() error
}

// WaitWriteback writes f's dirty pages back and waits for them where f supports it, returning a
// writeback error; elsewhere it is DataSync (which does that and more).
func WaitWriteback(f File) error {
	if w, ok := f.(WritebackWaiter); ok {
		return w.WaitWriteback()
	}
	return DataSync(f)
}

// CacheDropper is implemented by files whose clean cached pages of a range can be dropped from
// the page cache (Linux posix_fadvise with POSIX_FADV_DONTNEED). Dirty pages and pages under
// writeback are kept, so it never loses data; it only decides what a later read finds in memory.
type CacheDropper interface {
	DropCache(off, n int64) error
}

// DropCache drops f's clean cached pages of [off, off+n) where f supports it (n == 0: to the end of
// the file); elsewhere it does nothing and returns nil.
func DropCache(f File, off, n int64) error {
	if d, ok := f.(CacheDropper); ok {
		return d.DropCache(off, n)
	}
	return nil
}

func (f osFile) Size() (int64, error) {
	st, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// OpenFile implements FS.
func (OS) OpenFile(name string, flag int) (File, error) {
	f, err := os.OpenFile(name, flag, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Remove implements FS.
func (OS) Remove(name string) error { return os.Remove(name) }

// RemoveAll implements FS.
func (OS) RemoveAll(name string) error { return os.RemoveAll(name) }

// Rename implements FS.
func (OS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// MkdirAll implements FS.
func (OS) MkdirAll(name string) error { return os.MkdirAll(name, 0o755) }

// ReadDir implements FS.
func (OS) ReadDir(name string) ([]FileInfo, error) {
	des, err := os.ReadDir(name)
	if err != nil {
		return nil, err
	}
	out := make([]FileInfo, 0, len(des))
	for _, de := range des {
		fi := FileInfo{Name: de.Name(), IsDir: de.IsDir()}
		if !fi.IsDir {
			if info, err := de.Info(); err == nil {
				fi.Size = info.Size()
			}
		}
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Stat implements FS.
func (OS) Stat(name string) (FileInfo, error) {
	st, err := os.Stat(name)
	if err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Name: filepath.Base(name), Size: st.Size(), IsDir: st.IsDir()}, nil
}

// SyncDir implements FS.
func (OS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
