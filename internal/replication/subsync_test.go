package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
)

// TestSubscriptionStateRoundTrip: a state with ranges from the first entry, across ledgers and
// partial batches of several origins encodes and decodes to itself, and its marker entry is a
// marker of type SubscriptionStateMarker.
func TestSubscriptionStateRoundTrip(t *testing.T) {
	st := SubscriptionState{
		Subscription: "orders", Type: 3, Properties: map[string]string{"team": "a", "x": ""},
		Source: "a", TakenMs: 1_700_000_000_123, Seq: 42,
		Origins: []OriginAcks{
			{Key: OriginKey{"a", 0xdeadbeefcafef00d}, Ranges: []mtypes.PositionRange{{From: mtypes.Earliest, To: mtypes.Position{LedgerID: 7, EntryID: 99}}, {From: mtypes.Position{LedgerID: 7, EntryID: 101}, To: mtypes.Position{LedgerID: 9, EntryID: 3}}, {From: mtypes.Position{LedgerID: 9, EntryID: 5}, To: mtypes.Position{LedgerID: 9, EntryID: 5}}},
				Batches: []mtypes.BatchAck{{Position: mtypes.Position{LedgerID: 9, EntryID: 7}, Size: 70, Acked: []uint64{0b1011, 1 << 5}}}},
			{Key: OriginKey{"b", 0}, Ranges: []mtypes.PositionRange{{From: mtypes.Earliest, To: mtypes.Position{LedgerID: 3, EntryID: math.MaxInt64}}}},
		},
	}
	body, err := EncodeSubscriptionState(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSubscriptionState(body)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, st)
	}
	entry, err := EncodeStateMarkerEntry(body, st.TakenMs)
	if err != nil {
		t.Fatal(err)
	}
	dec, from, ok, err := DecodeStateMarkerEntry(entry)
	if !ok || err != nil || from != "" || !reflect.DeepEqual(dec, st) {
		t.Fatalf("marker entry: ok %v err %v from %q", ok, err, from)
	}
	// Forwarded by replicators, with replicated_from set on the way.
	out, reason, err := PrepareEntry(mtypes.Entry{Position: mtypes.Position{LedgerID: 9, EntryID: 8}, Data: entry}, "a", "b")
	if err != nil || reason != SkipNone || !out.Marker {
		t.Fatalf("prepare: %v %v marker %v", reason, err, out.Marker)
	}
	if _, from, ok, err := DecodeStateMarkerEntry(out.Bytes()); !ok || err != nil || from != "a" {
		t.Fatalf("forwarded marker: ok %v err %v from %q", ok, err, from)
	}
	// Another entry is not a state marker.
	if _, _, ok, err := DecodeStateMarkerEntry(mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 1}, "x", nil).Data); ok || err != nil {
		t.Fatalf("plain entry: ok %v err %v", ok, err)
	}
}

// TestSubscriptionStateRefusesHostileInput: the writer refuses states beyond the bounds; the
// reader refuses unsorted ranges, another version, oversized bitmaps and truncated bodies with an
// error, and never panics on mutated bytes.
func TestSubscriptionStateRefusesHostileInput(t *testing.T) {
	bad := []SubscriptionState{
		{Origins: []OriginAcks{{Ranges: []mtypes.PositionRange{{From: mtypes.Position{LedgerID: 1, EntryID: 5}, To: mtypes.Position{LedgerID: 1, EntryID: 4}}}}}},
		{Origins: []OriginAcks{{Ranges: []mtypes.PositionRange{{From: mtypes.Position{LedgerID: 1, EntryID: 1}, To: mtypes.Position{LedgerID: 1, EntryID: 4}}, {From: mtypes.Position{LedgerID: 1, EntryID: 3}, To: mtypes.Position{LedgerID: 1, EntryID: 9}}}}}},
		{Origins: []OriginAcks{{Batches: []mtypes.BatchAck{{Position: mtypes.Position{LedgerID: 1, EntryID: 1}, Size: 2, Acked: []uint64{1, 2}}}}}},
		{Origins: make([]OriginAcks, maxStateOrigins+1)},
	}
	for i, st := range bad {
		if _, err := EncodeSubscriptionState(st); err == nil {
			t.Fatalf("state %d encoded", i)
		}
	}
	good := SubscriptionState{Subscription: "s", Source: "a", Origins: []OriginAcks{{Key: OriginKey{"a", 1},
		Ranges: []mtypes.PositionRange{{From: mtypes.Earliest, To: mtypes.Position{LedgerID: 2, EntryID: 3}}, {From: mtypes.Position{LedgerID: 2, EntryID: 5}, To: mtypes.Position{LedgerID: 2, EntryID: 8}}}, Batches: []mtypes.BatchAck{{Position: mtypes.Position{LedgerID: 2, EntryID: 10}, Size: 3, Acked: []uint64{2}}}}}}
	body, err := EncodeSubscriptionState(good)
	if err != nil {
		t.Fatal(err)
	}
	// Version 2 is refused.
	v2 := slices.Clone(body)
	v2[1] = 2
	if _, err := DecodeSubscriptionState(v2); err == nil {
		t.Fatal("version 2 decoded")
	}
	// Ranges out of order: the range codec does not sort, the state check refuses them.
	st := good
	st.Origins = []OriginAcks{{Key: OriginKey{"a", 1}, Ranges: []mtypes.PositionRange{{From: mtypes.Position{LedgerID: 2, EntryID: 5}, To: mtypes.Position{LedgerID: 2, EntryID: 8}}, {From: mtypes.Position{LedgerID: 2, EntryID: 1}, To: mtypes.Position{LedgerID: 2, EntryID: 2}}}}}
	if err := checkStateBounds(st); err == nil {
		t.Fatal("unsorted ranges accepted")
	}
	// Every truncation is an error or a smaller valid state, never a panic.
	for n := 0; n < len(body); n++ {
		if st, err := DecodeSubscriptionState(body[:n]); err == nil {
			if err := checkStateBounds(st); err != nil {
				t.Fatalf("truncation to %d bytes decoded beyond the bounds: %v", n, err)
			}
		}
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 20000; i++ {
		m := slices.Clone(body)
		for k := 0; k < 1+rng.Intn(4); k++ {
			m[rng.Intn(len(m))] = byte(rng.Intn(256))
		}
		st, err := DecodeSubscriptionState(m)
		if err == nil {
			if err := checkStateBounds(st); err != nil {
				t.Fatalf("decoded a state beyond the bounds: %v", err)
			}
		}
	}
}

// indexWith builds an index holding origin's entries at the given local positions.
func indexWith(t *testing.T, x *Index, origin string, maps [][2]mtypes.Position) *Index {
	t.Helper()
	if x == nil {
		x = NewIndex(IndexOptions{})
	}
	for _, m := range maps {
		dup, _, _, commit, err := x.Admit(replicated(t, origin, m[0], "p"))
		if dup || err != nil {
			t.Fatalf("admit %v: %v %v", m[0], dup, err)
		}
		commit(m[1].LedgerID, m[1].EntryID, nil)
	}
	return x
}

// TestExportTranslateOneWay: a source's mark-delete position, a hole and a partial batch arrive on a
// receiver whose log interleaves the source's entries with its own: exactly the source's
// acknowledged entries are acknowledged there, and the receiver's own entries are not.
func TestExportTranslateOneWay(t *testing.T) {
	// Source "a": entries (1,0..9); acknowledged 0..4, 6..7, indexes 0 and 2 of the batch at 9.
	src := mtypes.SubscriptionAckState{Type: mtypes.SubShared, AckState: mtypes.AckState{MarkDelete: mtypes.Position{LedgerID: 1, EntryID: 4}, Ranges: []mtypes.AckRange{{LedgerID: 1, From: 6, To: 7}},
		Batches: []mtypes.BatchAck{{Position: mtypes.Position{LedgerID: 1, EntryID: 9}, Size: 3, Acked: []uint64{0b101}}}}}
	origins, _ := ExportState(src, ExportInput{Local: "a", IncarnationOf: func(int64) uint64 { return 0 },
		IncarnationsThrough: func(int64) []uint64 { return []uint64{0} }})
	want := []OriginAcks{{Key: OriginKey{"a", 0}, Ranges: []mtypes.PositionRange{{From: mtypes.Earliest, To: mtypes.Position{LedgerID: 1, EntryID: 4}}, {From: mtypes.Position{LedgerID: 1, EntryID: 6}, To: mtypes.Position{LedgerID: 1, EntryID: 7}}},
		Batches: []mtypes.BatchAck{{Position: mtypes.Position{LedgerID: 1, EntryID: 9}, Size: 3, Acked: []uint64{0b101}}}}}
	if !reflect.DeepEqual(origins, want) {
		t.Fatalf("export %+v", origins)
	}
	// Receiver "b": its own entry at (5,3) between a's (1,0..2) at (5,0..2) and a's (1,3..9) at (5,4..10).
	var m [][2]mtypes.Position
	for e := int64(0); e < 10; e++ {
		local := mtypes.Position{LedgerID: 5, EntryID: e}
		if e >= 3 {
			local.EntryID++
		}
		m = append(m, [2]mtypes.Position{{LedgerID: 1, EntryID: e}, local})
	}
	x := indexWith(t, nil, "a", m)
	tr := TranslateState(SubscriptionState{Source: "a", Origins: origins}, TranslateInput{Local: "b", Index: x})
	wantRanges := []mtypes.PositionRange{{From: mtypes.Position{LedgerID: 5, EntryID: 0}, To: mtypes.Position{LedgerID: 5, EntryID: 2}}, {From: mtypes.Position{LedgerID: 5, EntryID: 4}, To: mtypes.Position{LedgerID: 5, EntryID: 5}}, {From: mtypes.Position{LedgerID: 5, EntryID: 7}, To: mtypes.Position{LedgerID: 5, EntryID: 8}}}
	if !reflect.DeepEqual(tr.Ranges, wantRanges) || len(tr.Waiting) != 0 || tr.Through[OriginKey{"a", 0}] != (mtypes.Position{LedgerID: 1, EntryID: 4}) {
		t.Fatalf("translation %+v", tr)
	}
	if len(tr.Batches) != 1 || tr.Batches[0].Position != (mtypes.Position{LedgerID: 5, EntryID: 10}) || tr.Untranslated != 0 {
		t.Fatalf("batches %+v untranslated %d", tr.Batches, tr.Untranslated)
	}
	// Applied coverage skips runs already walked; an entry that has not arrived is not translated.
	tr = TranslateState(SubscriptionState{Source: "a", Origins: []OriginAcks{{Key: OriginKey{"a", 0}, Ranges: []mtypes.PositionRange{{From: mtypes.Earliest, To: mtypes.Position{LedgerID: 1, EntryID: 12}}}}}},
		TranslateInput{Local: "b", Index: x, Applied: map[OriginKey]mtypes.Position{{"a", 0}: {LedgerID: 1, EntryID: 4}}})
	if want := []mtypes.PositionRange{{From: mtypes.Position{LedgerID: 5, EntryID: 6}, To: mtypes.Position{LedgerID: 5, EntryID: 10}}}; !reflect.DeepEqual(tr.Ranges, want) {
		t.Fatalf("translation after applied coverage %+v", tr.Ranges)
	}
}

// TestExportTranslateThirdOrigin: entries the source received from a third cluster travel in that
// cluster's coordinates; a receiver that has not received them all yet waits for that cluster.
func TestExportTranslateThirdOrigin(t *testing.T) {
	// On source "a": c's entries (3,0..4) at a's (2,5..9).
	var ma [][2]mtypes.Position
	for e := int64(0); e < 5; e++ {
		ma = append(ma, [2]mtypes.Position{{LedgerID: 3, EntryID: e}, {LedgerID: 2, EntryID: 5 + e}})
	}
	xa := indexWith(t, nil, "c", ma)
	origins, through := ExportState(mtypes.SubscriptionAckState{AckState: mtypes.AckState{MarkDelete: mtypes.Position{LedgerID: 2, EntryID: 7}}}, ExportInput{Local: "a", Index: xa,
		IncarnationOf: func(int64) uint64 { return 7 }, IncarnationsThrough: func(int64) []uint64 { return []uint64{7} }})
	want := []OriginAcks{
		{Key: OriginKey{"a", 7}, Ranges: []mtypes.PositionRange{{From: mtypes.Earliest, To: mtypes.Position{LedgerID: 2, EntryID: 7}}}},
		{Key: OriginKey{"c", 0}, Ranges: []mtypes.PositionRange{{From: mtypes.Earliest, To: mtypes.Position{LedgerID: 3, EntryID: 2}}}},
	}
	if !reflect.DeepEqual(origins, want) || through[OriginKey{"c", 0}] != (mtypes.Position{LedgerID: 3, EntryID: 2}) {
		t.Fatalf("export %+v through %v", origins, through)
	}
	// Receiver "b" has c's (3,0..1) only, at (8,0..1).
	xb := indexWith(t, nil, "c", [][2]mtypes.Position{{{LedgerID: 3, EntryID: 0}, {LedgerID: 8, EntryID: 0}}, {{LedgerID: 3, EntryID: 1}, {LedgerID: 8, EntryID: 1}}})
	tr := TranslateState(SubscriptionState{Source: "a", Origins: origins}, TranslateInput{Local: "b", Index: xb})
	if !reflect.DeepEqual(tr.Ranges, []mtypes.PositionRange{{From: mtypes.Position{LedgerID: 8, EntryID: 0}, To: mtypes.Position{LedgerID: 8, EntryID: 1}}}) || !reflect.DeepEqual(tr.Waiting, []string{"c"}) {
		t.Fatalf("translation %+v", tr)
	}
	// Once c's (3,2) arrived, nothing waits.
	indexWith(t, xb, "c", [][2]mtypes.Position{{{LedgerID: 3, EntryID: 2}, {LedgerID: 8, EntryID: 5}}})
	tr = TranslateState(SubscriptionState{Source: "a", Origins: origins}, TranslateInput{Local: "b", Index: xb})
	if !reflect.DeepEqual(tr.Ranges, []mtypes.PositionRange{{From: mtypes.Position{LedgerID: 8, EntryID: 0}, To: mtypes.Position{LedgerID: 8, EntryID: 1}}, {From: mtypes.Position{LedgerID: 8, EntryID: 5}, To: mtypes.Position{LedgerID: 8, EntryID: 5}}}) || len(tr.Waiting) != 0 {
		t.Fatalf("translation %+v", tr)
	}
}

// TestTranslateReceiversOwnEntries: a state naming the receiver's own entries translates by
// identity, leaving out the local positions that hold replicated entries.
func TestTranslateReceiversOwnEntries(t *testing.T) {
	// Receiver "b": a's entries at (5,0..2) and (5,4..6); its own at (5,3), (5,7), (5,8).
	x := indexWith(t, nil, "a", [][2]mtypes.Position{{{LedgerID: 1, EntryID: 0}, {LedgerID: 5, EntryID: 0}}, {{LedgerID: 1, EntryID: 1}, {LedgerID: 5, EntryID: 1}}, {{LedgerID: 1, EntryID: 2}, {LedgerID: 5, EntryID: 2}}, {{LedgerID: 1, EntryID: 3}, {LedgerID: 5, EntryID: 4}}, {{LedgerID: 1, EntryID: 4}, {LedgerID: 5, EntryID: 5}}, {{LedgerID: 1, EntryID: 5}, {LedgerID: 5, EntryID: 6}}})
	st := SubscriptionState{Source: "a", Origins: []OriginAcks{{Key: OriginKey{"b", 0}, Ranges: []mtypes.PositionRange{{From: mtypes.Earliest, To: mtypes.Position{LedgerID: 5, EntryID: 7}}}}}}
	tr := TranslateState(st, TranslateInput{Local: "b", Index: x})
	want := []mtypes.PositionRange{{From: mtypes.Earliest, To: beforeLedger(5)}, {From: mtypes.Position{LedgerID: 5, EntryID: 3}, To: mtypes.Position{LedgerID: 5, EntryID: 3}}, {From: mtypes.Position{LedgerID: 5, EntryID: 7}, To: mtypes.Position{LedgerID: 5, EntryID: 7}}}
	if !reflect.DeepEqual(tr.Ranges, want) {
		t.Fatalf("identity translation %+v", tr.Ranges)
	}
}

// TestSettle: a replicated subscription's first dispatch waits while the last state applied from
// a source is recent and not final (its consumer is probably just moving here) or a marker of the
// topic is queued or being applied; a final or old state, or none, does not hold it back, and a
// step that applies the final state releases a waiting settle.
func TestSettle(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	s := newSubSync("b", nil, 0, slog.Default())
	s.now = func() time.Time { return now }
	k := subKey{"t", "app"}
	nowMs := now.UnixMilli()
	check := func(what string, want bool) {
		t.Helper()
		s.mu.Lock()
		got := s.unsettledLocked(k, nowMs)
		s.mu.Unlock()
		if got != want {
			t.Fatalf("%s: unsettled %v, want %v", what, got, want)
		}
	}
	check("never synced", false)
	src := &inSource{seq: 3, appliedMs: nowMs - 100}
	s.in[k] = &inState{sources: map[string]*inSource{"a": src}}
	check("recent state with a consumer on the source", true)
	src.appliedMs = nowMs - settleWindow.Milliseconds() - 1
	check("old state", false)
	src.appliedMs, src.final = nowMs-100, true
	check("final state", false)
	s.queue = []storedMarker{{topic: "other"}}
	check("a marker of another topic queued", false)
	s.queue = []storedMarker{{topic: "t"}}
	check("a marker of the topic queued", true)
	s.queue, s.applying = nil, []storedMarker{{topic: "t"}}
	check("a marker of the topic being applied", true)

	// A settle waiting for the final state returns once a step applied it.
	s.applying, src.final = nil, false
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.settle(context.Background(), "t", "app")
	}()
	<-s.kick // the settle asked the loop for a step
	s.mu.Lock()
	src.final = true
	close(s.stepped)
	s.stepped = make(chan struct{})
	s.mu.Unlock()
	<-done
}

// TestExportOtherOriginHoles: entries the source received from another cluster and acknowledged
// above its mark-delete position (holes, a partial batch) travel in that cluster's coordinates,
// and the receiver acknowledges exactly them.
func TestExportOtherOriginHoles(t *testing.T) {
	// On source "a": c's entries (3,0..5) at a's (2,10..15); a's own at (2,0..9).
	var ma [][2]mtypes.Position
	for e := int64(0); e < 6; e++ {
		ma = append(ma, [2]mtypes.Position{{LedgerID: 3, EntryID: e}, {LedgerID: 2, EntryID: 10 + e}})
	}
	xa := indexWith(t, nil, "c", ma)
	// Acknowledged: up to (2,11) (c's 0..1), then (2,13..14) (c's 3..4), and indexes of (2,15) (c's 5).
	st := mtypes.SubscriptionAckState{AckState: mtypes.AckState{MarkDelete: mtypes.Position{LedgerID: 2, EntryID: 11}, Ranges: []mtypes.AckRange{{LedgerID: 2, From: 13, To: 14}},
		Batches: []mtypes.BatchAck{{Position: mtypes.Position{LedgerID: 2, EntryID: 15}, Size: 4, Acked: []uint64{0b1001}}}}}
	origins, _ := ExportState(st, ExportInput{Local: "a", Index: xa,
		IncarnationOf: func(int64) uint64 { return 7 }, IncarnationsThrough: func(int64) []uint64 { return []uint64{7} }})
	var c *OriginAcks
	for i := range origins {
		if origins[i].Key == (OriginKey{"c", 0}) {
			c = &origins[i]
		}
	}
	if c == nil || !reflect.DeepEqual(c.Ranges, []mtypes.PositionRange{{From: mtypes.Earliest, To: mtypes.Position{LedgerID: 3, EntryID: 1}}, {From: mtypes.Position{LedgerID: 3, EntryID: 3}, To: mtypes.Position{LedgerID: 3, EntryID: 4}}}) ||
		len(c.Batches) != 1 || c.Batches[0].Position != (mtypes.Position{LedgerID: 3, EntryID: 5}) || c.Batches[0].Acked[0] != 0b1001 {
		t.Fatalf("c's acknowledgements exported as %+v", origins)
	}
	if _, err := EncodeSubscriptionState(SubscriptionState{Source: "a", Origins: origins}); err != nil {
		t.Fatalf("exported state does not encode: %v", err)
	}
	// Receiver "b" holds c's entries at (9,0..5).
	var mb [][2]mtypes.Position
	for e := int64(0); e < 6; e++ {
		mb = append(mb, [2]mtypes.Position{{LedgerID: 3, EntryID: e}, {LedgerID: 9, EntryID: e}})
	}
	xb := indexWith(t, nil, "c", mb)
	tr := TranslateState(SubscriptionState{Source: "a", Origins: []OriginAcks{*c}}, TranslateInput{Local: "b", Index: xb})
	if !reflect.DeepEqual(tr.Ranges, []mtypes.PositionRange{{From: mtypes.Position{LedgerID: 9, EntryID: 0}, To: mtypes.Position{LedgerID: 9, EntryID: 1}}, {From: mtypes.Position{LedgerID: 9, EntryID: 3}, To: mtypes.Position{LedgerID: 9, EntryID: 4}}}) ||
		len(tr.Batches) != 1 || tr.Batches[0].Position != (mtypes.Position{LedgerID: 9, EntryID: 5}) || len(tr.Waiting) != 0 {
		t.Fatalf("translation %+v", tr)
	}
}

// fakeSyncTopics is a SyncTopicSource whose topics record the states applied to them.
type fakeSyncTopics struct {
	mu      sync.Mutex
	applied []string // "<topic>/<subscription>"
}

func (f *fakeSyncTopics) SyncTopic(_ context.Context, topic string) (SyncTopic, error) {
	return fakeSyncTopic{f: f, topic: topic}, nil
}

func (f *fakeSyncTopics) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.applied)
}

type fakeSyncTopic struct {
	f     *fakeSyncTopics
	topic string
}

func (t fakeSyncTopic) SubscriptionAckState(string, int, int) (mtypes.SubscriptionAckState, error) {
	return mtypes.SubscriptionAckState{}, errors.New("not a source")
}
func (t fakeSyncTopic) AppendMarker(context.Context, []byte) (mtypes.Position, error) {
	return mtypes.Position{}, errors.New("not a source")
}
func (t fakeSyncTopic) ApplyReplicatedState(_ context.Context, sub string, _ mtypes.ReplicatedState) (mtypes.ReplicatedApplyResult, error) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.f.applied = append(t.f.applied, t.topic+"/"+sub)
	return mtypes.ReplicatedApplyResult{}, nil
}
func (t fakeSyncTopic) IncarnationOf(int64) uint64                      { return 0 }
func (t fakeSyncTopic) IncarnationsThrough(int64) []uint64              { return nil }
func (t fakeSyncTopic) FlushSubscription(context.Context, string) error { return nil }

// TestAppliedStatesAreReadAgainAtLoad: a topic that received state markers keeps the cursor
// AppliedStatesCursorName before the oldest one not applied durably; when the topic loads, the
// markers after it are read from the log and applied again (what a crash between storing and
// applying a state would otherwise lose), and the cursor then moves past them.
func TestAppliedStatesAreReadAgainAtLoad(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	cat, err := catalog.New(context.Background(), store, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	const topic = "persistent://public/default/t"
	lt := newMemTopic(topic, 3)
	lt.append(mkEntry(t, mtypes.Position{}, "data", nil).Data, 1)
	body, err := EncodeSubscriptionState(SubscriptionState{Subscription: "moved", Source: "a", TakenMs: 5, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	marker, err := EncodeStateMarkerEntry(body, 5)
	if err != nil {
		t.Fatal(err)
	}
	if marker, err = wire.SetReplicatedFrom(marker, "a", "9:9"); err != nil {
		t.Fatal(err)
	}
	at := lt.append(marker, 2)
	// The cursor says everything before the data entry is applied: the marker is after it.
	if _, _, err := lt.OpenCursor(context.Background(), AppliedStatesCursorName, mtypes.Earliest); err != nil {
		t.Fatal(err)
	}
	fake := &fakeSyncTopics{}
	m, err := NewManager(ManagerOptions{Local: "b", Policies: cat, Producers: &memRemotes{m: map[string]*memRemote{}}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mustStart(t, m, context.Background(), LocalTopics{Topics: &memTopics{topics: map[string]*memTopic{topic: lt}}, Sync: fake})
	defer m.Close(context.Background())
	m.TopicLoaded(topic)
	c, _, _ := lt.OpenCursor(context.Background(), AppliedStatesCursorName, mtypes.Earliest)
	poll.UntilNil(t, 10*time.Second, "the state applied after load", func() error {
		if len(fake.calls()) == 0 || c.MarkDeletePosition().Compare(at) < 0 {
			return fmt.Errorf("applied %v, cursor at %v (marker at %v)", fake.calls(), c.MarkDeletePosition(), at)
		}
		return nil
	})
	if got := fake.calls(); len(got) != 1 || got[0] != topic+"/moved" {
		t.Fatalf("applied %v", got)
	}
}
