package cluster

import (
	"context"
	"fmt"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEvenRangesMatchPulsarBoundaries(t *testing.T) {
	got := EvenRanges(4)
	want := []string{"0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000", "0xc0000000_0xffffffff"}
	for i, r := range got {
		if r.String() != want[i] {
			t.Fatalf("range %d = %s, want %s", i, r, want[i])
		}
		back, err := ParseRange(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRange(%s) = %v, %v", r, back, err)
		}
	}
	if one := EvenRanges(1); len(one) != 1 || one[0].String() != "0x00000000_0xffffffff" {
		t.Fatalf("one bundle = %v", one)
	}
}

func TestFindCoversTheHashSpace(t *testing.T) {
	for _, n := range []int{1, 3, 4, 16} {
		ranges := EvenRanges(n)
		for i := range 2000 {
			name := fmt.Sprintf("persistent://public/default/t-%d", i)
			r := Find(ranges, name)
			if !r.Contains(Hash(name)) {
				t.Fatalf("n=%d: %s (hash %#x) placed in %s", n, name, Hash(name), r)
			}
		}
		if r := ranges[len(ranges)-1]; !r.Contains(0xffffffff) {
			t.Fatalf("n=%d: the last range %s does not hold 0xffffffff", n, r)
		}
	}
}

func TestHashIsCRC32OfTheFullName(t *testing.T) {
	// Pulsar's bundle factory hashes the full topic name with CRC-32 (IEEE); its check value is
	// 0xcbf43926.
	if got := Hash("123456789"); got != 0xcbf43926 {
		t.Fatalf("hash = %#x, want CRC-32/IEEE", got)
	}
	if Hash("persistent://a/b/c-partition-0") == Hash("persistent://a/b/c-partition-1") {
		t.Fatal("partitions must hash apart")
	}
}

func TestRangesFromBoundaries(t *testing.T) {
	rs, err := RangesFromBoundaries([]string{"0x00000000", "0x80000000", "0xffffffff"})
	if err != nil || len(rs) != 2 || rs[1].String() != "0x80000000_0xffffffff" {
		t.Fatalf("ranges = %v, %v", rs, err)
	}
	for _, bad := range [][]string{{"0x00000000"}, {"0x00000001", "0xffffffff"}, {"0x00000000", "0x10", "0x08", "0xffffffff"}, {"0", "0xffffffff"}} {
		if _, err := RangesFromBoundaries(bad); err == nil {
			t.Fatalf("boundaries %v accepted", bad)
		}
	}
}

// TestDecide is the lookup rule as a table: who owns, who is live, what the answer is.
func TestDecide(t *testing.T) {
	b1 := BrokerInfo{ID: "b1", ServiceURL: "pulsar://127.0.0.1:6650"}
	b2 := BrokerInfo{ID: "b2", ServiceURL: "pulsar://127.0.0.2:6650"}
	b3 := BrokerInfo{ID: "b3", ServiceURL: "pulsar://127.0.0.3:6650"}
	live := func(bs ...BrokerInfo) map[string]BrokerInfo {
		m := map[string]BrokerInfo{}
		for _, b := range bs {
			m[b.ID] = b
		}
		return m
	}
	loaded := func(b BrokerInfo, n int) BrokerInfo { b.OwnedBundles = n; return b }
	for _, tc := range []struct {
		name   string
		view   View
		action Action
		broker string
	}{
		{"owner is self", View{Self: "b1", Record: &Ownership{Broker: "b1", Epoch: 3}, Live: live(b1, b2)}, Connect, "b1"},
		{"owner is another live broker", View{Self: "b1", Record: &Ownership{Broker: "b2", Epoch: 1}, Live: live(b1, b2)}, Redirect, "b2"},
		{"owner is down: taken over by the least loaded", View{Self: "b1", Record: &Ownership{Broker: "b3", Epoch: 1}, Live: live(loaded(b1, 2), loaded(b2, 1))}, Assign, "b2"},
		{"owner is down mid-hand-over: taken over", View{Self: "b1", Record: &Ownership{Broker: "b3", Epoch: 2, MovingTo: "b1"}, Live: live(b1)}, Assign, "b1"},
		{"owner is down, nobody else live", View{Self: "b1", Record: &Ownership{Broker: "b3", Epoch: 1}, Live: live()}, Wait, ""},
		{"self owns but is unregistered: others take it", View{Self: "b1", Record: &Ownership{Broker: "b1", Epoch: 1}, Live: live(b2)}, Assign, "b2"},
		{"unassigned: least loaded", View{Self: "b1", Live: live(loaded(b1, 2), loaded(b2, 1), loaded(b3, 1))}, Assign, "b2"},
		{"unassigned: ties by rendezvous rank", View{Self: "b3", Bundle: "public/default/0x00000000_0x40000000", Live: live(b1, b2, b3)}, Assign, rendezvousWinner("public/default/0x00000000_0x40000000", "b1", "b2", "b3")},
		{"unassigned, nobody live", View{Self: "b1", Live: live()}, Wait, ""},
		{"unassigned: a draining broker is not picked", View{Self: "b1", Live: live(loaded(b1, 3), func() BrokerInfo { b := b2; b.Draining = true; return b }())}, Assign, "b1"},
		{"unassigned, only a draining broker live", View{Self: "b1", Live: live(func() BrokerInfo { b := b1; b.Draining = true; return b }())}, Wait, ""},
		{"being handed over: the owner holds too", View{Self: "b1", Record: &Ownership{Broker: "b1", Epoch: 4, MovingTo: "b2"}, Live: live(b1, b2)}, Wait, ""},
		{"being handed over: others hold", View{Self: "b3", Record: &Ownership{Broker: "b1", Epoch: 4, MovingTo: "b2"}, Live: live(b1, b2, b3)}, Wait, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.view)
			if d.Action != tc.action || d.Broker.ID != tc.broker {
				t.Fatalf("Decide = %s %q, want %s %q", d.Action, d.Broker.ID, tc.action, tc.broker)
			}
		})
	}
}

func rendezvousWinner(bundle string, ids ...string) string {
	best, rank := "", uint32(0)
	for _, id := range ids {
		if r := crc32.ChecksumIEEE([]byte(bundle + "\x00" + id)); best == "" || r > rank {
			best, rank = id, r
		}
	}
	return best
}

// TestConcurrentAssignmentsSpread: bundles assigned at once, each decider seeing every broker
// unloaded, still land on different brokers.
func TestConcurrentAssignmentsSpread(t *testing.T) {
	live := map[string]BrokerInfo{"b1": {ID: "b1"}, "b2": {ID: "b2"}, "b3": {ID: "b3"}}
	per := map[string]int{}
	for _, r := range EvenRanges(12) {
		d := Decide(View{Self: "b1", Bundle: Bundle{Namespace: "public/default", Range: r}.String(), Live: live})
		per[d.Broker.ID]++
	}
	if len(per) != 3 {
		t.Fatalf("12 bundles decided at once went to %v", per)
	}
}

func startCoordinators(t *testing.T, n int, hold time.Duration) ([]*Coordinator, *memstore.Store) {
	t.Helper()
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	var cs []*Coordinator
	for i := 1; i <= n; i++ {
		c, err := Start(context.Background(), Options{
			Store:       store,
			Self:        BrokerInfo{ID: fmt.Sprintf("b%d", i), ServiceURL: fmt.Sprintf("pulsar://127.0.0.%d:6650", i)},
			HoldTimeout: hold,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		cs = append(cs, c)
	}
	return cs, store
}

// waitBrokers polls until every coordinator sees n live brokers.
func waitBrokers(t *testing.T, cs []*Coordinator, n int) {
	t.Helper()
	for _, c := range cs {
		poll.Until(t, 5*time.Second, fmt.Sprintf("%s to see %d brokers", c.Self().ID, n), func() bool { return len(c.Brokers()) == n })
	}
}

// TestLookupSpreadsBundlesAndAgrees: concurrent lookups from every broker of every bundle end with
// one owner per bundle, the same answer everywhere, and bundles spread over the brokers.
func TestLookupSpreadsBundlesAndAgrees(t *testing.T) {
	cs, _ := startCoordinators(t, 3, 2*time.Second)
	waitBrokers(t, cs, 3)
	const topics = 48
	owners := make([][]string, len(cs))
	var wg sync.WaitGroup
	for ci, c := range cs {
		owners[ci] = make([]string, topics)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range topics {
				ns := fmt.Sprintf("public/ns%d", i%12)
				d, err := c.Lookup(context.Background(), ns, fmt.Sprintf("persistent://%s/t-%d", ns, i))
				if err != nil {
					t.Error(err)
					return
				}
				if (d.Action == Connect) != (d.Broker.ID == c.Self().ID) || (d.Action != Connect && d.Action != Redirect) {
					t.Errorf("%s: %s to %s", c.Self().ID, d.Action, d.Broker.ID)
				}
				owners[ci][i] = d.Broker.ID
			}
		}()
	}
	wg.Wait()
	perBroker := map[string]int{}
	for i := range topics {
		for ci := range cs {
			if owners[ci][i] != owners[0][i] {
				t.Fatalf("topic %d: %s says %s, %s says %s", i, cs[0].Self().ID, owners[0][i], cs[ci].Self().ID, owners[ci][i])
			}
		}
	}
	for _, c := range cs {
		perBroker[c.Self().ID] = len(c.OwnedBundles())
	}
	for id, n := range perBroker {
		if n < 8 { // 12 namespaces x 4 bundles = 48 bundles over 3 brokers
			t.Fatalf("broker %s owns %d bundles: %v", id, n, perBroker)
		}
	}
	for _, c := range cs {
		for i := range topics {
			ns := fmt.Sprintf("public/ns%d", i%12)
			if got := c.Owns(ns, fmt.Sprintf("persistent://%s/t-%d", ns, i)); got != (owners[0][i] == c.Self().ID) {
				t.Fatalf("%s Owns(t-%d) = %v, owner %s", c.Self().ID, i, got, owners[0][i])
			}
		}
	}
}

// TestDeadOwnersBundleIsTakenOver: a bundle whose owner's registration is gone is taken over by
// a live broker at the next lookup. The record names the dead owner as stranded (its disk holds
// data of the bundle) and carries a ledger id floor above every id given out; when the dead owner
// registers again, the new owner is told to hand the bundle back to it (StrandedReturns), and
// completing that hand-over clears it. A stranded broker with nothing of the bundle unstrands itself.
func TestDeadOwnersBundleIsTakenOver(t *testing.T) {
	cs, store := startCoordinators(t, 2, 2*time.Second)
	waitBrokers(t, cs, 2)
	ctx := context.Background()
	ns := "public/default"
	topic := topicOwnedBy(t, cs[0], ns, "b2")
	b := cs[0].BundleOf(ns, topic)
	given, err := AllocateLedgerIDs(ctx, store, 0, 4096) // a block some broker holds
	if err != nil {
		t.Fatal(err)
	}
	cs[1].Close(ctx)
	waitBrokers(t, cs[:1], 1)
	d, err := cs[0].Lookup(ctx, ns, topic)
	if err != nil || d.Action != Connect {
		t.Fatalf("lookup with the owner down = %s, %v; want Connect (taken over)", d.Action, err)
	}
	own, _, err := cs[0].StoredRecord(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if own.Broker != "b1" || !own.HoldsStranded("b2") || own.IDFloor < given+4096 {
		t.Fatalf("record after the takeover = %+v, want owner b1, b2 stranded, id floor >= %d", own, given+4096)
	}
	if !cs[0].Owns(ns, topic) || len(cs[0].StrandedReturns()) != 0 {
		t.Fatalf("owns %v, returns %v", cs[0].Owns(ns, topic), cs[0].StrandedReturns())
	}

	// b2 comes back: b1 is to hand the bundle back so that b2 merges its data in.
	back, err := Start(ctx, Options{Store: store, Self: cs[1].Self(), HoldTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close(ctx)
	poll.Until(t, 5*time.Second, "b1 to see b2 return", func() bool { return len(cs[0].StrandedReturns()) == 1 })
	if mv := cs[0].StrandedReturns()[0]; mv.Bundle != b || mv.To.ID != "b2" {
		t.Fatalf("return = %+v", mv)
	}
	if got := back.StrandedHere(); len(got) != 1 || got[0] != b {
		t.Fatalf("StrandedHere on b2 = %v", got)
	}
	if back.Owns(ns, topic) {
		t.Fatal("the returned owner serves a bundle taken over")
	}
	epoch, err := cs[0].BeginHandOver(ctx, b, "b2")
	if err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, 5*time.Second, "b2 to see the move", func() error { return back.IncomingHandOver(ctx, b, "b1", epoch) })
	if err := cs[0].CompleteHandOver(ctx, b); err != nil {
		t.Fatal(err)
	}
	own, _, _ = cs[0].StoredRecord(ctx, b)
	if own.Broker != "b2" || len(own.Stranded) != 0 || own.IDFloor == 0 {
		t.Fatalf("record after the return = %+v, want owner b2, none stranded, the floor kept", own)
	}
	poll.Until(t, 5*time.Second, "b2 to serve", func() bool { return back.Owns(ns, topic) })

	// Another takeover, this time of b2's bundle by b1; b2 returns with nothing of it and unstrands.
	back.Close(ctx)
	waitBrokers(t, cs[:1], 1)
	if d, err := cs[0].Lookup(ctx, ns, topic); err != nil || d.Action != Connect {
		t.Fatalf("second takeover: %s, %v", d.Action, err)
	}
	again, err := Start(ctx, Options{Store: store, Self: cs[1].Self(), HoldTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	poll.Until(t, 5*time.Second, "b2 to see itself stranded", func() bool { return len(again.StrandedHere()) == 1 })
	if err := again.Unstrand(ctx, b); err != nil {
		t.Fatal(err)
	}
	own, _, _ = cs[0].StoredRecord(ctx, b)
	if own.Broker != "b1" || len(own.Stranded) != 0 {
		t.Fatalf("record after unstrand = %+v", own)
	}
}

// TestTakeoverRecord: the dead owner joins the stranded brokers (once), the new owner leaves them,
// and the id floor never goes down.
func TestTakeoverRecord(t *testing.T) {
	got := takeoverRecord(Ownership{Broker: "b3", Epoch: 4, Stranded: []string{"b1", "b2"}, IDFloor: 900}, "b1", 500)
	if got.Broker != "b1" || got.Epoch != 5 || fmt.Sprint(got.Stranded) != "[b2 b3]" || got.IDFloor != 900 || got.MovingTo != "" {
		t.Fatalf("takeover = %+v", got)
	}
	got = takeoverRecord(Ownership{Broker: "b3", Epoch: 1, MovingTo: "b2"}, "b2", 700)
	if fmt.Sprint(got.Stranded) != "[b3]" || got.IDFloor != 700 || got.MovingTo != "" {
		t.Fatalf("takeover mid-move = %+v", got)
	}
}

func TestSecondBrokerWithTheSameIDIsRefused(t *testing.T) {
	cs, store := startCoordinators(t, 1, time.Second)
	_, err := Start(context.Background(), Options{Store: store, SessionTTL: time.Second,
		Self: BrokerInfo{ID: cs[0].Self().ID, ServiceURL: "pulsar://127.0.0.9:6650"}})
	if err == nil {
		t.Fatal("a second live broker with the same id was accepted")
	}
}

func TestAllocateLedgerIDsNeverOverlap(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				first, err := AllocateLedgerIDs(context.Background(), store, 0, 10)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for id := first; id < first+10; id++ {
					if seen[id] {
						t.Errorf("ledger id %d handed out twice", id)
					}
					seen[id] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	last := int64(0)
	for id := range seen {
		last = max(last, id)
	}
	floor := last + 5000
	first, err := AllocateLedgerIDs(context.Background(), store, floor, 10)
	if err != nil || first != floor {
		t.Fatalf("with a floor above the counter: %d, %v (floor %d)", first, err, floor)
	}
	if next, _ := AllocateLedgerIDs(context.Background(), store, 0, 1); next != floor+10 {
		t.Fatalf("after the floor: %d, want %d", next, floor+10)
	}
}

// TestNewLedgerIDCounterStartsAtRandom: a new cluster's counter starts at its own random multiple
// of the block in [2^32, 2^47), so two clusters' positions practically never name the same
// ledger (a consumer moved by a switchover acknowledges positions of its old cluster).
func TestNewLedgerIDCounterStartsAtRandom(t *testing.T) {
	seen := map[int64]bool{}
	for range 4 {
		store := memstore.New()
		first, err := AllocateLedgerIDs(context.Background(), store, 0, 10)
		store.Close()
		if err != nil {
			t.Fatal(err)
		}
		if first < 1<<32 || first >= 1<<47 || first%4096 != 0 || seen[first] {
			t.Fatalf("a new counter starts at %d (seen: %v)", first, seen)
		}
		seen[first] = true
	}
}
