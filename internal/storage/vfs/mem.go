package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// Op names a filesystem operation, for error injection.
type Op int

// Operations that can fail by injection.
const (
	OpWrite Op = iota
	OpSync
	OpSyncDir
	OpCreate
	OpRename
	OpRemove
	OpTruncate
	OpRead
	// OpOpenDirect is Mem.OpenDirect; an injected error fails the open (return ErrDirectUnsupported
	// to make the caller fall back to buffered writes, EIO to fail it).
	OpOpenDirect
)

func (o Op) String() string {
	return [...]string{"write", "sync", "syncdir", "create", "rename", "remove", "truncate", "read", "opendirect"}[o]
}

// Injected errors.
var (
	EIO    error = syscall.EIO
	ENOSPC error = syscall.ENOSPC
)

// Mem is an in-memory filesystem that remembers what was made durable.
//
// A file's durable content is its content at its last Sync; a directory's durable entries
// are its entries at its last SyncDir (a new file whose parent directory was never synced
// does not survive a crash, even if the file itself was synced). Crash returns a new Mem
// holding only the durable state, optionally keeping a random prefix of each file's
// unsynced appended bytes (a torn tail) or of its unsynced overwrites of durable bytes (a torn
// overwrite, as of a recycled or zero-filled journal file). Paths are slash-separated and cleaned.
type Mem struct {
	mu              sync.Mutex
	root            *memNode
	inject          func(op Op, name string) error
	writeback       int64            // bytes handed to StartWriteback (nothing else happens: see WritebackStarted)
	writebackByFile map[string]int64 // the same, by file path
	noDirect        bool             // OpenDirect fails with ErrDirectUnsupported (SetDirectUnsupported)
}

type memNode struct {
	dir bool
	// files
	data       []byte
	synced     []byte
	dirtyBelow int  // lowest offset written (or truncated) since the last Sync
	dirtyEnd   int  // highest end of a write (or extending truncate) since the last Sync
	shrunk     bool // truncated to a smaller size since the last Sync
	// Writeback failures (mem_writeback.go): ranges of data lost to them (sorted, disjoint), the
	// count of failures and the last one, whether a description reported it, and how many
	// descriptions are open.
	lost      []span
	wbErrSeq  uint64
	wbErr     error
	wbErrSeen bool
	openFiles int
	// directories
	children       map[string]*memNode
	syncedChildren map[string]*memNode
}

func newDirNode() *memNode {
	return &memNode{dir: true, children: map[string]*memNode{}, syncedChildren: map[string]*memNode{}}
}

// NewMem returns an empty in-memory filesystem with a durable root directory.
func NewMem() *Mem { return &Mem{root: newDirNode()} }

var _ FS = (*Mem)(nil)

// SetDirectUnsupported makes OpenDirect fail with ErrDirectUnsupported (on) or work (off, the
// default), as on a file system without and with O_DIRECT. Files already open direct keep working.
// Crash carries the setting over to the returned Mem (a crash does not change the file system).
func (m *Mem) SetDirectUnsupported(on bool) {
	m.mu.Lock()
	m.noDirect = on
	m.mu.Unlock()
}

// SetInjector installs f, called before each operation; a non-nil result fails the operation.
// nil removes the injector.
func (m *Mem) SetInjector(f func(op Op, name string) error) {
	m.mu.Lock()
	m.inject = f
	m.mu.Unlock()
}

func (m *Mem) injected(op Op, name string) error {
	if m.inject == nil {
		return nil
	}
	if err := m.inject(op, name); err != nil {
		return &fs.PathError{Op: op.String(), Path: name, Err: err}
	}
	return nil
}

func clean(name string) []string {
	name = path.Clean("/" + strings.ReplaceAll(name, "\\", "/"))
	if name == "/" {
		return nil
	}
	return strings.Split(name[1:], "/")
}

// lookupDir returns the directory holding the last element of parts.
func (m *Mem) lookupDir(parts []string, create bool) (*memNode, error) {
	d := m.root
	for _, p := range parts {
		c, ok := d.children[p]
		if !ok {
			if !create {
				return nil, fs.ErrNotExist
			}
			c = newDirNode()
			d.children[p] = c
		}
		if !c.dir {
			return nil, syscall.ENOTDIR
		}
		d = c
	}
	return d, nil
}

func (m *Mem) lookup(name string) (*memNode, error) {
	parts := clean(name)
	if len(parts) == 0 {
		return m.root, nil
	}
	d, err := m.lookupDir(parts[:len(parts)-1], false)
	if err != nil {
		return nil, err
	}
	n, ok := d.children[parts[len(parts)-1]]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return n, nil
}

// OpenFile implements FS.
func (m *Mem) OpenFile(name string, flag int) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	parts := clean(name)
	if len(parts) == 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	d, err := m.lookupDir(parts[:len(parts)-1], false)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	base := parts[len(parts)-1]
	n, ok := d.children[base]
	if ok && n.dir {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	if ok && flag&Create != 0 && flag&Excl != 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	}
	if !ok {
		if flag&Create == 0 {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		if err := m.injected(OpCreate, name); err != nil {
			return nil, err
		}
		n = &memNode{}
		d.children[base] = n
	}
	if flag&Trunc != 0 && len(n.data) > 0 {
		n.data = n.data[:0]
		n.dirtyBelow = 0
		n.shrunk = true
		n.lost = nil
	}
	n.openFiles++
	return &memFile{m: m, n: n, name: name, writable: flag&(ReadWrite|Create) != 0, errSeq: n.sampleWritebackError()}, nil
}

// Remove implements FS.
func (m *Mem) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injected(OpRemove, name); err != nil {
		return err
	}
	parts := clean(name)
	if len(parts) == 0 {
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.EBUSY}
	}
	d, err := m.lookupDir(parts[:len(parts)-1], false)
	if err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	n, ok := d.children[parts[len(parts)-1]]
	if !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if n.dir && len(n.children) > 0 {
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	delete(d.children, parts[len(parts)-1])
	return nil
}

// RemoveAll implements FS.
func (m *Mem) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injected(OpRemove, name); err != nil {
		return err
	}
	parts := clean(name)
	if len(parts) == 0 {
		m.root.children = map[string]*memNode{}
		return nil
	}
	d, err := m.lookupDir(parts[:len(parts)-1], false)
	if err != nil {
		return nil
	}
	delete(d.children, parts[len(parts)-1])
	return nil
}

// Rename implements FS.
func (m *Mem) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injected(OpRename, oldname); err != nil {
		return err
	}
	op, np := clean(oldname), clean(newname)
	if len(op) == 0 || len(np) == 0 {
		return &fs.PathError{Op: "rename", Path: oldname, Err: syscall.EBUSY}
	}
	od, err := m.lookupDir(op[:len(op)-1], false)
	if err != nil {
		return &fs.PathError{Op: "rename", Path: oldname, Err: err}
	}
	n, ok := od.children[op[len(op)-1]]
	if !ok {
		return &fs.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
	}
	nd, err := m.lookupDir(np[:len(np)-1], false)
	if err != nil {
		return &fs.PathError{Op: "rename", Path: newname, Err: err}
	}
	if old, ok := nd.children[np[len(np)-1]]; ok && old.dir && len(old.children) > 0 {
		return &fs.PathError{Op: "rename", Path: newname, Err: syscall.ENOTEMPTY}
	}
	delete(od.children, op[len(op)-1])
	nd.children[np[len(np)-1]] = n
	return nil
}

// MkdirAll implements FS.
func (m *Mem) MkdirAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.lookupDir(clean(name), true)
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: name, Err: err}
	}
	return nil
}

// ReadDir implements FS.
func (m *Mem) ReadDir(name string) ([]FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.lookup(name)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	if !d.dir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: syscall.ENOTDIR}
	}
	out := make([]FileInfo, 0, len(d.children))
	for k, c := range d.children {
		out = append(out, FileInfo{Name: k, IsDir: c.dir, Size: int64(len(c.data))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Stat implements FS.
func (m *Mem) Stat(name string) (FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(name)
	if err != nil {
		return FileInfo{}, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return FileInfo{Name: path.Base("/" + name), IsDir: n.dir, Size: int64(len(n.data))}, nil
}

// SyncDir implements FS.
func (m *Mem) SyncDir(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.injected(OpSyncDir, name); err != nil {
		return err
	}
	d, err := m.lookup(name)
	if err != nil {
		return &fs.PathError{Op: "syncdir", Path: name, Err: err}
	}
	if !d.dir {
		return &fs.PathError{Op: "syncdir", Path: name, Err: syscall.ENOTDIR}
	}
	d.syncedChildren = make(map[string]*memNode, len(d.children))
	for k, v := range d.children {
		d.syncedChildren[k] = v
	}
	return nil
}

// Crash returns the filesystem as it would be found after a power loss now: only synced
// directory entries and synced file contents survive. With rng non-nil, each file whose
// unsynced changes are pure appends keeps a random prefix of them (possibly cutting a record in
// half), and may keep them in full: what a real disk may have written back on its own. Likewise
// a file whose unsynced writes overwrite durable bytes (and that was not truncated to a smaller
// size since its last Sync) may keep a prefix of the changed range, the rest of the range
// keeping its durable content. Such a prefix never reaches into bytes lost to a failed
// writeback (mem_writeback.go): those are never on disk.
func (m *Mem) Crash(rng *rand.Rand) *Mem {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]*memNode{}
	var copyDir func(d *memNode) *memNode
	copyDir = func(d *memNode) *memNode {
		nd := newDirNode()
		for k, c := range d.syncedChildren {
			var nc *memNode
			if prev, ok := seen[c]; ok {
				nc = prev
			} else if c.dir {
				nc = copyDir(c)
			} else {
				keep := append([]byte(nil), c.synced...)
				switch {
				case rng == nil:
				case c.dirtyBelow >= len(c.synced) && len(c.data) > len(c.synced):
					if rng.IntN(2) == 0 {
						extra := c.firstLost(len(c.synced)) - len(c.synced)
						n := rng.IntN(extra + 1)
						keep = append(keep, c.data[len(c.synced):len(c.synced)+n]...)
					}
				case !c.shrunk && c.dirtyEnd > c.dirtyBelow:
					if rng.IntN(2) == 0 {
						from := c.dirtyBelow
						to := from + rng.IntN(min(c.dirtyEnd, len(c.data), c.firstLost(from))-from+1)
						if to > len(keep) {
							keep = append(keep, make([]byte, to-len(keep))...)
						}
						copy(keep[from:to], c.data[from:to])
					}
				}
				nc = &memNode{data: keep, synced: append([]byte(nil), keep...), dirtyBelow: len(keep)}
			}
			seen[c] = nc
			nd.children[k] = nc
			nd.syncedChildren[k] = nc
		}
		return nd
	}
	return &Mem{root: copyDir(m.root), noDirect: m.noDirect}
}

// String lists the tree (for debugging tests).
func (m *Mem) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	var walk func(prefix string, d *memNode)
	walk = func(prefix string, d *memNode) {
		names := make([]string, 0, len(d.children))
		for k := range d.children {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			c := d.children[k]
			if c.dir {
				fmt.Fprintf(&b, "%s%s/\n", prefix, k)
				walk(prefix+"  ", c)
			} else {
				fmt.Fprintf(&b, "%s%s %d (synced %d)\n", prefix, k, len(c.data), len(c.synced))
			}
		}
	}
	walk("", m.root)
	return b.String()
}

type memFile struct {
	m        *Mem
	n        *memNode
	name     string
	writable bool
	closed   bool
	errSeq   uint64 // the writeback error this description reported last (mem_writeback.go)
}

var (
	errClosedFile = errors.New("vfs: file closed")
	errIsDir      = syscall.EISDIR
)

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return 0, errClosedFile
	}
	if err := f.m.injected(OpRead, f.name); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return 0, errClosedFile
	}
	if !f.writable {
		return 0, syscall.EBADF
	}
	if err := f.m.injected(OpWrite, f.name); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	end := int(off) + len(p)
	if end > len(f.n.data) {
		if end > cap(f.n.data) {
			nd := make([]byte, end, end*5/4+512)
			copy(nd, f.n.data)
			f.n.data = nd
		} else {
			old := len(f.n.data)
			f.n.data = f.n.data[:end]
			if int(off) > old {
				clear(f.n.data[old:off]) // a hole reads as zeros, not as bytes of an earlier truncated tail
			}
		}
	}
	copy(f.n.data[off:], p)
	f.n.clearLost(int(off), end)
	if int(off) < f.n.dirtyBelow {
		f.n.dirtyBelow = int(off)
	}
	f.n.dirtyEnd = max(f.n.dirtyEnd, end)
	return len(p), nil
}

func (f *memFile) Sync() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return errClosedFile
	}
	if err := f.m.injected(OpSync, f.name); err != nil {
		// The writeback failed: what was written since the last Sync is lost, and this
		// description reports it (mem_writeback.go).
		f.n.loseDirty()
		f.n.recordWritebackError(errors.Unwrap(err))
		f.errSeq, f.n.wbErrSeen = f.n.wbErrSeq, true
		return err
	}
	// Only [dirtyBelow, dirtyEnd) differs from the synced copy (synced is never shared: Crash
	// copies it), so a sync copies what was written, not the whole file: a group commit that
	// overwrites a full-size journal file costs its own bytes. Bytes lost to a failed writeback
	// are not copied: they never reach the disk.
	n := f.n
	lo := min(n.dirtyBelow, len(n.synced), len(n.data))
	hi := min(max(n.dirtyEnd, lo), len(n.data))
	if len(n.data) > cap(n.synced) {
		grown := make([]byte, len(n.data), len(n.data)*5/4+512)
		copy(grown, n.synced)
		n.synced = grown
	} else {
		n.synced = n.synced[:len(n.data)]
	}
	for from := lo; from < hi; {
		to := min(n.firstLost(from), hi)
		copy(n.synced[from:to], n.data[from:to])
		from = to
		for _, s := range n.lost {
			if s.from <= from && from < s.to {
				from = s.to
			}
		}
	}
	n.dirtyBelow, n.dirtyEnd, n.shrunk = len(n.synced), 0, false
	return f.checkWritebackError()
}

// StartWriteback implements WritebackStarter: an in-memory file has no device, so it only counts
// the bytes (WritebackStarted); it makes nothing durable, like the real call.
func (f *memFile) StartWriteback(off, n int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return errClosedFile
	}
	if off < 0 || n <= 0 || off+n > int64(len(f.n.data)) {
		return syscall.EINVAL
	}
	f.m.writeback += n
	if f.m.writebackByFile == nil {
		f.m.writebackByFile = map[string]int64{}
	}
	f.m.writebackByFile[f.name] += n
	return nil
}

// WritebackStartedUnder is the number of bytes of files whose path starts with prefix that were
// asked to start writing back (by the name each file was opened with).
func (m *Mem) WritebackStartedUnder(prefix string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for name, b := range m.writebackByFile {
		if strings.HasPrefix(name, prefix) {
			n += b
		}
	}
	return n
}

// WritebackStarted is the number of bytes files of m were asked to start writing back.
func (m *Mem) WritebackStarted() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writeback
}

func (f *memFile) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return errClosedFile
	}
	if err := f.m.injected(OpTruncate, f.name); err != nil {
		return err
	}
	if size < 0 {
		return syscall.EINVAL
	}
	if int(size) <= len(f.n.data) {
		f.n.shrunk = f.n.shrunk || int(size) < len(f.n.data)
		f.n.clearLost(int(size), len(f.n.data))
		f.n.data = f.n.data[:size]
	} else {
		f.n.dirtyEnd = max(f.n.dirtyEnd, int(size))
		f.n.data = append(f.n.data, make([]byte, int(size)-len(f.n.data))...)
	}
	if int(size) < f.n.dirtyBelow {
		f.n.dirtyBelow = int(size)
	}
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return int64(len(f.n.data)), nil
}

func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return errClosedFile
	}
	f.closed = true
	f.n.openFiles--
	if f.n.openFiles == 0 {
		f.n.wbErrSeen = true // an error nobody reported is evicted with the inode
	}
	return nil
}
