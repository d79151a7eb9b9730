package broker

import (
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

func pos(l, e int64) mtypes.Position { return mtypes.Position{LedgerID: l, EntryID: e} }

func entries(l int64, from, to int64, msgs int) []entryInfo {
	var out []entryInfo
	for e := from; e <= to; e++ {
		out = append(out, entryInfo{pos: pos(l, e), numMessages: msgs})
	}
	return out
}

// deliveredTo groups delivered entry ids by consumer name.
func deliveredTo(res assignResult) map[string][]int64 {
	out := map[string][]int64{}
	for _, d := range res.deliveries {
		out[d.to.name] = append(out[d.to.name], d.d.Position.EntryID)
	}
	return out
}

func TestSharedRoundRobinRespectsPermits(t *testing.T) {
	d := newDispatchState(mtypes.SubShared, -1, pos(1, 0))
	a, b := newDConsumer(1, "a", 0), newDConsumer(2, "b", 0)
	d.addConsumer(a, pos(1, -1))
	d.addConsumer(b, pos(1, -1))
	d.flow(a, 2)
	d.flow(b, 10)
	p, ok := d.plan(100, pos(1, 9), false, false)
	if !ok || !p.seq || p.max != 12 {
		t.Fatalf("plan = %+v, %v", p, ok)
	}
	res := d.assign(p, entries(1, 0, 9, 1), nil, 0)
	got := deliveredTo(res)
	if len(got["a"]) != 2 || len(got["b"]) != 8 {
		t.Fatalf("deliveries = %v", got)
	}
	// Round robin: a gets entries 0 and 2, b the rest.
	if got["a"][0] != 0 || got["a"][1] != 2 {
		t.Fatalf("a got %v, want [0 2]", got["a"])
	}
	if d.readPos != pos(1, 10) {
		t.Fatalf("readPos = %v", d.readPos)
	}
	if a.permits != 0 || b.permits != 2 || a.unacked != 2 || b.unacked != 8 {
		t.Fatalf("permits a=%d b=%d unacked a=%d b=%d", a.permits, b.permits, a.unacked, b.unacked)
	}
}

func TestBatchCountsMessagesAndStopsWithoutPermits(t *testing.T) {
	d := newDispatchState(mtypes.SubExclusive, -1, pos(1, 0))
	a := newDConsumer(1, "a", 0)
	d.addConsumer(a, pos(1, -1))
	d.flow(a, 15)
	p, _ := d.plan(100, pos(1, 9), false, false)
	res := d.assign(p, entries(1, 0, 9, 10), nil, 0)
	// 10 permits for the first batch, 5 left: the second batch overruns (as Pulsar), then stop.
	if n := len(res.deliveries); n != 2 {
		t.Fatalf("delivered %d entries, want 2", n)
	}
	if a.permits != -5 {
		t.Fatalf("permits = %d, want -5", a.permits)
	}
	if d.readPos != pos(1, 2) {
		t.Fatalf("readPos = %v, want 1:2", d.readPos)
	}
	if _, ok := d.plan(100, pos(1, 9), false, false); ok {
		t.Fatal("plan without permits")
	}
}

func TestMarkersAndAckedEntriesAreSkipped(t *testing.T) {
	d := newDispatchState(mtypes.SubShared, -1, pos(1, 0))
	a := newDConsumer(1, "a", 0)
	d.addConsumer(a, pos(1, -1))
	d.flow(a, 100)
	es := entries(1, 0, 4, 1)
	es[1].marker = true
	acked := func(p mtypes.Position) bool { return p == pos(1, 3) }
	p, _ := d.plan(100, pos(1, 4), false, false)
	res := d.assign(p, es, acked, 0)
	got := deliveredTo(res)["a"]
	if len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 4 {
		t.Fatalf("delivered %v, want [0 2 4]", got)
	}
	if len(res.markers) != 1 || res.markers[0] != pos(1, 1) {
		t.Fatalf("markers = %v", res.markers)
	}
}

func TestSharedRedeliveryComesFirstWithCount(t *testing.T) {
	d := newDispatchState(mtypes.SubShared, -1, pos(1, 0))
	a, b := newDConsumer(1, "a", 0), newDConsumer(2, "b", 0)
	d.addConsumer(a, pos(1, -1))
	d.addConsumer(b, pos(1, -1))
	d.flow(a, 100)
	p, _ := d.plan(100, pos(1, 3), false, false)
	d.assign(p, entries(1, 0, 3, 1), nil, 0)
	if a.unacked != 4 {
		t.Fatalf("a unacked %d", a.unacked)
	}
	// a nacks 1 and 3; b gets permits; redeliveries go first, with count 1.
	d.redeliverPending(a, []mtypes.Position{pos(1, 1), pos(1, 3)})
	d.flow(b, 100)
	p, ok := d.plan(100, pos(1, 3), false, false)
	if !ok || p.seq || len(p.replay) != 2 {
		t.Fatalf("plan = %+v", p)
	}
	es := entries(1, 1, 1, 1)
	es = append(es, entries(1, 3, 3, 1)...)
	res := d.assign(p, es, nil, 0)
	if len(res.deliveries) != 2 {
		t.Fatalf("deliveries %v", res.deliveries)
	}
	for _, dl := range res.deliveries {
		if dl.d.RedeliveryCount != 1 {
			t.Fatalf("redelivery count %d", dl.d.RedeliveryCount)
		}
	}
	if len(d.replay) != 0 {
		t.Fatalf("replay left %v", d.replay)
	}
}

func TestConsumerRemovalRedeliversToOthers(t *testing.T) {
	d := newDispatchState(mtypes.SubShared, -1, pos(1, 0))
	a, b := newDConsumer(1, "a", 0), newDConsumer(2, "b", 0)
	d.addConsumer(a, pos(1, -1))
	d.addConsumer(b, pos(1, -1))
	d.flow(a, 100)
	p, _ := d.plan(100, pos(1, 2), false, false)
	d.assign(p, entries(1, 0, 2, 1), nil, 0)
	d.removeConsumer(a, pos(1, -1))
	if len(d.replay) != 3 || len(d.owner) != 0 {
		t.Fatalf("replay %v owner %v", d.replay, d.owner)
	}
	d.flow(b, 100)
	p, _ = d.plan(100, pos(1, 2), false, false)
	res := d.assign(p, entries(1, 0, 2, 1), nil, 0)
	if got := deliveredTo(res)["b"]; len(got) != 3 {
		t.Fatalf("b got %v", got)
	}
}

func TestFailoverActiveConsumerAndRewind(t *testing.T) {
	tests := []struct {
		name      string
		partition int32
		names     []string
		want      string
	}{
		{"non-partitioned picks first by name", -1, []string{"c", "a", "b"}, "a"},
		{"partition 1 of 3", 1, []string{"c", "a", "b"}, "b"},
		{"partition 5 of 3", 5, []string{"c", "a", "b"}, "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDispatchState(mtypes.SubFailover, tt.partition, pos(1, 0))
			var last []activeChange
			for i, n := range tt.names {
				last = d.addConsumer(newDConsumer(uint64(i+1), n, 0), pos(1, -1))
			}
			if d.active.name != tt.want {
				t.Fatalf("active = %s, want %s", d.active.name, tt.want)
			}
			actives := 0
			for _, ch := range last {
				if ch.active {
					actives++
					if ch.to.name != tt.want {
						t.Fatalf("announced %s active", ch.to.name)
					}
				}
			}
			if actives != 1 || len(last) != len(tt.names) {
				t.Fatalf("changes = %+v", last)
			}
		})
	}

	// The active consumer leaves with pending entries: the new one gets them again (rewind).
	d := newDispatchState(mtypes.SubFailover, -1, pos(1, 0))
	a, b := newDConsumer(1, "a", 0), newDConsumer(2, "b", 0)
	d.addConsumer(a, pos(1, -1))
	d.addConsumer(b, pos(1, -1))
	d.flow(a, 100)
	d.flow(b, 100)
	p, _ := d.plan(100, pos(1, 4), false, false)
	res := d.assign(p, entries(1, 0, 4, 1), nil, 0)
	if got := deliveredTo(res); len(got["a"]) != 5 || len(got["b"]) != 0 {
		t.Fatalf("got %v", got)
	}
	changes := d.removeConsumer(a, pos(1, 1)) // 0 and 1 acked cumulatively
	if d.active != b || len(changes) != 1 || !changes[0].active {
		t.Fatalf("active %v changes %+v", d.active, changes)
	}
	if d.readPos != pos(1, 2) {
		t.Fatalf("readPos after rewind = %v", d.readPos)
	}
	p, _ = d.plan(100, pos(1, 4), false, false)
	res = d.assign(p, entries(1, 2, 4, 1), nil, 0)
	for _, dl := range res.deliveries {
		if dl.to != b || dl.d.RedeliveryCount != 1 {
			t.Fatalf("delivery %+v", dl)
		}
	}
}

func TestStaleReadIsDiscardedAfterReset(t *testing.T) {
	d := newDispatchState(mtypes.SubExclusive, -1, pos(1, 0))
	a := newDConsumer(1, "a", 0)
	d.addConsumer(a, pos(1, -1))
	d.flow(a, 10)
	p, _ := d.plan(100, pos(1, 4), false, false)
	d.reset(pos(1, 3)) // seek while the read was in flight
	if res := d.assign(p, entries(1, 0, 4, 1), nil, 0); len(res.deliveries) != 0 {
		t.Fatalf("stale read delivered %d", len(res.deliveries))
	}
	if d.readPos != pos(1, 3) {
		t.Fatalf("readPos %v", d.readPos)
	}
}

func TestPartiallyAckedBatchCarriesAckSet(t *testing.T) {
	d := newDispatchState(mtypes.SubShared, -1, pos(1, 0))
	a := newDConsumer(1, "a", 0)
	d.addConsumer(a, pos(1, -1))
	d.flow(a, 100)
	es := entries(1, 0, 0, 3)
	es[0].acked = []uint64{0b010} // index 1 acked
	p, _ := d.plan(100, pos(1, 0), false, false)
	res := d.assign(p, es, nil, 0)
	if len(res.deliveries) != 1 {
		t.Fatal("no delivery")
	}
	dl := res.deliveries[0].d
	if dl.NumMessages != 2 || len(dl.AckSet) != 1 || dl.AckSet[0] != 0b101 {
		t.Fatalf("delivery %+v", dl)
	}
	if a.permits != 98 || d.batchSize(pos(1, 0)) != 3 {
		t.Fatalf("permits %d batch size %d", a.permits, d.batchSize(pos(1, 0)))
	}
	d.partiallyAcked(pos(1, 0), 1)
	if a.unacked != 1 {
		t.Fatalf("unacked %d", a.unacked)
	}
}

func TestCumulativeAckClearsPendingAndCounts(t *testing.T) {
	d := newDispatchState(mtypes.SubExclusive, -1, pos(1, 0))
	a := newDConsumer(1, "a", 0)
	d.addConsumer(a, pos(1, -1))
	d.flow(a, 100)
	p, _ := d.plan(100, pos(1, 9), false, false)
	d.assign(p, entries(1, 0, 9, 1), nil, 0)
	d.rewind(pos(1, -1))
	p, _ = d.plan(100, pos(1, 9), false, false)
	d.assign(p, entries(1, 0, 9, 1), nil, 0)
	d.ackedUpTo(pos(1, 6))
	if a.unacked != 3 || len(d.owner) != 3 || len(d.redeliveries) != 3 {
		t.Fatalf("unacked %d owner %d redeliveries %d", a.unacked, len(d.owner), len(d.redeliveries))
	}
}

func TestDelayedDeliveryOnShared(t *testing.T) {
	d := newDispatchState(mtypes.SubShared, -1, pos(1, 0))
	a := newDConsumer(1, "a", 0)
	d.addConsumer(a, pos(1, -1))
	d.flow(a, 100)
	es := entries(1, 0, 2, 1)
	es[1].deliverAt = 5000
	p, _ := d.plan(100, pos(1, 2), false, false)
	res := d.assign(p, es, nil, 1000)
	if got := deliveredTo(res)["a"]; len(got) != 2 || got[1] != 2 {
		t.Fatalf("got %v", got)
	}
	if due := d.releaseDelayed(2000); due != 5000 {
		t.Fatalf("next due %d", due)
	}
	if due := d.releaseDelayed(5000); due != 0 || len(d.replay) != 1 {
		t.Fatalf("due %d replay %v", due, d.replay)
	}
}

func TestKeySharedRoutesByKeyAndParksBlockedKeys(t *testing.T) {
	d := newDispatchState(mtypes.SubKeyShared, -1, pos(1, 0))
	a, b := newDConsumer(1, "a", 0), newDConsumer(2, "b", 0)
	d.addConsumer(a, pos(1, -1))
	d.addConsumer(b, pos(1, -1))
	d.flow(a, 100) // b has no permits
	es := entries(1, 0, 3, 1)
	// a joined first and kept the upper half when b split the space: b owns 0..32767.
	es[0].keyHash, es[1].keyHash, es[2].keyHash, es[3].keyHash = 40000, 10, 50000, 20
	p, _ := d.plan(100, pos(1, 3), false, false)
	res := d.assign(p, es, nil, 0)
	if got := deliveredTo(res)["a"]; len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Fatalf("a got %v", got)
	}
	if len(d.replay) != 2 || d.readPos != pos(1, 4) {
		t.Fatalf("replay %v readPos %v", d.replay, d.readPos)
	}
	d.flow(b, 10)
	p, _ = d.plan(100, pos(1, 3), false, false)
	res = d.assign(p, []entryInfo{es[1], es[3]}, nil, 0)
	if got := deliveredTo(res)["b"]; len(got) != 2 {
		t.Fatalf("b got %v", got)
	}
}

func TestSharedKeepsChunksOfOneMessageTogether(t *testing.T) {
	d := newDispatchState(mtypes.SubShared, -1, pos(1, 0))
	a, b := newDConsumer(1, "a", 0), newDConsumer(2, "b", 0)
	d.addConsumer(a, pos(1, -1))
	d.addConsumer(b, pos(1, -1))
	d.flow(a, 100)
	d.flow(b, 100)
	es := entries(1, 0, 5, 1)
	for i := range 3 { // entries 0-2: chunks of message "m1"; 3 and 4 plain; 5: chunk of "m2"
		es[i].chunkUUID, es[i].lastChunk = "m1", i == 2
	}
	es[5].chunkUUID = "m2"
	p, _ := d.plan(100, pos(1, 5), false, false)
	res := d.assign(p, es, nil, 0)
	got := deliveredTo(res)
	if len(got["a"]) < 3 || got["a"][0] != 0 || got["a"][1] != 1 || got["a"][2] != 2 {
		t.Fatalf("chunks split: %v", got)
	}
	if _, ok := d.chunkOwner["m1"]; ok || d.chunkOwner["m2"] == nil {
		t.Fatalf("chunk owners %v", d.chunkOwner)
	}
}

func TestUnackedSet(t *testing.T) {
	set, left := unackedSet([]uint64{0b1011}, 5)
	if left != 2 || set[0] != 0b10100 {
		t.Fatalf("set %b left %d", set[0], left)
	}
	set, left = unackedSet(nil, 70)
	if left != 70 || len(set) != 2 || set[1] != 0b111111 {
		t.Fatalf("set %v left %d", set, left)
	}
}

func TestSharedSubscriptionBlockedOnUnackedLimit(t *testing.T) {
	d := newDispatchState(mtypes.SubShared, -1, pos(1, 0))
	d.maxUnackedSub = 4
	a, b := newDConsumer(1, "a", 0), newDConsumer(2, "b", 0)
	d.addConsumer(a, pos(1, -1))
	d.addConsumer(b, pos(1, -1))
	d.flow(a, 100)
	d.flow(b, 100)
	p, _ := d.plan(100, pos(1, 9), false, false)
	d.assign(p, entries(1, 0, 9, 2), nil, 0)
	// The pass itself is not cut short (as in Pulsar, the limit is checked between reads).
	if !d.subscriptionBlocked() {
		t.Fatal("subscription not blocked")
	}
	if _, ok := d.plan(100, pos(1, 19), false, false); ok {
		t.Fatal("plan while blocked")
	}
	for q := range d.owner {
		d.acked(q)
	}
	if _, ok := d.plan(100, pos(1, 19), false, false); !ok {
		t.Fatal("no plan after acks")
	}
}

func TestSharedConsumerBlockedOnUnackedLimit(t *testing.T) {
	d := newDispatchState(mtypes.SubShared, -1, pos(1, 0))
	d.maxUnacked = 3
	a, b := newDConsumer(1, "a", 0), newDConsumer(2, "b", 0)
	d.addConsumer(a, pos(1, -1))
	d.addConsumer(b, pos(1, -1))
	d.flow(a, 100)
	d.flow(b, 100)
	p, _ := d.plan(100, pos(1, 9), false, false)
	res := d.assign(p, entries(1, 0, 9, 1), nil, 0)
	got := deliveredTo(res)
	if len(got["a"]) != 3 || len(got["b"]) != 3 || d.readPos != pos(1, 6) {
		t.Fatalf("got %v readPos %v", got, d.readPos)
	}
	if _, ok := d.plan(100, pos(1, 9), false, false); ok {
		t.Fatal("plan while both consumers are blocked")
	}
	d.acked(pos(1, 0))
	p, ok := d.plan(100, pos(1, 9), false, false)
	if !ok {
		t.Fatal("no plan after an ack")
	}
	res = d.assign(p, entries(1, 6, 9, 1), nil, 0)
	if got := deliveredTo(res); len(got["a"]) != 1 || len(got["b"]) != 0 {
		t.Fatalf("after ack got %v", got)
	}
}

func TestKeySharedNewConsumerWaitsForOlderMessages(t *testing.T) {
	d := newDispatchState(mtypes.SubKeyShared, -1, pos(1, 0))
	a := newDConsumer(1, "a", 0)
	d.addConsumer(a, pos(1, -1))
	d.flow(a, 100)
	es := entries(1, 0, 3, 1)
	for i := range es {
		es[i].keyHash = 100 // one key, in the lower half: it moves to the next consumer to join
	}
	p, _ := d.plan(100, pos(1, 3), false, false)
	d.assign(p, es, nil, 0)
	// b joins: the key moves to b (upper half), but entries 0-3 are unacknowledged at a.
	b := newDConsumer(2, "b", 0)
	d.addConsumer(b, pos(1, -1))
	d.flow(b, 100)
	if b.joinedAt == nil || *b.joinedAt != pos(1, 4) {
		t.Fatalf("joinedAt %v", b.joinedAt)
	}
	more := entries(1, 4, 5, 1)
	for i := range more {
		more[i].keyHash = 100
	}
	p, _ = d.plan(100, pos(1, 5), false, false)
	res := d.assign(p, more, nil, 0)
	if len(res.deliveries) != 0 || len(d.replay) != 2 {
		t.Fatalf("delivered %v replay %v", deliveredTo(res), d.replay)
	}
	// a acknowledges everything before the join point: b may take the key now.
	d.ackedUpTo(pos(1, 3))
	d.markDelete = pos(1, 3)
	p, _ = d.plan(100, pos(1, 5), false, false)
	res = d.assign(p, more, nil, 0)
	if got := deliveredTo(res)["b"]; len(got) != 2 {
		t.Fatalf("b got %v", got)
	}
}
