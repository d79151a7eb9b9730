package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"unsafe"
)

// DirectAlign is the alignment O_DIRECT writes through this package need: file offset, length and
// buffer address all multiples of it. It is the page size and the device's physical block size;
// any logical block size up to it (512 on a typical virtio disk) is covered.
const DirectAlign = 4096

// ErrDirectUnsupported (wrapped) is returned by OpenDirect when the file system cannot do direct I/O
// (e.g. tmpfs: open with O_DIRECT fails with EINVAL; a Mem after SetDirectUnsupported(true); any OS
// but Linux), so the caller falls back to buffered writes.
var ErrDirectUnsupported = errors.New("vfs: direct I/O not supported")

// ErrMisaligned (wrapped) is returned by a Mem direct file for a WriteAt or ReadAt whose offset,
// length or buffer address is not a multiple of DirectAlign: what the kernel answers such a call
// on an O_DIRECT descriptor with. It wraps syscall.EINVAL, so errors.Is(err, syscall.EINVAL) holds
// for a misaligned call on both the real and the in-memory file system.
var ErrMisaligned = fmt.Errorf("vfs: direct I/O offset, length and buffer must be multiples of %d: %w", DirectAlign, syscall.EINVAL)

// DirectOpener is implemented by file systems that can open a file for direct (page-cache-bypassing)
// writes. OS and *Mem implement it.
type DirectOpener interface {
	// OpenDirect opens the existing file name read-write for direct I/O (O_DIRECT); it never
	// creates the file. Every WriteAt and ReadAt through the returned File must be aligned (see
	// DirectAlign); Sync, DataSync, Truncate, Size and Close work as on any File.
	OpenDirect(name string) (File, error)
}

// OpenDirect opens the existing file name for direct writes where fsys supports it; otherwise it
// returns an error wrapping ErrDirectUnsupported (fsys without DirectOpener, a file system without
// O_DIRECT). Other errors (a missing file: IsNotExist) are returned as they are.
func OpenDirect(fsys FS, name string) (File, error) {
	d, ok := fsys.(DirectOpener)
	if !ok {
		return nil, &fs.PathError{Op: "open direct", Path: name, Err: ErrDirectUnsupported}
	}
	return d.OpenDirect(name)
}

// AlignedBuffer returns a zeroed buffer of n bytes (n rounded up to DirectAlign) whose first byte is
// DirectAlign-aligned. Its capacity equals its length, so an append reallocates (losing the
// alignment) instead of growing past the aligned region. It panics if n is negative.
func AlignedBuffer(n int) []byte {
	if n < 0 {
		panic(fmt.Sprintf("vfs: AlignedBuffer(%d)", n))
	}
	size := AlignUp(n)
	// The Go heap does not move objects, and a slice keeps its whole allocation alive, so slicing
	// an over-sized allocation at its first aligned byte gives a buffer that stays aligned.
	raw := make([]byte, size+DirectAlign)
	skip := (DirectAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%DirectAlign)) % DirectAlign
	return raw[skip : skip+size : skip+size]
}

// AlignUp rounds n up to a multiple of DirectAlign.
func AlignUp[T int | int64](n T) T { return (n + DirectAlign - 1) &^ (DirectAlign - 1) }

// AlignDown rounds n down to a multiple of DirectAlign.
func AlignDown[T int | int64](n T) T { return n &^ (DirectAlign - 1) }

// CheckAligned returns ErrMisaligned unless off, len(p) and p's first byte are all multiples of
// DirectAlign (an empty p is always accepted, as a zero-length write is one no file system
// refuses). Mem's direct files apply it; the engine may use it to assert before a direct write.
func CheckAligned(p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	if off%DirectAlign != 0 || len(p)%DirectAlign != 0 ||
		uintptr(unsafe.Pointer(unsafe.SliceData(p)))%DirectAlign != 0 {
		return ErrMisaligned
	}
	return nil
}
