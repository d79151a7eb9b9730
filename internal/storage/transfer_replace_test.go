package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// sharedLedgerIDs is a cluster's ledger id counter (Options.LedgerIDBlock) for several engines.
type sharedLedgerIDs struct {
	mu   sync.Mutex
	next int64
}

func (s *sharedLedgerIDs) block(floor, size int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := max(s.next, floor)
	s.next = first + size
	return first, nil
}

// mergedCopy is what the node imports when a topic comes back: both copies' segments in id order,
// their entries, and the merged cursors.
func mergedCopy(t *testing.T, local, incoming ledgerCopy) ledgerCopy {
	t.Helper()
	m := ledgerCopy{entries: map[int64][]mtypes.Entry{}}
	m.exp.Segments = append(append([]ExportedSegment(nil), local.exp.Segments...), incoming.exp.Segments...)
	sort.Slice(m.exp.Segments, func(i, j int) bool { return m.exp.Segments[i].ID < m.exp.Segments[j].ID })
	for _, c := range []ledgerCopy{local, incoming} {
		for id, es := range c.entries {
			m.entries[id] = es
		}
	}
	recs, err := MergeCursorRecords(CursorSide{Records: local.exp.Cursors, Segments: local.exp.Segments},
		CursorSide{Records: incoming.exp.Cursors, Segments: incoming.exp.Segments})
	if err != nil {
		t.Fatalf("merge cursors: %v", err)
	}
	m.exp.Cursors = recs
	return m
}

// replaceLedger does what the node does when a topic comes back: an import replacing ledger name
// with c (read from the open local ledger and the incoming stream), the local ledger closed
// before Commit.
func replaceLedger(e *Engine, name string, local *Ledger, c ledgerCopy) error {
	ctx := context.Background()
	im, err := e.ImportLedgerReplacing(ctx, name)
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
	if local != nil {
		if err := local.Close(); err != nil {
			im.Abort()
			return err
		}
	}
	return im.Commit(ctx)
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestReplaceMergesAReturningBrokersLedger: broker A's engine has ledger "t" (two segments, then,
// after broker B served the topic, a third: A-old < B < A-new) with cursors; B's engine has its
// own "t" with other cursors. A imports B's copy merged with its own over its ledger. After a
// restart, and after a crash right after Commit, every entry of both sides is read at its
// position with its incarnation, and the cursors are as the merge rules say.
func TestReplaceMergesAReturningBrokersLedger(t *testing.T) {
	for _, restart := range []string{"close", "crash"} {
		t.Run(restart, func(t *testing.T) {
			ctx := context.Background()
			ids := &sharedLedgerIDs{next: 1000}
			mod := func(o *Options) {
				o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour
				o.LedgerIDBlock = ids.block
			}
			const name = "persistent://t/ns/came-back"
			memA, memB := vfs.NewMem(), vfs.NewMem()

			// A before it died: segments A1, A2.
			ea := openMem(t, memA, mod)
			la, err := ea.OpenLedger(ctx, name)
			mustDo(t, err)
			subA, onlyA := openCursorT(t, la, "sub"), openCursorT(t, la, "a-only")
			a1 := appendN(t, la, 4)
			mustDo(t, la.Roll(ctx))
			a2 := appendN(t, la, 3)
			mustDo(t, subA.MarkDelete(ctx, a1[1]))
			mustDo(t, subA.Delete(ctx, a2[0]))
			mustDo(t, subA.SetProperties(ctx, map[string]string{"k": "a", "x": "1"}))
			mustDo(t, onlyA.Flush(ctx))
			mustDo(t, la.Close())
			mustDo(t, ea.Close())

			// B served the topic meanwhile: segments B1, B2, ids above A's.
			eb := openMem(t, memB, mod)
			defer eb.Close()
			lb, err := eb.OpenLedger(ctx, name)
			mustDo(t, err)
			subB, onlyB := openCursorT(t, lb, "sub"), openCursorT(t, lb, "b-only")
			b1 := appendN(t, lb, 5)
			mustDo(t, lb.Roll(ctx))
			b2 := appendN(t, lb, 2)
			mustDo(t, subB.MarkDelete(ctx, b1[2]))
			mustDo(t, subB.Delete(ctx, b2[1]))
			mustDo(t, subB.AckBatchIndexes(ctx, b1[4], 4, []int{0, 2}))
			mustDo(t, subB.SetProperties(ctx, map[string]string{"k": "b"}))
			mustDo(t, onlyB.MarkDelete(ctx, b1[4]))
			incoming := exportLedger(t, lb)

			// A is back: its ledger gets a segment above B's (A-new) before the bundle returns.
			ea = openMem(t, memA, mod)
			la, err = ea.OpenLedger(ctx, name)
			mustDo(t, err)
			a3 := appendN(t, la, 2)
			if !(a2[0].LedgerID < b1[0].LedgerID && b2[0].LedgerID < a3[0].LedgerID) {
				t.Fatalf("layout A %d %d, B %d %d, A %d: not A-old < B < A-new", a1[0].LedgerID, a2[0].LedgerID, b1[0].LedgerID, b2[0].LedgerID, a3[0].LedgerID)
			}
			mustDo(t, la.Cursor("sub").Delete(ctx, a3[1]))
			local := exportLedger(t, la)
			want := mergedCopy(t, local, incoming)
			mustDo(t, replaceLedger(ea, name, la, want))

			switch restart {
			case "close":
				mustDo(t, ea.Close())
				ea = openMem(t, memA, mod)
			case "crash":
				crashed := memA.Crash(nil)
				_ = ea.Close()
				ea = openMem(t, crashed, mod)
			}
			defer ea.Close()
			l := openUnfenced(t, ea, name)
			checkLedgerHolds(t, l, want) // entries, positions, incarnations, cursor records as merged
			for _, s := range local.exp.Segments {
				if s.Incarnation == incoming.exp.Segments[0].Incarnation {
					t.Fatalf("both engines' incarnations are %x: the test cannot tell them apart", s.Incarnation)
				}
			}

			// The rules, entry by entry.
			type acks struct {
				ps   []mtypes.Position
				want []bool
			}
			all := func(ps []mtypes.Position, v bool) acks {
				w := make([]bool, len(ps))
				for i := range w {
					w[i] = v
				}
				return acks{ps, w}
			}
			some := func(ps []mtypes.Position, acked ...int) acks {
				a := all(ps, false)
				for _, i := range acked {
					a.want[i] = true
				}
				return a
			}
			for cursor, segs := range map[string][]acks{
				// Each side's own acknowledgements, for its own segments only.
				"sub": {some(a1, 0, 1), some(a2, 0), some(b1, 0, 1, 2), some(b2, 1), some(a3, 1)},
				// B's segments are after A's first: written while a-only lived on A, delivered.
				"a-only": {all(a1, false), all(a2, false), all(b1, false), all(b2, false), all(a3, false)},
				// A lacks it: none of A's entries is acknowledged (delivered again rather than never).
				"b-only": {all(a1, false), all(a2, false), all(b1, true), all(b2, false), all(a3, false)},
			} {
				c := l.Cursor(cursor)
				if c == nil || !c.Durable() {
					t.Fatalf("cursor %q missing", cursor)
				}
				for _, sg := range segs {
					for i, p := range sg.ps {
						if got := c.IsAcknowledged(p); got != sg.want[i] {
							t.Errorf("%s: %v acknowledged %v, want %v", cursor, p, got, sg.want[i])
						}
					}
				}
			}
			if md := l.Cursor("sub").MarkDeletePosition(); md != a1[1] {
				t.Errorf("sub: mark-delete %v, want %v", md, a1[1])
			}
			if md := l.Cursor("a-only").MarkDeletePosition(); md != (mtypes.Position{LedgerID: a1[0].LedgerID, EntryID: -1}) {
				t.Errorf("a-only: mark-delete %v, want before %v", md, a1[0])
			}
			if md := l.Cursor("b-only").MarkDeletePosition(); md != (mtypes.Position{LedgerID: a1[0].LedgerID, EntryID: -1}) {
				t.Errorf("b-only: mark-delete %v, want before %v", md, a1[0])
			}
			if got := l.Cursor("sub").AckedBatchIndexes(b1[4]); fmt.Sprint(got) != fmt.Sprint([]uint64{0b101}) {
				t.Errorf("sub: batch at %v acknowledged %b, want 101", b1[4], got)
			}
			if got := l.Cursor("sub").Properties(); !reflect.DeepEqual(got, map[string]string{"k": "b", "x": "1"}) {
				t.Errorf("sub: properties %v", got)
			}
			if got := l.Cursor("sub").Backlog(); got != int64(2+2+2+1+1) {
				t.Errorf("sub: backlog %d, want 8", got)
			}
			checkAppendsAbove(t, l, a3[0].LedgerID)
		})
	}
}

// TestReplaceRefuses: Commit with the ledger still open fails with ErrLedgerExists and leaves the
// old ledger; the name is reserved while the import runs; ImportLedger still refuses a name with
// a ledger; without a ledger, a replacing import is an import.
func TestReplaceRefuses(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, func(o *Options) { o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour })
	defer e.Close()
	const name = "persistent://t/ns/replace-refuses"
	l, err := e.OpenLedger(ctx, name)
	mustDo(t, err)
	openCursorT(t, l, "sub")
	appendN(t, l, 3)
	old := exportLedger(t, l)
	if _, err := e.ImportLedger(ctx, name); !errors.Is(err, ErrLedgerExists) {
		t.Fatalf("ImportLedger over an open ledger: %v", err)
	}
	im, err := e.ImportLedgerReplacing(ctx, name)
	mustDo(t, err)
	if _, err := e.OpenLedger(ctx, name); !errors.Is(err, ErrImporting) {
		t.Fatalf("OpenLedger during a replacing import: %v, want ErrImporting", err)
	}
	if _, err := e.ImportLedgerReplacing(ctx, name); !errors.Is(err, ErrImporting) {
		t.Fatalf("second replacing import: %v, want ErrImporting", err)
	}
	mustDo(t, im.StartSegment(1<<40, 7))
	mustDo(t, im.Append(ctx, []byte("new"), 1))
	if err := im.Commit(ctx); !errors.Is(err, ErrLedgerExists) {
		t.Fatalf("Commit with the ledger open: %v, want ErrLedgerExists", err)
	}
	checkLedgerHolds(t, l, old)
	mustDo(t, l.Close())
	if _, err := e.ImportLedger(ctx, name); !errors.Is(err, ErrLedgerExists) {
		t.Fatalf("ImportLedger over a ledger on disk: %v", err)
	}
	l = openUnfenced(t, e, name)
	checkLedgerHolds(t, l, old)
	mustDo(t, l.Close())

	// No ledger of that name: an import like any other.
	c := madeUpCopy()
	mustDo(t, replaceLedger(e, "persistent://t/ns/fresh", nil, c))
	checkLedgerHolds(t, openUnfenced(t, e, "persistent://t/ns/fresh"), c)
	des, err := mem.ReadDir("/data/ledgers")
	mustDo(t, err)
	for _, de := range des {
		if isTransferDir(de.Name) {
			t.Fatalf("%s left in ledgers/", de.Name)
		}
	}
}

// TestReplaceCrashAtEveryStep crashes the engine at every file-system operation from the start of
// a replacing import to its end (the local ledger open with journal records newer than the last
// checkpoint: its reopening, cursor changes, the export's seal; staging writes, the state file,
// the journal rotation and checkpoint Commit waits for, the close, both renames and fsyncs, the
// removal of the replaced directory), keeping random parts of what was not fsynced. After a
// restart the ledger holds either the old ledger whole or the new one whole (the new one once
// Commit returned), and nothing is left in ledgers/ but ledger directories. Once for a plain name,
// once for a name kept in a hashed directory.
func TestReplaceCrashAtEveryStep(t *testing.T) {
	for _, name := range []string{"persistent://t/ns/crash-replace", "persistent://t/ns/" + strings.Repeat("long-", 50)} {
		t.Run(fmt.Sprintf("name of %d bytes", len(name)), func(t *testing.T) { runReplaceCrashSteps(t, name) })
	}
}

func runReplaceCrashSteps(t *testing.T, name string) {
	ctx := context.Background()
	incoming := madeUpCopy() // ids far above this engine's
	mod := func(o *Options) { o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour }
	steps := 0
	for k := 1; ; k++ {
		mem := vfs.NewMem()
		e := openMem(t, mem, mod)
		l, err := e.OpenLedger(ctx, name)
		mustDo(t, err)
		sub := openCursorT(t, l, "sub")
		ps := appendN(t, l, 4)
		mustDo(t, l.Roll(ctx))
		appendN(t, l, 3)
		mustDo(t, sub.MarkDelete(ctx, ps[1]))
		mustDo(t, sub.Flush(ctx))
		mustDo(t, l.Close())
		// The node's flow: open the local ledger (journaled), change a cursor, export.
		l, err = e.OpenLedger(ctx, name)
		mustDo(t, err)
		mustDo(t, l.Cursor("sub").Delete(ctx, ps[3]))
		mustDo(t, l.Cursor("sub").Flush(ctx))
		old := exportLedger(t, l)
		want := mergedCopy(t, old, incoming)

		d := &deathInjector{k: k, watch: func(n string) bool { return strings.HasPrefix(n, "/data") }}
		mem.SetInjector(d.inject)
		err = replaceLedger(e, name, l, want)
		died := d.died()
		crashed := mem.Crash(rand.New(rand.NewPCG(uint64(k), 11)))
		_ = l.Close()
		_ = e.Close()
		if err != nil && !died {
			t.Fatalf("step %d: replace failed without an injected failure: %v", k, err)
		}
		e = openMem(t, crashed, mod)
		des, lerr := crashed.ReadDir("/data/ledgers")
		mustDo(t, lerr)
		for _, de := range des {
			if isTransferDir(de.Name) {
				t.Fatalf("step %d: %s left in ledgers/ after Open", k, de.Name)
			}
		}
		l = openUnfenced(t, e, name)
		isNew := false
		for _, s := range l.Segments() {
			isNew = isNew || s.ID == incoming.exp.Segments[0].ID
		}
		switch {
		case err == nil && !isNew:
			t.Fatalf("step %d: the replace was lost by a crash after Commit returned", k)
		case isNew:
			checkLedgerHolds(t, l, want)
		default:
			checkLedgerHolds(t, l, old)
		}
		mustDo(t, e.Close())
		if err == nil && !died {
			steps = k - 1
			break
		}
	}
	if steps < 20 {
		t.Fatalf("the replace took only %d file-system operations: the injector missed it", steps)
	}
	t.Logf("crashed at each of %d operations", steps)
}

// TestReplaceFailedSwapPutsBack: when a step of the swap fails (the rename of the staging
// directory, the fsync that commits it), Commit fails and the old ledger is back in place at once,
// the name free again; when putting it back fails too (its renames, or the fsync that makes them
// durable), the name stays reserved (ErrImporting) until the engine is opened again, which puts
// the old ledger back whole.
func TestReplaceFailedSwapPutsBack(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fail        func(seenStagingRename bool, op vfs.Op, n string) bool
		putBackFail bool // the failure stays until Commit returns (else only the first op fails)
		stuck       bool // the old ledger cannot be put back before a restart
	}{
		{"staging rename fails", func(_ bool, op vfs.Op, n string) bool {
			return op == vfs.OpRename && strings.HasPrefix(n, "/data/ledgers/"+stagingPrefix)
		}, false, false},
		// Every fsync of ledgers/ fails from the rename on (a checkpoint's too: which one comes
		// first is not the test's to choose), the put back's too: the old ledger is not served
		// before its put back is durable (TestPutBackAfterFailedReplaceCommitIsDurable).
		{"fsync after the staging rename fails", func(seen bool, op vfs.Op, n string) bool {
			return seen && op == vfs.OpSyncDir && n == "/data/ledgers"
		}, true, true},
		{"staging rename and the put back fail", func(_ bool, op vfs.Op, n string) bool {
			return op == vfs.OpRename && (strings.HasPrefix(n, "/data/ledgers/"+stagingPrefix) || strings.HasPrefix(n, "/data/ledgers/"+replacedPrefix))
		}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			mod := func(o *Options) { o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour }
			e := openMem(t, mem, mod)
			const name = "persistent://t/ns/put-back"
			l, err := e.OpenLedger(ctx, name)
			mustDo(t, err)
			openCursorT(t, l, "sub")
			appendN(t, l, 5)
			old := exportLedger(t, l)
			want := mergedCopy(t, old, madeUpCopy())
			var mu sync.Mutex
			seen, armed := false, true
			mem.SetInjector(func(op vfs.Op, n string) error {
				mu.Lock()
				defer mu.Unlock()
				fail := armed && tc.fail(seen, op, n)
				if op == vfs.OpRename && strings.HasPrefix(n, "/data/ledgers/"+stagingPrefix) {
					seen = true
				}
				if fail && !tc.putBackFail {
					armed = false
				}
				if fail {
					return vfs.EIO
				}
				return nil
			})
			if err := replaceLedger(e, name, l, want); err == nil {
				t.Fatal("Commit succeeded despite the failure")
			}
			mem.SetInjector(nil)
			if tc.stuck {
				if _, err := e.OpenLedger(ctx, name); !errors.Is(err, ErrImporting) {
					t.Fatalf("OpenLedger after a failed put back: %v, want ErrImporting", err)
				}
				mustDo(t, e.Close())
				e = openMem(t, mem, mod)
			}
			defer e.Close()
			l = openUnfenced(t, e, name)
			checkLedgerHolds(t, l, old)
			des, err := mem.ReadDir("/data/ledgers")
			mustDo(t, err)
			for _, de := range des {
				if isTransferDir(de.Name) {
					t.Fatalf("%s left in ledgers/", de.Name)
				}
			}
		})
	}
}

func (e *Engine) nextLedgerIDForTest() int64 {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	return e.nextLedgerID
}

// TestDeleteAfterReplaceRemovesTheLeftoverReplacedDir: a ledger deleted after a replacing import
// whose removal of ledgers/.replaced-<dir> failed (an I/O error after the commit) stays deleted
// after a restart. Before, the delete left the .replaced- directory, the next Open took it for an
// interrupted replace and renamed it back: the deleted ledger returned with its pre-replace entries.
func TestDeleteAfterReplaceRemovesTheLeftoverReplacedDir(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var failed atomic.Bool
	mem.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpRemove && strings.Contains(name, replacedPrefix) && failed.CompareAndSwap(false, true) {
			return vfs.EIO
		}
		return nil
	})
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	e := openMem(t, mem, mod)
	const name = "replaced-then-deleted"
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := l.Append(ctx, payload(i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	im := importOneEntry(t, e, name, true)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := im.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !failed.Load() {
		t.Fatal("the replaced directory's removal was not attempted")
	}
	mem.SetInjector(nil)
	if err := e.DeleteLedger(ctx, name); err != nil { // acknowledged
		t.Fatal(err)
	}
	checkpointThrough(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := openMem(t, mem, mod)
	defer e2.Close()
	if ok, err := e2.LedgerExists(ctx, name); err != nil || ok {
		l2, _ := e2.OpenLedger(ctx, name)
		var n int64
		if l2 != nil {
			n = l2.Entries()
		}
		t.Fatalf("deleted ledger %q exists again after a restart (%v), with %d entries", name, err, n)
	}
}

// syncThenFailFS makes one SyncDir of dir (armed, when says so) sync and then report EIO: the
// renames before it became durable (say, through a concurrent checkpoint's sync of the same
// directory), but the caller is told the sync failed.
type syncThenFailFS struct {
	*vfs.Mem
	dir   string
	when  func() bool // fail this sync of dir (once)
	armed atomic.Bool
}

func (f *syncThenFailFS) SyncDir(name string) error {
	err := f.Mem.SyncDir(name)
	if err == nil && name == f.dir && f.armed.Load() && f.when() {
		f.armed.Store(false)
		return vfs.EIO
	}
	return err
}

// TestPutBackAfterFailedReplaceCommitIsDurable: when the fsync of ledgers/ that commits a replace
// fails (outcome unknown), the old ledger put back is served again only once the put back is
// durable, so the appends it acknowledges then survive a power loss. Before, the put back's
// renames stayed in the page cache while the old ledger took acknowledged appends; the power loss
// found the new directory (durable) and the .replaced- one, Open finished the replace, and the
// appends went with the old directory.
func TestPutBackAfterFailedReplaceCommitIsDurable(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	const name = "put-back"
	fsys := &syncThenFailFS{Mem: mem, dir: "/data/ledgers"}
	fsys.when = func() bool { // after step 4: the new ledger in place, the old one aside
		_, err1 := mem.Stat("/data/ledgers/" + name)
		_, err2 := mem.Stat("/data/ledgers/" + replacedPrefix + name)
		return err1 == nil && err2 == nil
	}
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	e := openMem(t, fsys, mod)
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[mtypes.Position]string{}
	for i := 0; i < 3; i++ {
		p, err := l.Append(ctx, payload(i), int64(i))
		if err != nil {
			t.Fatal(err)
		}
		acked[p] = string(payload(i))
	}
	im := importOneEntry(t, e, name, true)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fsys.armed.Store(true)
	if err := im.Commit(ctx); err == nil {
		t.Fatal("the commit did not report the failed directory sync")
	}
	if fsys.armed.Load() {
		t.Fatal("the commit failed elsewhere")
	}
	// The old ledger is back and serves appends.
	l, err = e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Append(ctx, payload(3), 3)
	if err != nil {
		t.Fatal(err)
	}
	acked[p] = string(payload(3))
	checkpointThrough(t, e)
	crashed := mem.Crash(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	verifyAcked(t, e2, name, acked)
}

// A plain import whose commit failed at its fsync of ledgers/ (the rename in may have reached the
// disk) takes its directory back durably before the name is free again: a ledger created under
// that name next, and a power loss, must find that ledger and nothing of the failed import (the
// take-back stayed in the page cache, so the import's directory could come back under the name and
// the new ledger's entries be replayed into it).
func TestFailedImportTakeBackIsDurable(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	const name = "failed-import"
	fsys := &syncThenFailFS{Mem: mem, dir: "/data/ledgers"}
	fsys.when = func() bool { // right after the rename in
		_, err := mem.Stat("/data/ledgers/" + name)
		return err == nil
	}
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	e := openMem(t, fsys, mod)
	im := importOneEntry(t, e, name, false)
	fsys.armed.Store(true)
	if err := im.Commit(ctx); err == nil {
		t.Fatal("the commit did not report the failed directory sync")
	}
	if fsys.armed.Load() {
		t.Fatal("the commit failed elsewhere")
	}
	im.Abort()
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Append(ctx, payload(0), 0)
	if err != nil {
		t.Fatal(err)
	}
	crashed := mem.Crash(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	l2, err := e2.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	es, err := l2.Read(ctx, mtypes.Earliest, 0, 0)
	if err != nil || len(es) != 1 || es[0].Position != p || string(es[0].Data) != string(payload(0)) {
		var got []string
		for _, en := range es {
			got = append(got, fmt.Sprintf("%v=%q", en.Position, en.Data))
		}
		t.Fatalf("after the power loss %q holds %v (%v); want only its acknowledged entry %v", name, got, err, p)
	}
}

// importOneEntry starts an import of ledger name (replacing the ledger there, or a plain one) with
// one segment holding the entry "imported", and leaves it to the caller to commit.
func importOneEntry(t *testing.T, e *Engine, name string, replacing bool) *LedgerImport {
	t.Helper()
	ctx := context.Background()
	start := e.ImportLedger
	if replacing {
		start = e.ImportLedgerReplacing
	}
	im, err := start(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.StartSegment(e.nextLedgerIDForTest()+100, e.Incarnation()); err != nil {
		t.Fatal(err)
	}
	if err := im.Append(ctx, []byte("imported"), 1); err != nil {
		t.Fatal(err)
	}
	return im
}

// A failed plain import whose take-back fails, and whose removal fails too, keeps the name reserved:
// its directory may still stand under the name, and OpenLedger must not serve what Commit reported
// as failed.
func TestFailedImportTakeBackAndRemovalFailingKeepsTheNameReserved(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	const name = "failed-import"
	dir := "/data/ledgers/" + name
	fsys := &syncThenFailFS{Mem: mem, dir: "/data/ledgers"}
	fsys.when = func() bool { _, err := mem.Stat(dir); return err == nil }
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	e := openMem(t, fsys, mod)
	defer e.Close()
	im := importOneEntry(t, e, name, false)
	fsys.armed.Store(true)
	mem.SetInjector(func(op vfs.Op, n string) error {
		if (op == vfs.OpRename || op == vfs.OpRemove) && n == dir && !fsys.armed.Load() {
			return vfs.EIO // the take-back: the rename back and the removal both fail
		}
		return nil
	})
	if err := im.Commit(ctx); err == nil {
		t.Fatal("the commit did not report the failed directory sync")
	}
	mem.SetInjector(nil)
	im.Abort()
	l, err := e.OpenLedger(ctx, name)
	if errors.Is(err, ErrImporting) {
		return
	}
	if err != nil {
		t.Fatalf("OpenLedger: %v", err)
	}
	if n := l.Entries(); n != 0 {
		t.Fatalf("the import's Commit failed, yet OpenLedger(%q) serves its %d entries", name, n)
	}
}
