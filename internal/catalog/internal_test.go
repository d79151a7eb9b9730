package catalog

import (
	"context"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/naming"
)

// A subscriber that does not read does not hold anyone up; its queue collapses into one resync.
func TestSlowSubscriberGetsResync(t *testing.T) {
	old := maxSubscriberQueue
	maxSubscriberQueue = 3
	defer func() { maxSubscriberQueue = old }()
	s := memstore.New()
	defer s.Close()
	ctx := context.Background()
	c, err := New(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	slow, stopSlow := c.Subscribe()
	defer stopSlow()
	fast, stopFast := c.Subscribe()
	defer stopFast()
	// The slow subscriber's goroutine takes one event and blocks handing it over; the rest queue up.
	for i := 0; i < 10; i++ {
		if err := c.CreateCluster(ctx, "c"+string(rune('a'+i)), adminapi.ClusterData{}); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-fast:
			if ev.Kind != EventCluster {
				t.Fatalf("fast got %+v", ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("fast subscriber starved by the slow one")
		}
	}
	var kinds []EventKind
	deadline := time.After(5 * time.Second)
	for len(kinds) == 0 || kinds[len(kinds)-1] != EventResync {
		select {
		case ev := <-slow:
			kinds = append(kinds, ev.Kind)
		case <-deadline:
			t.Fatalf("slow subscriber got %v, never a resync", kinds)
		}
	}
	if len(kinds) > maxSubscriberQueue+2 {
		t.Fatalf("slow subscriber got %d events, want the queue bounded", len(kinds))
	}
}

// FuzzTopicKeys: every valid topic name maps to store keys that parse back to the same (base) name,
// and no key parses to a topic that does not round-trip.
func FuzzTopicKeys(f *testing.F) {
	for _, s := range []string{"t", "a b", "100%", "x:y=z", "é", "p-partition-3", "%2F", "a%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, local string) {
		tn, err := naming.ParseTopic("persistent://public/default/" + local)
		if err != nil {
			return
		}
		for _, key := range []string{partitionedKey(tn), topicPoliciesKey(tn)} {
			if err := metadata.ValidateKey(key); err != nil {
				t.Fatalf("%q: key %q invalid: %v", local, key, err)
			}
			kind, name := parseKey(key)
			if kind != keyPartitioned && kind != keyTopicPolicies || name != tn.Base().String() {
				t.Fatalf("%q: key %q parses to %v %q, want %q", local, key, kind, name, tn.Base().String())
			}
		}
		// Arbitrary keys never panic.
		parseKey(prefixPartitioned + local)
		parseKey(prefixPolicies + local)
	})
}
