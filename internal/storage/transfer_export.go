package storage

import (
	"context"
	"fmt"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// LedgerExport is what moving a ledger to another engine copies: its segments (read with
// Ledger.Read, written with LedgerImport.Append) and the state of its durable cursors.
type LedgerExport struct {
	// Segments are the ledger's non-empty segments, oldest first. All are sealed: nothing is
	// appended to them any more.
	Segments []ExportedSegment
	// Cursors are the durable cursors' states, one opaque record each (the cursor-log record
	// format): mark-delete position, individually acknowledged ranges, partially acknowledged
	// batches and properties, within the bounds every persisted state keeps (cursorlimits.go).
	// Non-durable cursors are not exported: they live in memory only and are not part of the
	// topic a restart would find either.
	Cursors [][]byte
}

// ExportedSegment describes one exported segment. Its entries are 0..Entries-1 (a segment always
// starts at entry 0: trimming removes whole segments).
type ExportedSegment struct {
	ID          int64  // the segment's ledger id: the importer keeps it, so positions stay valid
	Incarnation uint64 // the incarnation its ledger id belongs to (Ledger.IncarnationOf)
	Entries     int64
	Bytes       int64 // entry data bytes
}

// Export seals the ledger's current segment and reports its segments and cursors at that point,
// for copying the ledger to another engine (Engine.ImportLedger). The owner stops appending
// before; an append after the seal goes to a new segment, which this export does not hold.
// A fenced ledger (Err) cannot be exported: what it holds may be incomplete until it is
// reopened.
func (l *Ledger) Export(ctx context.Context) (LedgerExport, error) {
	if err := l.Err(); err != nil {
		return LedgerExport{}, fmt.Errorf("storage: export ledger %q: %w", l.name, err)
	}
	id, err := l.e.newLedgerID()
	if err != nil {
		return LedgerExport{}, err
	}
	ch := make(chan error, 1)
	l.e.enqueue(nil, func(b *batch) item {
		done := func(_ mtypes.Position, err error) { ch <- err }
		switch {
		case l.flags.Load()&flagQueueClosed != 0:
			return item{kind: kFail, err: ErrClosed, done: done}
		case l.flags.Load()&flagQueueFenced != 0:
			return item{kind: kFail, err: ErrFenced, done: done}
		}
		if id > l.queue.curID {
			l.switchSegmentLocked(b, id)
		}
		// Applied after the seal and after every entry appended before it.
		return item{kind: kBarrier, done: done}
	})
	select {
	case err = <-ch:
	case <-ctx.Done():
		return LedgerExport{}, ctx.Err()
	}
	if err == nil {
		err = l.Err()
	}
	if err != nil {
		return LedgerExport{}, fmt.Errorf("storage: export ledger %q: %w", l.name, err)
	}
	var out LedgerExport
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return LedgerExport{}, fmt.Errorf("storage: export ledger %q: %w", l.name, ErrClosed)
	}
	for _, s := range l.segs {
		if s.id < id && s.entries > 0 {
			out.Segments = append(out.Segments, ExportedSegment{ID: s.id, Entries: s.entries, Bytes: s.bytes})
		}
	}
	l.mu.RUnlock()
	for i := range out.Segments {
		out.Segments[i].Incarnation = l.IncarnationOf(out.Segments[i].ID)
	}
	out.Cursors = l.liveCursorRecords()
	return out, nil
}
