package storage

import (
	"path"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Small files written whole and made durable: the state file, NAME and FENCED markers, rewritten
// cursor logs. Every such write goes through these two functions, so the order that makes them
// crash-safe (write, fsync, rename, fsync of the directory) is written once.

// writeFileSynced creates or truncates p, writes b into it and fsyncs it. The directory entry of a
// new file is not synced: the caller does that (writeFileDurably), or a checkpoint does.
func writeFileSynced(fsys vfs.FS, p string, b []byte) error {
	f, err := fsys.OpenFile(p, vfs.ReadWrite|vfs.Create|vfs.Trunc)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeFileDurably writes p in place (writeFileSynced) and fsyncs its directory. A crash during it
// can leave p torn: for files whose readers accept that (a NAME being a prefix of the name, a
// FENCED marker whose content is only informative).
func writeFileDurably(fsys vfs.FS, p string, b []byte) error {
	if err := writeFileSynced(fsys, p, b); err != nil {
		return err
	}
	return fsys.SyncDir(path.Dir(p))
}

// replaceFileDurably replaces p with b atomically: b is written to tmp and fsynced, tmp renamed
// over p, and the directory fsynced. After a crash p holds either its old content or b.
func replaceFileDurably(fsys vfs.FS, p, tmp string, b []byte) error {
	if err := writeFileSynced(fsys, tmp, b); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, p); err != nil {
		return err
	}
	return fsys.SyncDir(path.Dir(p))
}
