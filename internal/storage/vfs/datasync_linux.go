package vfs

import (
	"io/fs"
	"syscall"
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
