package storage

import (
	"sync"
	"sync/atomic"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Cursor flushes: a cursor's records reach the journal in the order their states were taken.
//
// A flush takes a cursor's state (and notes its version as queued) and then queues the record.
// Flushes run on several goroutines: the periodic flush, Flush, a ledger's Close. Were the two
// steps apart, an older state could be queued after a newer one (the log's last record, which
// wins at load and at replay, would take the cursor back: a Flush that reported the newer state
// durable would not hold after a restart), and a state taken just before Close could be queued
// after the ledger's seal, when the applier no longer writes its cursor log: Close's own flush
// skips the cursor (its version is queued already) and the state is lost at a clean shutdown.
// DeleteCursor has the same problem with a state queued after the deletion (the cursor comes
// back). So each cursor's flushMu is held from taking its state until its record is queued, by
// every flush and by DeleteCursor; Close's flush therefore waits for one in progress, whose
// record is then ahead of the seal. Queueing does not wait for anything (enqueue only appends
// to the pending batch), so a flush holds flushMu briefly: the encoding of one state and one
// queue-lock acquisition.

// cursorFlushHooks lets tests stop a flush between taking a state and queueing it, and see a
// flush wait for another one (nil in production).
var cursorFlushHooks atomic.Pointer[cursorFlushHookSet]

type cursorFlushHookSet struct {
	taken   func(c *Cursor) // after c's state was taken for a record, before it is queued
	waiting func(c *Cursor) // a flush or delete of c waits for another one
}

// lockFlush takes c.flushMu.
func (c *Cursor) lockFlush() {
	if c.flushMu.TryLock() {
		return
	}
	if h := cursorFlushHooks.Load(); h != nil {
		h.waiting(c)
	}
	c.flushMu.Lock()
}

// flushCursors queues the state of changed durable cursors (of cs, or all when cs is nil) into
// the journal. With done non-nil, done receives the result once they are durable (always, even
// if nothing needed writing).
func (l *Ledger) flushCursors(cs []*Cursor, done chan error) {
	if cs == nil {
		l.mu.RLock()
		for _, c := range l.cursors {
			cs = append(cs, c)
		}
		l.mu.RUnlock()
	}
	if len(cs) == 0 && done == nil {
		return // a ledger without cursors: the periodic flush costs nothing
	}
	var errMu sync.Mutex
	var firstErr error
	recordDone := func(_ mtypes.Position, err error) {
		if err != nil {
			errMu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			errMu.Unlock()
		}
	}
	for _, c := range cs {
		if !c.durable {
			continue
		}
		c.lockFlush()
		c.mu.Lock()
		var body []byte
		v := c.version
		if !c.deleted && (c.version > c.queued || (done != nil && c.version > c.flushedV)) {
			body = encodeCursorState([]byte{cState}, &c.st)
			c.queued = c.version
			c.persisted.queued(c.version, c.st.markDelete)
		}
		c.mu.Unlock()
		if body != nil {
			if h := cursorFlushHooks.Load(); h != nil {
				h.taken(c)
			}
			l.e.enqueue(l, func(b *batch) item {
				var off int
				b.buf, off = appendJournalBody(b.buf, jCursor, l.slot, body)
				return item{kind: kCursor, cursor: c, version: v, off: off, n: len(body), done: recordDone}
			})
		}
		c.flushMu.Unlock()
	}
	if done != nil {
		l.e.enqueue(nil, func(*batch) item {
			return item{kind: kBarrier, done: func(_ mtypes.Position, err error) {
				errMu.Lock()
				if err == nil {
					err = firstErr
				}
				errMu.Unlock()
				done <- err
			}}
		})
	}
}
