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
