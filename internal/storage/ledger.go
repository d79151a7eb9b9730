package storage

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
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

	queue ledgerQueueState // the order of appends, under e.queue.mu

	closed  bool // guarded by mu
	dirMade bool // the ledger's directory exists (the applier's, after load)

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
	cursorLog ledgerCursorLog // under e.cursorLogs.mu

	closeOnce sync.Once
	flags     atomic.Uint32 // flagClosing, flagErrSet, flagFull, flagQueueClosed, flagQueueFenced
	closeErr  error
	closedCh  chan struct{}
}

// ledgerQueueState is a ledger's part of the append queue: where its next entry goes. Appenders
// and the sync loop change it under the engine's queue lock (e.queue.mu), which fixes the order
// of journal records and of entry ids. (Whether the queue takes the ledger's appends at all is
// in Ledger.flags: flagQueueClosed, flagQueueFenced; as bools here they would pad this struct and
// push the Ledger past its size class.)
type ledgerQueueState struct {
	announced uint64 // the journal file that last announced the ledger's slot and name
	curID     int64  // the segment new entries go to
	nextEntry int64  // the id of the next entry in it
	curBytes  int64  // the bytes appended to it (for SegmentMaxBytes)
}

// ledgerCursorLog is the size of a ledger's cursors.log and the size from which the janitor looks
// at compacting it (janitor.go), under the engine's cursor-log lock (e.cursorLogs.mu).
type ledgerCursorLog struct {
	size      int64
	compactAt int64
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
	// under e.queue.mu, read by AppendAsync without it, which took e.queue.mu a second time per append).
	flagFull
	// flagQueueClosed: the ledger is closed or deleted for the queue: appends fail with ErrClosed
	// without a journal record (set under e.queue.mu).
	flagQueueClosed
	// flagQueueFenced: the ledger is fenced for the queue: appends fail with ErrFenced (set under
	// e.queue.mu).
	flagQueueFenced
	// flagLoaded: the ledger loaded without error (set before ready is closed). The background
	// passes over every open ledger test it instead of receiving from ready, which takes the
	// channel's lock: with 10,000 idle topics that was a sixth of an idle broker's CPU.
	flagLoaded
)

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
func (l *Ledger) LastConfirmed() mtypes.Position {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.lastConfirmedLocked()
}

func (l *Ledger) lastConfirmedLocked() mtypes.Position {
	for i := len(l.segs) - 1; i >= 0; i-- {
		if s := l.segs[i]; s.entries > 0 {
			return mtypes.Position{LedgerID: s.id, EntryID: s.entries - 1}
		}
	}
	return mtypes.Position{LedgerID: l.segs[len(l.segs)-1].id, EntryID: -1}
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
func (l *Ledger) FirstPosition() mtypes.Position {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.firstPositionLocked()
}

func (l *Ledger) firstPositionLocked() mtypes.Position {
	for _, s := range l.segs {
		if s.entries > 0 {
			return mtypes.Position{LedgerID: s.id, EntryID: 0}
		}
	}
	return l.nextPositionLocked()
}

// nextPositionLocked is where the next confirmed entry will be (in the current segment).
func (l *Ledger) nextPositionLocked() mtypes.Position {
	s := l.segs[len(l.segs)-1]
	return mtypes.Position{LedgerID: s.id, EntryID: s.entries}
}

// nextStoredLocked returns the first stored (confirmed) entry after p.
func (l *Ledger) nextStoredLocked(p mtypes.Position) (mtypes.Position, bool) {
	for _, s := range l.segs {
		if s.entries == 0 || s.id < p.LedgerID {
			continue
		}
		if s.id == p.LedgerID {
			if p.EntryID+1 < s.entries {
				return mtypes.Position{LedgerID: s.id, EntryID: max(p.EntryID+1, 0)}, true
			}
			continue
		}
		return mtypes.Position{LedgerID: s.id, EntryID: 0}, true
	}
	return mtypes.Position{}, false
}

// IsStored reports whether an entry is stored at p: not one trimmed, not yet written, nor a
// position of a ledger id or entry id this ledger never had (such as another data directory's).
func (l *Ledger) IsStored(p mtypes.Position) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.isStoredLocked(p)
}

func (l *Ledger) isStoredLocked(p mtypes.Position) bool {
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
func (l *Ledger) CountEntries(from, to mtypes.Position) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.countLocked(from, to)
}

func (l *Ledger) countLocked(from, to mtypes.Position) int64 {
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

// Close flushes cursors and releases the ledger; appends already accepted complete first.
func (l *Ledger) Close() error {
	l.closeOnce.Do(func() {
		l.closedCh = make(chan struct{})
		defer close(l.closedCh)
		l.flags.Or(flagClosing) // publishes closedCh to OpenLedger
		l.flushCursors(nil, nil)
		ch := make(chan error, 1)
		l.e.enqueue(nil, func(b *batch) item {
			l.flags.Or(flagQueueClosed)
			b.items = append(b.items, item{kind: kSeal, l: l, ledgerID: l.queue.curID})
			return item{kind: kBarrier, done: func(_ mtypes.Position, err error) { ch <- err }}
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
