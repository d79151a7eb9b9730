package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Ledger is one topic's (or partition's) log: a sequence of segments, one per ledger id, each
// holding entries 0..n-1. Only the last segment is written; a new one starts on every open and
// every roll.
//
// The fields are ordered to leave no padding: one Ledger per topic, 256 B (README budget: 2 KiB per
// idle topic, the whole broker included).
type Ledger struct {
	e       *Engine
	name    string
	ready   chan struct{}
	loadErr error

	// Guarded by e.qmu: the order of appends.
	announced uint64
	curID     int64
	nextEntry int64
	curBytes  int64
	qClosed   bool
	qFenced   bool

	closed  bool // guarded by mu
	dirMade bool // sync loop only

	mu       sync.RWMutex
	slot     uint32     // immutable
	segs     []*segment // ascending ids; the last is the current one (possibly empty)
	entries  int64
	bytes    int64
	err      error
	cursors  map[string]*Cursor
	maxAge   time.Duration
	maxBytes int64
	// readHints: where recent reads stopped (see readHint); guarded by mu, allocated by the first
	// read from a file (the Ledger's size class is budgeted: idle_size_test.go).
	readHints *readHints
	logSize   int64 // cursors.log size (under e.cursorLogMu)
	compactAt int64 // cursors.log size from which a compaction is looked at (under e.cursorLogMu; janitor.go)

	closeOnce sync.Once
	flags     atomic.Uint32 // flagClosing, flagErrSet
	closeErr  error
	closedCh  chan struct{}
}

// Ledger.flags bits.
const (
	// flagClosing: Close has begun (publishes closedCh to OpenLedger).
	flagClosing = 1 << iota
	// flagErrSet: err is set (stored after it, under mu; err is never cleared), so that Err, called
	// by every append, takes no lock while there is none: the applier's per-entry mu.Lock made
	// appenders' RLock wait on a semaphore (~1 % of the unbatched catch-up's CPU).
	flagErrSet
	// flagFull: the current segment reached SegmentMaxBytes or SegmentMaxEntries (set and cleared
	// under e.qmu, read by AppendAsync without it, which took e.qmu a second time per append).
	flagFull
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

// ---- loading ----

func (l *Ledger) load(ctx context.Context) error {
	e := l.e
	des, err := e.fs.ReadDir(l.dirPath())
	if err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("storage: open ledger %q: %w", l.name, err)
	}
	l.dirMade = err == nil
	if err := l.checkName(); err != nil {
		return err
	}
	var ids []int64
	idx := map[int64]bool{}
	hasCursors := false
	for _, de := range des {
		switch {
		case de.Name == "FENCED":
			l.err = fmt.Errorf("%w: ledger %q was fenced by recovery (see the log of that run)", ErrFenced, l.name)
			l.flags.Or(flagErrSet)
		case de.Name == "cursors.log":
			hasCursors = true
		default:
			if id, ok := parseHexName(de.Name, ".seg"); ok {
				ids = append(ids, id)
			} else if id, ok := parseHexName(de.Name, ".idx"); ok {
				idx[id] = true
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		seg, err := l.loadSegment(id, idx[id])
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				e.log.Error("ledger fenced: corrupt segment", "ledger", l.name, "segment", id, "err", err)
				if l.err == nil {
					l.err = fmt.Errorf("%w: %w", ErrFenced, err)
					l.flags.Or(flagErrSet)
				}
				if seg == nil {
					continue
				}
			} else {
				return err
			}
		}
		if seg.entries == 0 {
			_ = e.fs.Remove(segPath(l.dirPath(), id))
			_ = e.fs.Remove(idxPath(l.dirPath(), id))
			continue
		}
		seg.written = seg.entries
		l.segs = append(l.segs, seg)
		l.entries += seg.entries
		l.bytes += seg.bytes
	}
	id, err := e.newLedgerID()
	if err != nil {
		return err
	}
	l.segs = append(l.segs, &segment{id: id})
	l.curID = id
	if hasCursors {
		if err := l.loadCursors(); err != nil {
			return err
		}
	}
	return nil
}

func (l *Ledger) persistCreation(ctx context.Context) error {
	ch := make(chan error, 1)
	l.e.enqueue(l, func(b *batch) item {
		var start int
		b.buf, start = beginJournalRecord(b.buf, jCreate, l.slot)
		finishJournalRecord(b.buf, start)
		return item{kind: kCreate, done: func(_ Position, err error) { ch <- err }}
	})
	select {
	case err := <-ch:
		if err != nil {
			return fmt.Errorf("storage: create ledger %q: %w", l.name, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loadSegment reads a sealed segment's index, or rebuilds it by scanning the file.
func (l *Ledger) loadSegment(id int64, hasIdx bool) (*segment, error) {
	e := l.e
	p := segPath(l.dirPath(), id)
	st, err := e.fs.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("storage: stat segment: %w", err)
	}
	if hasIdx {
		if ix, err := l.readIndex(id); err == nil && ix.fileSize == st.Size && ix.ledgerID == id {
			return &segment{id: id, entries: ix.entries, bytes: ix.bytes, size: ix.fileSize, minTime: ix.minTime,
				maxTime: ix.maxTime, points: ix.points, created: true, sealed: true, idxSaved: true}, nil
		}
	}
	f, err := e.fs.OpenFile(p, vfs.ReadWrite)
	if err != nil {
		return nil, fmt.Errorf("storage: open segment: %w", err)
	}
	defer f.Close()
	seg := &segment{id: id, created: true, sealed: true}
	hdr := make([]byte, headerSize)
	if n, _ := f.ReadAt(hdr, 0); n < headerSize {
		// A segment whose header never became durable holds no entries.
		return seg, nil
	}
	if hid, err := parseHeader(hdr, magicSegment); err != nil || int64(hid) != id {
		return nil, fmt.Errorf("%w: segment %d header: %v", ErrCorrupt, id, err)
	}
	seg.size = headerSize
	badAt, err := scanRecords(f, headerSize, st.Size, func(off int64, body []byte) bool {
		eid, pt, data, err := parseSegBody(body)
		if err != nil || eid != seg.entries {
			return false
		}
		seg.addEntry(off, int64(recHeaderSize+len(body)), pt, int64(len(data)))
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("storage: scan segment %d: %w", id, err)
	}
	if badAt >= 0 && isBlockPadding(f, badAt, st.Size) {
		// The zeros after a block written around the page cache (unbuffered.go), not a torn tail.
		if err := f.Truncate(badAt); err != nil {
			return nil, fmt.Errorf("storage: truncate segment padding: %w", err)
		}
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("storage: sync segment: %w", err)
		}
		badAt = -1
	}
	if badAt >= 0 {
		if e.opts.Sync == SyncInterval || !validRecordAfter(f, badAt, st.Size) {
			// With SyncInterval, segment data may run ahead of the durable journal: a torn tail is expected.
			if e.opts.Sync == SyncInterval || badAt+int64(recHeaderSize) > st.Size || tailIsZero(f, badAt, st.Size) {
				e.log.Warn("truncating torn segment tail", "ledger", l.name, "segment", id, "offset", badAt, "size", st.Size)
				e.m.tornTails.Add(1)
				if err := f.Truncate(badAt); err != nil {
					return nil, fmt.Errorf("storage: truncate segment: %w", err)
				}
				if err := f.Sync(); err != nil {
					return nil, fmt.Errorf("storage: sync segment: %w", err)
				}
			} else {
				return seg, fmt.Errorf("%w: segment %d: bad record at offset %d of %d after entry %d", ErrCorrupt, id, badAt, st.Size, seg.entries-1)
			}
		} else {
			return seg, fmt.Errorf("%w: segment %d: bad record at offset %d of %d after entry %d, valid data follows", ErrCorrupt, id, badAt, st.Size, seg.entries-1)
		}
	}
	l.saveIndex(seg)
	return seg, nil
}

// validRecordAfter looks for any well-formed record starting after a bad one (a sign of
// corruption in the middle rather than a torn tail). It checks each byte offset up to 1 MiB on.
func validRecordAfter(f vfs.File, bad, size int64) bool {
	end := min(size, bad+1<<20+maxRecordBody)
	n := end - bad
	if n <= 0 {
		return false
	}
	buf := make([]byte, n)
	got, _ := f.ReadAt(buf, bad)
	buf = buf[:got]
	for i := 1; i < len(buf)-recHeaderSize && i < 1<<20; i++ {
		ln := binary.LittleEndian.Uint32(buf[i:])
		if ln >= segBodyPrefix && int(ln) <= len(buf)-i-recHeaderSize {
			if _, _, err := decodeRecord(buf[i:], nil); err == nil {
				return true
			}
		}
	}
	return false
}

func tailIsZero(f vfs.File, from, size int64) bool {
	buf := make([]byte, 64<<10)
	for off := from; off < size; {
		n, _ := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if n <= 0 {
			return true
		}
		for _, c := range buf[:n] {
			if c != 0 {
				return false
			}
		}
		off += int64(n)
	}
	return true
}

// scanRecords calls fn for each valid record from off to size; it returns the offset of the
// first invalid record (or -1 if the file ends cleanly) — fn returning false also marks it invalid.
func scanRecords(f vfs.File, off, size int64, fn func(off int64, body []byte) bool) (int64, error) {
	buf := make([]byte, 1<<20)
	for off < size {
		want := min(int64(len(buf)), size-off)
		n, err := f.ReadAt(buf[:want], off)
		if err != nil && err != io.EOF {
			return -1, err
		}
		chunk := buf[:n]
		pos := 0
		for pos < len(chunk) {
			body, sz, err := decodeRecord(chunk[pos:], nil)
			if err != nil {
				if pos == 0 && len(chunk) >= recHeaderSize {
					// A record larger than the buffer: grow and retry.
					need := int64(binary.LittleEndian.Uint32(chunk)) + recHeaderSize
					if need <= maxRecordBody+recHeaderSize && need > int64(len(buf)) && off+need <= size {
						buf = make([]byte, need)
						break
					}
				}
				if pos > 0 && len(chunk) < int(want) {
					return off + int64(pos), nil
				}
				if pos > 0 {
					break // refill from this record
				}
				return off, nil
			}
			if !fn(off+int64(pos), body) {
				return off + int64(pos), nil
			}
			pos += sz
		}
		if pos == 0 && n < int(want) {
			return off, nil
		}
		off += int64(pos)
		if n == 0 {
			return off, nil
		}
	}
	return -1, nil
}

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

func (l *Ledger) readIndex(id int64) (*segIndex, error) {
	f, err := l.e.fs.OpenFile(idxPath(l.dirPath(), id), vfs.ReadOnly)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sz, err := f.Size()
	if err != nil {
		return nil, err
	}
	if sz > 64<<20 {
		return nil, fmt.Errorf("%w: index too large", ErrCorrupt)
	}
	b := make([]byte, sz)
	if n, _ := f.ReadAt(b, 0); int64(n) != sz {
		return nil, fmt.Errorf("%w: short index read", ErrCorrupt)
	}
	return decodeIndex(b)
}

// saveIndex writes a sealed segment's index file. It is derived data: written without fsync
// (the checkpoint syncs it), checked against the segment's size when read, rebuilt if wrong.
func (l *Ledger) saveIndex(seg *segment) {
	if seg.entries == 0 || seg.idxSaved || seg.size < minIndexedSegment {
		return
	}
	ix := &segIndex{ledgerID: seg.id, entries: seg.entries, bytes: seg.bytes, fileSize: seg.size,
		minTime: seg.minTime, maxTime: seg.maxTime, points: seg.points}
	p := idxPath(l.dirPath(), seg.id)
	f, err := l.e.fs.OpenFile(p, vfs.ReadWrite|vfs.Create|vfs.Trunc)
	if err == nil {
		_, err = f.WriteAt(encodeIndex(ix), 0)
		_ = f.Close()
	}
	if err != nil {
		l.e.log.Warn("cannot write segment index; it will be rebuilt on next open", "ledger", l.name, "segment", seg.id, "err", err)
		_ = l.e.fs.Remove(p)
		return
	}
	seg.idxSaved = true
}

// ---- appending ----

// Append stores data and returns once it is durable (SyncAlways) or written (SyncInterval).
func (l *Ledger) Append(ctx context.Context, data []byte, publishTime int64) (Position, error) {
	type result struct {
		p   Position
		err error
	}
	ch := make(chan result, 1)
	l.AppendAsync(data, publishTime, func(p Position, err error) { ch <- result{p, err} })
	select {
	case r := <-ch:
		return r.p, r.err
	case <-ctx.Done():
		// The append may still complete; the caller only stops waiting.
		return Position{}, ctx.Err()
	}
}

// AppendAsync stores data and calls done exactly once, in append order per ledger, from a storage
// goroutine, once durable or failed. done must not block, nor read the ledger (the applier writes
// the entry to its segment file after calling done: Engine.apply). data is copied.
func (l *Ledger) AppendAsync(data []byte, publishTime int64, done func(Position, error)) {
	e := l.e
	var rollTo int64 = -1
	if len(data) > e.opts.MaxEntrySize {
		err := fmt.Errorf("%w: %d bytes > %d", ErrEntryTooLarge, len(data), e.opts.MaxEntrySize)
		e.enqueue(nil, func(*batch) item { return item{kind: kFail, err: err, done: done} })
		return
	}
	// Auto-roll: allocate the next ledger id outside the queue lock when the segment is full.
	if l.flags.Load()&flagFull != 0 {
		if id, err := e.newLedgerID(); err == nil {
			rollTo = id
		}
	}
	if err := l.appendErr(); err != nil {
		e.enqueue(nil, func(*batch) item { return item{kind: kFail, err: err, done: done} })
		return
	}
	e.enqueue(l, func(b *batch) item {
		if l.qClosed {
			return item{kind: kFail, err: ErrClosed, done: done}
		}
		if l.qFenced {
			return item{kind: kFail, err: ErrFenced, done: done}
		}
		if rollTo > l.curID {
			l.switchSegmentLocked(b, rollTo)
		}
		b.buf = growBatchBuf(b.buf, entryRecordHead+segRecordOverhead+len(data))
		var start int
		b.buf, start = beginJournalRecord(b.buf, jEntry, l.slot)
		b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(l.curID))
		recOff := len(b.buf)
		b.buf = appendSegRecord(b.buf, l.nextEntry, publishTime, data)
		finishJournalRecord(b.buf, start)
		it := item{kind: kEntry, ledgerID: l.curID, entryID: l.nextEntry, publishTime: publishTime,
			off: recOff, n: len(b.buf) - recOff, done: done}
		l.nextEntry++
		l.curBytes += int64(it.n)
		if l.curBytes >= e.opts.SegmentMaxBytes || l.nextEntry >= e.opts.SegmentMaxEntries {
			l.flags.Or(flagFull)
		}
		return it
	})
}

// growBatchBuf makes room for n more bytes in a batch's journal buffer, doubling its capacity
// when it must grow. append grows a large slice by a quarter, which would copy a batch buffer
// about four times over (under the queue lock) while it grows to the size of a catch-up's group
// commit (10-60 MB; each of the engine's batches grows once).
//
// make and copy rather than slices.Grow: slices.Grow writes the whole new capacity at once (it
// appends zeros), while a large allocation of memory new to the heap is not cleared by make, so
// only the bytes copied and later appended are touched. A doubled buffer's tail that a burst
// never reaches then costs no page faults (on a virtual machine whose free memory goes back to
// the host, each one a host fault; docs/catch-up-cpu.md).
func growBatchBuf(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), len(b)+max(n, cap(b), 64<<10))
	copy(nb, b)
	return nb
}

// switchSegmentLocked starts segment id for new appends (e.qmu held) and queues the seal of the
// previous one behind its entries.
func (l *Ledger) switchSegmentLocked(b *batch, id int64) {
	old := l.curID
	l.mu.Lock()
	l.segs = append(l.segs, &segment{id: id})
	l.mu.Unlock()
	l.curID, l.nextEntry, l.curBytes = id, 0, 0
	l.flags.And(^uint32(flagFull))
	b.items = append(b.items, item{kind: kSeal, l: l, ledgerID: old})
}

// segWrite collects one segment's records of a batch, written with one WriteAt.
type segWrite struct {
	l    *Ledger
	seg  *segment
	off  int64 // file offset of buf[0]
	size int
	buf  []byte
	err  error
	// direct: written by the sync loop before the journal (directwrite.go); cf is held until its
	// fsync finished, and shareable says the entry cache may keep slices of buf.
	direct    bool
	shareable bool
	cf        *cachedFile
	sf        vfs.File // direct: the descriptor its fdatasync runs on (opened before the write)
	// end: the entry id after the last one in buf.
	end int64
	// block: set when the write bypasses the page cache (unbuffered.go): buf's records within
	// whole 4 KiB blocks, from file offset blockOff = off rounded down; the bytes before buf are
	// the file's bytes there, filled in by writeSegments, the bytes after it zeros.
	block    []byte
	blockOff int64
}

// layoutEntries places the entry records of a durable batch in their segment files: each item's
// file offset, and one contiguous buffer per segment (b.writes) that writeSegments writes once
// the entries are acknowledged (phase one of applying a batch). Its only I/O creates a new
// segment's file, so that a failure there still fails the entries instead of acknowledging them.
func (e *Engine) layoutEntries(b *batch) {
	writes := b.writes[:0]
	var last *segWrite
	for i := range b.items {
		it := &b.items[i]
		if it.kind != kEntry || it.w != nil {
			continue // it.w set: written directly by the sync loop (directwrite.go)
		}
		l := it.l
		if last == nil || last.l != l || last.seg.id != it.ledgerID {
			last = nil
			for _, w := range writes {
				if w.l == l && w.seg.id == it.ledgerID {
					last = w
					break
				}
			}
		}
		if last == nil {
			l.mu.RLock()
			err := l.err
			if err == nil && l.closed {
				err = ErrClosed
			}
			seg := l.segByIDLocked(it.ledgerID)
			l.mu.RUnlock()
			if err == nil && seg == nil {
				err = fmt.Errorf("storage: internal error: no segment %d for entry %d", it.ledgerID, it.entryID)
			}
			if err != nil {
				it.err = err
				continue
			}
			last = &segWrite{l: l, seg: seg, off: seg.size, blockOff: -1}
			if !seg.created {
				last.off = headerSize
			}
			if seg.entries != it.entryID {
				last.err = fmt.Errorf("storage: internal error: entry %d:%d out of sequence (have %d)", it.ledgerID, it.entryID, seg.entries)
			}
			writes = append(writes, last)
		}
		it.fileOff = last.off + int64(last.size)
		it.w = last
		last.size += it.n
		last.end = it.entryID + 1
	}
	// Lay the records of each segment out contiguously in one arena. When every entry of the
	// batch fits the entry cache, the arena is new and the cache keeps slices of it (no second
	// copy per entry; it is freed once the cache has evicted all of them); otherwise one arena is
	// reused and the cache gets copies.
	total := 0
	for _, w := range writes {
		total += w.size
	}
	var arena []byte
	if b.cacheArena = e.cache.limit > 0 && total > 0; b.cacheArena {
		for i := range b.items {
			if it := &b.items[i]; it.kind == kEntry && int64(it.n-segRecordOverhead)+cacheEntryOverhead > e.cache.limit/4 {
				b.cacheArena = false
				break
			}
		}
	}
	// Writes that bypass the page cache get whole aligned blocks of the arena (unbuffered.go).
	bypass := false
	for _, w := range writes {
		if w.err == nil && e.bypassCache(w.size) {
			w.blockOff = vfs.AlignDown(w.off)
			total += vfs.AlignUp(int(w.off-w.blockOff)+w.size) - w.size
			bypass = true
		}
	}
	if b.cacheArena {
		if bypass {
			arena = vfs.AlignedBuffer(total)[:total]
		} else {
			arena = make([]byte, total)
		}
	} else {
		if cap(e.arena) < total || (bypass && !blockAligned(e.arena)) {
			e.arena = vfs.AlignedBuffer(total)
		}
		arena = e.arena[:total]
	}
	if bypass {
		// Blocks first, from the aligned start of the arena, so each one is aligned.
		for _, w := range writes {
			if w.blockOff < 0 {
				continue
			}
			pre := int(w.off - w.blockOff)
			n := vfs.AlignUp(pre + w.size)
			w.block, arena = arena[:n:n], arena[n:]
			clear(w.block[pre+w.size:]) // zeros after the records (a reused arena is not)
			w.buf = w.block[pre : pre : pre+w.size]
		}
	}
	for _, w := range writes {
		if w.blockOff < 0 {
			w.buf, arena = arena[:0:w.size], arena[w.size:]
		}
	}
	for i := range b.items {
		if it := &b.items[i]; it.kind == kEntry && it.w != nil && !it.w.direct {
			it.w.buf = append(it.w.buf, b.buf[it.off:it.off+it.n]...)
		}
	}
	for _, w := range writes {
		if w.err == nil && !w.seg.created {
			w.err = w.l.createSegmentFile(w.seg.id)
		}
	}
	b.writes = writes
}

// writeSegments writes the segment buffers layoutEntries laid out for b, one write per segment,
// and lets readers waiting for those entries' bytes go on (applier only; the entries are
// acknowledged already). A write that fails cannot fail its entries any more: they are durable in
// the journal. The file becomes a repair target (repair.go): the ledger is fenced, no checkpoint
// retires the journal, and the file is rewritten from the journal.
func (e *Engine) writeSegments(b *batch) {
	for _, w := range b.writes {
		if w.err != nil {
			continue // its entries failed before the acknowledgement (applyEntry)
		}
		p := segPath(w.l.dirPath(), w.seg.id)
		cf, err := e.files.acquire(p, false)
		if err == nil {
			if w.block != nil {
				err = e.writeBlocks(cf, w)
			} else {
				_, err = cf.f.WriteAt(w.buf, w.off)
				if err == nil {
					e.paceWriteback(cf.f, w.seg, w.off+int64(len(w.buf)))
				}
			}
			e.files.release(cf)
		}
		if err != nil {
			e.needRepair(p, w.l, fmt.Errorf("storage: segment write after acknowledgement: %w", err))
			continue
		}
		e.dirtyFiles[p] = struct{}{}
		w.l.segmentWritten(w.seg, w.end)
	}
	clear(b.writes)
	b.writes = b.writes[:0]
}

// writebackChunk is how much a segment file is written through the page cache before the applier
// starts its writeback.
//
// Why: segment data written by the applier (the double write) is fsynced only at the checkpoint,
// when its journal file fills (64 MiB). Left to the kernel, none of it reaches the device before
// then (writeback starts after 30 s or gigabytes of dirty pages), so the checkpoint would send the
// whole 64 MiB at once and the journal's fdatasyncs would queue behind it. Started every 1 MiB, the
// writes reach the device in steps a few milliseconds long, and the checkpoint's fsync finds little
// left to write: at 5,000 msg/s x 1 KiB the pacing lowers the replication latency p99 from about
// 38 ms to 11 ms (median of six alternating pairs; docs/storage.md, "Paced writeback").
const writebackChunk = 1 << 20

// paceWriteback starts writeback of segment seg's file up to end once writebackChunk bytes have
// been written past the last start (applier only). Advisory: an error (or a file system without
// it) only loses the pacing; the checkpoint's fsync still makes the data durable and reports
// failures.
func (e *Engine) paceWriteback(f vfs.File, seg *segment, end int64) {
	if end-seg.wbOff < writebackChunk {
		return
	}
	if err := vfs.StartWriteback(f, seg.wbOff, end-seg.wbOff); err != nil {
		e.log.Debug("storage: segment writeback", "err", err)
	}
	// The chunks handed to the device before this one are written back by now (most of them):
	// drop their clean pages so that the next chunk's page cache reuses memory used moments ago.
	if seg.wbOff > seg.dropOff {
		if err := vfs.DropCache(f, seg.dropOff, seg.wbOff-seg.dropOff); err != nil {
			e.log.Debug("storage: segment drop cache", "err", err)
		}
		seg.dropOff = max(seg.dropOff, seg.wbOff-2*writebackChunk)
	}
	seg.wbOff = end
}

// applyEntry makes a written entry visible and returns its position (phase two). With shared, the
// entry cache keeps a slice of the batch's arena; else it copies into slab.
func (l *Ledger) applyEntry(it *item, shared bool, slab *[]byte) (Position, error) {
	e := l.e
	if it.err != nil {
		return Position{}, it.err
	}
	if it.w.err != nil {
		l.fence(it.w.err)
		return Position{}, it.w.err
	}
	if it.w.direct {
		shared = it.w.shareable
	}
	seg := it.w.seg
	rec := it.w.buf[it.fileOff-it.w.off:][:it.n]
	data := rec[segRecordOverhead:]
	pos := Position{seg.id, it.entryID}
	l.mu.Lock()
	if l.closed || l.err != nil {
		err := l.err
		if err == nil {
			err = ErrClosed
		}
		l.mu.Unlock()
		e.noteUnconfirmed(it.w) // its bytes may be in the file already (unconfirmed.go)
		return Position{}, err
	}
	seg.created = true
	seg.addEntry(it.fileOff, int64(len(rec)), it.publishTime, int64(len(data)))
	if it.w.direct && seg.written == it.entryID {
		seg.written++ // the sync loop wrote it before the journal (directwrite.go)
	}
	l.entries++
	l.bytes += int64(len(data))
	l.mu.Unlock()
	if e.cache.limit > 0 && shared {
		e.cache.put(pos, it.publishTime, data[:len(data):len(data)])
	} else if e.cache.limit > 0 {
		// One allocation per batch holds the cached copies of all its entries.
		if len(*slab) < len(data) {
			*slab = make([]byte, max(len(data), 256<<10))
		}
		c := (*slab)[:len(data):len(data)]
		*slab = (*slab)[len(data):]
		copy(c, data)
		e.cache.put(pos, it.publishTime, c)
	}
	return pos, nil
}

func (l *Ledger) createSegmentFile(id int64) error {
	e := l.e
	if !l.dirMade {
		if err := e.ensureLedgerDir(l.name, l.dirPath()); err != nil {
			return err
		}
		l.dirMade = true
	}
	if err := e.files.create(segPath(l.dirPath(), id), appendHeader(nil, magicSegment, uint64(id))); err != nil {
		return fmt.Errorf("storage: create segment: %w", err)
	}
	e.dirtyDirs[l.dirPath()] = struct{}{}
	return nil
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

func (l *Ledger) applySeal(id int64) {
	l.mu.Lock()
	seg := l.segByIDLocked(id)
	if seg == nil || seg.sealed {
		l.mu.Unlock()
		return
	}
	seg.sealed = true
	cur := len(l.segs) > 0 && l.segs[len(l.segs)-1] == seg
	if seg.entries == 0 && !cur {
		l.removeSegLocked(seg)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.unpad(seg)
	if seg.padded {
		return // no index: its file size would not match (unpad logged why)
	}
	l.saveIndex(seg)
	if seg.idxSaved {
		l.e.dirtyFiles[idxPath(l.dirPath(), seg.id)] = struct{}{}
	}
}

func (l *Ledger) removeSegLocked(seg *segment) {
	for i, s := range l.segs {
		if s == seg {
			l.segs = append(l.segs[:i], l.segs[i+1:]...)
			break
		}
	}
}

// Err is non-nil once the ledger is fenced (fsync failure, mid-data corruption).
func (l *Ledger) Err() error {
	if l.flags.Load()&flagErrSet == 0 {
		return nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.err
}

// Name returns the ledger's name.
func (l *Ledger) Name() string { return l.name }

// dirPath is the ledger's directory (derived from the name, not stored: idle ledgers stay small).
func (l *Ledger) dirPath() string { return l.e.ledgerDir(l.name) }

// ---- positions and counts ----

// LastConfirmed is the last durable entry, or {currentLedgerID, -1} when the ledger is empty.
func (l *Ledger) LastConfirmed() Position {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.lastConfirmedLocked()
}

func (l *Ledger) lastConfirmedLocked() Position {
	for i := len(l.segs) - 1; i >= 0; i-- {
		if s := l.segs[i]; s.entries > 0 {
			return Position{s.id, s.entries - 1}
		}
	}
	return Position{l.segs[len(l.segs)-1].id, -1}
}

// SegmentInfo describes one segment of a ledger: what Pulsar's internal stats call a ledger.
type SegmentInfo struct {
	ID      int64 // the ledger id of positions in this segment
	Entries int64 // confirmed entries
	Bytes   int64 // entry data bytes
	MaxTime int64 // latest publish time in the segment, ms (0 if unknown)
}

// Segments lists the ledger's segments, oldest first, including the open (possibly empty) one.
func (l *Ledger) Segments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]SegmentInfo, 0, len(l.segs))
	for _, s := range l.segs {
		out = append(out, SegmentInfo{ID: s.id, Entries: s.entries, Bytes: s.bytes, MaxTime: s.maxTime})
	}
	return out
}

// FirstPosition is the first stored entry, or the next position to be written if empty.
func (l *Ledger) FirstPosition() Position {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.firstPositionLocked()
}

func (l *Ledger) firstPositionLocked() Position {
	for _, s := range l.segs {
		if s.entries > 0 {
			return Position{s.id, 0}
		}
	}
	return l.nextPositionLocked()
}

// nextPositionLocked is where the next confirmed entry will be (in the current segment).
func (l *Ledger) nextPositionLocked() Position {
	s := l.segs[len(l.segs)-1]
	return Position{s.id, s.entries}
}

// nextStoredLocked returns the first stored (confirmed) entry after p.
func (l *Ledger) nextStoredLocked(p Position) (Position, bool) {
	for _, s := range l.segs {
		if s.entries == 0 || s.id < p.LedgerID {
			continue
		}
		if s.id == p.LedgerID {
			if p.EntryID+1 < s.entries {
				return Position{s.id, max(p.EntryID+1, 0)}, true
			}
			continue
		}
		return Position{s.id, 0}, true
	}
	return Position{}, false
}

func (l *Ledger) isStoredLocked(p Position) bool {
	s := l.segByIDLocked(p.LedgerID)
	return s != nil && p.EntryID >= 0 && p.EntryID < s.entries
}

// Entries is the number of stored entries.
func (l *Ledger) Entries() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.entries
}

// Bytes is the stored size of the entries' data.
func (l *Ledger) Bytes() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.bytes
}

// CountEntries counts stored entries in (from, to].
func (l *Ledger) CountEntries(from, to Position) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.countLocked(from, to)
}

func (l *Ledger) countLocked(from, to Position) int64 {
	var n int64
	for _, s := range l.segs {
		if s.entries == 0 || s.id < from.LedgerID || s.id > to.LedgerID {
			continue
		}
		lo, hi := int64(0), s.entries-1
		if s.id == from.LedgerID {
			lo = max(lo, from.EntryID+1)
		}
		if s.id == to.LedgerID {
			hi = min(hi, to.EntryID)
		}
		if hi >= lo {
			n += hi - lo + 1
		}
	}
	return n
}

// ---- reading ----

// Read returns stored entries with position >= from, in order, up to LastConfirmed: at most
// maxEntries entries (<= 0: no limit) and at most maxBytes of data (<= 0: no limit), but at least
// one entry if any is stored. Empty slice if none.
func (l *Ledger) Read(ctx context.Context, from Position, maxEntries int, maxBytes int64) ([]Entry, error) {
	out := []Entry{}
	if maxEntries > 0 {
		out = make([]Entry, 0, min(maxEntries, 1024))
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		l.mu.RLock()
		if l.closed {
			l.mu.RUnlock()
			return out, ErrClosed
		}
		var seg *segment
		var start, startOff int64
		var limit, written, avgRec int64
		for _, s := range l.segs {
			if s.entries == 0 || s.id < from.LedgerID || (s.id == from.LedgerID && from.EntryID >= s.entries) {
				continue
			}
			seg = s
			start = 0
			if s.id == from.LedgerID {
				start = max(from.EntryID, 0)
			}
			limit, written = s.entries, s.written
			avgRec = max((s.size-headerSize)/s.entries, segRecordOverhead)
			from = Position{s.id, start}
			start, startOff = l.hintLocked(s, start)
			break
		}
		l.mu.RUnlock()
		if seg == nil {
			return out, nil
		}
		var err error
		out, total, err = l.readSegment(ctx, seg.id, start, startOff, from.EntryID, limit, written, avgRec, out, total, maxEntries, maxBytes)
		if err != nil {
			if vfs.IsNotExist(err) {
				// Trimmed while reading: continue with what is still stored.
				from = Position{seg.id + 1, 0}
				continue
			}
			return out, err
		}
		if (maxEntries > 0 && len(out) >= maxEntries) || (maxBytes > 0 && total >= maxBytes) {
			return out, nil
		}
		from = Position{seg.id + 1, 0}
	}
}

// readSegment appends entries want..limit-1 of segment id to out, starting the file scan at
// entry at (file offset off), serving entries from the cache where possible. Entries from written
// on may not be in the file yet: the file is read only after they are (waitWritten).
func (l *Ledger) readSegment(ctx context.Context, id, at, off, want, limit, written, avgRec int64, out []Entry, total int64, maxEntries int, maxBytes int64) ([]Entry, int64, error) {
	e := l.e
	full := func() bool {
		return (maxEntries > 0 && len(out) >= maxEntries) || (maxBytes > 0 && total >= maxBytes && len(out) > 0)
	}
	// Fast path: the cache has the wanted entries (caught-up readers).
	for want < limit && !full() {
		ce, ok := e.cache.get(Position{id, want})
		if !ok {
			break
		}
		if maxBytes > 0 && len(out) > 0 && total+int64(len(ce.data)) > maxBytes {
			return out, maxBytes, nil
		}
		out = append(out, Entry{Position: Position{id, want}, PublishTime: ce.publishTime, Data: ce.data})
		total += int64(len(ce.data))
		want++
	}
	if want >= limit || full() {
		return out, total, nil
	}
	if written < limit {
		if err := l.waitWritten(ctx, id, limit); err != nil {
			return out, total, err
		}
	}
	if want != at {
		// Re-locate from the index (the cache served a prefix).
		l.mu.RLock()
		s := l.segByIDLocked(id)
		if s == nil {
			l.mu.RUnlock()
			return out, total, nil
		}
		at, off = l.hintLocked(s, want)
		l.mu.RUnlock()
	}
	cf, err := e.files.acquire(segPath(l.dirPath(), id), false)
	if err != nil {
		return out, total, err
	}
	defer e.files.release(cf)
	// Size the read by what is wanted: maxEntries average records, at most maxBytes (plus one).
	// Records before want (from the index point on) are read too: count them in, so that they
	// do not push the wanted ones into a second read.
	skip := (want - at) * avgRec
	chunk := int64(256<<10) + skip
	if maxEntries > 0 {
		chunk = int64(maxEntries-len(out))*avgRec + recHeaderSize + skip
	}
	if maxBytes > 0 {
		chunk = min(chunk, maxBytes-total+avgRec+skip)
	}
	chunk = min(max(chunk, 4<<10), 4<<20)
	// Entries read are slices of buf (like cached entries, they are never modified), so a
	// buffer that entries refer to is never filled again: the next read gets a new one.
	// The read allocates buf (e.readAt) when it is nil or of another size than size.
	var buf []byte
	size := int(chunk)
	inUse := false
	nextRec := 0 // size of the record a refill starts with, when its header was read
	for at < limit && !full() {
		if inUse {
			if maxEntries > 0 {
				// A refill reads what is still wanted (a record straddling the end of the
				// last read must not cost a whole second chunk).
				rest := int64(maxEntries-len(out)) + max(want-at, 0)
				size = min(size, max(int(rest*avgRec)+recHeaderSize, nextRec, 4<<10))
			}
			buf, inUse = nil, false
		}
		nextRec = 0
		n, rerr := e.readAt(cf, &buf, size, off)
		if n < recHeaderSize {
			if rerr == nil || rerr == io.EOF {
				return out, total, fmt.Errorf("%w: segment %d ends early at offset %d", ErrCorrupt, id, off)
			}
			return out, total, fmt.Errorf("storage: read segment: %w", rerr)
		}
		pos := 0
		for at < limit && !full() {
			body, sz, derr := decodeRecord(buf[pos:n], nil)
			if derr != nil {
				// The record may just continue past this read: refill from it (growing the
				// buffer for a record larger than it). At the start of a read it is corrupt.
				grow := false
				if pos+recHeaderSize <= n {
					need := int(binary.LittleEndian.Uint32(buf[pos:])) + recHeaderSize
					if need <= maxRecordBody+recHeaderSize {
						nextRec = need
					}
					if need > len(buf) && need <= maxRecordBody+recHeaderSize {
						buf, size, inUse = nil, need, false
						grow = true
					}
				}
				if pos == 0 && !grow {
					return out, total, fmt.Errorf("%w: segment %d: bad record at offset %d", ErrCorrupt, id, off)
				}
				break
			}
			eid, pt, data, perr := parseSegBody(body)
			if perr != nil || eid != at {
				return out, total, fmt.Errorf("%w: segment %d: entry %d where %d expected", ErrCorrupt, id, eid, at)
			}
			if at >= want {
				if maxBytes > 0 && len(out) > 0 && total+int64(len(data)) > maxBytes {
					l.noteReadHint(id, at, off+int64(pos))
					return out, maxBytes, nil
				}
				out = append(out, Entry{Position: Position{id, at}, PublishTime: pt, Data: data[:len(data):len(data)]})
				inUse = true
				total += int64(len(data))
			}
			at++
			pos += sz
		}
		off += int64(pos)
	}
	if at < limit && at > want {
		l.noteReadHint(id, at, off)
	}
	return out, total, nil
}

// segmentWritten records that seg's entries before end are in its file (applier only).
func (l *Ledger) segmentWritten(seg *segment, end int64) {
	l.mu.Lock()
	seg.written = max(seg.written, end)
	l.wakeWriteWaitersLocked()
	l.mu.Unlock()
}

// wakeWriteWaiters lets readers waiting in waitWritten look again (after a fence).
func (l *Ledger) wakeWriteWaiters() {
	l.mu.Lock()
	l.wakeWriteWaitersLocked()
	l.mu.Unlock()
}

func (l *Ledger) wakeWriteWaitersLocked() {
	if h := l.readHints; h != nil && h.wrote != nil {
		close(h.wrote)
		h.wrote = nil
	}
}

// waitWritten waits until the entries of segment id before end are in its file: the applier
// confirms entries just before it writes them (Engine.apply). It returns at once when the segment
// is gone (trimmed; the caller's read finds that), and with the ledger's error once it is fenced.
func (l *Ledger) waitWritten(ctx context.Context, id, end int64) error {
	for {
		l.mu.Lock()
		s := l.segByIDLocked(id)
		if s == nil || s.written >= end {
			l.mu.Unlock()
			return nil
		}
		if l.err != nil || l.closed {
			err := l.err
			if err == nil {
				err = ErrClosed
			}
			l.mu.Unlock()
			return err
		}
		if l.readHints == nil {
			l.readHints = &readHints{}
		}
		if l.readHints.wrote == nil {
			l.readHints.wrote = make(chan struct{})
		}
		ch := l.readHints.wrote
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ReadEntry reads the entry at p.
func (l *Ledger) ReadEntry(ctx context.Context, p Position) (Entry, error) {
	es, err := l.Read(ctx, p, 1, 0)
	if err != nil {
		return Entry{}, err
	}
	if len(es) == 0 || es[0].Position != p {
		if p.Compare(l.FirstPosition()) < 0 {
			return Entry{}, fmt.Errorf("%w: entry %s: %w", ErrNotFound, p, ErrTrimmed)
		}
		return Entry{}, fmt.Errorf("%w: entry %s", ErrNotFound, p)
	}
	return es[0], nil
}

// FindByTime returns the first position with publishTime >= ts, or the next position to be
// written if there is none. It reads at most one index block of entries per segment it checks.
func (l *Ledger) FindByTime(ctx context.Context, ts int64) (Position, error) {
	l.mu.RLock()
	type cand struct{ id, entry, end int64 }
	var cands []cand
	for _, s := range l.segs {
		if s.entries == 0 || s.maxTime < ts {
			continue
		}
		for i := range s.points {
			if s.points[i].maxTime >= ts {
				end := s.entries
				if i+1 < len(s.points) {
					end = s.points[i+1].entryID
				}
				cands = append(cands, cand{s.id, s.points[i].entryID, end})
				break
			}
		}
	}
	next := l.nextPositionLocked()
	l.mu.RUnlock()
	for _, c := range cands {
		es, err := l.Read(ctx, Position{c.id, c.entry}, int(c.end-c.entry), 0)
		if err != nil {
			return Position{}, err
		}
		for _, en := range es {
			if en.Position.LedgerID == c.id && en.PublishTime >= ts {
				return en.Position, nil
			}
		}
	}
	return next, nil
}

// ---- roll, retention, trim ----

// Roll seals the current ledger id and starts a new one.
func (l *Ledger) Roll(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	id, err := l.e.newLedgerID()
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	l.e.enqueue(nil, func(b *batch) item {
		if l.qClosed {
			return item{kind: kFail, err: ErrClosed, done: func(_ Position, err error) { ch <- err }}
		}
		if id > l.curID {
			l.switchSegmentLocked(b, id)
		}
		return item{kind: kBarrier, done: func(_ Position, err error) { ch <- err }}
	})
	select {
	case err = <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	return l.Trim(ctx)
}

// SetRetention sets how long and how much data that no cursor needs is kept: -1 infinite, 0 none
// (Pulsar's semantics). A consumed segment is removed once it is older than maxAge or the ledger
// is larger than maxBytes.
func (l *Ledger) SetRetention(maxAge time.Duration, maxBytes int64) {
	l.mu.Lock()
	l.maxAge, l.maxBytes = maxAge, maxBytes
	l.mu.Unlock()
}

// Trim removes whole sealed segments that every durable cursor has consumed and that retention
// allows to remove. It also runs periodically.
func (l *Ledger) Trim(ctx context.Context) error {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	cursors := make([]*Cursor, 0, len(l.cursors))
	for _, c := range l.cursors {
		if c.durable {
			cursors = append(cursors, c)
		}
	}
	l.mu.RUnlock()
	slowest := Latest
	for _, c := range cursors {
		if md := c.trimPosition(); md.Compare(slowest) < 0 {
			slowest = md
		}
	}
	nowMs := time.Now().UnixMilli()
	var victims []int64
	l.mu.RLock()
	total := l.bytes
	infinite := l.maxAge < 0 && l.maxBytes < 0
	for i, s := range l.segs {
		if infinite || i == len(l.segs)-1 || !s.sealed || s.entries == 0 {
			break
		}
		if (Position{s.id, s.entries - 1}).Compare(slowest) > 0 {
			break
		}
		expired := l.maxAge >= 0 && (l.maxAge == 0 || nowMs-s.maxTime > l.maxAge.Milliseconds())
		overSize := l.maxBytes >= 0 && total > l.maxBytes
		if !expired && !overSize {
			break
		}
		victims = append(victims, s.id)
		total -= s.bytes
	}
	l.mu.RUnlock()
	if len(victims) == 0 {
		return nil
	}
	ch := make(chan error, len(victims))
	for _, id := range victims {
		l.e.enqueue(l, func(b *batch) item {
			var start int
			b.buf, start = beginJournalRecord(b.buf, jTrim, l.slot)
			b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(id))
			finishJournalRecord(b.buf, start)
			return item{kind: kTrim, ledgerID: id, done: func(_ Position, err error) { ch <- err }}
		})
	}
	var errs []error
	for range victims {
		select {
		case err := <-ch:
			if err != nil {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

func (l *Ledger) applyTrim(id int64) {
	e := l.e
	l.mu.Lock()
	seg := l.segByIDLocked(id)
	if seg == nil || l.closed {
		l.mu.Unlock()
		return
	}
	l.removeSegLocked(seg)
	l.entries -= seg.entries
	l.bytes -= seg.bytes
	first := l.firstPositionLocked()
	cursors := make([]*Cursor, 0, len(l.cursors))
	for _, c := range l.cursors {
		cursors = append(cursors, c)
	}
	l.mu.Unlock()
	e.cache.dropLedger(id, seg.entries)
	for _, p := range []string{segPath(l.dirPath(), id), idxPath(l.dirPath(), id)} {
		e.files.forget(p)
		if err := e.moveToTrash(p); err != nil {
			e.log.Warn("cannot remove trimmed segment file", "path", p, "err", err)
		}
	}
	e.m.trimmedSegments.Add(1)
	e.log.Debug("trimmed", "ledger", l.name, "segment", id)
	// Non-durable cursors may lag behind the trimmed data: move them to the first stored entry.
	for _, c := range cursors {
		c.skipTrimmed(first)
	}
}

func (l *Ledger) applyDelete() error {
	e := l.e
	e.qmu.Lock()
	l.qClosed = true // later appends fail without a journal record
	e.qmu.Unlock()
	l.mu.Lock()
	l.closed = true
	if l.err == nil {
		l.err = ErrClosed
		l.flags.Or(flagErrSet)
	}
	segs := l.segs
	l.mu.Unlock()
	e.forget(l)
	for _, s := range segs {
		e.cache.dropLedger(s.id, s.entries)
	}
	e.files.forgetPrefix(l.dirPath())
	if err := e.moveToTrash(l.dirPath()); err != nil {
		return fmt.Errorf("storage: delete ledger %q: %w", l.name, err)
	}
	e.legacyDirs.forget(l.name)
	return nil
}

// Close flushes cursors and releases the ledger; appends already accepted complete first.
func (l *Ledger) Close() error {
	l.closeOnce.Do(func() {
		l.closedCh = make(chan struct{})
		defer close(l.closedCh)
		l.flags.Or(flagClosing) // publishes closedCh to OpenLedger
		l.flushCursors(nil, nil)
		ch := make(chan error, 1)
		l.e.enqueue(nil, func(b *batch) item {
			l.qClosed = true
			b.items = append(b.items, item{kind: kSeal, l: l, ledgerID: l.curID})
			return item{kind: kBarrier, done: func(_ Position, err error) { ch <- err }}
		})
		err := <-ch
		if errors.Is(err, ErrClosed) {
			err = nil
		}
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.e.forget(l)
		l.closeErr = err
	})
	return l.closeErr
}
