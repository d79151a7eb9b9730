package storage

import (
	"context"
	"sort"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Reading a cursor's whole acknowledgement state, and acknowledging ranges of entries: what a
// replicated subscription needs to carry its state to another cluster and to apply it there.

// AckState returns a copy of the cursor's acknowledgement state, with at most maxRanges ranges and
// maxBatches partial batches (the lowest ones).
func (c *Cursor) AckState(maxRanges, maxBatches int) mtypes.AckState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := mtypes.AckState{MarkDelete: c.st.markDelete, Version: c.version}
	n := min(len(c.st.acked), max(maxRanges, 0))
	st.Truncated = n < len(c.st.acked)
	st.Ranges = make([]mtypes.AckRange, n)
	for i, r := range c.st.acked[:n] {
		st.Ranges[i] = mtypes.AckRange{LedgerID: r.ledger, From: r.from, To: r.to}
	}
	if len(c.st.batches) > 0 {
		keys := make([]mtypes.Position, 0, len(c.st.batches))
		for k := range c.st.batches {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].Compare(keys[j]) < 0 })
		if len(keys) > max(maxBatches, 0) {
			keys, st.Truncated = keys[:max(maxBatches, 0)], true
		}
		st.Batches = make([]mtypes.BatchAck, len(keys))
		for i, k := range keys {
			b := c.st.batches[k]
			st.Batches[i] = mtypes.BatchAck{Position: k, Size: b.size, Acked: append([]uint64(nil), b.acked...)}
		}
	}
	return st
}

// Version changes with every change of the cursor's state.
func (c *Cursor) Version() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// DeleteRange acknowledges every stored entry from from to to (inclusive, across ledgers), at most
// limit of them (the lowest); it returns how many it acknowledged that were not acknowledged
// before and whether it stopped at the limit. A range that begins at or before the entry after the
// mark-delete position moves the mark-delete position (MarkDelete), whatever its length.
func (c *Cursor) DeleteRange(ctx context.Context, from, to mtypes.Position, limit int) (acked int64, truncated bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(); err != nil {
		return 0, false, err
	}
	if lc := c.l.LastConfirmed(); to.Compare(lc) > 0 {
		to = lc
	}
	// A range may end between ledgers ("everything before ledger L"): end it at a stored entry,
	// so the mark-delete position is one.
	c.l.mu.RLock()
	to, stored := c.l.lastStoredAtOrBeforeLocked(to)
	c.l.mu.RUnlock()
	if !stored {
		return 0, false, nil
	}
	if to.Compare(c.st.markDelete) <= 0 || from.Compare(to) > 0 {
		return 0, false, nil
	}
	next := c.next()
	first, ok := next(c.st.markDelete)
	if !ok {
		return 0, false, nil
	}
	if from.Compare(first) <= 0 {
		c.l.mu.RLock()
		before := c.l.countLocked(c.st.markDelete, to) - c.st.ackedBetween(c.st.markDelete, to)
		c.l.mu.RUnlock()
		c.st.setMarkDelete(to)
		c.st.normalize(next)
		c.version++
		return before, false, nil
	}
	c.l.mu.RLock()
	p := from
	if !c.l.isStoredLocked(p) {
		var found bool
		p, found = c.l.nextStoredLocked(mtypes.Position{LedgerID: from.LedgerID, EntryID: from.EntryID - 1})
		if !found {
			c.l.mu.RUnlock()
			return 0, false, nil
		}
	}
	for p.Compare(to) <= 0 {
		if int(acked) >= limit {
			truncated = true
			break
		}
		if !c.st.isAcked(p) {
			c.st.ack(p)
			acked++
		}
		var found bool
		if p, found = c.l.nextStoredLocked(p); !found {
			break
		}
	}
	c.l.mu.RUnlock()
	if acked > 0 {
		c.st.normalize(next)
		c.version++
	}
	return acked, truncated, nil
}

// ackedBetween counts the individually acknowledged entries after lo and at or before hi.
func (s *cursorState) ackedBetween(lo, hi mtypes.Position) int64 {
	var n int64
	for _, r := range s.acked {
		from, to := mtypes.Position{LedgerID: r.ledger, EntryID: r.from}, mtypes.Position{LedgerID: r.ledger, EntryID: r.to}
		if to.Compare(lo) <= 0 {
			continue
		}
		if from.Compare(hi) > 0 {
			break
		}
		if from.Compare(lo) <= 0 {
			from = mtypes.Position{LedgerID: r.ledger, EntryID: lo.EntryID + 1}
		}
		if to.Compare(hi) > 0 {
			to = mtypes.Position{LedgerID: r.ledger, EntryID: hi.EntryID}
		}
		if to.EntryID >= from.EntryID {
			n += to.EntryID - from.EntryID + 1
		}
	}
	return n
}

// lastStoredAtOrBeforeLocked returns the last stored entry at or before p.
func (l *Ledger) lastStoredAtOrBeforeLocked(p mtypes.Position) (mtypes.Position, bool) {
	var best mtypes.Position
	found := false
	for _, s := range l.segs {
		if s.entries == 0 || s.id > p.LedgerID {
			continue
		}
		e := s.entries - 1
		if s.id == p.LedgerID {
			e = min(e, p.EntryID)
		}
		if e < 0 {
			continue
		}
		best, found = mtypes.Position{LedgerID: s.id, EntryID: e}, true
	}
	return best, found
}
