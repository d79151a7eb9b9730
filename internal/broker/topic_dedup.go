package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/wire"
)

// A topic's producer deduplication: turning it on and off by policy, its snapshot cursor, and
// recovering its state at load.

// dedupWanted reports whether the policies enable deduplication.
func (t *topicState) dedupWanted() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.policies.Deduplication != nil {
		return *t.policies.Deduplication
	}
	return t.b.cfg.DedupDefault
}

func (t *topicState) dedupEnabled() bool {
	t.dedupMu.Lock()
	defer t.dedupMu.Unlock()
	return t.dedup != nil
}

// applyDedupPolicy turns deduplication on (recovering its state) or off (dropping its cursor).
func (t *topicState) applyDedupPolicy(ctx context.Context) error {
	if t.nonPersistent() {
		return nil
	}
	want := t.dedupWanted()
	t.pubMu.Lock() // no publish decisions while the state is rebuilt
	defer t.pubMu.Unlock()
	t.dedupMu.Lock()
	have := t.dedup != nil
	t.dedupMu.Unlock()
	switch {
	case want && !have && t.ledger.Cursor(dedupCursorName) == nil && !t.hasProducers():
		// Nothing to recover, and nobody to publish: the cursor would be created at the end of
		// the log and restore nothing. Creating it is left to the first producer or publish
		// (ensureDedupCursor), before any entry it must cover: an idle topic keeps no cursor.
		if t.lastAppendTime == 0 {
			t.lastAppendTime = t.b.nowMs()
		}
		t.dedupMu.Lock()
		t.dedup, t.dedupCursor = newDedupState(t.b.nowMsFunc), nil
		t.dedupMu.Unlock()
	case want && !have:
		dd, cur, err := t.recoverDedup(ctx)
		if err != nil {
			return err
		}
		t.dedupMu.Lock()
		t.dedup, t.dedupCursor = dd, cur
		t.dedupMu.Unlock()
	case !want && have:
		t.inflight.Wait() // completions may start snapshots; none can start after this (pubMu held)
		t.bg.Wait()       // a running snapshot must not recreate the cursor
		t.dedupMu.Lock()
		t.dedup, t.dedupCursor = nil, nil
		t.dedupMu.Unlock()
		if err := t.ledger.DeleteCursor(ctx, dedupCursorName); err != nil && !errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("dropping dedup cursor: %w", err)
		}
	case !want && !have:
		if t.ledger.Cursor(dedupCursorName) != nil {
			if err := t.ledger.DeleteCursor(ctx, dedupCursorName); err != nil && !errors.Is(err, storage.ErrNotFound) {
				return fmt.Errorf("dropping dedup cursor: %w", err)
			}
		}
	}
	return nil
}

// ensureDedupCursor creates the dedup cursor if deduplication is on without one (see
// applyDedupPolicy); addProducer calls it so the first publish does not.
func (t *topicState) ensureDedupCursor(ctx context.Context) error {
	if t.nonPersistent() {
		return nil
	}
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	return t.ensureDedupCursorLocked(ctx)
}

// ensureDedupCursorLocked is ensureDedupCursor with pubMu held: no append can slip in between the
// cursor's creation (at the end of the log, as recoverDedup would have) and the entries it covers.
func (t *topicState) ensureDedupCursorLocked(ctx context.Context) error {
	t.dedupMu.Lock()
	need := t.dedup != nil && t.dedupCursor == nil
	t.dedupMu.Unlock()
	if !need {
		return nil
	}
	cur, err := t.ledger.OpenCursor(ctx, dedupCursorName, storage.CursorOptions{Initial: mtypes.Latest, Durable: true})
	if err != nil {
		return fmt.Errorf("opening dedup cursor: %w", err)
	}
	t.dedupMu.Lock()
	t.dedupCursor = cur
	t.dedupMu.Unlock()
	return nil
}

// recoverDedup reads the last snapshot and replays the entries stored after it. The caller holds
// pubMu, so no append happens meanwhile.
func (t *topicState) recoverDedup(ctx context.Context) (*dedupState, *storage.Cursor, error) {
	cur, err := t.ledger.OpenCursor(ctx, dedupCursorName, storage.CursorOptions{Initial: mtypes.Latest, Durable: true})
	if err != nil {
		return nil, nil, fmt.Errorf("opening dedup cursor: %w", err)
	}
	dd := newDedupState(t.b.nowMsFunc)
	dd.restore(cur.Properties())
	from := next(cur.MarkDeletePosition())
	last := t.ledger.LastConfirmed()
	replayed := 0
	var lastPos mtypes.Position
	for from.Compare(last) <= 0 {
		entries, err := t.ledger.Read(ctx, from, 256, 8<<20)
		if err != nil {
			if errors.Is(err, storage.ErrTrimmed) {
				from = t.ledger.FirstPosition()
				continue
			}
			return nil, nil, fmt.Errorf("replaying entries for dedup from %s: %w", from, err)
		}
		if len(entries) == 0 {
			break
		}
		for _, e := range entries {
			md, err := wire.DecodeMetadata(e.Data)
			if err != nil {
				t.b.log.Warn("dedup replay: entry metadata does not parse; skipped",
					slog.String("topic", t.name.String()), slog.String("position", e.Position.String()), slog.Any("err", err))
				continue
			}
			dd.replay(md)
			replayed++
			lastPos = e.Position
		}
		from = next(entries[len(entries)-1].Position)
	}
	if t.lastAppendTime == 0 {
		t.lastAppendTime = t.b.nowMs()
	}
	t.b.log.Debug("dedup state recovered", slog.String("topic", t.name.String()),
		slog.Int("producers", len(dd.persisted)), slog.Int("replayed", replayed))
	if replayed > 0 {
		// Persist what the replay learned, so the next load starts from here.
		if err := cur.SetProperties(ctx, dd.snapshot()); err != nil {
			return nil, nil, fmt.Errorf("writing dedup snapshot: %w", err)
		}
		if err := cur.MarkDelete(ctx, lastPos); err != nil {
			return nil, nil, fmt.Errorf("moving dedup cursor: %w", err)
		}
	}
	return dd, cur, nil
}
