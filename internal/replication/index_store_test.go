package replication

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
)

// interleave stores n replicated entries on topic through x, alternating origins a and b (every
// entry a run of its own), from origin entry *next onwards.
func interleave(t testing.TB, x *Index, topic *memTopic, next *[2]int64, n int) {
	t.Helper()
	for i := range n {
		o := i & 1
		pos := mtypes.Position{LedgerID: 100 + int64(o), EntryID: next[o]}
		next[o]++
		src := wire.ReplicatedOrigin{From: []byte{"ab"[o]}, HasFrom: true, Position: []byte(pos.String()), HasPosition: true}
		dup, _, _, ticket, err := x.AdmitOriginTicket(nil, src)
		if err != nil || dup || ticket == 0 {
			t.Fatalf("admit %c %v: dup %v ticket %d err %v", "ab"[o], pos, dup, ticket, err)
		}
		local := topic.append(nil, 1)
		x.Commit(ticket, local.LedgerID, local.EntryID, nil)
	}
}

func keyA() OriginKey { return OriginKey{Cluster: "a"} }
func keyB() OriginKey { return OriginKey{Cluster: "b"} }

// chunkCursors lists topic's chunk cursors.
func chunkCursors(topic *memTopic) []string {
	var out []string
	for _, n := range topic.CursorNames() {
		if strings.HasPrefix(n, chunkCursorPrefix) {
			out = append(out, n)
		}
	}
	return out
}

// sameMappings checks that y answers every origin position below next as x does.
func sameMappings(t *testing.T, x, y *Index, next [2]int64) {
	t.Helper()
	for o, key := range []OriginKey{keyA(), keyB()} {
		for e := int64(0); e < next[o]; e++ {
			pos := mtypes.Position{LedgerID: 100 + int64(o), EntryID: e}
			if !y.Contains(key, pos) {
				t.Fatalf("%v %v not stored after reload", key, pos)
			}
			l1, ok1 := x.Lookup(key, pos)
			l2, ok2 := y.Lookup(key, pos)
			if ok1 != ok2 || l1 != l2 {
				t.Fatalf("%v %v: before reload %v %v, after %v %v", key, pos, l1, ok1, l2, ok2)
			}
		}
	}
}

// TestIndexSnapshotV2RoundTrip: many saves of interleaved traffic seal and merge chunks; a reload
// answers every position as the index did, the chunk cursors stay few, and none is left unlisted.
func TestIndexSnapshotV2RoundTrip(t *testing.T) {
	ctx := context.Background()
	topic := newMemTopic("persistent://t/n/v2", 3)
	opts := IndexOptions{SnapshotInterval: time.Hour, SealBytes: 512, MaxRuns: 8192, Logger: quietLogger()}
	x, err := LoadIndex(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	var next [2]int64
	maxChunks := 0
	for range 200 {
		interleave(t, x, topic, &next, 300)
		if err := x.Save(ctx); err != nil {
			t.Fatal(err)
		}
		maxChunks = max(maxChunks, len(chunkCursors(topic)))
	}
	if got := topic.cursors[IndexCursorName].Properties()[propVersion]; got != "2" {
		t.Fatalf("snapshot version %q, want 2", got)
	}
	if maxChunks == 0 || maxChunks > 2*maxChunksPerKey {
		t.Fatalf("at most %d chunk cursors over the run, want some and at most %d", maxChunks, 2*maxChunksPerKey)
	}
	in := x.Inbound()
	if in[0].Runs > 8192+runBlockSize || in[0].Runs < 8192 {
		t.Fatalf("runs kept in memory %d, want MaxRuns to MaxRuns plus a block", in[0].Runs)
	}
	y, err := LoadIndex(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	sameMappings(t, x, y, next)
	if _, ok := y.Lookup(keyA(), mtypes.Position{LedgerID: 100, EntryID: 0}); ok {
		t.Fatal("the oldest mapping should have been folded into the floor")
	}
	if _, ok := y.Lookup(keyA(), mtypes.Position{LedgerID: 100, EntryID: next[0] - 1}); !ok {
		t.Fatal("the newest mapping is missing")
	}
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := y.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Every chunk cursor is listed by the head.
	listed := map[string]bool{}
	h, err := decodeHead(topic.cursors[IndexCursorName].Properties(), func(int, run) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range h.keys {
		for _, c := range k.chunks {
			listed[ChunkCursorName(c.id)] = true
		}
	}
	for _, n := range chunkCursors(topic) {
		if !listed[n] {
			t.Fatalf("chunk cursor %s is not listed by the head", n)
		}
	}
}

// TestIndexLoadsVersion1Snapshot: a snapshot written in format version 1 (testdata, written by the
// version 1 encoder) loads under incarnation 0, and the next save writes it as version 2.
func TestIndexLoadsVersion1Snapshot(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile("testdata/index-snapshot-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var props map[string]string
	if err := json.Unmarshal(raw, &props); err != nil {
		t.Fatal(err)
	}
	topic := newMemTopic("persistent://t/n/v1", 41)
	for range 60 { // the log the snapshot covers (41:0..59)
		topic.append(mkEntry(t, mtypes.Position{}, "local", nil).Data, 1)
	}
	cur, _, _ := topic.OpenCursor(ctx, IndexCursorName, mtypes.Earliest)
	_ = cur.SetProperties(ctx, props)
	check := func(x *Index) {
		t.Helper()
		for e := int64(0); e < 20; e++ {
			if !x.Contains(keyA(), mtypes.Position{LedgerID: 6, EntryID: e}) {
				t.Fatalf("a 6:%d missing", e)
			}
		}
		want := map[mtypes.Position]mtypes.Position{{LedgerID: 6, EntryID: 14}: {LedgerID: 40, EntryID: 28}, {LedgerID: 6, EntryID: 19}: {LedgerID: 40, EntryID: 38}, {LedgerID: 7, EntryID: 0}: {LedgerID: 40, EntryID: 40}, {LedgerID: 7, EntryID: 119}: {LedgerID: 40, EntryID: 159}}
		for o, l := range want {
			if got, ok := x.Lookup(keyA(), o); !ok || got != l {
				t.Fatalf("a %v -> %v %v, want %v", o, got, ok, l)
			}
		}
		if _, ok := x.Lookup(keyA(), mtypes.Position{LedgerID: 6, EntryID: 13}); ok {
			t.Fatal("a 6:13 is below the floor: stored, not mapped")
		}
		if got, ok := x.Lookup(keyB(), mtypes.Position{LedgerID: 3, EntryID: 26}); !ok || got != (mtypes.Position{LedgerID: 41, EntryID: 13}) {
			t.Fatalf("b 3:26 -> %v %v", got, ok)
		}
		if !x.Contains(keyB(), mtypes.Position{LedgerID: 3, EntryID: 24}) || x.Contains(keyB(), mtypes.Position{LedgerID: 3, EntryID: 27}) || x.Contains(keyB(), mtypes.Position{LedgerID: 3, EntryID: 40}) {
			t.Fatal("b: floor 3:24 and runs 3:26, 3:28, ... up to 3:38")
		}
		if x.Contains(OriginKey{Cluster: "a", Incarnation: 7}, mtypes.Position{LedgerID: 6, EntryID: 0}) {
			t.Fatal("a version 1 snapshot belongs to incarnation 0")
		}
	}
	x, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	check(x)
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if v := cur.Properties()[propVersion]; v != "2" {
		t.Fatalf("after a save the snapshot is version %q, want 2", v)
	}
	y, err := LoadIndex(ctx, topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close(ctx)
	check(y)
}

// TestIndexSnapshotSurvivesFailedWrites: a save whose head write fails leaves the head it
// replaced (or the new one) complete, keeps the chunks either lists, and the chunk cursors left
// over are deleted by a later save or the next load.
func TestIndexSnapshotSurvivesFailedWrites(t *testing.T) {
	ctx := context.Background()
	topic := newMemTopic("persistent://t/n/fail", 5)
	opts := IndexOptions{SnapshotInterval: time.Hour, SealBytes: 256, Logger: quietLogger()}
	x, err := LoadIndex(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	var next [2]int64
	for round := range 40 {
		interleave(t, x, topic, &next, 200)
		head := topic.cursors[IndexCursorName]
		fail := round%3 == 1
		if head != nil && fail {
			head.err = errors.New("disk on fire") // Flush and MarkDelete fail; SetProperties still lands
		}
		err := x.Save(ctx)
		if head != nil {
			head.err = nil
		}
		if fail && head != nil && err == nil {
			t.Fatalf("round %d: save with a failing head reported success", round)
		}
		// Whatever the head cursor holds now must load completely (a crash at this point).
		y, err := LoadIndex(ctx, topic, opts)
		if err != nil {
			t.Fatal(err)
		}
		sameMappings(t, x, y, next)
		y.mu.Lock()
		y.closed = true // not saved: x goes on as the topic's index
		y.mu.Unlock()
	}
	if err := x.Save(ctx); err != nil {
		t.Fatal(err)
	}
	// A chunk cursor nothing lists (a crash between writing it and the head) goes at load.
	orphan, _, _ := topic.OpenCursor(ctx, ChunkCursorName(1<<40), mtypes.Latest)
	_ = orphan.SetProperties(ctx, map[string]string{propChunk: "junk"})
	y, err := LoadIndex(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(topic.CursorNames(), ChunkCursorName(1<<40)) {
		t.Fatal("orphan chunk cursor not removed at load")
	}
	sameMappings(t, x, y, next)
	// Chunk cursors of a topic without a head cursor go too.
	headless := newMemTopic("persistent://t/n/headless", 5)
	stray, _, _ := headless.OpenCursor(ctx, ChunkCursorName(3), mtypes.Latest)
	_ = stray.SetProperties(ctx, map[string]string{propChunk: "junk"})
	if z, err := LoadIndex(ctx, headless, opts); err != nil || len(headless.CursorNames()) != 0 {
		t.Fatalf("headless topic: %v, cursors %v", err, headless.CursorNames())
	} else {
		_ = z.Close(ctx)
	}
	// The next chunk id is past the orphan's.
	interleave(t, y, topic, &next, 2000)
	if err := y.Save(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range chunkCursors(topic) {
		if id, _ := chunkIDOf(n); id < 1<<40 && id >= y.store.nextChunkID {
			t.Fatalf("chunk %s at or past the next id %d", n, y.store.nextChunkID)
		}
	}
	_ = x.Close(ctx)
	_ = y.Close(ctx)
}

// TestIndexDamagedChunkRebuildsFromTheLog: a chunk that is missing or unreadable makes the load
// rebuild from the log (never a wrong answer), and the stale chunk cursors go.
func TestIndexDamagedChunkRebuildsFromTheLog(t *testing.T) {
	ctx := context.Background()
	topic := newMemTopic("persistent://t/n/damaged", 5)
	opts := IndexOptions{SnapshotInterval: time.Hour, SealBytes: 256, Logger: quietLogger()}
	x, err := LoadIndex(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	var next [2]int64
	// Entries as the replicator sends them, so that the rebuild finds them in the log.
	for i := range 600 {
		o := i & 1
		data := replicated(t, string("ab"[o]), mtypes.Position{LedgerID: 100 + int64(o), EntryID: next[o]}, "x")
		next[o]++
		_, _, _, c, err := x.Admit(data)
		if err != nil || c == nil {
			t.Fatal(err)
		}
		p := topic.append(data, 1)
		c(p.LedgerID, p.EntryID, nil)
		if i%100 == 99 {
			if err := x.Save(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	chunks := chunkCursors(topic)
	if len(chunks) == 0 {
		t.Fatal("no chunk written")
	}
	for _, damage := range []func(){
		func() { _ = topic.cursors[chunks[0]].SetProperties(ctx, map[string]string{propChunk: "AAAA"}) },
		func() { _ = topic.DeleteCursor(ctx, chunks[0]) },
	} {
		damage()
		y, err := LoadIndex(ctx, topic, opts)
		if err != nil {
			t.Fatal(err)
		}
		sameMappings(t, x, y, next)
		if slices.Contains(topic.CursorNames(), chunks[0]) {
			t.Fatal("damaged chunk kept")
		}
		if err := y.Close(ctx); err != nil { // writes a complete snapshot again
			t.Fatal(err)
		}
		chunks = chunkCursors(topic)
	}
	_ = x.Close(ctx)
}

// TestIndexPinsKeepMappings: a pinned origin position keeps its mapping beyond MaxRuns, up to
// MaxPinnedRuns; beyond it the mapping goes (counted), and Unpin lets the index fold again.
func TestIndexPinsKeepMappings(t *testing.T) {
	topic := newMemTopic("persistent://t/n/pins", 5)
	x := NewIndex(IndexOptions{MaxRuns: 2048, MaxPinnedRuns: 8192, Logger: quietLogger()})
	var next [2]int64
	interleave(t, x, topic, &next, 100)
	pinned := mtypes.Position{LedgerID: 100, EntryID: 10}
	x.Pin("sub-1", keyA(), pinned)
	interleave(t, x, topic, &next, 2*6000) // 6,000 runs of a: beyond MaxRuns, below MaxPinnedRuns
	if _, ok := x.Lookup(keyA(), pinned); !ok {
		t.Fatal("pinned mapping forgotten below the hard bound")
	}
	if _, ok := x.Lookup(keyB(), mtypes.Position{LedgerID: 101, EntryID: 10}); ok {
		t.Fatal("unpinned origin b kept beyond MaxRuns")
	}
	interleave(t, x, topic, &next, 2*4000) // a: 10,100 runs, beyond the hard bound
	if _, ok := x.Lookup(keyA(), pinned); ok {
		t.Fatal("pinned mapping kept beyond MaxPinnedRuns")
	}
	in := x.Inbound()
	if in[0].Runs > 8192 || in[0].PinnedRunsDropped == 0 {
		t.Fatalf("a: %d runs, %d pinned runs dropped", in[0].Runs, in[0].PinnedRunsDropped)
	}
	if !x.Contains(keyA(), pinned) {
		t.Fatal("a folded position must still count as stored")
	}
	x.Pin("sub-1", keyA(), mtypes.Position{LedgerID: 100, EntryID: next[0] - 10})
	x.Unpin("sub-1", keyA())
	if in := x.Inbound(); in[0].Runs > 2048+runBlockSize {
		t.Fatalf("after Unpin a keeps %d runs, want at most MaxRuns plus a block", in[0].Runs)
	}
}

// runPtr returns the address of the run that maps origin position pos of key.
func runPtr(x *Index, key OriginKey, pos mtypes.Position) *run {
	o := x.existing(key)
	for _, b := range o.runs.blocks {
		for i := range b {
			if b[i].origin == pos {
				return &b[i]
			}
		}
	}
	return nil
}

// TestIndexRecordAtMemoryBoundMovesNoRuns: once an origin holds MaxRuns runs, recording another
// entry forgets old runs without moving the others (moving them would cost 40 MB per entry at the
// default bound, on the storage's completion path), and memory stays bounded.
func TestIndexRecordAtMemoryBoundMovesNoRuns(t *testing.T) {
	topic := newMemTopic("persistent://t/n/bound", 5)
	const maxRuns = 4096
	x := NewIndex(IndexOptions{MaxRuns: maxRuns, Logger: quietLogger()})
	var next [2]int64
	interleave(t, x, topic, &next, 2*3*maxRuns) // 3x the bound for each origin
	watched := mtypes.Position{LedgerID: 100, EntryID: next[0] - 1}
	p := runPtr(x, keyA(), watched)
	if p == nil {
		t.Fatal("newest run not found")
	}
	for range 2 * runBlockSize / 2 {
		interleave(t, x, topic, &next, 2)
		if p.origin != watched {
			t.Fatalf("the run of %v moved in memory (now %v there) while recording one entry", watched, p.origin)
		}
	}
	for _, in := range x.Inbound() {
		if in.Runs > maxRuns+runBlockSize {
			t.Fatalf("%s keeps %d runs, bound %d", in.Origin, in.Runs, maxRuns+runBlockSize)
		}
	}
	for e := int64(0); e < next[0]; e++ {
		if !x.Contains(keyA(), mtypes.Position{LedgerID: 100, EntryID: e}) {
			t.Fatalf("a 100:%d forgotten", e)
		}
	}
}

// FuzzDecodeSnapshot: hostile snapshot properties are refused or loaded, never a panic or an
// unbounded allocation.
func FuzzDecodeSnapshot(f *testing.F) {
	topic := newMemTopic("persistent://t/n/fuzz", 5)
	x := NewIndex(IndexOptions{SealBytes: 64})
	x.topic = topic
	var next [2]int64
	interleave(f, x, topic, &next, 100)
	if err := x.Save(context.Background()); err != nil {
		f.Fatal(err)
	}
	head := topic.cursors[IndexCursorName].Properties()
	f.Add(head[propHead], "")
	for _, n := range chunkCursors(topic) {
		f.Add(head[propHead], topic.cursors[n].Properties()[propChunk])
	}
	f.Fuzz(func(t *testing.T, headData, chunkData string) {
		tails := 0
		h, err := decodeHead(map[string]string{propScanFrom: "5:0", propHead: headData}, func(int, run) { tails++ })
		if err != nil {
			return
		}
		for _, k := range h.keys {
			for _, c := range k.chunks {
				_ = decodeChunk(map[string]string{propChunk: chunkData}, k.key, c, func(run) {})
			}
		}
		_, _, _ = decodeV1(map[string]string{propScanFrom: "1:0", propDataV1: headData})
	})
}

// TestIndexChunksStayWithinSizeBound: however many runs one save seals (here a tail of 600,000
// runs per origin, 3 MB encoded), no chunk exceeds maxChunkBytes, so its properties stay far below
// what storage accepts for a cursor; the snapshot still loads whole.
func TestIndexChunksStayWithinSizeBound(t *testing.T) {
	if testing.Short() {
		t.Skip("records 1.2 M entries")
	}
	ctx := context.Background()
	topic := newMemTopic("persistent://t/n/big", 5)
	opts := IndexOptions{SnapshotInterval: time.Hour, MaxRuns: 700_000, MaxPinnedRuns: 800_000, Logger: quietLogger()}
	x, err := LoadIndex(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	var next [2]int64
	interleave(t, x, topic, &next, 1_200_000)
	if err := x.Save(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := decodeHead(topic.cursors[IndexCursorName].Properties(), func(int, run) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range h.keys {
		if len(k.chunks) < 2 {
			t.Fatalf("%v: %d chunks, want the tail split", k.key, len(k.chunks))
		}
		for _, c := range k.chunks {
			if c.size > maxChunkBytes+64 {
				t.Fatalf("%v chunk %d: %d bytes encoded, bound %d", k.key, c.id, c.size, maxChunkBytes)
			}
			n := 0
			for key, v := range topic.cursors[ChunkCursorName(c.id)].Properties() {
				n += len(key) + len(v)
			}
			if n > 4<<20 {
				t.Fatalf("chunk %d: %d bytes of properties", c.id, n)
			}
		}
	}
	y, err := LoadIndex(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	for o, key := range []OriginKey{keyA(), keyB()} {
		for _, e := range []int64{0, next[o] / 2, next[o] - 1} {
			if l1, ok := x.Lookup(key, mtypes.Position{LedgerID: 100 + int64(o), EntryID: e}); !ok {
				t.Fatalf("%v %d not mapped", key, e)
			} else if l2, ok := y.Lookup(key, mtypes.Position{LedgerID: 100 + int64(o), EntryID: e}); !ok || l1 != l2 {
				t.Fatalf("%v %d: %v before the reload, %v %v after", key, e, l1, l2, ok)
			}
		}
	}
	_ = x.Close(ctx)
	_ = y.Close(ctx)
}

// FuzzDecodeOrigins: hostile version 1 snapshot data is refused or loaded, never a panic.
func FuzzDecodeOrigins(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		origins, err := decodeOriginsV1(b)
		if err != nil {
			return
		}
		x := NewIndex(IndexOptions{})
		for _, v := range origins {
			o := x.originOf([]byte(v.name), 0)
			o.floor = v.floor
			for _, r := range v.runs {
				x.loadRun(o, r)
			}
			x.Contains(OriginKey{Cluster: v.name}, mtypes.Position{LedgerID: 0, EntryID: 0})
		}
	})
}
