package storage

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Append stores data and returns once it is durable (SyncAlways) or written (SyncInterval).
func (l *Ledger) Append(ctx context.Context, data []byte, publishTime int64) (mtypes.Position, error) {
	type result struct {
		p   mtypes.Position
		err error
	}
	ch := make(chan result, 1)
	l.AppendAsync(data, publishTime, func(p mtypes.Position, err error) { ch <- result{p, err} })
	select {
	case r := <-ch:
		return r.p, r.err
	case <-ctx.Done():
		// The append may still complete; the caller only stops waiting.
		return mtypes.Position{}, ctx.Err()
	}
}

// AppendAsync stores data and calls done exactly once, in append order per ledger, once durable
// or failed: from a storage goroutine, or from a goroutine that ends a lead (leadcommit.go), never
// before AppendAsync returns. done must not block, nor read the ledger (the applier writes
// the entry to its segment file after calling done: Engine.apply). data is copied.
func (l *Ledger) AppendAsync(data []byte, publishTime int64, done func(mtypes.Position, error)) {
	l.AppendAsyncIn(nil, data, publishTime, done)
}

// AppendAsyncIn is AppendAsync inside lead, opened by the calling goroutine (nil: none): the
// append is committed when the lead ends, on the goroutine that ends it or by the sync loop
// (leadcommit.go).
func (l *Ledger) AppendAsyncIn(lead *Lead, data []byte, publishTime int64, done func(mtypes.Position, error)) {
	e := l.e
	if lead != nil && lead.e != e {
		lead = nil // another engine's lead: this append wakes its own sync loop
	}
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
	e.enqueueIn(lead, l, func(b *batch) item {
		if l.flags.Load()&flagQueueClosed != 0 {
			return item{kind: kFail, err: ErrClosed, done: done}
		}
		if l.flags.Load()&flagQueueFenced != 0 {
			return item{kind: kFail, err: ErrFenced, done: done}
		}
		if rollTo > l.queue.curID {
			l.switchSegmentLocked(b, rollTo)
		}
		b.buf = growBatchBuf(b.buf, entryRecordHead+segRecordOverhead+len(data))
		var start int
		b.buf, start = beginJournalRecord(b.buf, jEntry, l.slot)
		b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(l.queue.curID))
		recOff := len(b.buf)
		b.buf = appendSegRecord(b.buf, l.queue.nextEntry, publishTime, data)
		finishJournalRecord(b.buf, start)
		it := item{kind: kEntry, ledgerID: l.queue.curID, entryID: l.queue.nextEntry, publishTime: publishTime,
			off: recOff, n: len(b.buf) - recOff, done: done}
		l.queue.nextEntry++
		l.queue.curBytes += int64(it.n)
		if l.queue.curBytes >= e.opts.SegmentMaxBytes || l.queue.nextEntry >= e.opts.SegmentMaxEntries {
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

// switchSegmentLocked starts segment id for new appends (e.queue.mu held) and queues the seal of the
// previous one behind its entries.
func (l *Ledger) switchSegmentLocked(b *batch, id int64) {
	old := l.queue.curID
	l.mu.Lock()
	l.segs = append(l.segs, &segment{id: id})
	l.mu.Unlock()
	l.queue.curID, l.queue.nextEntry, l.queue.curBytes = id, 0, 0
	l.flags.And(^uint32(flagFull))
	b.items = append(b.items, item{kind: kSeal, l: l, ledgerID: old})
}
