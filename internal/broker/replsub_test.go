package broker

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/poll"
)

// recordingSync is a SubscriptionSync that records what the broker tells it.
type recordingSync struct {
	mu      sync.Mutex
	changed []syncCall
	markers []mtypes.Position
}

type syncCall struct {
	sub   string
	final bool
}

func (r *recordingSync) StateChanged(_ naming.TopicName, sub string, final bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changed = append(r.changed, syncCall{sub, final})
}

func (r *recordingSync) MarkerStored(_ naming.TopicName, pos mtypes.Position, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.markers = append(r.markers, pos)
}

func (r *recordingSync) Settle(context.Context, naming.TopicName, string) {}

func (r *recordingSync) calls() []syncCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]syncCall(nil), r.changed...)
}

// TestReplicatedFlagByPolicyAndAdmin: a subscription is replicated by its own flag (consumer, admin)
// or while the topic's policy says so; the admin flag persists across a restart and a crash, and
// POST false clears the flag but not the policy's effect.
func TestReplicatedFlagByPolicyAndAdmin(t *testing.T) {
	pol := &policies{pol: map[string]TopicPolicies{"public/default": {}}}
	e := &env{t: t, cfg: Config{AutoTopicCreation: true}, pol: pol, fs: newMemFS()}
	e.open()
	t.Cleanup(e.close)
	ctx := context.Background()
	top := e.topic("flags")
	c, _ := subscribe(t, top, SubscribeOptions{Subscription: "plain", Durable: true})
	c.Close()
	if on, err := top.SubscriptionReplicated("plain"); err != nil || on {
		t.Fatalf("plain subscription replicated=%v err=%v", on, err)
	}
	if _, err := top.SubscriptionReplicated("missing"); err == nil {
		t.Fatal("a missing subscription has a replicated flag")
	}
	if err := top.SetSubscriptionReplicated(ctx, "plain", true); err != nil {
		t.Fatal(err)
	}
	e.crash()
	top = e.topic("flags")
	if on, _ := top.SubscriptionReplicated("plain"); !on || !top.Stats().Subscriptions["plain"].IsReplicated {
		t.Fatal("the admin flag did not survive a crash")
	}
	if err := top.SetSubscriptionReplicated(ctx, "plain", false); err != nil {
		t.Fatal(err)
	}
	e.restart()
	top = e.topic("flags")
	if on, _ := top.SubscriptionReplicated("plain"); on {
		t.Fatal("the cleared flag came back after a restart")
	}

	// The namespace (or topic) policy makes every durable subscription replicated while in force.
	on := true
	pol.set("public/default", TopicPolicies{ReplicateSubscriptions: &on})
	e.b.PoliciesChanged(naming.NamespaceName{Tenant: "public", Namespace: "default"})
	poll.Until(t, 10*time.Second, "the policy reaches the topic", func() bool {
		r, _ := top.SubscriptionReplicated("plain")
		return r
	})
	if got := top.ReplicatedSubscriptions(); len(got) != 1 || got[0] != "plain" {
		t.Fatalf("replicated subscriptions %v", got)
	}
	reader, _ := subscribe(t, top, SubscribeOptions{Subscription: "reader", Durable: false})
	defer reader.Close()
	if r, _ := top.SubscriptionReplicated("reader"); r {
		t.Fatal("a non-durable subscription (a reader) is replicated by the policy")
	}
	off := false
	pol.set("public/default", TopicPolicies{ReplicateSubscriptions: &off})
	e.b.PoliciesChanged(naming.NamespaceName{Tenant: "public", Namespace: "default"})
	poll.Until(t, 10*time.Second, "the policy is lifted", func() bool {
		r, _ := top.SubscriptionReplicated("plain")
		return !r
	})
}

// TestSubscriptionSyncHooks: the broker tells the sync about consumer acknowledgements on replicated
// subscriptions (not on others), about the last consumer leaving (final), about a subscription
// becoming replicated (final), and hands it the markers replicator producers store; the marker is
// never delivered.
func TestSubscriptionSyncHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recordingSync{}
		e := &env{t: t, cfg: Config{AutoTopicCreation: true}, fs: newMemFS(), sync: rec}
		e.open()
		t.Cleanup(e.close)
		top := e.topic("hooks")
		p := addProducer(t, top, ProducerOptions{})
		pos := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 1, "m0")}).Position

		plain, _ := subscribe(t, top, SubscribeOptions{Subscription: "plain", Durable: true, InitialPosition: mtypes.InitialEarliest})
		if err := plain.Ack(context.Background(), []Ack{{Position: pos}}, false); err != nil {
			t.Fatal(err)
		}
		plain.Close()
		if calls := rec.calls(); len(calls) != 0 {
			t.Fatalf("a subscription that is not replicated reached the sync: %v", calls)
		}
		c, _ := subscribe(t, top, SubscribeOptions{Subscription: "r", Durable: true, InitialPosition: mtypes.InitialEarliest, ReplicateSubscriptionState: true})
		if err := c.Ack(context.Background(), []Ack{{Position: pos}}, false); err != nil {
			t.Fatal(err)
		}
		c.Close()
		want := []syncCall{{"r", true}, {"r", false}, {"r", true}}
		if calls := rec.calls(); !slicesEqual(calls, want) {
			t.Fatalf("sync calls %v, want %v", calls, want)
		}

		// A marker from a replicator producer is handed over once stored, and never delivered.
		rp := addProducer(t, top, ProducerOptions{Name: "pulsar.repl.b-->a"})
		m := publishSync(t, rp, PublishRequest{Entry: markerEntry(t), Marker: true})
		if m.Err != nil {
			t.Fatal(m.Err)
		}
		rec.mu.Lock()
		markers := append([]mtypes.Position(nil), rec.markers...)
		rec.mu.Unlock()
		if len(markers) != 1 || markers[0] != m.Position {
			t.Fatalf("markers handed over %v, want [%v]", markers, m.Position)
		}
		own, err := top.AppendMarker(context.Background(), markerEntry(t))
		if err != nil {
			t.Fatal(err)
		}
		after := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 1, 1, "m1")}).Position
		c, s := subscribe(t, top, SubscribeOptions{Subscription: "r", Durable: true, InitialPosition: mtypes.InitialEarliest})
		defer c.Close()
		c.Flow(100)
		got := s.waitMessages(t, 1)
		s.quiet(t, 1)
		if got[0].Position != after {
			t.Fatalf("delivered %v, want only %v (markers at %v and %v are never delivered)", got[0].Position, after, m.Position, own)
		}
	})
}

func slicesEqual(a, b []syncCall) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestApplyReplicatedState: a state from another cluster creates the subscription (durable,
// replicated, the source's type and properties, at the first entry), acknowledges ranges (moving the
// mark-delete position over a prefix, entry by entry elsewhere) and batch indexes, and what it
// applied survives a crash once flushed, with the sync record and the type.
func TestApplyReplicatedState(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	ctx := context.Background()
	top := e.topic("apply")
	p := addProducer(t, top, ProducerOptions{})
	var ps []mtypes.Position
	for i := 0; i < 10; i++ {
		ps = append(ps, publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "m")}).Position)
	}
	batch := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 10, 4, "b"), NumMessages: 4}).Position
	props := map[string]string{"team": "a"}
	res, err := top.ApplyReplicatedState(ctx, "moved", mtypes.ReplicatedState{
		Type: mtypes.SubShared, Properties: props,
		Ranges:     []mtypes.PositionRange{{From: mtypes.Earliest, To: ps[2]}, {From: ps[5], To: ps[6]}},
		Batches:    []mtypes.BatchAck{{Position: batch, Size: 4, Acked: []uint64{0b0101}}},
		SyncRecord: "rec-1",
	})
	if err != nil || !res.Created || res.Acked != 5 || res.Truncated {
		t.Fatalf("apply: %+v %v", res, err)
	}
	check := func(when string) {
		t.Helper()
		top := e.topic("apply")
		st := top.Stats().Subscriptions["moved"]
		if !st.IsReplicated || st.Type != "Shared" || !maps.Equal(st.SubscriptionProperties, props) {
			t.Fatalf("%s: replicated %v type %s properties %v", when, st.IsReplicated, st.Type, st.SubscriptionProperties)
		}
		if rec, _ := top.SubscriptionSyncRecord("moved"); rec != "rec-1" {
			t.Fatalf("%s: sync record %q", when, rec)
		}
		as, err := top.SubscriptionAckState("moved", 100, 100)
		if err != nil || as.MarkDelete != ps[2] || len(as.Ranges) != 1 || len(as.Batches) != 1 || as.Batches[0].Acked[0] != 0b0101 {
			t.Fatalf("%s: ack state %+v %v", when, as, err)
		}
	}
	check("applied")
	if err := top.FlushSubscription(ctx, "moved"); err != nil {
		t.Fatal(err)
	}
	e.crash()
	check("after a crash")
	top = e.topic("apply")
	// An older, smaller state changes nothing; a limit stops entry-by-entry acknowledgements.
	res, err = top.ApplyReplicatedState(ctx, "moved", mtypes.ReplicatedState{Type: mtypes.SubShared, Properties: props,
		Ranges: []mtypes.PositionRange{{From: mtypes.Earliest, To: ps[1]}}, SyncRecord: "rec-1"})
	if err != nil || res.Created || res.Acked != 0 {
		t.Fatalf("older state: %+v %v", res, err)
	}
	res, err = top.ApplyReplicatedState(ctx, "moved", mtypes.ReplicatedState{Type: mtypes.SubShared, Properties: props,
		Ranges: []mtypes.PositionRange{{From: ps[8], To: ps[9]}}, SyncRecord: "rec-2", MaxEntries: 1})
	if err != nil || res.Acked != 1 || !res.Truncated {
		t.Fatalf("limited state: %+v %v", res, err)
	}
	if _, err := top.ApplyReplicatedState(ctx, "pulsar.repl.x", mtypes.ReplicatedState{}); err == nil {
		t.Fatal("a state for a reserved cursor name was applied")
	}
	// A subscription of this cluster with the same name that is not replicated is never changed.
	local, _ := subscribe(t, top, SubscribeOptions{Subscription: "local", Durable: true, InitialPosition: mtypes.InitialEarliest})
	local.Close()
	if _, err := top.ApplyReplicatedState(ctx, "local", mtypes.ReplicatedState{Ranges: []mtypes.PositionRange{{From: mtypes.Earliest, To: ps[9]}}}); !errors.Is(err, mtypes.ErrSubscriptionNotReplicated) {
		t.Fatalf("state applied to a subscription that is not replicated here: %v", err)
	}
	if as, _ := top.SubscriptionAckState("local", 10, 10); as.MarkDelete == ps[9] {
		t.Fatal("the local subscription's acknowledgements changed")
	}
	if _, err := top.ApplyReplicatedState(ctx, "moved", mtypes.ReplicatedState{Type: mtypes.SubType(7)}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("a state with subscription type 7: %v", err)
	}
}
