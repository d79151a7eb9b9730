package replication

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// replicatedInc builds entry bytes as a replicator sends them: from origin, source position src of
// a ledger of incarnation inc (0: none).
func replicatedInc(t testing.TB, origin string, inc uint64, src mtypes.Position, payload string) []byte {
	t.Helper()
	e := mkEntry(t, src, payload, nil)
	e.Incarnation = inc
	out, reason, err := PrepareEntry(e, origin, "here")
	if err != nil || reason != SkipNone {
		t.Fatalf("prepare: %v %v", reason, err)
	}
	return out.Bytes()
}

// store admits and appends data on topic through x; it fails the test on a duplicate or an error.
func store(t testing.TB, x *Index, topic *memTopic, data []byte) mtypes.Position {
	t.Helper()
	dup, _, _, c, err := x.Admit(data)
	if err != nil || dup || c == nil {
		t.Fatalf("admit: dup %v err %v", dup, err)
	}
	p := topic.append(data, 1)
	c(p.LedgerID, p.EntryID, nil)
	return p
}

// TestIndexIncarnationsAreSeparateOrigins: a source restored from an older copy of its data dir (or
// rebuilt empty) hands out origin positions it had used before, under a new incarnation: those
// entries are new, not duplicates. Entries without an incarnation (Pulsar) are incarnation 0.
// Stats stay per cluster.
func TestIndexIncarnationsAreSeparateOrigins(t *testing.T) {
	ctx := context.Background()
	topic := newMemTopic("persistent://t/n/inc", 9)
	x, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	const first, restored = 0x1111, 0x2222
	for _, inc := range []uint64{first, restored, 0} {
		for e := range int64(10) {
			store(t, x, topic, replicatedInc(t, "a", inc, mtypes.Position{LedgerID: 4, EntryID: e}, "x"))
		}
	}
	check := func(x *Index) {
		t.Helper()
		for i, inc := range []uint64{first, restored, 0} {
			for e := range int64(10) {
				dup, l, le, _, err := x.AdmitTicket(replicatedInc(t, "a", inc, mtypes.Position{LedgerID: 4, EntryID: e}, "x"))
				if want := (mtypes.Position{LedgerID: 9, EntryID: int64(10*i) + e}); err != nil || !dup || (mtypes.Position{LedgerID: l, EntryID: le}) != want {
					t.Fatalf("resend of a/%x 4:%d: dup %v at %d:%d err %v, want a duplicate of %v", inc, e, dup, l, le, err, want)
				}
			}
		}
		if _, ok := x.Lookup(OriginKey{Cluster: "a", Incarnation: 0x3333}, mtypes.Position{LedgerID: 4, EntryID: 0}); ok {
			t.Fatal("an unknown incarnation has mappings")
		}
	}
	check(x)
	in := x.Inbound()
	if len(in) != 1 || in[0].Origin != "a" || in[0].MsgInCount != 30 || in[0].DuplicatesDropped != 30 || in[0].Incarnations != 3 {
		t.Fatalf("inbound %+v", in)
	}
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
	y, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close(ctx)
	check(y)
	// Only the key its cluster used last keeps a tail in the head; older keys are chunks.
	h, err := decodeHead(topic.cursors[IndexCursorName].Properties(), func(int, run) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range h.keys {
		if k.tailRuns > 0 && k.key.Incarnation != 0 {
			t.Fatalf("older key %v keeps %d tail runs in the head", k.key, k.tailRuns)
		}
	}
	// A malformed incarnation is refused with an error, never indexed under another key.
	bad, err := wire.SetReplicatedSource(replicated(t, "a", mtypes.Position{LedgerID: 4, EntryID: 99}, "x"), "a", "4:99", 0)
	if err != nil {
		t.Fatal(err)
	}
	bad, err = wire.RewriteMetadata(bad, func(md *pulsarpb.MessageMetadata) {
		md.Properties = append(md.Properties, &pulsarpb.KeyValue{Key: proto.String(SourceIncarnationProperty), Value: proto.String("xyz")})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := y.AdmitTicket(bad); err == nil {
		t.Fatal("malformed incarnation admitted")
	}
}

// TestIndexFailedAppendAcrossIncarnations: after an append of a's entry fails, a's entries of
// another incarnation are refused too (the replicator resends the failed one first), but only for
// failedAppendHold: a source that lost the failed entry never sends it again.
func TestIndexFailedAppendAcrossIncarnations(t *testing.T) {
	now := time.Unix(1000, 0)
	x := NewIndex(IndexOptions{Now: func() time.Time { return now }, Logger: quietLogger()})
	_, _, _, c, err := x.Admit(replicatedInc(t, "a", 7, mtypes.Position{LedgerID: 1, EntryID: 0}, "x"))
	if err != nil {
		t.Fatal(err)
	}
	c(0, 0, errors.New("fenced"))
	if _, _, _, _, err := x.Admit(replicatedInc(t, "a", 8, mtypes.Position{LedgerID: 1, EntryID: 0}, "x")); !errors.Is(err, ErrIndexOutOfOrder) {
		t.Fatalf("another incarnation right after the failure: %v", err)
	}
	if _, _, _, c, err := x.Admit(replicatedInc(t, "b", 8, mtypes.Position{LedgerID: 1, EntryID: 0}, "x")); err != nil || c == nil {
		t.Fatalf("another cluster: %v", err) // other clusters are not held up
	} else {
		c(0, 1, nil)
	}
	now = now.Add(failedAppendHold)
	if _, _, _, _, err := x.Admit(replicatedInc(t, "a", 7, mtypes.Position{LedgerID: 1, EntryID: 1}, "x")); !errors.Is(err, ErrIndexOutOfOrder) {
		t.Fatalf("the failed incarnation's later entry: %v", err)
	}
	_, _, _, c, err = x.Admit(replicatedInc(t, "a", 8, mtypes.Position{LedgerID: 1, EntryID: 0}, "x"))
	if err != nil || c == nil {
		t.Fatalf("another incarnation after the hold: %v", err)
	}
	c(0, 2, nil)
}

// TestIndexKeysPerClusterBounded: an origin cluster keeps at most maxKeysPerCluster incarnations;
// the one that recorded least recently goes first, and the index keeps working for the others.
func TestIndexKeysPerClusterBounded(t *testing.T) {
	topic := newMemTopic("persistent://t/n/keys", 9)
	x := NewIndex(IndexOptions{Logger: quietLogger()})
	for inc := uint64(1); inc <= maxKeysPerCluster+10; inc++ {
		store(t, x, topic, replicatedInc(t, "a", inc, mtypes.Position{LedgerID: 1, EntryID: 0}, "x"))
	}
	if in := x.Inbound(); in[0].Incarnations != maxKeysPerCluster || in[0].MsgInCount != maxKeysPerCluster+10 {
		t.Fatalf("inbound %+v", in[0])
	}
	if x.Contains(OriginKey{Cluster: "a", Incarnation: 1}, mtypes.Position{LedgerID: 1, EntryID: 0}) || !x.Contains(OriginKey{Cluster: "a", Incarnation: maxKeysPerCluster + 10}, mtypes.Position{LedgerID: 1, EntryID: 0}) {
		t.Fatal("the oldest incarnation should be forgotten, the newest kept")
	}
	// The admission of the newest key, cached, and then of a new key after an eviction.
	store(t, x, topic, replicatedInc(t, "a", maxKeysPerCluster+10, mtypes.Position{LedgerID: 1, EntryID: 1}, "x"))
	store(t, x, topic, replicatedInc(t, "a", 1, mtypes.Position{LedgerID: 1, EntryID: 0}, "x")) // forgotten: stored again
	if !x.Contains(OriginKey{Cluster: "a", Incarnation: 1}, mtypes.Position{LedgerID: 1, EntryID: 0}) {
		t.Fatal("re-created key lost its entry")
	}
}

// TestIndexResendOfOlderIncarnation: resends of an older incarnation's entries (duplicates after a
// source restart) do not make it the cluster's newest key: the key the source writes keeps its
// tail in the head and is not rewritten.
func TestIndexResendOfOlderIncarnation(t *testing.T) {
	ctx := context.Background()
	topic := newMemTopic("persistent://t/n/resend", 9)
	x, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close(ctx)
	for e := range int64(5) {
		store(t, x, topic, replicatedInc(t, "a", 1, mtypes.Position{LedgerID: 1, EntryID: e}, "x"))
	}
	for e := range int64(5) {
		store(t, x, topic, replicatedInc(t, "a", 2, mtypes.Position{LedgerID: 1, EntryID: e}, "x"))
	}
	if dup, _, _, _, err := x.AdmitTicket(replicatedInc(t, "a", 1, mtypes.Position{LedgerID: 1, EntryID: 4}, "x")); !dup || err != nil {
		t.Fatalf("resend: dup %v err %v", dup, err)
	}
	if err := x.Save(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := decodeHead(topic.cursors[IndexCursorName].Properties(), func(int, run) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range h.keys {
		switch k.key.Incarnation {
		case 1:
			if k.tailRuns != 0 || len(k.chunks) != 1 {
				t.Fatalf("older key: %d tail runs, %d chunks; want its runs in one chunk", k.tailRuns, len(k.chunks))
			}
		case 2:
			if k.tailRuns == 0 || len(k.chunks) != 0 {
				t.Fatalf("newest key: %d tail runs, %d chunks; want its runs in the head", k.tailRuns, len(k.chunks))
			}
		}
	}
}
