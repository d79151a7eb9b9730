package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/storage"
)

// TestLoadThatLosesOwnershipIsNotServed: a topic whose bundle stops being this broker's while the
// topic loads (a hand-over began) is not served: the load that finishes after that fails with
// ErrNotServedHere instead of joining the loaded topics, which the hand-over has already closed.
func TestLoadThatLosesOwnershipIsNotServed(t *testing.T) {
	eng, err := storage.Open(context.Background(), storage.Options{Dir: t.TempDir(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var checks atomic.Int32
	// Owned at the load's first check, not afterwards: the bundle starts moving during the load.
	owns := func(naming.TopicName) bool { return checks.Add(1) == 1 }
	b, err := New(Config{Cluster: "c", AutoTopicCreation: true}, Deps{Storage: eng, Logger: testLogger(), Owns: owns})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	name, _ := naming.ParseTopic("persistent://public/default/moving")
	if _, err := b.GetTopic(context.Background(), name, true); !errors.Is(err, ErrNotServedHere) {
		t.Fatalf("load across the start of a hand-over = %v, want ErrNotServedHere", err)
	}
	if len(b.LoadedTopics()) != 0 {
		t.Fatal("the topic is served although its bundle is moving")
	}
}

// TestEveryLedgerOpensAtTheFloor: whichever way a topic's ledger is opened (a load that creates
// it, or an explicit create), its first segment gets a ledger id at or above the topic's floor
// (a bundle taken over from a dead broker: docs/cluster.md, "When a broker dies").
func TestEveryLedgerOpensAtTheFloor(t *testing.T) {
	eng, err := storage.Open(context.Background(), storage.Options{Dir: t.TempDir(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	floors := map[string]int64{"loaded": 1 << 50, "created": 1 << 51}
	b, err := New(Config{Cluster: "c", AutoTopicCreation: true}, Deps{Storage: eng, Logger: testLogger(),
		LedgerIDFloor: func(n naming.TopicName) int64 { return floors[n.Local] }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	ctx := context.Background()
	loaded, _ := naming.ParseTopic("persistent://public/default/loaded")
	created, _ := naming.ParseTopic("persistent://public/default/created")
	if _, err := b.GetTopic(ctx, loaded, true); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic(ctx, created); err != nil {
		t.Fatal(err)
	}
	for _, name := range []naming.TopicName{loaded, created} {
		top, err := b.GetTopic(ctx, name, false)
		if err != nil {
			t.Fatal(err)
		}
		if id, floor := top.t.ledger.LastConfirmed().LedgerID, floors[name.Local]; id < floor {
			t.Errorf("%s opened its ledger with id %d, below the floor %d", name, id, floor)
		}
	}
}
