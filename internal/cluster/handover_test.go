package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/poll"
)

func TestShed(t *testing.T) {
	bundles := func(n int) []Bundle {
		out := make([]Bundle, n)
		for i, r := range EvenRanges(n) {
			out[i] = Bundle{Namespace: "public/default", Range: r}
		}
		return out
	}
	live := func(counts ...int) map[string]BrokerInfo {
		m := map[string]BrokerInfo{}
		for i, n := range counts {
			id := fmt.Sprintf("b%d", i+1)
			m[id] = BrokerInfo{ID: id, OwnedBundles: n}
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		live   map[string]BrokerInfo
		served int
		to     string // "" = no move
	}{
		{"alone", live(4), 4, ""},
		{"balanced", live(4, 4, 4), 4, ""},
		{"one more than the least: stay (a move would only swap the imbalance)", live(5, 4, 4), 5, ""},
		{"two more than the least: move to it", live(6, 4, 5), 6, "b2"},
		{"a new empty broker", live(8, 0), 8, "b2"},
		{"nothing served (all moving)", live(8, 0), 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := Shed("b1", tc.live, bundles(max(tc.served, 1))[:tc.served], nil)
			if ok != (tc.to != "") || ok && m.To.ID != tc.to {
				t.Fatalf("Shed = %+v %v, want a move to %q", m, ok, tc.to)
			}
		})
	}
	// Deterministic: the same view picks the same bundle.
	a, _ := Shed("b1", live(8, 0), bundles(8), nil)
	b, _ := Shed("b1", live(8, 0), bundles(8), nil)
	if a.Bundle != b.Bundle {
		t.Fatalf("Shed picked %s then %s", a.Bundle, b.Bundle)
	}
	// A bundle that may not move (too much data to copy) is passed over; none movable, no move.
	c, ok := Shed("b1", live(8, 0), bundles(8), func(x Bundle) bool { return x != a.Bundle })
	if !ok || c.Bundle == a.Bundle {
		t.Fatalf("Shed picked %s (%v), which may not move", c.Bundle, ok)
	}
	if _, ok := Shed("b1", live(8, 0), bundles(8), func(Bundle) bool { return false }); ok {
		t.Fatal("Shed moved a bundle none of which may move")
	}
}

// TestHandOverSteps walks a hand-over through the records: lookups hold while the bundle moves, the
// target accepts data only while it is the target, and completion redirects everyone to it.
func TestHandOverSteps(t *testing.T) {
	cs, _ := startCoordinators(t, 2, 2*time.Second)
	waitBrokers(t, cs, 2)
	ns := "public/default"
	topic := topicOwnedBy(t, cs[0], ns, "b1")
	b := cs[0].BundleOf(ns, topic)
	ctx := context.Background()

	if err := cs[1].IncomingHandOver(ctx, b, "b1", 1); !errors.Is(err, ErrHandOverRefused) {
		t.Fatalf("incoming before the hand-over began = %v", err)
	}
	if _, err := cs[1].BeginHandOver(ctx, b, "b1"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("a non-owner began a hand-over: %v", err)
	}
	if _, err := cs[0].BeginHandOver(ctx, b, "b1"); !errors.Is(err, ErrHandOverRefused) {
		t.Fatalf("a hand-over to itself: %v", err)
	}
	epoch, err := cs[0].BeginHandOver(ctx, b, "b2")
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].Owns(ns, topic) {
		t.Fatal("the owner still serves a bundle it hands over")
	}
	if _, err := cs[0].BeginHandOver(ctx, b, "b2"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("a second hand-over of a moving bundle: %v", err)
	}
	if err := cs[1].IncomingHandOver(ctx, b, "b1", epoch); err != nil {
		t.Fatalf("the target refused: %v", err)
	}
	if err := cs[1].IncomingHandOver(ctx, b, "b3", epoch); !errors.Is(err, ErrHandOverRefused) {
		t.Fatalf("a copy from a broker that is not the owner = %v", err)
	}
	if err := cs[1].IncomingHandOver(ctx, b, "b1", epoch-2); !errors.Is(err, ErrHandOverRefused) {
		t.Fatalf("a stream of an earlier move = %v", err)
	}
	poll.Until(t, 5*time.Second, "b2 to see the bundle moving", func() bool {
		r, _ := cs[1].view.record(b)
		return r.own.MovingTo == "b2"
	})
	lookupCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = cs[1].Lookup(lookupCtx, ns, topic)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a lookup of a moving bundle answered: %v", err)
	}
	held := make(chan Decision, 1)
	go func() {
		d, err := cs[1].Lookup(ctx, ns, topic)
		if err != nil {
			t.Error(err)
		}
		held <- d
	}()
	if err := cs[0].CompleteHandOver(ctx, b); err != nil {
		t.Fatal(err)
	}
	if d := <-held; d.Action != Connect || d.Broker.ID != "b2" {
		t.Fatalf("the held lookup answered %s %s, want Connect on b2", d.Action, d.Broker.ID)
	}
	poll.Until(t, 5*time.Second, "b1 sees b2 as the owner", func() bool {
		d, err := cs[0].Lookup(ctx, ns, topic)
		return err == nil && d.Action == Redirect && d.Broker.ID == "b2"
	})
	if err := cs[0].AbortHandOver(ctx, b); !errors.Is(err, ErrHandOverRefused) {
		t.Fatalf("abort after completion = %v", err)
	}
}

func TestAbortedHandOverServesAgain(t *testing.T) {
	var served atomic.Int32
	cs, store := startCoordinators(t, 2, 2*time.Second)
	waitBrokers(t, cs, 2)
	ns := "public/default"
	topic := topicOwnedBy(t, cs[0], ns, "b1")
	b := cs[0].BundleOf(ns, topic)
	ctx := context.Background()
	if _, err := cs[0].BeginHandOver(ctx, b, "b2"); err != nil {
		t.Fatal(err)
	}
	if err := cs[0].AbortHandOver(ctx, b); err != nil {
		t.Fatal(err)
	}
	if !cs[0].Owns(ns, topic) {
		t.Fatal("the owner does not serve the bundle after an aborted hand-over")
	}

	// An owner that dies while handing over aborts the hand-over when it starts again.
	if _, err := cs[0].BeginHandOver(ctx, b, "b2"); err != nil {
		t.Fatal(err)
	}
	self := cs[0].Self()
	cs[0].Close(ctx)
	again, err := Start(ctx, Options{Store: store, Self: self, SessionTTL: 2 * time.Second,
		OnServe: func(got Bundle) {
			if got == b {
				served.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	if !again.Owns(ns, topic) || served.Load() != 1 {
		t.Fatalf("after a restart: owns %v, OnServe called %d times", again.Owns(ns, topic), served.Load())
	}
}

// topicOwnedBy finds a topic of ns whose bundle broker id owns.
func topicOwnedBy(t *testing.T, c *Coordinator, ns, id string) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		topic := fmt.Sprintf("persistent://%s/moving-%d", ns, i)
		d, err := c.Lookup(context.Background(), ns, topic)
		if err != nil {
			t.Fatal(err)
		}
		if d.Broker.ID == id {
			return topic
		}
	}
	t.Fatalf("no topic owned by %s", id)
	return ""
}

// TestAwaitServingHoldsUntilTheMoveEnds: the target of a hand-over waits for it to end (the old
// owner sent the bundle's clients there) and answers whether it then serves the bundle: yes when
// the move completes, no when it is aborted.
func TestAwaitServingHoldsUntilTheMoveEnds(t *testing.T) {
	cs, _ := startCoordinators(t, 2, 5*time.Second)
	waitBrokers(t, cs, 2)
	ctx := context.Background()
	ns := "public/default"
	for _, complete := range []bool{false, true} {
		topic := topicOwnedBy(t, cs[0], ns, "b1")
		b := cs[0].BundleOf(ns, topic)
		if cs[1].AwaitServing(ctx, ns, topic) {
			t.Fatal("AwaitServing on a broker the bundle is not moving to answered true")
		}
		if _, err := cs[0].BeginHandOver(ctx, b, "b2"); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 5*time.Second, "b2 to see the move", func() bool { return cs[1].Incoming(ns, topic) })
		answer := make(chan bool, 1)
		go func() { answer <- cs[1].AwaitServing(ctx, ns, topic) }()
		select {
		case got := <-answer:
			t.Fatalf("AwaitServing answered %v while the bundle moves", got)
		case <-time.After(100 * time.Millisecond): // still holding, as it must
		}
		end := cs[0].AbortHandOver
		if complete {
			end = cs[0].CompleteHandOver
		}
		if err := end(ctx, b); err != nil {
			t.Fatal(err)
		}
		if got := <-answer; got != complete {
			t.Fatalf("AwaitServing after the move ended (completed: %v) = %v", complete, got)
		}
	}
}
