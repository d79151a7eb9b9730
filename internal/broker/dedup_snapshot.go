package broker

import (
	"context"
	"log/slog"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// testHookDedupSnapshot, when set (tests), is called while a background dedup snapshot is being
// built, after its state was copied.
var testHookDedupSnapshot func()

// startSnapshot persists a dedup snapshot of dd covering every entry up to pos, in the background.
// The caller holds dedupMu and has set snapshotRunning. Only copying dd's records takes the lock;
// selecting and formatting them, forgetting inactive producers (under the lock again, for the
// few forgotten) and the cursor writes happen on the snapshot's own goroutine, so a large snapshot
// holds up neither this topic's publishes nor the storage applier. The state copied may include
// entries after pos: it is durable state, and replaying those entries again on load changes
// nothing.
func (t *topicState) startSnapshot(dd *dedupState, pos mtypes.Position) {
	cur := t.dedupCursor
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		t.dedupMu.Lock()
		recs := dd.records()
		t.dedupMu.Unlock()
		if h := testHookDedupSnapshot; h != nil {
			h()
		}
		now := t.b.nowMs()
		props, inactive := snapshotProps(recs, now)
		if len(inactive) > 0 {
			t.dedupMu.Lock()
			dd.forget(inactive, now-dedupInactivity.Milliseconds())
			t.dedupMu.Unlock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := cur.SetProperties(ctx, props)
		if err == nil {
			err = cur.MarkDelete(ctx, pos)
		}
		if err != nil {
			t.b.log.Warn("dedup snapshot failed", slog.String("topic", t.name.String()), slog.Any("err", err))
		}
		t.dedupMu.Lock()
		t.snapshotRunning = false
		t.dedupMu.Unlock()
	}()
}
