package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Read returns stored entries with position >= from, in order, up to LastConfirmed: at most
// maxEntries entries (<= 0: no limit) and at most maxBytes of data (<= 0: no limit), but at least
// one entry if any is stored. Empty slice if none.
func (l *Ledger) Read(ctx context.Context, from mtypes.Position, maxEntries int, maxBytes int64) ([]mtypes.Entry, error) {
	rb := &readBatch{out: []mtypes.Entry{}, maxEntries: maxEntries, maxBytes: maxBytes}
	for {
		if err := ctx.Err(); err != nil {
			return rb.out, err
		}
		l.mu.RLock()
		if l.closed {
			l.mu.RUnlock()
			return rb.out, ErrClosed
		}
		var seg *segment
		var sc segmentScan
		for _, s := range l.segs {
			if s.entries == 0 || s.id < from.LedgerID || (s.id == from.LedgerID && from.EntryID >= s.entries) {
				continue
			}
			seg = s
			start := int64(0)
			if s.id == from.LedgerID {
				start = max(from.EntryID, 0)
			}
			sc = segmentScan{id: s.id, want: start, limit: s.entries, written: s.written,
				avgRec: max((s.size-headerSize)/s.entries, segRecordOverhead)}
			from = mtypes.Position{LedgerID: s.id, EntryID: start}
			sc.at, sc.off = l.hintLocked(s, start)
			break
		}
		l.mu.RUnlock()
		if seg == nil {
			return rb.out, nil
		}
		if maxEntries > 0 && cap(rb.out) == 0 {
			// Sized once there is something to read: a read past the end (an idle topic's, a
			// reader that keeps up) allocates nothing.
			rb.out = make([]mtypes.Entry, 0, min(maxEntries, 1024))
		}
		if err := l.readSegment(ctx, sc, rb); err != nil {
			if vfs.IsNotExist(err) {
				// Trimmed while reading: continue with what is still stored.
				from = mtypes.Position{LedgerID: seg.id + 1, EntryID: 0}
				continue
			}
			return rb.out, err
		}
		if (maxEntries > 0 && len(rb.out) >= maxEntries) || (maxBytes > 0 && rb.total >= maxBytes) {
			return rb.out, nil
		}
		from = mtypes.Position{LedgerID: seg.id + 1, EntryID: 0}
	}
}

// segmentScan is what readSegment reads of one segment, fixed by Read under the ledger's lock.
type segmentScan struct {
	id      int64 // the segment's ledger id
	at, off int64 // the file scan starts at entry at, file offset off (an index point or a read hint)
	want    int64 // the first entry wanted
	limit   int64 // entries confirmed when the read started: want..limit-1 are read
	written int64 // entries in the file when the read started: from there on the read waits (waitWritten)
	avgRec  int64 // average record size in the file, to size the read
}

// readBatch collects the entries of one Read within its limits.
type readBatch struct {
	out        []mtypes.Entry
	total      int64 // data bytes in out (set to maxBytes when the next entry would pass it)
	maxEntries int   // <= 0: no limit
	maxBytes   int64 // <= 0: no limit
}

// full reports whether the batch may take no further entry.
func (rb *readBatch) full() bool {
	return (rb.maxEntries > 0 && len(rb.out) >= rb.maxEntries) || (rb.maxBytes > 0 && rb.total >= rb.maxBytes && len(rb.out) > 0)
}

// readSegment appends entries sc.want..sc.limit-1 of segment sc.id to rb, starting the file scan
// at entry sc.at (file offset sc.off), serving entries from the cache where possible. Entries from
// sc.written on may not be in the file yet: the file is read only after they are (waitWritten).
func (l *Ledger) readSegment(ctx context.Context, sc segmentScan, rb *readBatch) error {
	e := l.e
	id, limit, written, avgRec := sc.id, sc.limit, sc.written, sc.avgRec
	inc := l.IncarnationOf(id)
	at, off, want := sc.at, sc.off, sc.want
	// Fast path: the cache has the wanted entries (caught-up readers).
	for want < limit && !rb.full() {
		ce, ok := e.cache.get(mtypes.Position{LedgerID: id, EntryID: want})
		if !ok {
			break
		}
		if rb.maxBytes > 0 && len(rb.out) > 0 && rb.total+int64(len(ce.data)) > rb.maxBytes {
			rb.total = rb.maxBytes
			return nil
		}
		rb.out = append(rb.out, mtypes.Entry{Position: mtypes.Position{LedgerID: id, EntryID: want}, PublishTime: ce.publishTime, Data: ce.data, Incarnation: inc})
		rb.total += int64(len(ce.data))
		want++
	}
	if want >= limit || rb.full() {
		return nil
	}
	if written < limit {
		if err := l.waitWritten(ctx, id, limit); err != nil {
			return err
		}
	}
	if want != at {
		// Re-locate from the index (the cache served a prefix).
		l.mu.RLock()
		s := l.segByIDLocked(id)
		if s == nil {
			l.mu.RUnlock()
			return nil
		}
		at, off = l.hintLocked(s, want)
		l.mu.RUnlock()
	}
	cf, err := e.files.acquire(segPath(l.dirPath(), id), false)
	if err != nil {
		return err
	}
	defer e.files.release(cf)
	// Size the read by what is wanted: maxEntries average records, at most maxBytes (plus one).
	// Records before want (from the index point on) are read too: count them in, so that they
	// do not push the wanted ones into a second read.
	skip := (want - at) * avgRec
	chunk := int64(256<<10) + skip
	if rb.maxEntries > 0 {
		chunk = int64(rb.maxEntries-len(rb.out))*avgRec + recHeaderSize + skip
	}
	if rb.maxBytes > 0 {
		chunk = min(chunk, rb.maxBytes-rb.total+avgRec+skip)
	}
	chunk = min(max(chunk, 4<<10), 4<<20)
	// Entries read are slices of buf (like cached entries, they are never modified), so a
	// buffer that entries refer to is never filled again: the next read gets a new one.
	// The read allocates buf (e.readAt) when it is nil or of another size than size.
	var buf []byte
	size := int(chunk)
	inUse := false
	nextRec := 0 // size of the record a refill starts with, when its header was read
	for at < limit && !rb.full() {
		if inUse {
			if rb.maxEntries > 0 {
				// A refill reads what is still wanted (a record straddling the end of the
				// last read must not cost a whole second chunk).
				rest := int64(rb.maxEntries-len(rb.out)) + max(want-at, 0)
				size = min(size, max(int(rest*avgRec)+recHeaderSize, nextRec, 4<<10))
			}
			buf, inUse = nil, false
		}
		nextRec = 0
		n, rerr := e.readAt(cf, &buf, size, off)
		if n < recHeaderSize {
			if rerr == nil || rerr == io.EOF {
				return fmt.Errorf("%w: segment %d ends early at offset %d", ErrCorrupt, id, off)
			}
			return fmt.Errorf("storage: read segment: %w", rerr)
		}
		pos := 0
		for at < limit && !rb.full() {
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
					return fmt.Errorf("%w: segment %d: bad record at offset %d", ErrCorrupt, id, off)
				}
				break
			}
			eid, pt, data, perr := parseSegBody(body)
			if perr != nil || eid != at {
				return fmt.Errorf("%w: segment %d: entry %d where %d expected", ErrCorrupt, id, eid, at)
			}
			if at >= want {
				if rb.maxBytes > 0 && len(rb.out) > 0 && rb.total+int64(len(data)) > rb.maxBytes {
					l.noteReadHint(id, at, off+int64(pos))
					rb.total = rb.maxBytes
					return nil
				}
				rb.out = append(rb.out, mtypes.Entry{Position: mtypes.Position{LedgerID: id, EntryID: at}, PublishTime: pt, Data: data[:len(data):len(data)], Incarnation: inc})
				inUse = true
				rb.total += int64(len(data))
			}
			at++
			pos += sz
		}
		off += int64(pos)
	}
	if at < limit && at > want {
		l.noteReadHint(id, at, off)
	}
	return nil
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
func (l *Ledger) ReadEntry(ctx context.Context, p mtypes.Position) (mtypes.Entry, error) {
	es, err := l.Read(ctx, p, 1, 0)
	if err != nil {
		return mtypes.Entry{}, err
	}
	if len(es) == 0 || es[0].Position != p {
		if p.Compare(l.FirstPosition()) < 0 {
			return mtypes.Entry{}, fmt.Errorf("%w: entry %s: %w", ErrNotFound, p, ErrTrimmed)
		}
		return mtypes.Entry{}, fmt.Errorf("%w: entry %s", ErrNotFound, p)
	}
	return es[0], nil
}

// FindByTime returns the first position with publishTime >= ts, or the next position to be
// written if there is none. It reads at most one index block of entries per segment it checks.
func (l *Ledger) FindByTime(ctx context.Context, ts int64) (mtypes.Position, error) {
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
		es, err := l.Read(ctx, mtypes.Position{LedgerID: c.id, EntryID: c.entry}, int(c.end-c.entry), 0)
		if err != nil {
			return mtypes.Position{}, err
		}
		for _, en := range es {
			if en.Position.LedgerID == c.id && en.PublishTime >= ts {
				return en.Position, nil
			}
		}
	}
	return next, nil
}
