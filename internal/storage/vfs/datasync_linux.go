package vfs

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// DataSync implements DataSyncer with fdatasync(2).
func (f osFile) DataSync() error {
	for {
		err := syscall.Fdatasync(int(f.File.Fd()))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "fdatasync", Path: f.File.Name(), Err: err}
		}
		return nil
	}
}

// StartWriteback implements WritebackStarter with sync_file_range(SYNC_FILE_RANGE_WRITE).
func (f osFile) StartWriteback(off, n int64) error {
	for {
		err := unix.SyncFileRange(int(f.File.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "sync_file_range", Path: f.File.Name(), Err: err}
		}
		return nil
	}
}
