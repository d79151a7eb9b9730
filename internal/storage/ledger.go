package storage

import (
	"context"
	"time"
)

// Ledger is one topic's (or partition's) log: a sequence of ledger ids, each holding entries 0..n.
type Ledger struct {
	name string
}

// Name returns the ledger's name.
func (l *Ledger) Name() string { return l.name }

// Append stores data and returns once it is durable (in SyncAlways mode).
func (l *Ledger) Append(ctx context.Context, data []byte, publishTime int64) (Position, error) {
	return Position{}, errNotImplemented
}

// AppendAsync stores data and calls done exactly once, in append order per ledger, from a storage
// goroutine, once durable or failed. done must not block.
func (l *Ledger) AppendAsync(data []byte, publishTime int64, done func(Position, error)) {
	done(Position{}, errNotImplemented)
}

// Read returns stored entries with position >= from, in order, up to LastConfirmed, at most
// maxEntries entries and about maxBytes bytes (at least one entry if any). Empty slice if none.
func (l *Ledger) Read(ctx context.Context, from Position, maxEntries int, maxBytes int64) ([]Entry, error) {
	return nil, errNotImplemented
}

// ReadEntry reads the entry at p.
func (l *Ledger) ReadEntry(ctx context.Context, p Position) (Entry, error) {
	return Entry{}, errNotImplemented
}

// LastConfirmed is the last durable entry, or {currentLedgerID, -1} when the ledger is empty.
func (l *Ledger) LastConfirmed() Position { return Position{} }

// FirstPosition is the first stored entry, or the next position to be written if empty.
func (l *Ledger) FirstPosition() Position { return Position{} }

// Entries is the number of stored entries.
func (l *Ledger) Entries() int64 { return 0 }

// Bytes is the stored size of the entries' data.
func (l *Ledger) Bytes() int64 { return 0 }

// CountEntries counts stored entries in (from, to].
func (l *Ledger) CountEntries(from, to Position) int64 { return 0 }

// FindByTime returns the first position with publishTime >= ts, or the next position to be written.
func (l *Ledger) FindByTime(ctx context.Context, ts int64) (Position, error) {
	return Position{}, errNotImplemented
}

// Roll seals the current ledger id and starts a new one.
func (l *Ledger) Roll(ctx context.Context) error { return errNotImplemented }

// SetRetention sets how much data no cursor needs is kept: maxAge and maxBytes, -1 infinite, 0 none.
func (l *Ledger) SetRetention(maxAge time.Duration, maxBytes int64) {}

// Trim removes whole sealed ledger ids that no cursor needs and retention allows. It also runs periodically.
func (l *Ledger) Trim(ctx context.Context) error { return errNotImplemented }

// OpenCursor opens or creates a cursor. An existing durable cursor keeps its stored state.
func (l *Ledger) OpenCursor(ctx context.Context, name string, opts CursorOptions) (*Cursor, error) {
	return nil, errNotImplemented
}

// Cursor returns the open cursor called name, or nil.
func (l *Ledger) Cursor(name string) *Cursor { return nil }

// Cursors lists the ledger's cursors.
func (l *Ledger) Cursors() []*Cursor { return nil }

// DeleteCursor removes a cursor and its stored state.
func (l *Ledger) DeleteCursor(ctx context.Context, name string) error { return errNotImplemented }

// Close flushes cursors and releases the ledger. Pending appends complete first.
func (l *Ledger) Close() error { return errNotImplemented }

// Err is non-nil once the ledger is fenced (fsync failure, mid-data corruption).
func (l *Ledger) Err() error { return nil }
