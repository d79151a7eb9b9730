package replication

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// replicated builds entry bytes as a replicator sends them: from origin, source position src.
func replicated(t testing.TB, origin string, src mtypes.Position, payload string) []byte {
	t.Helper()
	e := mkEntry(t, src, payload, nil)
	out, reason, err := PrepareEntry(e, origin, "here")
	if err != nil || reason != SkipNone {
		t.Fatalf("prepare: %v %v", reason, err)
	}
	return out.Bytes()
}

func TestIndexAdmitCommitDuplicate(t *testing.T) {
	x := NewIndex(IndexOptions{})
	d1 := replicated(t, "a", mtypes.Position{LedgerID: 5, EntryID: 0}, "x")
	dup, _, _, commit, err := x.Admit(d1)
	if dup || commit == nil || err != nil {
		t.Fatalf("first admit: %v %v %v", dup, commit != nil, err)
	}
	// The same origin position while its append is pending: retry later.
	if _, _, _, _, err := x.Admit(d1); !errors.Is(err, ErrIndexPending) {
		t.Fatalf("pending admit: %v", err)
	}
	commit(9, 3, nil)
	dup, l, e, commit2, err := x.Admit(d1)
	if !dup || l != 9 || e != 3 || commit2 != nil || err != nil {
		t.Fatalf("duplicate admit: %v %d:%d %v", dup, l, e, err)
	}
	if p, ok := x.Lookup(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 5, EntryID: 0}); !ok || p != (mtypes.Position{LedgerID: 9, EntryID: 3}) {
		t.Fatalf("lookup %v %v", p, ok)
	}
	if _, ok := x.Lookup(OriginKey{Cluster: "b"}, mtypes.Position{LedgerID: 5, EntryID: 0}); ok {
		t.Fatal("lookup of another origin")
	}
	// Entries that are not replicated are not indexed.
	plain := mkEntry(t, mtypes.Position{}, "p", nil).Data
	if dup, _, _, commit, err := x.Admit(plain); dup || commit != nil || err != nil {
		t.Fatalf("plain admit: %v %v %v", dup, commit != nil, err)
	}
	// Garbage is an error, not a panic.
	if _, _, _, _, err := x.Admit([]byte{1, 2, 3}); err == nil {
		t.Fatal("garbage admitted")
	}
	st := x.Inbound()
	if len(st) != 1 || st[0].Origin != "a" || st[0].MsgInCount != 1 || st[0].DuplicatesDropped != 1 {
		t.Fatalf("inbound %+v", st)
	}
}

func TestIndexFailedAppendKeepsOriginOrder(t *testing.T) {
	x := NewIndex(IndexOptions{})
	_, _, _, c0, _ := x.Admit(replicated(t, "a", mtypes.Position{LedgerID: 1, EntryID: 0}, "0"))
	_, _, _, c1, _ := x.Admit(replicated(t, "a", mtypes.Position{LedgerID: 1, EntryID: 1}, "1"))
	c0(0, 0, errors.New("fenced"))
	c1(0, 1, errors.New("fenced"))
	if _, _, _, _, err := x.Admit(replicated(t, "a", mtypes.Position{LedgerID: 1, EntryID: 2}, "2")); !errors.Is(err, ErrIndexOutOfOrder) {
		t.Fatalf("entry after a failed one: %v", err)
	}
	dup, _, _, c, err := x.Admit(replicated(t, "a", mtypes.Position{LedgerID: 1, EntryID: 0}, "0"))
	if dup || c == nil || err != nil {
		t.Fatalf("resend of the failed entry: %v %v", dup, err)
	}
	c(3, 0, nil)
}

func TestIndexRunsCompressAndLookup(t *testing.T) {
	x := NewIndex(IndexOptions{})
	local := int64(0)
	add := func(origin string, src mtypes.Position) {
		_, _, _, c, err := x.Admit(replicated(t, origin, src, "x"))
		if err != nil || c == nil {
			t.Fatal(err)
		}
		c(20, local, nil)
		local++
	}
	for i := range 100 {
		add("a", mtypes.Position{LedgerID: 3, EntryID: int64(i)})
	}
	for i := range 10 { // a second origin interleaves
		add("a", mtypes.Position{LedgerID: 4, EntryID: int64(i)})
		add("b", mtypes.Position{LedgerID: 8, EntryID: int64(i)})
	}
	st := x.Inbound()
	if st[0].Origin != "a" || st[0].Runs != 11 || st[1].Runs != 10 {
		t.Fatalf("runs %+v", st)
	}
	if p, ok := x.Lookup(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 3, EntryID: 42}); !ok || p != (mtypes.Position{LedgerID: 20, EntryID: 42}) {
		t.Fatalf("lookup 3:42 -> %v %v", p, ok)
	}
	if p, ok := x.Lookup(OriginKey{Cluster: "b"}, mtypes.Position{LedgerID: 8, EntryID: 9}); !ok || p != (mtypes.Position{LedgerID: 20, EntryID: 119}) {
		t.Fatalf("lookup b 8:9 -> %v %v", p, ok)
	}
	if _, ok := x.Lookup(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 3, EntryID: 100}); ok {
		t.Fatal("lookup past a run")
	}
}

func TestIndexSnapshotRoundTripAndRebuild(t *testing.T) {
	ctx := context.Background()
	topic := newMemTopic("persistent://t/n/x", 30)
	x, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	store := func(x *Index, origin string, src mtypes.Position) {
		t.Helper()
		data := replicated(t, origin, src, "x")
		dup, _, _, c, err := x.Admit(data)
		if err != nil || dup {
			t.Fatalf("admit %v: dup %v err %v", src, dup, err)
		}
		p := topic.append(data, 1)
		c(p.LedgerID, p.EntryID, nil)
	}
	for i := range 50 {
		store(x, "a", mtypes.Position{LedgerID: 1, EntryID: int64(i)})
		topic.append(mkEntry(t, mtypes.Position{}, "local", nil).Data, 1) // local traffic interleaves
	}
	if err := x.Save(ctx); err != nil {
		t.Fatal(err)
	}
	cur := topic.cursors[IndexCursorName]
	first := cur.Properties()
	if first["index.scanFrom"] != "30:100" {
		t.Fatalf("first snapshot scans from %q, want 30:100", first["index.scanFrom"])
	}
	// After the snapshot: more entries that only the log knows about.
	for i := 50; i < 60; i++ {
		store(x, "a", mtypes.Position{LedgerID: 1, EntryID: int64(i)})
	}
	store(x, "b", mtypes.Position{LedgerID: 9, EntryID: 0})
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Simulate a crash that lost the last snapshot: restore the first one's properties, so the
	// entries after it must come from the log.
	if err := cur.SetProperties(ctx, first); err != nil {
		t.Fatal(err)
	}
	y, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close(ctx)
	for i := range 60 {
		if !y.Contains(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 1, EntryID: int64(i)}) {
			t.Fatalf("a 1:%d missing after reload", i)
		}
	}
	if p, ok := y.Lookup(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 1, EntryID: 10}); !ok || p != (mtypes.Position{LedgerID: 30, EntryID: 20}) {
		t.Fatalf("lookup after reload %v %v", p, ok)
	}
	if !y.Contains(OriginKey{Cluster: "b"}, mtypes.Position{LedgerID: 9, EntryID: 0}) {
		t.Fatal("b missing")
	}
	if dup, _, _, _, _ := y.Admit(replicated(t, "a", mtypes.Position{LedgerID: 1, EntryID: 59}, "x")); !dup {
		t.Fatal("resend after reload not recognised as duplicate")
	}
	// New entries after a reload from a snapshot are recorded under their origin and counted (a
	// snapshot-loaded origin once lost its name: entries were counted under "" and not mapped).
	store(y, "a", mtypes.Position{LedgerID: 1, EntryID: 60})
	if !y.Contains(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 1, EntryID: 60}) {
		t.Fatal("entry stored after reload not mapped under its origin")
	}
	if dup, _, _, _, _ := y.Admit(replicated(t, "a", mtypes.Position{LedgerID: 1, EntryID: 60}, "x")); !dup {
		t.Fatal("resend of an entry stored after reload not recognised as duplicate")
	}
	for _, in := range y.Inbound() {
		if in.Origin == "a" && in.MsgInCount != 1 {
			t.Fatalf("origin a counted %d since the reload, want 1", in.MsgInCount)
		}
		if in.Origin == "" {
			t.Fatalf("entries counted under an empty origin: %+v", in)
		}
	}

	// A damaged snapshot costs a full scan, never correctness.
	_ = cur.SetProperties(ctx, map[string]string{"index.version": "1", "index.scanFrom": "30:200", "index.data": "!!!"})
	z, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close(ctx)
	if !z.Contains(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 1, EntryID: 0}) || !z.Contains(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 1, EntryID: 59}) {
		t.Fatal("rebuild after a damaged snapshot incomplete")
	}
}

func FuzzPrepareEntry(f *testing.F) {
	f.Add(mkEntry(f, mtypes.Position{LedgerID: 1, EntryID: 1}, "payload", nil).Data)
	f.Add(mkEntry(f, mtypes.Position{LedgerID: 1, EntryID: 1}, "x", func(md *pulsarpb.MessageMetadata) { md.ReplicateTo = []string{"b"} }).Data)
	f.Add(mkEntry(f, mtypes.Position{LedgerID: 1, EntryID: 1}, "x", func(md *pulsarpb.MessageMetadata) { md.ReplicatedFrom = proto.String("c") }).Data)
	f.Add([]byte{0x0e, 0x01, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, reason, err := PrepareEntry(mtypes.Entry{Position: mtypes.Position{LedgerID: 1, EntryID: 2}, Data: b}, "a", "b")
		if reason == SkipNone && err == nil {
			pe, err := ParseEntry(out.Bytes())
			if err != nil {
				t.Fatalf("prepared entry does not parse: %v", err)
			}
			if o, p, ok, _ := SourceOf(pe.Metadata); !ok || o != "a" || p != (mtypes.Position{LedgerID: 1, EntryID: 2}) {
				t.Fatalf("prepared entry lacks its source: %v %v %v", o, p, ok)
			}
		}
	})
}

// TestIndexSnapshotFollowsLocalTraffic: with only local traffic after a replicated entry, the snapshot
// (and its cursor, which would otherwise hold back trimming) still moves to the end of the log.
func TestIndexSnapshotFollowsLocalTraffic(t *testing.T) {
	ctx := context.Background()
	topic := newMemTopic("persistent://t/n/local", 4)
	x, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	data := replicated(t, "a", mtypes.Position{LedgerID: 1, EntryID: 0}, "x")
	_, _, _, c, _ := x.Admit(data)
	p := topic.append(data, 1)
	c(p.LedgerID, p.EntryID, nil)
	for range 10 {
		topic.append(mkEntry(t, mtypes.Position{}, "local", nil).Data, 1)
	}
	// The cursor's mark-delete follows what a durable snapshot covers: one save later, or at the
	// next Maintain when nothing changed in between.
	x.Maintain(ctx, time.Now().Add(2*time.Second))
	x.Maintain(ctx, time.Now().Add(4*time.Second))
	cur := topic.cursors[IndexCursorName]
	if md := cur.MarkDeletePosition(); md != (mtypes.Position{LedgerID: 4, EntryID: 10}) {
		t.Fatalf("index cursor at %v, want 4:10 (end of the log)", md)
	}
	for range 5 {
		topic.append(mkEntry(t, mtypes.Position{}, "local", nil).Data, 1)
	}
	x.Maintain(ctx, time.Now().Add(6*time.Second))
	x.Maintain(ctx, time.Now().Add(8*time.Second))
	if md := cur.MarkDeletePosition(); md != (mtypes.Position{LedgerID: 4, EntryID: 15}) {
		t.Fatalf("index cursor at %v after more local traffic, want 4:15", md)
	}
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIndexSnapshotSkippedOnEmptyLog: an idle, empty topic saves no snapshot (nothing to spare a
// rescan of; it would cost every idle topic its properties); the first entry makes one due.
func TestIndexSnapshotSkippedOnEmptyLog(t *testing.T) {
	ctx := context.Background()
	topic := newMemTopic("persistent://t/n/idle", 4)
	x, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	x.Maintain(ctx, time.Now().Add(2*time.Second))
	if names := topic.CursorNames(); len(names) != 0 {
		t.Fatalf("empty topic has cursors %v, want none (the index cursor is created lazily)", names)
	}
	topic.append(mkEntry(t, mtypes.Position{}, "local", nil).Data, 1)
	x.Maintain(ctx, time.Now().Add(4*time.Second))
	cur := topic.cursors[IndexCursorName]
	if cur == nil {
		t.Fatal("no index cursor after the first entry")
	}
	if props := cur.Properties(); props["index.version"] == "" {
		t.Fatalf("no snapshot after the first entry: %v", props)
	}
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIndexCursorCreatedBeforeFirstReplicatedEntry: an idle topic has no index cursor; the first
// replicated entry creates it (at the start of the log, so nothing replicated is trimmed before a
// snapshot covers it), and a reload without any snapshot (a crash) still deduplicates everything
// stored, rebuilt from the log.
func TestIndexCursorCreatedBeforeFirstReplicatedEntry(t *testing.T) {
	ctx := context.Background()
	topic := newMemTopic("persistent://t/n/lazy", 7)
	x, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	topic.append(mkEntry(t, mtypes.Position{}, "local", nil).Data, 1)
	if names := topic.CursorNames(); len(names) != 0 {
		t.Fatalf("cursors %v before any replicated entry", names)
	}
	data := replicated(t, "a", mtypes.Position{LedgerID: 3, EntryID: 0}, "x")
	dup, _, _, commit, err := x.Admit(data)
	if err != nil || dup || commit == nil {
		t.Fatalf("admit: dup %v err %v", dup, err)
	}
	cur := topic.cursors[IndexCursorName]
	if cur == nil {
		t.Fatal("no index cursor once a replicated entry was admitted")
	}
	if md := cur.MarkDeletePosition(); md != (mtypes.Position{LedgerID: 7, EntryID: -1}) {
		t.Fatalf("index cursor created at %v, want 7:-1 (the start of the log)", md)
	}
	p := topic.append(data, 1)
	commit(p.LedgerID, p.EntryID, nil)
	// A crash: no snapshot was saved. The reload rebuilds from the log.
	y, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close(ctx)
	if dup, dl, de, _, err := y.Admit(data); err != nil || !dup || (mtypes.Position{LedgerID: dl, EntryID: de}) != p {
		t.Fatalf("after reload: dup %v at %d:%d err %v, want a duplicate of %v", dup, dl, de, err, p)
	}
	// A failing cursor creation refuses the entry (the replicator retries), it is not stored unindexed.
	empty := newMemTopic("persistent://t/n/lazy-fail", 8)
	z, err := LoadIndex(ctx, empty, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	empty.openErr = errors.New("disk full")
	if _, _, _, c, err := z.Admit(data); err == nil || c != nil {
		t.Fatalf("admit without a cursor: commit %v err %v, want an error", c != nil, err)
	}
}

// TestSplitInbound: a remote's replicator producer on this topic is an inbound link. It fills the
// inbound fields of this cluster's outbound replicator to the same remote (as Pulsar's stats do) but
// never makes one up: a cluster that only receives from c has no "replication" entry for c.
func TestSplitInbound(t *testing.T) {
	repl := map[string]adminapi.ReplicatorStats{"b": {ReplicationBacklog: 3, Connected: true}}
	counted := map[string]adminapi.InboundReplicationStats{"c": {MsgInCounter: 9}}
	outbound, inbound := SplitInbound(repl, counted, []adminapi.PublisherStats{
		{ProducerName: "app-1", Address: "/127.0.0.1:1"},
		{ProducerName: "pulsar.repl.b-->a", Address: "/127.0.0.1:2", ConnectedSince: "2026-01-01T00:00:00Z", MsgRateIn: 5},
		{ProducerName: "pulsar.repl.c-->a", Address: "/127.0.0.1:3", MsgRateIn: 2, MsgThroughputIn: 2048},
	})
	if b := outbound["b"]; b.InboundConnection != "/127.0.0.1:2" || b.ReplicationBacklog != 3 || b.MsgRateIn != 5 || !b.Connected {
		t.Fatalf("b: %+v", b)
	}
	if _, ok := outbound["c"]; ok || len(outbound) != 1 {
		t.Fatalf("outbound %+v: c only sends to this cluster", outbound)
	}
	if c := inbound["c"]; c.Connection != "/127.0.0.1:3" || c.MsgRateIn != 2 || c.MsgThroughputIn != 2048 || c.ProducerName != "pulsar.repl.c-->a" || c.MsgInCounter != 9 {
		t.Fatalf("inbound c: %+v", c)
	}
	if b := inbound["b"]; b.Connection != "/127.0.0.1:2" || b.ConnectedSince != "2026-01-01T00:00:00Z" || len(inbound) != 2 {
		t.Fatalf("inbound %+v", inbound)
	}
	if o, i := SplitInbound(nil, nil, nil); o != nil || i != nil {
		t.Fatalf("no replication at all: %v %v", o, i)
	}
}

func FuzzIndexAdmit(f *testing.F) {
	f.Add(replicated(f, "a", mtypes.Position{LedgerID: 1, EntryID: 2}, "x"))
	f.Add(mkEntry(f, mtypes.Position{}, "plain", nil).Data)
	f.Add([]byte{0x0e, 0x01, 0, 0, 0, 0, 0, 0, 0, 1, 0x2a})
	f.Fuzz(func(t *testing.T, b []byte) {
		x := NewIndex(IndexOptions{})
		dup, _, _, commit, err := x.Admit(b)
		if err != nil || dup {
			return
		}
		if commit != nil {
			commit(1, 0, nil)
			if dup2, _, _, _, _ := x.Admit(b); !dup2 {
				t.Fatal("the same replicated entry admitted twice")
			}
		}
	})
}

// Entries of an origin's first second show as a rate at the first tick (the origin's window starts
// with a zero sample).
func TestIndexRateOfFirstSecond(t *testing.T) {
	now := time.Unix(1000, 0)
	x := NewIndex(IndexOptions{Now: func() time.Time { return now }})
	for i := range 10 {
		_, _, _, commit, err := x.Admit(replicated(t, "a", mtypes.Position{LedgerID: 5, EntryID: int64(i)}, "x"))
		if err != nil || commit == nil {
			t.Fatal(err)
		}
		commit(9, int64(i), nil)
	}
	now = now.Add(time.Second)
	x.Tick(now)
	in := x.Inbound()
	if len(in) != 1 || in[0].MsgRateIn != 10 || in[0].MsgThroughputIn <= 0 {
		t.Fatalf("inbound %+v", in)
	}
}

// Tickets: commits out of admission order, repeated and unknown tickets, the pending check for a
// position below the highest pending one (a resend while newer entries are being appended), and the
// inflight queue's reuse after it drains.
func TestIndexTicketsOutOfOrderAndPending(t *testing.T) {
	x := NewIndex(IndexOptions{})
	admit := func(origin string, pos mtypes.Position) uint64 {
		t.Helper()
		dup, _, _, ticket, err := x.AdmitTicket(replicated(t, origin, pos, "x"))
		if dup || ticket == 0 || err != nil {
			t.Fatalf("admit %s %s: dup=%v ticket=%d err=%v", origin, pos, dup, ticket, err)
		}
		return ticket
	}
	pending := func(origin string, pos mtypes.Position) {
		t.Helper()
		if _, _, _, ticket, err := x.AdmitTicket(replicated(t, origin, pos, "x")); !errors.Is(err, ErrIndexPending) || ticket != 0 {
			t.Fatalf("%s %s: want pending, got ticket %d err %v", origin, pos, ticket, err)
		}
	}
	t0 := admit("a", mtypes.Position{LedgerID: 1, EntryID: 0})
	t1 := admit("a", mtypes.Position{LedgerID: 1, EntryID: 1})
	t2 := admit("b", mtypes.Position{LedgerID: 7, EntryID: 0})
	t3 := admit("a", mtypes.Position{LedgerID: 1, EntryID: 2})
	pending("a", mtypes.Position{LedgerID: 1, EntryID: 1}) // below a's highest pending position: found by the scan
	pending("a", mtypes.Position{LedgerID: 1, EntryID: 2})
	pending("b", mtypes.Position{LedgerID: 7, EntryID: 0})
	x.Commit(t1, 5, 1, nil) // early: stays in the queue behind t0
	x.Commit(t1, 5, 9, nil) // repeated: ignored
	x.Commit(0, 5, 9, nil)  // not indexed: ignored
	x.Commit(t3+100, 5, 9, nil)
	if p, ok := x.Lookup(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 1, EntryID: 1}); !ok || p != (mtypes.Position{LedgerID: 5, EntryID: 1}) {
		t.Fatalf("lookup after early commit: %v %v", p, ok)
	}
	pending("a", mtypes.Position{LedgerID: 1, EntryID: 0})
	x.Commit(t0, 5, 0, nil)
	x.Commit(t3, 5, 3, nil)
	x.Commit(t2, 5, 2, nil)
	if x.adm.npending != 0 || len(x.adm.inflight) != 0 {
		t.Fatalf("drained: npending %d, inflight %d", x.adm.npending, len(x.adm.inflight))
	}
	for _, c := range []struct {
		origin   string
		pos, loc mtypes.Position
	}{{"a", mtypes.Position{LedgerID: 1, EntryID: 0}, mtypes.Position{LedgerID: 5, EntryID: 0}}, {"a", mtypes.Position{LedgerID: 1, EntryID: 2}, mtypes.Position{LedgerID: 5, EntryID: 3}}, {"b", mtypes.Position{LedgerID: 7, EntryID: 0}, mtypes.Position{LedgerID: 5, EntryID: 2}}} {
		dup, l, e, ticket, err := x.AdmitTicket(replicated(t, c.origin, c.pos, "x"))
		if !dup || (mtypes.Position{LedgerID: l, EntryID: e}) != c.loc || ticket != 0 || err != nil {
			t.Fatalf("%s %s: dup=%v at %d:%d ticket %d err %v, want dup at %s", c.origin, c.pos, dup, l, e, ticket, err, c.loc)
		}
	}
	// Tickets keep counting after the queue drained; an old ticket is ignored.
	t4 := admit("a", mtypes.Position{LedgerID: 1, EntryID: 3})
	if t4 <= t3 {
		t.Fatalf("ticket %d after %d", t4, t3)
	}
	x.Commit(t0, 6, 0, nil)
	x.Commit(t4, 5, 4, errors.New("fenced"))
	if _, _, _, _, err := x.AdmitTicket(replicated(t, "a", mtypes.Position{LedgerID: 1, EntryID: 4}, "x")); !errors.Is(err, ErrIndexOutOfOrder) {
		t.Fatalf("after a failed append: %v", err)
	}
	if _, ok := x.Lookup(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 1, EntryID: 3}); ok {
		t.Fatal("failed append recorded")
	}
	st := x.Inbound()
	if len(st) != 2 || st[0].MsgInCount != 3 || st[1].MsgInCount != 1 {
		t.Fatalf("inbound %+v", st)
	}
}

// A long run of admissions with commits lagging behind: the queue compacts and every entry is
// recorded exactly once.
func TestIndexTicketsLaggingCommits(t *testing.T) {
	x := NewIndex(IndexOptions{})
	var open []uint64
	const n = 2000
	for i := range n {
		dup, _, _, ticket, err := x.AdmitTicket(replicated(t, "a", mtypes.Position{LedgerID: 2, EntryID: int64(i)}, "x"))
		if dup || ticket == 0 || err != nil {
			t.Fatalf("admit %d: %v %d %v", i, dup, ticket, err)
		}
		open = append(open, ticket)
		if i%7 == 6 { // commit all but the newest three, the second oldest first
			k := len(open) - 3
			if k > 1 {
				open[0], open[1] = open[1], open[0]
			}
			for _, tk := range open[:k] {
				x.Commit(tk, 9, int64(tk), nil)
			}
			open = open[k:]
		}
		if live := len(x.adm.inflight) - x.adm.head; live > 10 || cap(x.adm.inflight) > 32 {
			t.Fatalf("inflight: %d live, capacity %d", live, cap(x.adm.inflight))
		}
	}
	for _, tk := range open {
		x.Commit(tk, 9, int64(tk), nil)
	}
	if x.adm.npending != 0 || len(x.adm.inflight) != 0 {
		t.Fatalf("drained: npending %d, inflight %d", x.adm.npending, len(x.adm.inflight))
	}
	if st := x.Inbound(); len(st) != 1 || st[0].MsgInCount != n {
		t.Fatalf("inbound %+v", st)
	}
	for i := range n {
		if !x.Contains(OriginKey{Cluster: "a"}, mtypes.Position{LedgerID: 2, EntryID: int64(i)}) {
			t.Fatalf("2:%d missing", i)
		}
	}
}

// Every loaded topic has an Index, most never admit anything (README budget: 2 KiB per idle
// topic): the admission queue is allocated on first use and the struct stays in its size class.
func TestIndexIdleSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes checked on 64-bit platforms")
	}
	if got := unsafe.Sizeof(Index{}); got > 176 {
		t.Fatalf("Index is %d bytes, more than the 176-byte size class", got)
	}
	if x := NewIndex(IndexOptions{}); x.adm != nil || x.clusters != nil {
		t.Fatal("an unused index allocates its admissions or origins")
	}
}

// AdmitOriginTicket, given the origin the server's scan collected, answers exactly as
// AdmitTicket scanning the entry itself: the same admission, duplicate or error, for replicated,
// plain and malformed metadata.
func FuzzIndexAdmitOrigin(f *testing.F) {
	for _, e := range [][]byte{
		replicated(f, "a", mtypes.Position{LedgerID: 1, EntryID: 2}, "x"),
		replicated(f, "east", mtypes.Position{LedgerID: 123456789, EntryID: 98765}, "payload"),
		mkEntry(f, mtypes.Position{}, "plain", nil).Data,
	} {
		parts, err := wire.ParseEntry(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(parts.Metadata)
	}
	bad, _ := proto.Marshal(&pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1),
		ReplicatedFrom: proto.String("a"), NumMessagesInBatch: proto.Int32(-3),
		Properties: []*pulsarpb.KeyValue{{Key: proto.String(SourcePositionProperty), Value: proto.String("12:x")}}})
	f.Add(bad)
	f.Fuzz(func(t *testing.T, metadata []byte) {
		entry := wire.AppendRawEntry(nil, metadata, []byte("body"))
		_, origin, ok, err := wire.ScanPublishMetadataOrigin(entry, "")
		if err != nil || !ok {
			return // the server refuses it, or the index scans it itself
		}
		x, y := NewIndex(IndexOptions{}), NewIndex(IndexOptions{})
		for round := 0; round < 2; round++ {
			dup1, l1, e1, t1, err1 := x.AdmitTicket(entry)
			dup2, l2, e2, t2, err2 := y.AdmitOriginTicket(entry, origin)
			if dup1 != dup2 || l1 != l2 || e1 != e2 || t1 != t2 || fmt.Sprint(err1) != fmt.Sprint(err2) {
				t.Fatalf("round %d: scan %v %d:%d %d %v; origin %v %d:%d %d %v", round, dup1, l1, e1, t1, err1, dup2, l2, e2, t2, err2)
			}
			if t1 != 0 {
				x.Commit(t1, 7, int64(round), nil)
				y.Commit(t2, 7, int64(round), nil)
			}
		}
		counts := func(ix *Index) string {
			var s string
			for _, st := range ix.Inbound() {
				s += fmt.Sprint(st.Origin, st.MsgInCount, st.BytesInCount, st.DuplicatesDropped, st.Runs, st.LastOrigin, ";")
			}
			return s
		}
		if counts(x) != counts(y) {
			t.Fatalf("inbound %s, %s", counts(x), counts(y))
		}
	})
}

// TestMaintainingIdleIndexesAllocatesLittle: the manager's per-second pass over every inbound index
// allocates a fixed amount, not per index, when no snapshot is due (ten thousand idle topics made
// ten thousand contexts and timers a second).
func TestMaintainingIdleIndexesAllocatesLittle(t *testing.T) {
	m := &Manager{opts: ManagerOptions{Local: "b"}, indexes: map[string]*Index{}}
	now := time.Now()
	for i := range 500 {
		x := NewIndex(IndexOptions{SnapshotInterval: time.Hour})
		x.Maintain(context.Background(), now) // the first save, then none is due for an hour
		m.indexes[fmt.Sprintf("persistent://t/n/idle-%d", i)] = x
	}
	allocs := testing.AllocsPerRun(20, func() { m.maintainIndexes(context.Background()) })
	if allocs > 100 {
		t.Fatalf("one pass over 500 idle indexes allocates %.0f times, want a fixed cost (< 100)", allocs)
	}
}
