package broker

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage"
)

// The topic epoch (CommandProducer.topic_epoch) fences exclusive producers: each exclusive grant
// raises it, and a producer that comes back with an older epoch is refused (ProducerFenced). It
// must survive restarts, or a fenced producer would be let back in once the broker restarted. It
// is kept in the properties of an internal cursor, topicStateCursorName, made durable before the
// producer that raised it is answered. The cursor consumes nothing: its mark-delete position is
// moved to the end of the log whenever it is written and once a minute (advanceEpochCursor), so it
// never holds back trimming for longer than that.

const (
	topicStateCursorName = internalCursorPrefix + "topic-state"
	topicEpochKey        = "topic_epoch"
	topicStateVersionKey = "v"
	topicStateVersion    = "1"
)

// epochStore is a topic's persisted epoch, made on first use (most topics never have an exclusive
// producer and keep no cursor for it).
type epochStore struct {
	mu        sync.Mutex // serialises writes
	cursor    *storage.Cursor
	persisted uint64
}

// loadEpoch restores the topic epoch on load. A value that does not parse stops the load with an
// error naming the cursor: fencing must not silently start over.
func (t *topicState) loadEpoch() error {
	if t.nonPersistent() {
		return nil
	}
	cur := t.ledger.Cursor(topicStateCursorName)
	if cur == nil {
		return nil
	}
	props := cur.Properties()
	v, ok := props[topicEpochKey]
	if !ok {
		t.epochs = &epochStore{cursor: cur}
		return nil
	}
	epoch, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fmt.Errorf("cursor %q of %s: topic epoch %q: %w: %w", topicStateCursorName, t.name, v, ErrPersistence, err)
	}
	t.topicEpoch = epoch
	t.epochs = &epochStore{cursor: cur, persisted: epoch}
	return nil
}

// granted finishes granting a producer the topic: an exclusive producer's epoch is made durable
// first; if that fails, the producer is closed and the error returned.
func (t *topicState) granted(ctx context.Context, p *producerState) (*Producer, error) {
	if p.hasTopicEpoch {
		if err := t.persistEpoch(ctx); err != nil {
			_ = p.close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return p.public, nil
}

// persistEpoch makes the topic's current epoch durable (a no-op if it already is).
func (t *topicState) persistEpoch(ctx context.Context) error {
	if t.nonPersistent() {
		return nil
	}
	t.mu.Lock()
	if t.epochs == nil {
		t.epochs = &epochStore{}
	}
	es := t.epochs
	t.mu.Unlock()
	es.mu.Lock()
	defer es.mu.Unlock()
	t.mu.Lock()
	epoch := t.topicEpoch
	t.mu.Unlock()
	if epoch <= es.persisted {
		return nil // a write of this epoch or a later one is durable already
	}
	if es.cursor == nil {
		cur, err := t.ledger.OpenCursor(ctx, topicStateCursorName, storage.CursorOptions{Initial: mtypes.Latest, Durable: true})
		if err != nil {
			return fmt.Errorf("topic %s: opening %q: %w: %w", t.name, topicStateCursorName, ErrPersistence, err)
		}
		es.cursor = cur
	}
	props := map[string]string{topicStateVersionKey: topicStateVersion, topicEpochKey: strconv.FormatUint(epoch, 10)}
	err := es.cursor.SetProperties(ctx, props)
	if err == nil {
		err = es.cursor.MarkDelete(ctx, t.ledger.LastConfirmed())
	}
	if err == nil {
		err = es.cursor.Flush(ctx)
	}
	if err != nil {
		return fmt.Errorf("topic %s: persisting topic epoch %d: %w: %w", t.name, epoch, ErrPersistence, err)
	}
	es.persisted = epoch
	return nil
}

// advanceEpochCursor moves the epoch cursor to the end of the log, so it does not hold back
// trimming (periodically; the cursor writes the move with its next flush).
func (t *topicState) advanceEpochCursor(ctx context.Context) {
	t.mu.Lock()
	es := t.epochs
	t.mu.Unlock()
	if es == nil {
		return
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.cursor == nil {
		return
	}
	if err := es.cursor.MarkDelete(ctx, t.ledger.LastConfirmed()); err != nil {
		t.b.log.Warn("moving the topic-state cursor failed", slog.String("topic", t.name.String()), slog.Any("err", err))
	}
}
