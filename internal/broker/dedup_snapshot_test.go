package broker

import (
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/poll"
)

// TestDedupSnapshotDoesNotHoldUpReceipts: building a dedup snapshot (purging and formatting up to
// 10,000 producers) must not run where every topic's receipts wait: on the storage applier or
// under the topic's dedup lock. The hook holds the first snapshot build until the test releases
// it; meanwhile publishes to another topic and to the snapshotting topic itself complete.
func TestDedupSnapshotDoesNotHoldUpReceipts(t *testing.T) {
	building := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	testHookDedupSnapshot = func() {
		once.Do(func() {
			close(building)
			<-release
		})
	}
	t.Cleanup(func() { testHookDedupSnapshot = nil })
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	e := newEnv(t, Config{AutoTopicCreation: true, DedupDefault: true, DedupSnapshotInterval: 1})
	snap, other := e.topic("snapshotting"), e.topic("other")
	ps, po := addProducer(t, snap, ProducerOptions{Name: "s"}), addProducer(t, other, ProducerOptions{Name: "o"})
	first := make(chan PublishResult, 1)
	ps.Publish(PublishRequest{Entry: entry(t, "s", 0, 1, "x"), SequenceID: 0}, func(r PublishResult) { first <- r })
	select {
	case <-building:
	case <-time.After(waitTimeout):
		t.Fatal("no snapshot started")
	}
	// The snapshot build is held. Receipts of both topics must still arrive.
	for i, p := range []*Producer{po, ps} {
		done := make(chan PublishResult, 1)
		name := []string{"o", "s"}[i]
		p.Publish(PublishRequest{Entry: entry(t, name, 1, 1, "y"), SequenceID: 1}, func(r PublishResult) { done <- r })
		select {
		case r := <-done:
			if r.Err != nil {
				t.Fatalf("publish to %s: %v", p.Topic().Name(), r.Err)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("publish to %s held up by a dedup snapshot", p.Topic().Name())
		}
	}
	close(release)
	released = true
	if r := <-first; r.Err != nil {
		t.Fatal(r.Err)
	}
	cur := snap.Ledger().Cursor(dedupCursorName)
	poll.Until(t, 10*time.Second, "snapshot written", func() bool { return cur.Properties()[dedupPropPrefix+"s"] != "" })
}
