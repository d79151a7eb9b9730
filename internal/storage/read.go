package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

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
