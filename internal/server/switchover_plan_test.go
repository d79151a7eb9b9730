package server

import (
	"slices"
	"testing"
	"time"
)

func TestSwitchoverPlan(t *testing.T) {
	t0 := time.Unix(1000, 0)
	synced := SubscriptionProgress{Replicated: true, HasState: true, SyncedToTarget: true, Backlog: 500}
	type obs struct {
		at    time.Duration
		in    switchoverInput
		want  switchoverActions
		label string
	}
	drained := func(subs map[string]SubscriptionProgress) switchoverInput {
		return switchoverInput{ProducersQuiet: true, Progress: TopicProgress{ReplicatesToTarget: true, Subscriptions: subs}}
	}
	cases := []struct {
		name string
		obs  []obs
	}{
		{"producers wait for their fence to be quiet", []obs{
			{0, switchoverInput{ProducersQuiet: false, Progress: TopicProgress{ReplicatesToTarget: true}}, switchoverActions{}, "in flight"},
			{0, switchoverInput{ProducersQuiet: true, Progress: TopicProgress{ReplicatesToTarget: true}}, switchoverActions{RedirectProducers: true}, "quiet"},
		}},
		{"producers wait for the replication backlog to the target", []obs{
			{0, switchoverInput{ProducersQuiet: true, Progress: TopicProgress{ReplicatesToTarget: true, ReplicationBacklog: 3,
				Subscriptions: map[string]SubscriptionProgress{"s": synced}}}, switchoverActions{}, "backlog 3: nobody moves"},
			{0, switchoverInput{ProducersQuiet: true, Progress: TopicProgress{ReplicatesToTarget: true,
				Subscriptions: map[string]SubscriptionProgress{"s": synced}}}, switchoverActions{RedirectProducers: true, RedirectSubscriptions: []string{"s"}}, "drained"},
		}},
		{"no replication to the target: producers move when quiet, consumers when read up", []obs{
			{0, switchoverInput{ProducersQuiet: true, Progress: TopicProgress{ReplicationBacklog: 7,
				Subscriptions: map[string]SubscriptionProgress{"r": synced, "plain": {Backlog: 1}, "done": {}}}},
				switchoverActions{RedirectProducers: true, RedirectSubscriptions: []string{"done"}}, "replicated flag alone does not help without a replicator"},
		}},
		{"a replicated subscription moves once synced, whatever its backlog", []obs{
			{0, drained(map[string]SubscriptionProgress{"s": {Replicated: true, HasState: true, Backlog: 900}}),
				switchoverActions{RedirectProducers: true}, "state pending"},
			{0, drained(map[string]SubscriptionProgress{"s": {Replicated: true, Backlog: 900}}),
				switchoverActions{RedirectProducers: true, SyncSubscriptions: []string{"s"}}, "never synced: ask for a state"},
			{0, drained(map[string]SubscriptionProgress{"s": synced}),
				switchoverActions{RedirectProducers: true, RedirectSubscriptions: []string{"s"}}, "synced"},
		}},
		{"a plain subscription waits for its backlog", []obs{
			{0, drained(map[string]SubscriptionProgress{"p": {Backlog: 2}}), switchoverActions{RedirectProducers: true}, "backlog"},
			{0, drained(map[string]SubscriptionProgress{"p": {}}), switchoverActions{RedirectProducers: true, RedirectSubscriptions: []string{"p"}}, "read up"},
		}},
		{"unacknowledged deliveries hold a ready subscription up to the grace", []obs{
			{0, drained(map[string]SubscriptionProgress{"s": {Replicated: true, HasState: true, SyncedToTarget: true, Unacked: 4}}),
				switchoverActions{RedirectProducers: true}, "first seen ready"},
			{unackedGrace - time.Millisecond, drained(map[string]SubscriptionProgress{"s": {Replicated: true, HasState: true, SyncedToTarget: true, Unacked: 4}}),
				switchoverActions{RedirectProducers: true}, "inside the grace"},
			{unackedGrace, drained(map[string]SubscriptionProgress{"s": {Replicated: true, HasState: true, SyncedToTarget: true, Unacked: 4}}),
				switchoverActions{RedirectProducers: true, RedirectSubscriptions: []string{"s"}}, "grace over"},
		}},
		{"the grace restarts when a subscription stops being ready", []obs{
			{0, drained(map[string]SubscriptionProgress{"s": {Replicated: true, HasState: true, SyncedToTarget: true, Unacked: 1}}), switchoverActions{RedirectProducers: true}, "ready"},
			{time.Second, drained(map[string]SubscriptionProgress{"s": {Replicated: true, HasState: true, Unacked: 1}}), switchoverActions{RedirectProducers: true}, "state pending again"},
			{unackedGrace, drained(map[string]SubscriptionProgress{"s": {Replicated: true, HasState: true, SyncedToTarget: true, Unacked: 1}}), switchoverActions{RedirectProducers: true}, "ready again: new grace"},
			{unackedGrace + time.Second, drained(map[string]SubscriptionProgress{"s": {Replicated: true, HasState: true, SyncedToTarget: true}}),
				switchoverActions{RedirectProducers: true, RedirectSubscriptions: []string{"s"}}, "all acknowledged"},
		}},
		{"consumers never move before the producers drained once", []obs{
			{0, switchoverInput{ProducersQuiet: false, Progress: TopicProgress{ReplicatesToTarget: true, Subscriptions: map[string]SubscriptionProgress{"s": synced, "p": {}}}},
				switchoverActions{}, "producer in flight"},
			{time.Second, switchoverInput{ProducersQuiet: true, Progress: TopicProgress{ReplicatesToTarget: true, ReplicationBacklog: 1, Subscriptions: map[string]SubscriptionProgress{"s": synced}}},
				switchoverActions{}, "backlog"},
			{2 * time.Second, drained(map[string]SubscriptionProgress{"s": synced, "p": {}}),
				switchoverActions{RedirectProducers: true, RedirectSubscriptions: []string{"p", "s"}}, "drained: all, sorted"},
			// A producer that arrived later is fenced and in flight: consumers may still move.
			{3 * time.Second, switchoverInput{ProducersQuiet: false, Progress: TopicProgress{ReplicatesToTarget: true, ReplicationBacklog: 1, Subscriptions: map[string]SubscriptionProgress{"s": synced}}},
				switchoverActions{RedirectSubscriptions: []string{"s"}}, "late producer"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p switchoverPlan
			for i, o := range tc.obs {
				got := p.step(t0.Add(o.at), o.in)
				if got.RedirectProducers != o.want.RedirectProducers || !slices.Equal(got.RedirectSubscriptions, o.want.RedirectSubscriptions) ||
					!slices.Equal(got.SyncSubscriptions, o.want.SyncSubscriptions) {
					t.Fatalf("step %d (%s): got %+v, want %+v", i, o.label, got, o.want)
				}
			}
		})
	}
}

func TestProducerFence(t *testing.T) {
	var f producerFence
	if !f.admit() || f.quiet() {
		t.Fatal("an unfenced producer admits SENDs and is not quiet")
	}
	f.fenced.Store(true)
	if f.quiet() {
		t.Fatal("quiet with a SEND in flight")
	}
	if f.admit() {
		t.Fatal("a fenced producer admitted a SEND")
	}
	f.done()
	if !f.quiet() {
		t.Fatal("not quiet once the last SEND completed")
	}
	f.fenced.Store(false)
	if !f.admit() {
		t.Fatal("unfenced producer refused a SEND")
	}
}
