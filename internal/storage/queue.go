package storage

import (
	"sync"
	"time"
	"unsafe"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// appendQueue is where appenders meet the sync loop and the applier: the pending batch all
// appenders fill, the free batches the applier gives back, and what each goroutine reports to the
// sync loop. Every field is guarded by mu; cond wakes the sync loop (new work, a batch freed, an
// fsync reported), its only waiter.
type appendQueue struct {
	mu   sync.Mutex
	cond *sync.Cond // on mu
	// pending is the batch appenders fill; pendingSeq is the journal file it will be written to
	// and journalSize the size of that file including the pending batch.
	pending     *batch
	pendingSeq  uint64
	journalSize int64
	stopping    bool         // Close: no more appends; the sync loop finishes and stops
	applying    bool         // the applier is working on a batch
	syncDone    []syncResult // SyncInterval: background fsyncs finished, for the sync loop
	// commitDone: SyncAlways, fsyncs of batches in flight reported by the commit syncers
	// (pipelinesync.go).
	commitDone []*commitInFlight
	// freeBatches: batches to fill again (applier -> sync loop), a stack: the sync loop takes the
	// one freed last (see takeFreeBatch).
	freeBatches []*batch
	spare       *batch      // taken from freeBatches by the sync loop, the next pending batch
	demand      batchDemand // recent batch sizes (see batchDemand.trim)
	appliedJobs uint64      // jobs the applier finished (the sync loop counts those it handed on)
	// rotateThrough: the group commit of a journal file up to this one closes the file (an
	// import waits for its checkpoint: transfer_state.go).
	rotateThrough uint64
	lead          leadState // a group commit on the appender's goroutine (leadcommit.go)
}

// batch is one group commit: journal bytes plus what to do once they are durable.
type batch struct {
	seq    uint64
	buf    []byte
	items  []item
	rotate bool // close this journal file after the batch
	moved  bool // encoded for an abandoned journal file
	// cacheArena: the segment arena of this batch is its own, and the entry cache keeps slices
	// of it (set by layoutEntries).
	cacheArena bool
	// Direct writes of this batch (directwrite.go) and the journal bytes written instead of buf
	// when there are any.
	direct []*segWrite
	jbuf   []byte
	// writes: the segment writes the applier laid out for b (layoutEntries) and has not written
	// yet (writeSegments).
	writes []*segWrite
	// dbuf holds the records of b's direct writes that nothing refers to once b is applied
	// (writeDirect: the entry cache copies them).
	dbuf []byte
	// opened is when the first item joined the batch (for the commit latency histogram).
	opened time.Time
}

type itemKind uint8

const (
	kEntry itemKind = iota
	kCursor
	kDelCursor
	kTrim
	kDelLedger
	kSeal
	kBarrier
	kFail // report err in order
	kCreate
	kRepair // rewrite the files that wait for it (repair.go)
)

type item struct {
	kind        itemKind
	l           *Ledger
	ledgerID    int64
	entryID     int64
	publishTime int64
	off, n      int // the segment record (kEntry) or cursor-log body (kCursor, kDelCursor) in buf
	err         error
	done        func(mtypes.Position, error)
	cursor      *Cursor   // kCursor: clears its in-flight flag
	version     uint64    // kCursor: state version written
	fileOff     int64     // kEntry: where its record went in the segment file
	w           *segWrite // kEntry: the segment write it is part of
}

// enqueue appends one item, built by fill under the queue lock (which fixes the order of
// journal records and of entry ids per ledger), announcing the ledger in this journal file first.
func (e *Engine) enqueue(l *Ledger, fill func(b *batch) item) { e.enqueueIn(nil, l, fill) }

// enqueueIn is enqueue of an item made inside lead (nil: none): an entry append of the lead's
// holder, while the lead is open, leaves the sync loop asleep, owing it a wake-up that the lead's
// end gives; any other item gives the wake-up it owes (leadcommit.go).
func (e *Engine) enqueueIn(lead *Lead, l *Ledger, fill func(b *batch) item) {
	e.queue.mu.Lock()
	b := e.queue.pending
	if e.queue.stopping {
		e.queue.mu.Unlock()
		it := fill(&batch{seq: b.seq})
		if it.done != nil {
			// Never call back on the caller's goroutine (it may hold locks done needs).
			go it.done(mtypes.Position{}, ErrClosed)
		}
		return
	}
	if l != nil && l.queue.announced != b.seq {
		b.buf = appendAnnounce(b.buf, l.slot, l.name)
		l.queue.announced = b.seq
	}
	before := len(b.buf)
	wasEmpty := len(b.items) == 0
	it := fill(b)
	it.l = l
	b.items = append(b.items, it)
	e.queue.journalSize += int64(len(b.buf) - before)
	if wasEmpty {
		b.opened = time.Now()
	}
	switch {
	case lead != nil && e.queue.lead.open && it.kind == kEntry:
		e.queue.lead.owed = e.queue.lead.owed || wasEmpty
	case wasEmpty || e.queue.lead.owed:
		e.queue.lead.owed = false
		e.queue.cond.Signal()
	}
	e.queue.mu.Unlock()
}

// takeFreeBatch takes the batch freed last, waiting for one (sync loop only, e.queue.mu held).
//
// Why a stack: a batch's buffers keep the capacity of the largest group commit they held (a
// catch-up's are 10-60 MB). Taken in turn, as from a queue, every batch grows to that size and
// is cold when its turn comes again; taken last-freed first, the batches the pipeline does not
// need at once stay at the bottom, small or idle, and the one reused is the one just written
// (its memory recently touched). Idle ones give their buffers back (releaseIdleBatches).
func (e *Engine) takeFreeBatch() *batch {
	for len(e.queue.freeBatches) == 0 {
		e.queue.cond.Wait()
	}
	b := e.queue.freeBatches[len(e.queue.freeBatches)-1]
	e.queue.freeBatches[len(e.queue.freeBatches)-1] = nil
	e.queue.freeBatches = e.queue.freeBatches[:len(e.queue.freeBatches)-1]
	return b
}

// batchKeep is the capacity a batch's buffers keep however small the recent group commits were.
const batchKeep = 1 << 20

// batchDemand is the largest journal buffer and item count of the batches freed in the current
// and the previous demand window (releaseIdleBatches starts a window every batchDemandWindow).
type batchDemand struct {
	buf, items         int // current window
	prevBuf, prevItems int // previous window
	since              time.Time
}

// batchDemandWindow is how long a demand window lasts: a batch's buffers are dropped after one to
// two windows without a batch that needed them. (Not CursorFlushInterval itself, which may be set
// much shorter: buffers would then be dropped and regrown between the bursts of a steady load.)
const batchDemandWindow = time.Second

func (d *batchDemand) note(b *batch) {
	d.buf = max(d.buf, len(b.buf), len(b.jbuf), len(b.dbuf))
	d.items = max(d.items, len(b.items))
}

// trim drops b's buffers where their capacity exceeds four times the recent demand (and
// batchKeep): after a burst the engine's batches would otherwise each keep the largest group
// commit they ever carried (a catch-up's are 40-100 MB: hundreds of MB across the pool) for as
// long as the process runs, raising the heap's size and the garbage collector's goal. A dropped
// buffer's memory is reused by the heap's next allocations instead of fresh memory.
func (d *batchDemand) trim(b *batch) {
	limit := max(batchKeep, 4*max(d.buf, d.prevBuf))
	if cap(b.buf) > limit && len(b.buf) == 0 {
		b.buf = nil
	}
	if cap(b.jbuf) > limit {
		b.jbuf = nil
	}
	if cap(b.dbuf) > limit {
		b.dbuf = nil
	}
	if n := max(d.items, d.prevItems); cap(b.items) > max(batchKeep/int(unsafe.Sizeof(item{})), 4*n) && len(b.items) == 0 {
		b.items = nil
	}
}

// releaseIdleBatches starts a new demand window when the current one is batchDemandWindow old and
// trims the free batches, the spare and an empty pending batch to it (background goroutine): an
// engine whose load fell gives back what it no longer needs.
func (e *Engine) releaseIdleBatches(now time.Time) {
	e.queue.mu.Lock()
	defer e.queue.mu.Unlock()
	d := &e.queue.demand
	if now.Sub(d.since) < batchDemandWindow*9/10 { // (a tick a little early does not skip a window)
		return
	}
	d.prevBuf, d.prevItems = d.buf, d.items
	d.buf, d.items, d.since = 0, 0, now
	for _, b := range e.queue.freeBatches {
		d.trim(b)
	}
	if e.queue.spare != nil {
		d.trim(e.queue.spare)
	}
	if len(e.queue.pending.items) == 0 {
		d.trim(e.queue.pending)
	}
}
