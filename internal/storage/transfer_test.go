package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// ledgerCopy is an exported ledger as the coordinator moves it: the export and every entry of its
// segments, read with Ledger.Read.
type ledgerCopy struct {
	exp     LedgerExport
	entries map[int64][]mtypes.Entry // by segment id
}

// exportLedger exports l and reads the entries of its exported segments.
func exportLedger(t *testing.T, l *Ledger) ledgerCopy {
	t.Helper()
	ctx := context.Background()
	exp, err := l.Export(ctx)
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	c := ledgerCopy{exp: exp, entries: map[int64][]mtypes.Entry{}}
	for _, s := range exp.Segments {
		es, err := l.Read(ctx, mtypes.Position{LedgerID: s.ID, EntryID: 0}, int(s.Entries), 0)
		if err != nil {
			t.Fatalf("read segment %d: %v", s.ID, err)
		}
		if int64(len(es)) != s.Entries {
			t.Fatalf("segment %d: read %d entries, export says %d", s.ID, len(es), s.Entries)
		}
		for i, en := range es {
			if en.Position != (mtypes.Position{LedgerID: s.ID, EntryID: int64(i)}) {
				t.Fatalf("segment %d: entry %d at %v", s.ID, i, en.Position)
			}
		}
		c.entries[s.ID] = es
	}
	return c
}

// importLedgerCopy writes c into e as ledger name and commits it.
func importLedgerCopy(e *Engine, name string, c ledgerCopy) error {
	ctx := context.Background()
	im, err := e.ImportLedger(ctx, name)
	if err != nil {
		return err
	}
	for _, s := range c.exp.Segments {
		if err := im.StartSegment(s.ID, s.Incarnation); err != nil {
			im.Abort()
			return err
		}
		for _, en := range c.entries[s.ID] {
			if err := im.Append(ctx, en.Data, en.PublishTime); err != nil {
				im.Abort()
				return err
			}
		}
	}
	if err := im.SetCursors(c.exp.Cursors); err != nil {
		im.Abort()
		return err
	}
	return im.Commit(ctx)
}

// decodedCursors decodes cursor-state records, by cursor name.
func decodedCursors(t *testing.T, recs [][]byte) map[string]*cursorState {
	t.Helper()
	out := map[string]*cursorState{}
	for _, r := range recs {
		st, err := decodeCursorState(r[1:])
		if err != nil {
			t.Fatalf("cursor record: %v", err)
		}
		out[st.name] = st
	}
	return out
}

// checkLedgerHolds checks that l holds exactly the segments, entries, publish times,
// incarnations and durable cursor states of c (and possibly newer, empty segments).
func checkLedgerHolds(t *testing.T, l *Ledger, c ledgerCopy) {
	t.Helper()
	ctx := context.Background()
	if err := l.Err(); err != nil {
		t.Fatalf("ledger fenced: %v", err)
	}
	var got []ExportedSegment
	for _, s := range l.Segments() {
		if s.Entries > 0 {
			got = append(got, ExportedSegment{ID: s.ID, Incarnation: l.IncarnationOf(s.ID), Entries: s.Entries, Bytes: s.Bytes})
		}
	}
	if !reflect.DeepEqual(got, c.exp.Segments) {
		t.Fatalf("segments:\n got  %+v\n want %+v", got, c.exp.Segments)
	}
	es, err := l.Read(ctx, mtypes.Earliest, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []mtypes.Entry
	for _, s := range c.exp.Segments {
		want = append(want, c.entries[s.ID]...)
	}
	if len(es) != len(want) {
		t.Fatalf("read %d entries, want %d", len(es), len(want))
	}
	for i := range es {
		g, w := es[i], want[i]
		if g.Position != w.Position || g.PublishTime != w.PublishTime || !bytes.Equal(g.Data, w.Data) || g.Incarnation != w.Incarnation {
			t.Fatalf("entry %d: got %v t=%d inc=%x %q, want %v t=%d inc=%x %q", i, g.Position, g.PublishTime, g.Incarnation, g.Data,
				w.Position, w.PublishTime, w.Incarnation, w.Data)
		}
	}
	gotCursors := decodedCursors(t, l.liveCursorRecords())
	wantCursors := decodedCursors(t, c.exp.Cursors)
	if !reflect.DeepEqual(gotCursors, wantCursors) {
		t.Fatalf("cursors:\n got  %s\n want %s", describeCursors(gotCursors), describeCursors(wantCursors))
	}
	for name := range wantCursors {
		if c := l.Cursor(name); c == nil || !c.Durable() {
			t.Fatalf("cursor %q missing or not durable", name)
		}
	}
}

func describeCursors(m map[string]*cursorState) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		st := m[n]
		fmt.Fprintf(&b, "[%s md=%v acked=%v batches=%d props=%v] ", n, st.markDelete, st.acked, len(st.batches), st.props)
	}
	return b.String()
}

// buildTransferSource makes ledger name on e: four segments (the first trimmed once every durable
// cursor consumed it), durable cursors with a mark-delete position, individual and batch
// acknowledgements and properties, and a non-durable cursor.
func buildTransferSource(t *testing.T, e *Engine, name string) *Ledger {
	t.Helper()
	ctx := context.Background()
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// Durable cursors exist before the rolls: a roll trims what no durable cursor needs.
	sub := openCursorT(t, l, "sub")
	repl := openCursorT(t, l, "pulsar.repl.west")
	var segs [][]mtypes.Position
	for s := 0; s < 4; s++ {
		var ps []mtypes.Position
		for i := 0; i < 10; i++ {
			p, err := l.Append(ctx, payload(100*s+i), int64(1_000_000+100*s+i))
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		segs = append(segs, ps)
		if s < 3 {
			if err := l.Roll(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := sub.MarkDelete(ctx, segs[0][9]); err != nil {
		t.Fatal(err)
	}
	if err := sub.Delete(ctx, segs[1][3], segs[1][5], segs[1][6]); err != nil {
		t.Fatal(err)
	}
	if err := sub.AckBatchIndexes(ctx, segs[1][8], 10, []int{1, 2, 7}); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetProperties(ctx, map[string]string{"dedup": "producer-1:41", "epoch": "3"}); err != nil {
		t.Fatal(err)
	}
	if err := repl.MarkDelete(ctx, segs[2][4]); err != nil {
		t.Fatal(err)
	}
	if err := repl.SetProperties(ctx, map[string]string{"replicator": "west"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenCursor(ctx, "reader-nd", CursorOptions{Initial: mtypes.Earliest}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Cursor{sub, repl} {
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	if first := l.FirstPosition(); first.LedgerID != segs[1][0].LedgerID {
		t.Fatalf("the head segment was not trimmed: first position %v", first)
	}
	return l
}

// TestLedgerTransferRoundTrip exports a ledger with a trimmed head segment and cursors of every
// kind from engine A and imports it into engine B, whose own ledger ids are below A's: B's
// ledger has the same segments, positions, entries, publish times, incarnations and cursor
// states, before and after B restarts, and B's next segments are above every imported id.
func TestLedgerTransferRoundTrip(t *testing.T) {
	ctx := context.Background()
	const aBase = int64(1) << 50 // above every id B draws (firstLedgerIDMax)
	modA := func(o *Options) {
		o.LedgerIDBlock = func(floor, size int64) (int64, error) { return max(floor, aBase), nil }
		o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour
	}
	var floorsMu sync.Mutex
	var bFloors []int64
	modB := func(o *Options) {
		o.LedgerIDBlock = func(floor, size int64) (int64, error) {
			floorsMu.Lock()
			bFloors = append(bFloors, floor)
			floorsMu.Unlock()
			return floor, nil
		}
		o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour
	}
	memA, memB := vfs.NewMem(), vfs.NewMem()
	a := openMem(t, memA, modA)
	defer a.Close()
	const name = "persistent://tenant/ns/moving-topic"
	src := buildTransferSource(t, a, name)
	c := exportLedger(t, src)
	if len(c.exp.Segments) != 3 {
		t.Fatalf("exported %d segments, want 3 (4 made, the first trimmed, the current one sealed)", len(c.exp.Segments))
	}
	if names := decodedCursors(t, c.exp.Cursors); len(names) != 2 || names["sub"] == nil || names["pulsar.repl.west"] == nil {
		t.Fatalf("exported cursors %s, want the two durable ones", describeCursors(names))
	}
	for _, s := range c.exp.Segments {
		if s.Incarnation != a.Incarnation() {
			t.Fatalf("segment %d exported with incarnation %x, want A's %x", s.ID, s.Incarnation, a.Incarnation())
		}
	}
	// An append after the export goes to a new segment, not to an exported one.
	after, err := src.Append(ctx, []byte("after export"), 1)
	if err != nil {
		t.Fatal(err)
	}
	maxImported := c.exp.Segments[len(c.exp.Segments)-1].ID
	if after.LedgerID <= maxImported {
		t.Fatalf("append after the export went to %v, into the exported segments", after)
	}

	b := openMem(t, memB, modB)
	own, err := b.OpenLedger(ctx, "b-own-topic")
	if err != nil {
		t.Fatal(err)
	}
	if own.LastConfirmed().LedgerID >= c.exp.Segments[0].ID {
		t.Fatalf("B's ids (%d) are not below A's (%d): the test would prove nothing", own.LastConfirmed().LedgerID, c.exp.Segments[0].ID)
	}
	if err := importLedgerCopy(b, name, c); err != nil {
		t.Fatalf("import: %v", err)
	}
	floorsMu.Lock()
	raised := len(bFloors) > 0 && bFloors[len(bFloors)-1] == maxImported+1
	floorsMu.Unlock()
	if !raised {
		t.Fatalf("B did not draw a ledger id block from %d; floors %v", maxImported+1, bFloors)
	}
	dst, err := b.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	checkLedgerHolds(t, dst, c)
	if dst.Cursor("reader-nd") != nil {
		t.Fatal("a non-durable cursor was imported")
	}
	checkAppendsAbove(t, dst, maxImported)

	// B restarts: the import, the raised id limit and the incarnations are on disk.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openMem(t, memB, modB)
	defer b.Close()
	dst, err = b.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	c.exp.Segments = append(c.exp.Segments, ExportedSegment{}) // the segment appended to above
	got := dst.Segments()
	appended := got[len(got)-2]
	c.exp.Segments[len(c.exp.Segments)-1] = ExportedSegment{ID: appended.ID, Incarnation: dst.IncarnationOf(appended.ID), Entries: appended.Entries, Bytes: appended.Bytes}
	es, err := dst.Read(ctx, mtypes.Position{LedgerID: appended.ID, EntryID: 0}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.entries[appended.ID] = es
	checkLedgerHolds(t, dst, c)
	checkAppendsAbove(t, dst, appended.ID)
}

// checkAppendsAbove appends to l and checks the new position is in a segment above id.
func checkAppendsAbove(t *testing.T, l *Ledger, id int64) {
	t.Helper()
	p, err := l.Append(context.Background(), []byte("appended after the import"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if p.LedgerID <= id || p.EntryID != 0 {
		t.Fatalf("append after the import at %v, want entry 0 of a segment above %d", p, id)
	}
	if inc := l.IncarnationOf(p.LedgerID); inc != l.e.Incarnation() {
		t.Fatalf("new segment %d has incarnation %x, want this engine's %x", p.LedgerID, inc, l.e.Incarnation())
	}
}

// TestExportOfAFencedLedgerFails: a ledger whose Err is set (fenced at run time, or by recovery's
// FENCED marker) is not exported.
func TestExportOfAFencedLedgerFails(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	l, err := e.OpenLedger(ctx, "fenced-at-run-time")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3)
	l.fence(errors.New("injected"))
	if _, err := l.Export(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("export of a fenced ledger: %v, want ErrFenced", err)
	}
	m, err := e.OpenLedger(ctx, "fenced-by-recovery")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, m, 3)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := writeFileDurably(mem, m.dirPath()+"/FENCED", []byte("test\n")); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	m, err = e.OpenLedger(ctx, "fenced-by-recovery")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Export(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("export of a ledger recovery fenced: %v, want ErrFenced", err)
	}
	if err := m.Close(); err != nil && !errors.Is(err, ErrFenced) {
		t.Fatal(err)
	}
	if _, err := m.Export(ctx); err == nil {
		t.Fatal("export of a closed ledger succeeded")
	}
}

// TestImportOfAHashedName: a ledger whose name is too long for a plain directory name is imported
// with its NAME file, and loads after a restart.
func TestImportOfAHashedName(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	name := "persistent://tenant/ns/" + strings.Repeat("long-topic-name/", 20)
	if _, hashed := dirName(name); !hashed {
		t.Fatal("the name is not hashed: the test would prove nothing")
	}
	c := madeUpCopy()
	if err := importLedgerCopy(e, name, c); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	names, err := e.ListLedgers(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != name {
		t.Fatalf("ListLedgers = %q", names)
	}
	checkLedgerHolds(t, openUnfenced(t, e, name), c)
}
