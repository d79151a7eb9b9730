package vfs

import (
	"io/fs"
)

var _ DirectOpener = (*Mem)(nil)

// OpenDirect implements DirectOpener. The file must exist; it is opened read-write. Injection:
// OpOpenDirect (before anything else but the SetDirectUnsupported check).
//
// A Mem direct file is a Mem file whose WriteAt and ReadAt refuse a misaligned call (offset, length
// or buffer address not a multiple of DirectAlign) with an *fs.PathError wrapping ErrMisaligned
// (and so syscall.EINVAL), before any injection and without changing anything. Everything else is
// exactly a Mem file's behaviour: a write lands in the one content every handle of the file reads,
// it is durable only after Sync (DataSync), a Crash drops or tears unsynced direct writes like
// buffered ones, and OpWrite/OpSync/OpRead/OpTruncate injection applies. In memory there is no page
// cache to bypass, so the only difference is the alignment check.
func (m *Mem) OpenDirect(name string) (File, error) {
	m.mu.Lock()
	noDirect := m.noDirect
	var err error
	if !noDirect {
		err = m.injected(OpOpenDirect, name)
	}
	m.mu.Unlock()
	if noDirect {
		return nil, &fs.PathError{Op: "open direct", Path: name, Err: ErrDirectUnsupported}
	}
	if err != nil {
		return nil, err
	}
	f, err := m.OpenFile(name, ReadWrite)
	if err != nil {
		return nil, err
	}
	return &memDirectFile{f.(*memFile)}, nil
}

// memDirectFile is a memFile with O_DIRECT's alignment rules.
type memDirectFile struct{ *memFile }

func (f *memDirectFile) WriteAt(p []byte, off int64) (int, error) {
	if err := CheckAligned(p, off); err != nil {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: err}
	}
	return f.memFile.WriteAt(p, off)
}

func (f *memDirectFile) ReadAt(p []byte, off int64) (int, error) {
	if err := CheckAligned(p, off); err != nil {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
	}
	return f.memFile.ReadAt(p, off)
}
