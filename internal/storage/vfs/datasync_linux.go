package vfs

import (
	"io/fs"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DataSync implements DataSyncer with fdatasync(2).
func (f osFile) DataSync() error {
	return f.retry("fdatasync", func(fd int) error { return unix.Fdatasync(fd) })
}

// StartWriteback implements WritebackStarter with sync_file_range(SYNC_FILE_RANGE_WRITE).
func (f osFile) StartWriteback(off, n int64) error {
	return f.retry("sync_file_range", func(fd int) error {
		return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
	})
}

// WaitWriteback implements WritebackWaiter with sync_file_range(WAIT_BEFORE|WRITE|WAIT_AFTER) over
// the whole file (since Linux 4.14 it reports the file's writeback errors like fsync).
func (f osFile) WaitWriteback() error {
	return f.retry("sync_file_range", func(fd int) error {
		return unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	})
}

// DropCache implements CacheDropper with posix_fadvise(POSIX_FADV_DONTNEED).
func (f osFile) DropCache(off, n int64) error {
	return f.retry("fadvise", func(fd int) error { return unix.Fadvise(fd, off, n, unix.FADV_DONTNEED) })
}

// retry runs call on f's descriptor until it is not interrupted (EINTR) and names a failure after
// op and f's path.
func (f osFile) retry(op string, call func(fd int) error) error {
	for {
		err := call(int(f.File.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: op, Path: f.File.Name(), Err: err}
		}
		return nil
	}
}

// ResidentPages reports how many of the pages of the file at name the page cache holds, and how
// many pages the file has (mincore(2) over a read-only mapping, which reads nothing in). A
// diagnostic for tests and investigations of the page cache policy (docs/storage.md, "Page cache").
func ResidentPages(name string) (resident, total int, err error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, 0, err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, &fs.PathError{Op: "mmap", Path: name, Err: err}
	}
	defer unix.Munmap(mem)
	page := os.Getpagesize()
	vec := make([]byte, (len(mem)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, 0, &fs.PathError{Op: "mincore", Path: name, Err: errno}
	}
	for _, v := range vec {
		resident += int(v & 1)
	}
	return resident, len(vec), nil
}
