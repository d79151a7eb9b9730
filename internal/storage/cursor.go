package storage

import "context"

// Cursor is a subscription's (or replicator's) position in a ledger: a mark-delete position
// plus individually acknowledged entries after it, and properties.
type Cursor struct {
	name    string
	durable bool
}

// Name returns the cursor's name.
func (c *Cursor) Name() string { return c.name }

// Durable reports whether the cursor is persisted.
func (c *Cursor) Durable() bool { return c.durable }

// MarkDeletePosition: every entry <= it is acknowledged.
func (c *Cursor) MarkDeletePosition() Position { return Position{} }

// MarkDelete acknowledges every entry <= p (cumulative); a no-op if p is behind.
func (c *Cursor) MarkDelete(ctx context.Context, p Position) error { return errNotImplemented }

// Delete acknowledges individual entries; a contiguous prefix moves the mark-delete position.
func (c *Cursor) Delete(ctx context.Context, ps ...Position) error { return errNotImplemented }

// AckBatchIndexes acknowledges some messages of the batch entry at p; once all batchSize are acked it
// is like Delete(p).
func (c *Cursor) AckBatchIndexes(ctx context.Context, p Position, batchSize int, indexes []int) error {
	return errNotImplemented
}

// AckedBatchIndexes returns the bitset of acked indexes of a partially acked batch (nil if none).
func (c *Cursor) AckedBatchIndexes(p Position) []uint64 { return nil }

// IsAcknowledged reports whether the entry at p is acknowledged.
func (c *Cursor) IsAcknowledged(p Position) bool { return false }

// ResetTo moves the cursor so that the next entry to deliver is p; clears individual acks.
func (c *Cursor) ResetTo(ctx context.Context, p Position) error { return errNotImplemented }

// Backlog is exact: stored entries after the mark-delete position minus individually acknowledged ones.
func (c *Cursor) Backlog() int64 { return 0 }

// Properties returns a copy of the cursor's properties.
func (c *Cursor) Properties() map[string]string { return nil }

// SetProperties replaces the cursor's properties.
func (c *Cursor) SetProperties(ctx context.Context, props map[string]string) error {
	return errNotImplemented
}

// Flush persists the cursor's state now.
func (c *Cursor) Flush(ctx context.Context) error { return errNotImplemented }
