package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// madeUpCopy is a ledger copy as another engine would export it: three segments of other
// incarnations with ids far above this engine's (the import must raise its counter), one of them
// large enough for an index file, and two cursors.
func madeUpCopy() ledgerCopy {
	const base = int64(1) << 50
	c := ledgerCopy{entries: map[int64][]mtypes.Entry{}}
	for i, seg := range []struct {
		id      int64
		inc     uint64
		n, size int
	}{{base + 1, 0x11, 7, 100}, {base + 5, 0x22, 40, 30 << 10}, {base + 9, 0x33, 3, 10}} {
		s := ExportedSegment{ID: seg.id, Incarnation: seg.inc, Entries: int64(seg.n)}
		for j := 0; j < seg.n; j++ {
			data := []byte(fmt.Sprintf("seg%d-entry%d-%s", i, j, strings.Repeat("d", seg.size)))
			c.entries[seg.id] = append(c.entries[seg.id], mtypes.Entry{Position: mtypes.Position{LedgerID: seg.id, EntryID: int64(j)},
				PublishTime: int64(5000 + 10*i + j), Data: data, Incarnation: seg.inc})
			s.Bytes += int64(len(data))
		}
		c.exp.Segments = append(c.exp.Segments, s)
	}
	sub := &cursorState{name: "sub", markDelete: mtypes.Position{LedgerID: base + 1, EntryID: 6}, props: map[string]string{"k": "v"}}
	sub.ack(mtypes.Position{LedgerID: base + 5, EntryID: 2})
	sub.ack(mtypes.Position{LedgerID: base + 5, EntryID: 3})
	if _, err := sub.ackBatch(mtypes.Position{LedgerID: base + 5, EntryID: 7}, 5, []int{0, 4}); err != nil {
		panic(err)
	}
	repl := &cursorState{name: "pulsar.repl.east", markDelete: mtypes.Position{LedgerID: base + 9, EntryID: 0}}
	c.exp.Cursors = [][]byte{encodeCursorState([]byte{cState}, sub), encodeCursorState([]byte{cState}, repl)}
	return c
}

// deathInjector fails every file-system operation once the k-th one under the watched paths has
// been reached: the process died there.
type deathInjector struct {
	mu    sync.Mutex
	k     int
	n     int
	dead  bool
	watch func(name string) bool
}

func (d *deathInjector) inject(op vfs.Op, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.dead && d.watch(name) {
		d.n++
		d.dead = d.n >= d.k
	}
	if d.dead {
		return vfs.EIO
	}
	return nil
}

func (d *deathInjector) died() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dead
}

// TestImportCrashAtEveryStep crashes the engine at every file-system operation of an import (its
// staging writes, the state file, the rename and the directory fsync that commit it; with an
// earlier ledger of that name deleted, also the journal rotation and the checkpoint Commit waits
// for), keeping random parts of what was not fsynced: after a restart there is either no ledger of
// that name (the import had not committed) or all of it (Commit returned, or its rename was
// durable), and no staging directory is left. The same for ImportLedgerReplacing of a name
// without a ledger: it is an import like any other.
func TestImportCrashAtEveryStep(t *testing.T) {
	for _, tc := range []struct {
		name          string
		deletedBefore bool
		watch         func(string) bool
	}{
		{"fresh name", false, func(n string) bool { return strings.Contains(n, "/ledgers/") || strings.Contains(n, stateFile) }},
		{"deleted before", true, func(n string) bool { return strings.HasPrefix(n, "/data") }},
	} {
		t.Run(tc.name, func(t *testing.T) { runImportCrashSteps(t, tc.deletedBefore, false, tc.watch) })
		t.Run(tc.name+", replacing import", func(t *testing.T) { runImportCrashSteps(t, tc.deletedBefore, true, tc.watch) })
	}
}

func runImportCrashSteps(t *testing.T, deletedBefore, replacing bool, watch func(string) bool) {
	ctx := context.Background()
	c := madeUpCopy()
	const name = "persistent://t/ns/crash-import"
	mod := func(o *Options) { o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour }
	steps := 0
	for k := 1; ; k++ {
		mem := vfs.NewMem()
		e := openMem(t, mem, mod)
		if deletedBefore {
			old, err := e.OpenLedger(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			openCursorT(t, old, "sub")
			appendN(t, old, 3)
			if err := e.DeleteLedger(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
		d := &deathInjector{k: k, watch: watch}
		mem.SetInjector(d.inject)
		var err error
		if replacing {
			err = replaceLedger(e, name, nil, c)
		} else {
			err = importLedgerCopy(e, name, c)
		}
		died := d.died() // (possibly in a background goroutine after the import's last operation)
		crashed := mem.Crash(rand.New(rand.NewPCG(uint64(k), 7)))
		_ = e.Close()
		if err != nil && !died {
			t.Fatalf("step %d: import failed without an injected failure: %v", k, err)
		}
		e = openMem(t, crashed, mod)
		des, lerr := crashed.ReadDir("/data/ledgers")
		if lerr != nil {
			t.Fatal(lerr)
		}
		for _, de := range des {
			if strings.HasPrefix(de.Name, stagingPrefix) {
				t.Fatalf("step %d: staging directory %s left after Open", k, de.Name)
			}
		}
		exists, xerr := e.LedgerExists(ctx, name)
		if xerr != nil {
			t.Fatal(xerr)
		}
		switch {
		case err == nil && !exists:
			t.Fatalf("step %d: committed import lost by a crash after Commit returned", k)
		case exists:
			l := openUnfenced(t, e, name)
			checkLedgerHolds(t, l, c)
			checkAppendsAbove(t, l, c.exp.Segments[len(c.exp.Segments)-1].ID)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if err == nil && !died {
			steps = k - 1
			break
		}
	}
	if steps < 10 {
		t.Fatalf("the import took only %d file-system operations: the injector missed it", steps)
	}
	t.Logf("crashed at each of %d operations", steps)
}

// TestImportAfterDeleteSurvivesJournalReplay: the ledger existed on this engine, was deleted
// (its entries, cursor states and delete record still in the journal, not yet checkpointed),
// then a ledger of that name was imported, then the engine crashed. The journal replay must not
// apply the earlier ledger's records to the imported directory (nor its delete record, nor fence
// it): the import is intact. Once with the earlier ledger's own segments imported back (a topic
// that came back), once with another engine's.
func TestImportAfterDeleteSurvivesJournalReplay(t *testing.T) {
	for _, tc := range []struct {
		name string
		back bool
		sync SyncMode
	}{
		{"same segments back", true, SyncAlways},
		{"other engine's segments", false, SyncAlways},
		{"same segments back, interval sync", true, SyncInterval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			mod := func(o *Options) {
				o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour
				o.Sync = tc.sync
			}
			e := openMem(t, mem, mod)
			const name = "persistent://t/ns/came-back"
			old, err := e.OpenLedger(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			cur := openCursorT(t, old, "sub")
			ps := appendN(t, old, 5)
			if err := old.Roll(ctx); err != nil {
				t.Fatal(err)
			}
			appendN(t, old, 4)
			if err := cur.MarkDelete(ctx, ps[2]); err != nil {
				t.Fatal(err)
			}
			if err := cur.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			c := madeUpCopy()
			if tc.back {
				c = exportLedger(t, old)
			}
			if err := e.DeleteLedger(ctx, name); err != nil {
				t.Fatal(err)
			}
			if err := importLedgerCopy(e, name, c); err != nil {
				t.Fatalf("import: %v", err)
			}
			crashed := mem.Crash(nil)
			_ = e.Close()
			e = openMem(t, crashed, mod)
			defer e.Close()
			l := openUnfenced(t, e, name)
			checkLedgerHolds(t, l, c)
		})
	}
}

// TestImportedIncarnationsPersist: imported segments keep the incarnation they were exported with
// across restarts (Ledger.IncarnationOf and every entry Read returns); a damaged INCARNATIONS
// file stops the ledger's load with ErrCorrupt naming it, never falls back to this engine's.
func TestImportedIncarnationsPersist(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	c := madeUpCopy()
	const name = "persistent://t/ns/incarnations"
	if err := importLedgerCopy(e, name, c); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	l := openUnfenced(t, e, name)
	checkLedgerHolds(t, l, c) // incarnations of segments and of every entry read
	first, last := c.exp.Segments[0].ID, c.exp.Segments[len(c.exp.Segments)-1].ID
	if got := l.IncarnationsBetween(first, last); fmt.Sprint(got) != fmt.Sprint([]uint64{0x11, e.IncarnationOf(first + 1), 0x22, e.IncarnationOf(first + 5), 0x33}) {
		t.Fatalf("IncarnationsBetween(%d, %d) = %x", first, last, got)
	}
	p := l.dirPath() + "/" + importedIncarnationsFile
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := readWholeFile(mem, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, damage := range []struct {
		what string
		b    []byte
	}{
		{"flipped byte", func() []byte { b := append([]byte(nil), good...); b[len(b)-3] ^= 0x40; return b }()},
		{"truncated", good[:len(good)-5]},
		{"bad header", append([]byte("MRDN-XXX"), good[8:]...)},
		{"empty", nil},
	} {
		if err := writeFileDurably(mem, p, damage.b); err != nil {
			t.Fatal(err)
		}
		e = openMem(t, mem, nil)
		_, err := e.OpenLedger(ctx, name)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
			t.Fatalf("%s INCARNATIONS: OpenLedger: %v, want ErrCorrupt naming %s", damage.what, err, p)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestImportRefusesWhatTheEngineWouldNot: entries over MaxEntrySize, cursor records that do not
// decode or break the bounds of a persisted state, two records of one cursor, segments out of
// order, a name that exists or is being imported. Each is an error, never a panic, and an
// aborted import leaves nothing behind.
func TestImportRefusesWhatTheEngineWouldNot(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, func(o *Options) { o.MaxEntrySize = 100 })
	defer e.Close()
	const name = "persistent://t/ns/bounds"
	im, err := e.ImportLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Append(ctx, []byte("x"), 1); err == nil {
		t.Fatal("Append before StartSegment accepted")
	}
	if err := im.StartSegment(50, 1); err != nil {
		t.Fatal(err)
	}
	if err := im.Append(ctx, make([]byte, 100), 1); err != nil {
		t.Fatalf("entry of MaxEntrySize: %v", err)
	}
	if err := im.Append(ctx, make([]byte, 101), 1); !errors.Is(err, ErrEntryTooLarge) {
		t.Fatalf("entry over MaxEntrySize: %v, want ErrEntryTooLarge", err)
	}
	for _, id := range []int64{50, 49, -1} {
		if err := im.StartSegment(id, 1); err == nil {
			t.Fatalf("segment %d after segment 50 accepted", id)
		}
	}
	good := encodeCursorState([]byte{cState}, &cursorState{name: "sub", markDelete: mtypes.Position{LedgerID: 50, EntryID: 0}})
	bigProps := &cursorState{name: "props", props: map[string]string{"k": strings.Repeat("v", MaxCursorPropertiesBytes)}}
	manyRanges := &cursorState{name: "ranges", markDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}
	for i := 0; i <= maxPersistedRanges; i++ {
		manyRanges.acked = append(manyRanges.acked, ackRange{ledger: 2, from: int64(2 * i), to: int64(2 * i)})
	}
	for _, bad := range []struct {
		what string
		recs [][]byte
	}{
		{"empty record", [][]byte{{}}},
		{"delete record", [][]byte{append([]byte{cDelete}, "sub"...)}},
		{"truncated state", [][]byte{good[:len(good)-1]}},
		{"trailing bytes", [][]byte{append(append([]byte(nil), good...), 0)}},
		{"unknown state version", [][]byte{{cState, 9, 0}}},
		{"empty cursor name", [][]byte{encodeCursorState([]byte{cState}, &cursorState{})}},
		{"cursor twice", [][]byte{good, good}},
		{"properties over the bound", [][]byte{encodeCursorState([]byte{cState}, bigProps)}},
		{"ranges over the bound", [][]byte{encodeRawCursorState(manyRanges)}},
		{"huge counts", [][]byte{{cState, 1, 1, 'a', 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}}},
	} {
		if err := im.SetCursors(bad.recs); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: SetCursors: %v, want ErrCorrupt", bad.what, err)
		}
	}
	if err := im.SetCursors([][]byte{good}); err != nil {
		t.Fatal(err)
	}
	// The name is taken while the import runs.
	if _, err := e.OpenLedger(ctx, name); !errors.Is(err, ErrImporting) {
		t.Fatalf("OpenLedger during the import: %v, want ErrImporting", err)
	}
	if _, err := e.ImportLedger(ctx, name); !errors.Is(err, ErrImporting) {
		t.Fatalf("second ImportLedger: %v, want ErrImporting", err)
	}
	im.Abort()
	im.Abort()
	if err := im.Commit(ctx); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	des, err := mem.ReadDir("/data/ledgers")
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != 0 {
		t.Fatalf("aborted import left %v", des)
	}
	// Free again; an existing ledger cannot be imported over.
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ImportLedger(ctx, name); !errors.Is(err, ErrLedgerExists) {
		t.Fatalf("import over an open ledger: %v, want ErrLedgerExists", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ImportLedger(ctx, name); !errors.Is(err, ErrLedgerExists) {
		t.Fatalf("import over a ledger on disk: %v, want ErrLedgerExists", err)
	}
}

// encodeRawCursorState encodes st with all its ranges, past what encodeCursorState persists (a
// hostile sender's record).
func encodeRawCursorState(st *cursorState) []byte {
	b := []byte{cState, 1}
	b = binary.AppendUvarint(b, uint64(len(st.name)))
	b = append(b, st.name...)
	b = binary.AppendVarint(b, st.markDelete.LedgerID)
	b = binary.AppendVarint(b, st.markDelete.EntryID)
	b = binary.AppendUvarint(b, uint64(len(st.acked)))
	for _, r := range st.acked {
		b = binary.AppendVarint(b, r.ledger)
		b = binary.AppendVarint(b, r.from)
		b = binary.AppendUvarint(b, uint64(r.to-r.from))
	}
	return append(b, 0, 0) // no batches, no properties
}

// TestImportKilledBeforeItsDirectoryFsyncThenAppended: the process dies after an import's rename
// and before the fsync of ledgers/ that commits it. Restarted over the same page cache, the engine
// finds the ledger there; it is opened and appended to, and its checkpoints fsync only its own
// directory, so a power loss afterwards took the whole ledger, acknowledged appends included.
// Open makes the ledger directories it finds durable.
func TestImportKilledBeforeItsDirectoryFsyncThenAppended(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	a := openMem(t, mem, nil)
	c := madeUpCopy()
	d := &deathInjector{k: 1, watch: func(n string) bool { return n == "/data/ledgers" }}
	mem.SetInjector(func(op vfs.Op, name string) error {
		if op != vfs.OpSyncDir && !d.died() {
			return nil
		}
		return d.inject(op, name)
	})
	if err := importLedgerCopy(a, "imported", c); err == nil || !d.died() {
		t.Fatalf("the import's commit was not interrupted: %v", err)
	}
	mem.SetInjector(nil)
	b := openMem(t, mem, nil) // the restarted process, same page cache
	l, err := b.OpenLedger(ctx, "imported")
	if err != nil {
		t.Fatal(err)
	}
	checkLedgerHolds(t, l, c)
	ps := appendN(t, l, 20)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	crashed := mem.Crash(nil)
	_ = a.Close()
	e := openMem(t, crashed, nil)
	defer e.Close()
	l2 := openUnfenced(t, e, "imported")
	es, err := l2.Read(ctx, mtypes.Earliest, 0, 0)
	imported := 0
	for _, seg := range c.entries {
		imported += len(seg)
	}
	if err != nil || len(es) != imported+len(ps) || es[imported].Position != ps[0] {
		t.Fatalf("after the power loss the ledger holds %d entries (%v), want the %d imported and the %d appended", len(es), err, imported, len(ps))
	}
}
