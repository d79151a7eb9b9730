package vfs

import (
	"errors"
	"io/fs"
	"sort"
)

// Writeback failures in Mem, modelled on Linux.
//
// When the kernel fails to write a file's dirty pages back (EIO from the device, ENOSPC on a thin
// or delayed-allocation volume), it marks them clean anyway: the data stays readable from the page
// cache until it is evicted, but it is not on the device, and no later fsync writes it again (the
// "fsyncgate" behaviour). The error is recorded on the file (its address space's errseq) and
// reported once to each open file description: the next fsync through every descriptor that was
// open when it happened returns it, later fsyncs through the same descriptor return success. A
// descriptor opened afterwards sees the error only if no descriptor has reported it yet; and once
// the last descriptor is closed, the inode (and the unreported error with it) may be evicted at any
// time, after which nobody ever hears of it.
//
// Mem does exactly that, pessimistically:
//   - an injected OpSync error, or FailWriteback, drops what was written since the last Sync: the
//     bytes stay in the file's content but are marked lost, so no later Sync makes them durable
//     (a later Sync does make the file's size durable: the lost bytes then read as their old
//     durable content, or zeros past it) and a Crash never keeps them; writing a lost range again
//     makes it dirty, and durable at the next successful Sync;
//   - each file description (each OpenFile) remembers the last error it reported; Sync reports an
//     error recorded since (after making the rest durable), once per description;
//   - an error nobody reported is forgotten when the file's last description is closed (the
//     inode evicted).

// span is a byte range [from, to) of a file.
type span struct{ from, to int }

// addLost marks [from, to) as lost (n.lost stays sorted and disjoint).
func (n *memNode) addLost(from, to int) {
	if from >= to {
		return
	}
	out := n.lost[:0:0]
	for _, s := range n.lost {
		switch {
		case s.to < from || s.from > to:
			out = append(out, s)
		default:
			from, to = min(from, s.from), max(to, s.to)
		}
	}
	out = append(out, span{from, to})
	sort.Slice(out, func(i, j int) bool { return out[i].from < out[j].from })
	n.lost = out
}

// clearLost removes [from, to) from the lost ranges: it was written again.
func (n *memNode) clearLost(from, to int) {
	if len(n.lost) == 0 || from >= to {
		return
	}
	out := n.lost[:0:0]
	for _, s := range n.lost {
		if s.to <= from || s.from >= to {
			out = append(out, s)
			continue
		}
		if s.from < from {
			out = append(out, span{s.from, from})
		}
		if s.to > to {
			out = append(out, span{to, s.to})
		}
	}
	n.lost = out
}

// firstLost is the start of the first lost range at or after off, or len(n.data) if none.
func (n *memNode) firstLost(off int) int {
	for _, s := range n.lost {
		if s.to > off {
			return max(s.from, off)
		}
	}
	return len(n.data)
}

// loseDirty is a failed writeback of everything written since the last Sync: it is lost, and the
// file is clean.
func (n *memNode) loseDirty() {
	lo := min(n.dirtyBelow, len(n.synced), len(n.data))
	hi := min(max(n.dirtyEnd, lo), len(n.data))
	if len(n.data) > len(n.synced) {
		hi = len(n.data) // everything past the durable size was written since
	}
	n.addLost(lo, hi)
	n.dirtyBelow, n.dirtyEnd = len(n.data), 0
}

// recordWritebackError records a writeback failure on n (m.mu held).
func (n *memNode) recordWritebackError(err error) {
	n.wbErrSeq++
	n.wbErr = err
	n.wbErrSeen = n.openFiles == 0 // nobody holds the inode: the error is gone with it
}

// sampleWritebackError is what a new description of n starts from: an error nobody has reported
// yet is reported to it (m.mu held).
func (n *memNode) sampleWritebackError() uint64 {
	if n.wbErrSeq > 0 && !n.wbErrSeen {
		return n.wbErrSeq - 1
	}
	return n.wbErrSeq
}

// checkWritebackError returns the error recorded on f's file since f last reported one, once
// (m.mu held).
func (f *memFile) checkWritebackError() error {
	n := f.n
	if f.errSeq == n.wbErrSeq {
		return nil
	}
	f.errSeq = n.wbErrSeq
	n.wbErrSeen = true
	return &fs.PathError{Op: "sync", Path: f.name, Err: n.wbErr}
}

// WaitWriteback implements WritebackWaiter: it reports a writeback error recorded since this
// description last reported one, like Sync, and fails like Sync under injection (OpSync: what was
// written since the last Sync is lost); it makes nothing durable (the data stays dirty until Sync).
func (f *memFile) WaitWriteback() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return errClosedFile
	}
	if err := f.m.injected(OpSync, f.name); err != nil {
		f.n.loseDirty()
		f.n.recordWritebackError(errors.Unwrap(err))
		f.errSeq, f.n.wbErrSeen = f.n.wbErrSeq, true
		return err
	}
	return f.checkWritebackError()
}

// FailWriteback makes the kernel's writeback of name's dirty data fail with err now, as a
// background flush may at any time: what was written since the file's last Sync is lost (see
// "Writeback failures in Mem"), and the error is reported by the next Sync of each open
// description, or forgotten if none is open.
func (m *Mem) FailWriteback(name string, err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, lerr := m.lookup(name)
	if lerr != nil {
		return &fs.PathError{Op: "failwriteback", Path: name, Err: lerr}
	}
	if n.dir {
		return &fs.PathError{Op: "failwriteback", Path: name, Err: errIsDir}
	}
	n.loseDirty()
	n.recordWritebackError(err)
	return nil
}

// LostBytes reports how many bytes of name's content are lost to failed writebacks and not
// written again since (for tests).
func (m *Mem) LostBytes(name string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(name)
	if err != nil {
		return 0, &fs.PathError{Op: "lostbytes", Path: name, Err: err}
	}
	total := 0
	for _, s := range n.lost {
		total += s.to - s.from
	}
	return total, nil
}
