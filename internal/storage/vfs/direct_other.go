//go:build !linux

package vfs

import "io/fs"

var _ DirectOpener = OS{}

// OpenDirect implements DirectOpener: direct I/O is only implemented for Linux, so it always
// returns an error wrapping ErrDirectUnsupported.
func (OS) OpenDirect(name string) (File, error) {
	return nil, &fs.PathError{Op: "open direct", Path: name, Err: ErrDirectUnsupported}
}
