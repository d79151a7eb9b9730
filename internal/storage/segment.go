package storage

import (
	"sort"
)

// segment is one ledger id of a Ledger.
type segment struct {
	id       int64
	entries  int64 // confirmed entries
	bytes    int64 // entry data bytes
	size     int64 // file size up to the last confirmed record
	minTime  int64
	maxTime  int64
	points   []indexPoint
	created  bool // the file exists
	sealed   bool
	idxSaved bool
	// written: the entries whose records are in the file (written to it, not necessarily
	// durable). The applier confirms entries (entries) before it writes them (writeSegments), so
	// it can be behind entries for that long; a read that needs the file waits for it
	// (Ledger.waitWritten). Under the ledger's mu.
	written int64
	// tail, tailOff: a copy of the file's bytes [tailOff, tailOff+len(tail)) in the partial last
	// 4 KiB block after the last write that bypassed the page cache (writeAround), the prefix of
	// the next one. padded: the file ends with zeros after the records. Both belong to whoever
	// writes the segment: the applier, or the sync loop in direct mode (writeAround says why they
	// never do at once).
	tail    []byte
	tailOff int64
	padded  bool
	// wbOff: the file's bytes before it were handed to the device by a paced writeback
	// (writeSegments; applier only).
	wbOff int64
	// dropOff: the file's bytes before it were dropped from the page cache after their writeback
	// (paceWriteback; applier only).
	dropOff int64
}

// readHint is an in-memory index point where a read stopped: entry entryID of segment segID starts at
// file offset off. A sequential reader (a replicator, a consumer catching up) starts its next read
// exactly there instead of at the index point before it, up to indexEveryEntries records back:
// without it a 100-entry read of 1 KiB entries started on average ~30 records early, and its
// buffer, sized for 100 records, then needed a second read with a second buffer (1.7 bytes read,
// zeroed and checksummed per byte returned). A hint is recorded only for an entry that was
// confirmed when the read started, at the offset where the scan found the end of the entry before
// it; confirmed records never move within a segment (files are appended to and trimmed by whole
// segments; a tail is cut only by recovery, before any read), so a hint is as good as an index
// point. The scan still checks every record's id and checksum.
type readHint struct {
	segID, entryID, off int64
}

// readHintSlots: hints kept per ledger (one per concurrent sequential reader, e.g. a replicator per
// remote cluster and a consumer).
const readHintSlots = 4

type readHints struct {
	h    [readHintSlots]readHint
	next int // slot replaced when no hint of the same segment precedes the new one
	// wrote is closed (and cleared) when the applier has written entries to a segment file or
	// fenced the ledger; made by the first reader waiting for that (waitWritten). Here rather
	// than in Ledger, whose size is budgeted: only a reader of the file ever waits.
	wrote chan struct{}
}

// hintLocked returns the best start for reading entry want of segment s: the last index point at or
// before it, or a later read hint (l.mu held).
func (l *Ledger) hintLocked(s *segment, want int64) (at, off int64) {
	i := sort.Search(len(s.points), func(i int) bool { return s.points[i].entryID > want }) - 1
	at, off = s.points[i].entryID, s.points[i].offset
	if l.readHints == nil {
		return at, off
	}
	for _, h := range l.readHints.h {
		if h.segID == s.id && h.entryID > at && h.entryID <= want && h.entryID < s.entries {
			at, off = h.entryID, h.off
		}
	}
	return at, off
}

// noteReadHint records that entry entryID of segment segID starts at file offset off.
func (l *Ledger) noteReadHint(segID, entryID, off int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rh := l.readHints
	if rh == nil {
		rh = &readHints{}
		l.readHints = rh
	}
	// The hint closest before this one in the same segment is most likely the same reader's
	// previous one: replace it; else the oldest.
	best := -1
	for i, h := range rh.h {
		if h.segID == segID && h.entryID <= entryID && (best < 0 || h.entryID > rh.h[best].entryID) {
			best = i
		}
	}
	if best < 0 {
		best = rh.next
		rh.next = (rh.next + 1) % readHintSlots
	}
	rh.h[best] = readHint{segID, entryID, off}
}

const (
	indexEveryEntries = 64
	indexEveryBytes   = 64 << 10
	// Smaller sealed segments get no index file: scanning them on open is cheaper than
	// creating a file (about 0.5 ms on ext4).
	minIndexedSegment = 1 << 20
)

func (s *segment) addEntry(off, recLen, publishTime, dataLen int64) {
	np := len(s.points)
	if np == 0 || s.entries-s.points[np-1].entryID >= indexEveryEntries || off-s.points[np-1].offset >= indexEveryBytes {
		s.points = append(s.points, indexPoint{entryID: s.entries, offset: off, maxTime: publishTime})
	} else if publishTime > s.points[np-1].maxTime {
		s.points[np-1].maxTime = publishTime
	}
	if s.entries == 0 || publishTime < s.minTime {
		s.minTime = publishTime
	}
	if s.entries == 0 || publishTime > s.maxTime {
		s.maxTime = publishTime
	}
	s.entries++
	s.bytes += dataLen
	s.size = off + recLen
}

func (l *Ledger) segByIDLocked(id int64) *segment {
	for i := len(l.segs) - 1; i >= 0; i-- {
		if l.segs[i].id == id {
			return l.segs[i]
		}
		if l.segs[i].id < id {
			break
		}
	}
	return nil
}

func (l *Ledger) removeSegLocked(seg *segment) {
	for i, s := range l.segs {
		if s == seg {
			l.segs = append(l.segs[:i], l.segs[i+1:]...)
			break
		}
	}
}
