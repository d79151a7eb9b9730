package storage

import (
	"context"
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

func repairT(t *testing.T, fs vfs.FS, ledger string, accept bool) *RepairReport {
	t.Helper()
	r, err := Repair(context.Background(), RepairOptions{Dir: "/data", FS: fs, Ledger: ledger, AcceptLoss: accept, Logger: testLogger()})
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	var b strings.Builder
	r.Print(&b)
	t.Logf("repair report:\n%s", b.String())
	return r
}

// wantRepaired: a report without AcceptLoss finds a problem with file (and changes nothing);
// with it, the problem is repaired and the ledgers concerned load.
func wantRepaired(t *testing.T, fs vfs.FS, ledger, file string) {
	t.Helper()
	found := repairT(t, fs, ledger, false)
	if len(found.Actions) == 0 || found.Actions[0].Done || !strings.Contains(found.Actions[0].File, file) {
		t.Fatalf("the report without --accept-loss: %+v, want a problem with %s", found.Actions, file)
	}
	again := repairT(t, fs, ledger, false)
	if len(again.Actions) != len(found.Actions) {
		t.Fatal("a report without --accept-loss changed something")
	}
	done := repairT(t, fs, ledger, true)
	for _, a := range done.Actions {
		if !a.Done {
			t.Fatalf("not repaired: %+v", a)
		}
	}
	for n, err := range done.Loaded {
		if err != nil {
			t.Fatalf("ledger %q does not load after the repair: %v", n, err)
		}
	}
	if after := repairT(t, fs, ledger, false); len(after.Actions) != 0 {
		t.Fatalf("still found after the repair: %+v", after.Actions)
	}
}

func TestRepairCursorLogHeader(t *testing.T) {
	mem := vfs.NewMem()
	ps := cursorHistory(t, mem)
	p := cursorLogFile(t)
	b := readFileForTest(t, mem, p)
	b[3] ^= 0xff
	writeFileForTest(t, mem, p, b)
	wantLedgerStopped(t, mem)
	wantRepaired(t, mem, damageLedger, "cursors.log")
	wantCursors(t, mem, map[string]mtypes.Position{"a": ps[3], "b": ps[5], "c": ps[1]})
}

func TestRepairCursorLogMiddle(t *testing.T) {
	mem := vfs.NewMem()
	ps := cursorHistory(t, mem)
	p := cursorLogFile(t)
	b := readFileForTest(t, mem, p)
	scan := scanCursorLog(b)
	b[scan.prefix[1].off+recHeaderSize+3] ^= 0xff
	writeFileForTest(t, mem, p, b)
	wantRepaired(t, mem, "", "cursors.log")
	wantCursors(t, mem, map[string]mtypes.Position{"a": ps[3], "b": ps[5], "c": ps[1]})
}

// TestRepairCursorLogAfterReplay: the replay appended the journal's state of a after the damage;
// the repair keeps it.
func TestRepairCursorLogAfterReplay(t *testing.T) {
	mem := vfs.NewMem()
	ps := cursorHistory(t, mem)
	crashed, aPos, _ := journalAfterCheckpoint(t, mem, ps)
	p := cursorLogFile(t)
	b := readFileForTest(t, crashed, p)
	b[3] ^= 0xff
	writeFileForTest(t, crashed, p, b)
	wantLedgerStopped(t, crashed)
	wantRepaired(t, crashed, damageLedger, "cursors.log")
	wantCursors(t, crashed, map[string]mtypes.Position{"a": aPos, "b": ps[5], "c": ps[1]})
}

// TestRepairCursorLogBeforeReplay: repaired before the journal was replayed (the broker was not
// started after the crash): the replay appends the journal's state to the salvaged log.
func TestRepairCursorLogBeforeReplay(t *testing.T) {
	mem := vfs.NewMem()
	ps := cursorHistory(t, mem)
	crashed, aPos, _ := journalAfterCheckpoint(t, mem, ps)
	p := cursorLogFile(t)
	b := readFileForTest(t, crashed, p)
	b[3] ^= 0xff
	writeFileForTest(t, crashed, p, b)
	wantRepaired(t, crashed, damageLedger, "cursors.log")
	wantCursors(t, crashed, map[string]mtypes.Position{"a": aPos, "b": ps[5], "c": ps[1]})
}

// TestRepairMissingState: the state file is rebuilt from the ids on disk; new ledger ids are
// above every one in use, so positions keep increasing.
func TestRepairMissingState(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	ps := cursorHistory(t, mem)
	if err := mem.Remove("/data/" + stateFile); err != nil {
		t.Fatal(err)
	}
	wantRepaired(t, mem, "", stateFile)
	e := openMem(t, mem, nil)
	defer e.Close()
	l, err := e.OpenLedger(ctx, damageLedger)
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Append(ctx, []byte("after"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Compare(ps[len(ps)-1]) <= 0 {
		t.Fatalf("an entry appended after the repair is at %v, before the last one before it %v", p, ps[len(ps)-1])
	}
	if c := l.Cursor("b"); c == nil || c.MarkDeletePosition() != ps[5] || c.Backlog() != 5 {
		t.Fatalf("cursor b after the repair: %+v", c)
	}
}

// TestRepairDamagedSegment: a segment damaged in the middle fences its ledger; repair cuts it at
// the damage and the ledger takes appends again.
func TestRepairDamagedSegment(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	l, err := e.OpenLedger(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, l, 50)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	seg := segPath("/data/ledgers/m", ps[0].LedgerID)
	b := readFileForTest(t, mem, seg)
	b[200] ^= 0xff
	writeFileForTest(t, mem, seg, b)
	e = openMem(t, mem, nil)
	l, err = e.OpenLedger(ctx, "m")
	if err != nil || !errors.Is(l.Err(), ErrCorrupt) {
		t.Fatalf("the damaged segment was not reported: %v %v", err, l.Err())
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	wantRepaired(t, mem, "m", ".seg")
	e = openMem(t, mem, nil)
	defer e.Close()
	l, err = e.OpenLedger(ctx, "m")
	if err != nil || l.Err() != nil {
		t.Fatalf("after the repair: %v %v", err, l.Err())
	}
	if _, err := l.Append(ctx, []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
}

// TestRepairIncarnations: a damaged incarnations file keeps its readable records.
func TestRepairIncarnations(t *testing.T) {
	mem := vfs.NewMem()
	cursorHistory(t, mem)
	e := openMem(t, mem, nil)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	p := "/data/" + incarnationsFile
	b := readFileForTest(t, mem, p)
	b[len(b)-3] ^= 0xff
	writeFileForTest(t, mem, p, b)
	wantOpenError(t, mem, incarnationsFile)
	wantRepaired(t, mem, "", incarnationsFile)
}

// TestRepairRefusesSegmentOfAnotherVersion: a segment whose header is well formed but of another
// format version (a newer build's) is not damage. Repair refuses it, as it refuses a state file
// of another version, instead of removing it with its entries.
func TestRepairRefusesSegmentOfAnotherVersion(t *testing.T) {
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	crashed, seg, _ := checkpointedLedger(t, "repair/version", mod, 10)
	id, err := parseHeader(segHeaderOf(t, crashed, seg), magicSegment)
	if err != nil {
		t.Fatal(err)
	}
	overwriteSynced(t, crashed, seg, 0, appendHeaderVersion(nil, magicSegment, id, 0, FormatVersion+1))
	before := readFileForTest(t, crashed, seg)
	r, err := Repair(context.Background(), RepairOptions{Dir: "/data", FS: crashed, Ledger: "repair/version", AcceptLoss: true, Logger: testLogger()})
	if err == nil {
		t.Errorf("repair --accept-loss took a segment of format version %d: %+v", FormatVersion+1, r.Actions)
	} else if !errors.Is(err, errUnsupportedVersion) || !strings.Contains(err.Error(), seg) {
		t.Errorf("repair: %v; want the version error naming %s", err, seg)
	}
	if after, err := crashed.Stat(seg); err != nil || after.Size != int64(len(before)) {
		t.Fatalf("the segment of another version was changed or removed: %v", err)
	}
	if after := readFileForTest(t, crashed, seg); string(after) != string(before) {
		t.Fatal("the segment of another version was changed")
	}
}

// TestRepairCutsAGarbageTailThatLoadingFences: a segment that no journal names, whose last record
// is overwritten with non-zero bytes (no valid record after them), fences its ledger under
// SyncAlways: its entries were checkpointed, so this is damage, not a torn write. Repair must
// report it and, with --accept-loss, cut it, or the ledger stays fenced for good.
func TestRepairCutsAGarbageTailThatLoadingFences(t *testing.T) {
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	crashed, seg, acked := checkpointedLedger(t, "repair/tail", mod, 10)
	overwriteSynced(t, crashed, seg, headerSize+9*31+24, []byte("XX")) // entry 9's data ("entry-N": 31-byte records)
	e := openMem(t, crashed, mod)
	l, err := e.OpenLedger(context.Background(), "repair/tail")
	if err != nil || !errors.Is(l.Err(), ErrCorrupt) {
		t.Fatalf("the damaged last record was not reported: %v %v", err, l.Err())
	}
	_ = e.Close()
	wantRepaired(t, crashed, "repair/tail", ".seg")
	e = openMem(t, crashed, mod)
	defer e.Close()
	l, err = e.OpenLedger(context.Background(), "repair/tail")
	if err != nil || l.Err() != nil {
		t.Fatalf("after the repair: %v %v", err, l.Err())
	}
	if l.Entries() != int64(len(acked))-1 {
		t.Fatalf("after the repair: %d entries, want the %d before the damaged one", l.Entries(), len(acked)-1)
	}
}

// TestRepairLeavesSegmentsTheJournalNamesToTheReplay: a segment that a journal file to replay
// still names may end torn or with garbage after a crash (its last writes were never synced); the
// replay writes the journal's entries over it. Repair's checks before the replay must not call that
// damage and cut it (with direct writes, what follows a hole there may be acknowledged entries the
// replay keeps).
func TestRepairLeavesSegmentsTheJournalNamesToTheReplay(t *testing.T) {
	ctx := context.Background()
	mem, mod, e, _, seg := journalTailLedger(t, "repair/replayed", 5, 5)
	crashed := mem.Crash(nil)
	_ = e.Close()
	st, err := crashed.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	overwriteSynced(t, crashed, seg, st.Size, []byte("garbage written back before the crash"))
	if r := repairT(t, crashed, "repair/replayed", false); len(r.Actions) != 0 {
		t.Fatalf("repair reports a segment the journal replay repairs: %+v", r.Actions)
	}
	repairT(t, crashed, "repair/replayed", true)
	e = openMem(t, crashed, mod)
	defer e.Close()
	l, err := e.OpenLedger(ctx, "repair/replayed")
	if err != nil || l.Err() != nil || l.Entries() != 10 {
		t.Fatalf("after repair and replay: %v %v, %d entries, want 10", err, l.Err(), l.Entries())
	}
}

// TestRepairGoesOnPastARefusedSegment: a segment of another format version is refused, but the
// other files are still checked and repaired; the version error comes at the end.
func TestRepairGoesOnPastARefusedSegment(t *testing.T) {
	ctx := context.Background()
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	mem := vfs.NewMem()
	e := openMem(t, mem, mod)
	var segs []string
	for _, name := range []string{"a", "b"} {
		l, err := e.OpenLedger(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, 3)
		segs = append(segs, segPath(l.dirPath(), l.Segments()[0].ID))
	}
	checkpointAll(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	id, err := parseHeader(segHeaderOf(t, mem, segs[0]), magicSegment)
	if err != nil {
		t.Fatal(err)
	}
	overwriteSynced(t, mem, segs[0], 0, appendHeaderVersion(nil, magicSegment, id, 0, FormatVersion+1))
	writeFileForTest(t, mem, path.Dir(segs[1])+"/FENCED", []byte("test: fenced"))
	r, err := Repair(ctx, RepairOptions{Dir: "/data", FS: mem, AcceptLoss: true, Logger: testLogger()})
	if !errors.Is(err, errUnsupportedVersion) {
		t.Fatalf("repair: %v; want the version error", err)
	}
	fenced, refused := false, false
	for _, a := range r.Actions {
		fenced = fenced || (strings.HasSuffix(a.File, "FENCED") && a.Done)
		refused = refused || (a.File == segs[0] && !a.Done)
	}
	if !fenced || !refused {
		t.Fatalf("actions %+v: want b's FENCED marker repaired and a's segment reported as refused", r.Actions)
	}
	if _, err := mem.Stat(path.Dir(segs[1]) + "/FENCED"); !vfs.IsNotExist(err) {
		t.Fatalf("b's FENCED marker is still there: %v", err)
	}
}
