package storage

import (
	"context"
)

// Engine owns one broker data directory: all ledgers, their cursors, the sync loop and the entry cache.
type Engine struct {
	opts Options
}

// Open opens (creating if needed) the engine in opts.Dir.
func Open(ctx context.Context, opts Options) (*Engine, error) { return nil, errNotImplemented }

// OpenLedger opens the ledger called name, creating it if absent. While it is open, every call
// returns the same *Ledger. name is opaque and may contain '/'. Opening starts a new ledger id.
func (e *Engine) OpenLedger(ctx context.Context, name string) (*Ledger, error) {
	return nil, errNotImplemented
}

// LedgerExists reports whether a ledger called name exists (open or on disk).
func (e *Engine) LedgerExists(ctx context.Context, name string) (bool, error) {
	return false, errNotImplemented
}

// ListLedgers lists the names of existing ledgers starting with prefix, sorted.
func (e *Engine) ListLedgers(ctx context.Context, prefix string) ([]string, error) {
	return nil, errNotImplemented
}

// DeleteLedger closes the ledger if open and removes its data and cursors.
func (e *Engine) DeleteLedger(ctx context.Context, name string) error { return errNotImplemented }

// Close flushes cursors, syncs, and closes every ledger and file.
func (e *Engine) Close() error { return errNotImplemented }

// Metrics returns a snapshot of engine-wide counters.
func (e *Engine) Metrics() EngineMetrics { return EngineMetrics{} }
