package broker

import (
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// TestWaitForEntriesOnAnIdleTopicDoesNotAccumulate: a replicator that rewinds again and again on a
// topic nobody publishes to waits again each time; those waits share one waiter per position
// instead of adding one each until the next publish. The publish releases every one of them.
func TestWaitForEntriesOnAnIdleTopicDoesNotAccumulate(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("idle")
	p := addProducer(t, top, ProducerOptions{})
	last := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 1, "x")}).Position
	from := mtypes.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	var chans []<-chan struct{}
	for range 1000 {
		chans = append(chans, top.WaitForEntries(from))
	}
	ws := top.t.entryWaiters.Load()
	ws.mu.Lock()
	n := len(ws.list)
	ws.mu.Unlock()
	if n > 1 {
		t.Fatalf("%d waiters for one position on an idle topic", n)
	}
	publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 1, 1, "y"), SequenceID: 1})
	for i, ch := range chans {
		select {
		case <-ch:
		case <-time.After(waitTimeout):
			t.Fatalf("wait %d not released by the publish", i)
		}
	}
}
