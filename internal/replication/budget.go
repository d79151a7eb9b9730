package replication

import (
	"context"
	"sync"
)

// MemoryBudget bounds the bytes of entries that the replicators sharing it hold: read from the
// local log and not yet acknowledged by their remote (sent and in flight, or read ahead). One
// replicator holds at most its window (MachineConfig.MaxInflightBytes) plus two read batches; a
// broker whose remote comes back after an outage has every topic catching up at once, and
// without a shared bound that is tens of MiB per topic, all at the same time. With it, a
// replicator whose next read does not fit waits until others' entries are acknowledged: fewer
// topics catch up at once, each at full speed, and the broker's memory stays bounded.
//
// Reads of a catch-up wait for room (Acquire, for the most a read can bring); a replicator's
// holdings are trued up to what its machine actually keeps after every event (Add), including the
// small reads of caught-up (tailing) replicators, which never wait. Holdings are released as the
// remote acknowledges, and all at once when a replicator rewinds or stops. A nil *MemoryBudget,
// or one with a limit <= 0, is unlimited (but still counts).
type MemoryBudget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed (and replaced) whenever used falls
}

// NewMemoryBudget returns a budget of limit bytes (<= 0: unlimited).
func NewMemoryBudget(limit int64) *MemoryBudget {
	return &MemoryBudget{limit: limit, changed: make(chan struct{})}
}

// Acquire waits until n more bytes fit, then holds them. A request that fits into an empty budget
// is always admitted, whatever its size, so one replicator can always make progress.
func (b *MemoryBudget) Acquire(ctx context.Context, n int64) error {
	if b == nil {
		return nil
	}
	for {
		b.mu.Lock()
		if b.fitsLocked(n) {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TryAcquire holds n more bytes if they fit now (as Acquire would admit them) and reports whether
// it did.
func (b *MemoryBudget) TryAcquire(n int64) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.fitsLocked(n) {
		return false
	}
	b.used += n
	return true
}

// fitsLocked reports whether n more bytes are admitted now: they fit, or nothing is held (b.mu held).
func (b *MemoryBudget) fitsLocked(n int64) bool {
	return b.limit <= 0 || b.used == 0 || b.used+n <= b.limit
}

// Add holds n more bytes without waiting (n < 0 releases).
func (b *MemoryBudget) Add(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.used += n
	if n < 0 {
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

// Used is the bytes held now.
func (b *MemoryBudget) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Limit is the budget's size (<= 0: unlimited).
func (b *MemoryBudget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}
