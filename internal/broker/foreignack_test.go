package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// TestAckOfAnotherClustersPositionAcknowledgesNothing is a consumer moved from cluster a to cluster
// b by a switchover (docs/geo-replication.md §7): the client still holds messages a delivered and
// acknowledges them on b, naming a's positions. Both clusters have fresh data directories, each
// with its own storage engine. On b the topic holds the replicated copies of a's messages, with
// messages of b's own producer between them, so a's positions name other entries on b. Such
// acknowledgements must acknowledge nothing on b: every entry of b the subscription had not
// acknowledged is still delivered and counted in its backlog.
func TestAckOfAnotherClustersPositionAcknowledgesNothing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		subType    mtypes.SubType
		cumulative bool
	}{
		{"shared-individual", mtypes.SubShared, false},
		{"failover-cumulative", mtypes.SubFailover, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const topic = "persistent://public/default/orders"
			ctx := context.Background()
			a := newEnv(t, Config{Cluster: "a", AutoTopicCreation: true})
			b := newEnv(t, Config{Cluster: "b", AutoTopicCreation: true})
			opts := SubscribeOptions{Subscription: "s", Type: tc.subType, Durable: true, InitialPosition: mtypes.InitialEarliest}
			// ack acknowledges ps as the client does: each one, or the last one cumulatively.
			ack := func(c *Consumer, ps []mtypes.Position) error {
				if tc.cumulative {
					return c.Ack(ctx, []Ack{{Position: ps[len(ps)-1]}}, true)
				}
				var errs []error
				for _, p := range ps {
					errs = append(errs, c.Ack(ctx, []Ack{{Position: p}}, false))
				}
				return errors.Join(errs...)
			}

			// On a: ten messages; the consumer processes and acknowledges a0..a6 and still holds a7..a9
			// when it is moved.
			topA := a.topic(topic)
			pa := addProducer(t, topA, ProducerOptions{})
			var onA []mtypes.Position
			for i := range 10 {
				r := publishSync(t, pa, PublishRequest{Entry: entry(t, pa.Name(), uint64(i), 1, fmt.Sprint("a", i)), SequenceID: int64(i)})
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				onA = append(onA, r.Position)
			}
			ca, sa := subscribe(t, topA, opts)
			ca.Flow(100)
			sa.waitMessages(t, 10)
			if err := ack(ca, onA[:7]); err != nil {
				t.Fatal(err)
			}

			// On b: the copies of a0..a6, then three messages of b's own producer, then the copies of
			// a7..a9. The replicated subscription state has acknowledged the copies of a0..a6.
			topB := b.topic(topic)
			copies := addProducer(t, topB, ProducerOptions{})
			local := addProducer(t, topB, ProducerOptions{})
			var onB []mtypes.Position
			publish := func(p *Producer, seq int, payload string) {
				r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(seq), 1, payload), SequenceID: int64(seq)})
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				onB = append(onB, r.Position)
			}
			cb, sb := subscribe(t, topB, opts)
			for i := range 7 {
				publish(copies, i, fmt.Sprint("a", i))
			}
			for i := range 3 {
				publish(local, i, fmt.Sprint("b", i))
			}
			for i := 7; i < 10; i++ {
				publish(copies, i, fmt.Sprint("a", i))
			}
			if err := ack(cb, onB[:7]); err != nil {
				t.Fatal(err)
			}
			cb.Close()
			if n := sb.count(); n != 0 {
				t.Fatalf("the stand-in for the replicated state got %d messages", n)
			}
			backlog := func() int64 { return topB.Stats().Subscriptions["s"].MsgBacklog }
			if got := backlog(); got != 6 {
				t.Fatalf("backlog on b before the move: %d, want 6", got)
			}

			// The consumer arrives on b and acknowledges a7..a9 with a's positions.
			moved, sm := subscribe(t, topB, opts)
			// The answer does not matter here (a client acknowledges without waiting for one).
			_ = ack(moved, onA[7:])
			if got := backlog(); got != 6 {
				t.Errorf("backlog on b after acknowledgements naming a's positions %v: %d, want 6 (b's entries at %v)", onA[7:], got, onB)
			}
			moved.Flow(100)
			// Delivery is in position order: once the last entry (the copy of a9) is there, every
			// entry before it that is not acknowledged is there too.
			sm.waitFor(t, "the copy of a9", func(s *sink) bool {
				return slices.ContainsFunc(s.msgs, func(d Delivery) bool { return d.Position == onB[12] })
			})
			var got []string
			for _, d := range sm.waitMessages(t, 0) {
				got = append(got, payloadOf(t, d))
			}
			if want := []string{"b0", "b1", "b2", "a7", "a8", "a9"}; !slices.Equal(got, want) {
				t.Fatalf("delivered on b after the move: %v, want %v: b's entries %v were acknowledged by a's positions %v",
					got, want, onB[7:10], onA[7:])
			}
		})
	}
}

// TestAckOfNoStoredEntryAcknowledgesNothing: an acknowledgement naming a position where the topic
// stores no entry (another cluster's ledger id, here one between two of this topic's ledgers;
// an entry id past a sealed ledger's end) changes nothing, cumulative or not, and is counted.
func TestAckOfNoStoredEntryAcknowledgesNothing(t *testing.T) {
	ctx := context.Background()
	for _, cumulative := range []bool{false, true} {
		t.Run(fmt.Sprint("cumulative=", cumulative), func(t *testing.T) {
			e := newEnv(t, Config{AutoTopicCreation: true})
			top := e.topic("persistent://public/default/gaps")
			typ := mtypes.SubShared
			if cumulative {
				typ = mtypes.SubFailover
			}
			// The subscription exists first: a sealed ledger no subscription needs is removed.
			c, s := subscribe(t, top, SubscribeOptions{Subscription: "s", Type: typ, Durable: true, InitialPosition: mtypes.InitialEarliest})
			p := addProducer(t, top, ProducerOptions{})
			var stored []mtypes.Position
			publish := func(n int) {
				for range n {
					seq := len(stored)
					r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(seq), 1, fmt.Sprint("m", seq)), SequenceID: int64(seq)})
					if r.Err != nil {
						t.Fatal(r.Err)
					}
					stored = append(stored, r.Position)
				}
			}
			publish(5)
			// Another topic takes the next ledger id, so the topic's next ledger leaves a gap.
			e.topic("persistent://public/default/other")
			if err := top.t.ledger.Roll(ctx); err != nil {
				t.Fatal(err)
			}
			publish(5)
			first, second := stored[0].LedgerID, stored[5].LedgerID
			if second <= first+1 {
				t.Fatalf("ledgers %d and %d leave no id between them", first, second)
			}
			nowhere := []mtypes.Position{{LedgerID: first + 1, EntryID: 3}, {LedgerID: first, EntryID: 5}, {LedgerID: first, EntryID: 1 << 40}}
			for _, pos := range nowhere {
				if err := c.Ack(ctx, []Ack{{Position: pos}}, cumulative); err != nil {
					t.Errorf("ack of %s: %v, want it ignored without an error", pos, err)
				}
			}
			if got := top.Stats().Subscriptions["s"].MsgBacklog; got != 10 {
				t.Errorf("backlog after acknowledgements of %v, where no entry is stored: %d, want 10", nowhere, got)
			}
			if got := e.b.IgnoredAcks(); got != int64(len(nowhere)) {
				t.Errorf("IgnoredAcks = %d, want %d", got, len(nowhere))
			}
			c.Flow(100)
			s.waitFor(t, "the last entry", func(s *sink) bool {
				return slices.ContainsFunc(s.msgs, func(d Delivery) bool { return d.Position == stored[9] })
			})
			var got []mtypes.Position
			for _, d := range s.waitMessages(t, 0) {
				got = append(got, d.Position)
			}
			if !slices.Equal(got, stored) {
				t.Fatalf("delivered %v, want every stored entry %v", got, stored)
			}
		})
	}
}

// TestLogThrottle: one line per interval; the next one says how many were held back.
func TestLogThrottle(t *testing.T) {
	var l logThrottle
	steps := []struct {
		now      int64
		ok       bool
		heldBack int64
	}{
		{1000, true, 0}, {1001, false, 0}, {10_999, false, 0}, {11_000, true, 2}, {11_001, false, 0}, {50_000, true, 1}, {50_000, false, 0},
	}
	for _, st := range steps {
		if ok, held := l.allow(st.now, 10_000); ok != st.ok || held != st.heldBack {
			t.Fatalf("at %d: allow = %v, %d; want %v, %d", st.now, ok, held, st.ok, st.heldBack)
		}
	}
}
