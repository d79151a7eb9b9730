package broker

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
)

// TestSubscriptionPropertiesSurviveRestart: the properties a subscription was created with, and its
// replicated flag, are kept in its cursor and come back after a restart and after a crash.
func TestSubscriptionPropertiesSurviveRestart(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("subprops")
	want := map[string]string{"owner": "team-a", "purpose": "audit"}
	c, _ := subscribe(t, top, SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true,
		SubscriptionProperties: want, ReplicateSubscriptionState: true})
	c.Close()
	check := func(when string) {
		t.Helper()
		st := e.topic("subprops").Stats().Subscriptions["s"]
		if !maps.Equal(st.SubscriptionProperties, want) || !st.IsReplicated {
			t.Fatalf("%s: properties %v, replicated %v; want %v, true", when, st.SubscriptionProperties, st.IsReplicated, want)
		}
	}
	check("before the restart")
	e.restart()
	check("after a restart")
	e.crash()
	check("after a crash")
	// Subscribing again with other properties does not change an existing subscription's.
	c, _ = subscribe(t, e.topic("subprops"), SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true,
		SubscriptionProperties: map[string]string{"owner": "someone-else"}})
	c.Close()
	check("after a second subscribe")
}

// TestRedeliveryCountsSurviveRestart: a message's redelivery count (what a client's dead-letter
// policy decides on) does not start again from 0 when the broker restarts.
func TestRedeliveryCountsSurviveRestart(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("redeliveries")
	p := addProducer(t, top, ProducerOptions{})
	poison := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 1, "poison")}).Position
	opts := SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true, InitialPosition: mtypes.InitialEarliest}
	c, s := subscribe(t, top, opts)
	c.Flow(100)
	for round := 1; round <= 3; round++ { // three negative acks
		got := s.waitMessages(t, round)
		c.RedeliverUnacknowledged([]mtypes.Position{got[round-1].Position})
	}
	got := s.waitMessages(t, 4)
	if got[3].Position != poison || got[3].RedeliveryCount != 3 {
		t.Fatalf("fourth delivery %v count %d, want %v count 3", got[3].Position, got[3].RedeliveryCount, poison)
	}
	c.Close() // still unacknowledged: one more redelivery
	e.restart()
	c, s = subscribe(t, e.topic("redeliveries"), opts)
	c.Flow(100)
	if d := s.waitMessages(t, 1)[0]; d.Position != poison || d.RedeliveryCount != 4 {
		t.Fatalf("after a restart: %v count %d, want %v count 4", d.Position, d.RedeliveryCount, poison)
	}
	c.RedeliverUnacknowledged([]mtypes.Position{poison})
	if d := s.waitMessages(t, 2)[1]; d.RedeliveryCount != 5 {
		t.Fatalf("after a restart and a negative ack: count %d, want 5", d.RedeliveryCount)
	}
	// Once durable (the cursor flushed), the counts survive a crash too.
	poll.Until(t, 10*time.Second, "redelivery counts in the cursor", func() bool {
		cur := e.topic("redeliveries").Ledger().Cursor("s")
		return len(cur.Properties()) > 0 && cur.Flush(context.Background()) == nil
	})
	e.crash()
	c, s = subscribe(t, e.topic("redeliveries"), opts)
	c.Flow(100)
	if d := s.waitMessages(t, 1)[0]; d.RedeliveryCount < 5 {
		t.Fatalf("after a crash: count %d, want at least 5", d.RedeliveryCount)
	}
	c.Close()
}

// TestExclusiveProducerEpochSurvivesRestart: a producer fenced by a newer exclusive producer
// stays fenced after a restart and after a crash: the topic epoch is persisted before the newer
// producer is granted the topic.
func TestExclusiveProducerEpochSurvivesRestart(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("epoch")
	old := addProducer(t, top, ProducerOptions{Name: "old", AccessMode: mtypes.AccessExclusiveWithFencing})
	oldEpoch, _ := old.TopicEpoch()
	newer := addProducer(t, top, ProducerOptions{Name: "newer", AccessMode: mtypes.AccessExclusiveWithFencing})
	newEpoch, _ := newer.TopicEpoch()
	if newEpoch <= oldEpoch {
		t.Fatalf("epochs %d then %d", oldEpoch, newEpoch)
	}
	if err := newer.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, restart := range []func(){e.restart, e.crash} {
		restart()
		top = e.topic("epoch")
		_, err := top.AddProducer(context.Background(), ProducerOptions{Name: "old", AccessMode: mtypes.AccessExclusive, TopicEpoch: &oldEpoch})
		if !errors.Is(err, ErrProducerFenced) {
			t.Fatalf("the fenced producer came back after a restart: %v", err)
		}
		p := addProducer(t, top, ProducerOptions{Name: "next", AccessMode: mtypes.AccessExclusive})
		if got, _ := p.TopicEpoch(); got <= newEpoch {
			t.Fatalf("epoch after a restart %d, want above %d", got, newEpoch)
		}
		newEpoch, _ = p.TopicEpoch()
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAdminSubscriptionPropertiesSurviveRestart: properties set through the admin API (at
// creation, or replaced later) are durable once the call returns: they survive a crash right after.
func TestAdminSubscriptionPropertiesSurviveRestart(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("adminprops")
	if err := top.CreateSubscriptionWithProperties(t.Context(), "created", mtypes.Earliest, false, map[string]string{"a": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := top.CreateSubscription(t.Context(), "set", mtypes.Earliest, false); err != nil {
		t.Fatal(err)
	}
	if err := top.SetSubscriptionProperties(t.Context(), "set", map[string]string{"b": "2"}); err != nil {
		t.Fatal(err)
	}
	if err := top.SetSubscriptionProperties(t.Context(), "set", map[string]string{"k": string(make([]byte, 17<<10))}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("17 KiB of properties: %v", err)
	}
	e.crash()
	top = e.topic("adminprops")
	for sub, want := range map[string]map[string]string{"created": {"a": "1"}, "set": {"b": "2"}} {
		got, err := top.SubscriptionProperties(sub)
		if err != nil || !maps.Equal(got, want) {
			t.Fatalf("%s after a crash: %v %v, want %v", sub, got, err, want)
		}
	}
}
