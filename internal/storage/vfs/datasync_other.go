//go:build !linux

package vfs

// DataSync implements DataSyncer; without fdatasync it is a full fsync.
func (f osFile) DataSync() error { return f.File.Sync() }
