package broker

import (
	"bytes"
	"context"
	"fmt"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Admin operations that walk a subscription's backlog (peek, skip) read it in bounded chunks and
// keep nothing of a chunk once they are past it: one request holds at most one chunk (plus, for
// peek, the entry it answers with), however far it walks and however large the entries are.

const (
	// adminReadEntries and adminReadBytes bound one storage read of a backlog walk.
	adminReadEntries = 64
	adminReadBytes   = 4 << 20
)

// walkBacklog calls fn with each unacknowledged entry of subscription s from position from on, in
// order, until fn returns false or the log ends. An entry handed to fn is valid during the call
// only (its bytes belong to the read's buffer).
func (t *topicState) walkBacklog(ctx context.Context, s *subscriptionState, from mtypes.Position, fn func(mtypes.Entry) bool) error {
	for {
		entries, err := t.ledger.Read(ctx, from, adminReadEntries, adminReadBytes)
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			return nil
		}
		for _, e := range entries {
			if s.cursor.IsAcknowledged(e.Position) {
				continue
			}
			if !fn(e) {
				return nil
			}
		}
		from = next(entries[len(entries)-1].Position)
	}
}

// peekEntry returns the n-th (1-based) unacknowledged entry of a subscription's backlog; found is
// false when the backlog holds fewer. The entry's bytes are its own (a copy), so the read buffers
// it came from are not kept alive.
func (t *topicState) peekEntry(ctx context.Context, name string, n int) (e mtypes.Entry, found bool, err error) {
	if err := t.needStorage(); err != nil {
		return mtypes.Entry{}, false, err
	}
	s, err := t.subscription(name)
	if err != nil {
		return mtypes.Entry{}, false, err
	}
	if n < 1 {
		return mtypes.Entry{}, false, fmt.Errorf("peek position %d, want 1 or more: %w", n, ErrInvalidRequest)
	}
	seen := 0
	err = t.walkBacklog(ctx, s, next(s.cursor.MarkDeletePosition()), func(got mtypes.Entry) bool {
		if seen++; seen < n {
			return true
		}
		e, found = got, true
		e.Data = bytes.Clone(got.Data)
		return false
	})
	if err != nil {
		return mtypes.Entry{}, false, fmt.Errorf("peek on %q: %w", name, err)
	}
	return e, found, nil
}

// skip acknowledges the next n unacknowledged entries of a subscription, a chunk at a time.
func (t *topicState) skip(ctx context.Context, name string, n int) error {
	if err := t.needStorage(); err != nil {
		return err
	}
	s, err := t.subscription(name)
	if err != nil {
		return err
	}
	from := next(s.cursor.MarkDeletePosition())
	for n > 0 {
		ps := make([]mtypes.Position, 0, min(n, adminReadEntries))
		err := t.walkBacklog(ctx, s, from, func(e mtypes.Entry) bool {
			ps = append(ps, e.Position)
			return len(ps) < cap(ps)
		})
		if err != nil {
			return fmt.Errorf("skip on %q: %w", name, err)
		}
		if len(ps) == 0 {
			return nil
		}
		if err := s.cursor.Delete(ctx, ps...); err != nil {
			return fmt.Errorf("skip on %q: %w", name, err)
		}
		s.mu.Lock()
		s.d.acked(ps...)
		s.mu.Unlock()
		n -= len(ps)
		from = next(ps[len(ps)-1])
	}
	return nil
}
