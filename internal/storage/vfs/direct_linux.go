package vfs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

var _ DirectOpener = OS{}

// OpenDirect implements DirectOpener: open(2) with O_RDWR|O_DIRECT (os.OpenFile retries EINTR). A
// file system that refuses O_DIRECT (tmpfs) fails the open with EINVAL, which is returned wrapping
// both ErrDirectUnsupported and the EINVAL. The File's WriteAt and ReadAt go straight to the
// device; a misaligned one fails with EINVAL (an *fs.PathError naming the file) and changes nothing.
func (OS) OpenDirect(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		if errors.Is(err, syscall.EINVAL) {
			return nil, fmt.Errorf("%w: %w", ErrDirectUnsupported, err)
		}
		return nil, err
	}
	return osFile{f}, nil
}
