package storage

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Deterministic tests for two crash outcomes that the randomized crash test
// (TestRandomizedCrashDirect) reaches when checkpoints run often (as with the early rotation of a
// journal file that is not full size, nextjournal.go). Both come from a checkpoint of an earlier
// journal file fsyncing a ledger's directory while the current journal file still covers that
// ledger's unsynced segment files: the directory then shows the current state of the segment files
// (new ones exist, trimmed ones are gone) while their contents are still those of the page cache at
// the crash.

// TestRecoveryTruncatesVoidedTornSegment: a segment write fails while a batch is applied, after
// the entry it held was acknowledged (the applier acknowledges entries before it writes them), so
// the ledger is fenced, checkpoints stop (the journal keeps that entry), and its void record says
// that the next segment's entries of that batch (written by the same apply, never acknowledged)
// do not count. After a crash that keeps a torn prefix of
// that unsynced segment (its directory entry made durable meanwhile), recovery must cut the torn
// record off, as it cuts off complete voided records; left in place, the torn record would bring
// the ledger back fenced as corrupt ("bad record at offset 32 ... after entry -1").
func TestRecoveryTruncatesVoidedTornSegment(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	fs := &stallFS{FS: mem}
	mod := func(o *Options) {
		o.SegmentMaxEntries = 2
		o.DirectWriteBytes = -1
		o.SyncPipelineDepth = 1
	}
	e := openMem(t, fs, mod)
	other, err := e.OpenLedger(ctx, "void/other")
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.OpenLedger(ctx, "void/torn")
	if err != nil {
		t.Fatal(err)
	}
	first := appendN(t, l, 1)[0]
	// Hold a group commit of another ledger at its fsync, so that the next three appends form one
	// batch: entry 1 of the first segment, then (the segment is full) entries 0 and 1 of a new one.
	fs.stall()
	otherDone := make(chan error, 1)
	other.AppendAsync([]byte("held"), 1, func(_ mtypes.Position, err error) { otherDone <- err })
	poll.Until(t, 10*time.Second, "the journal fsync to stall", func() bool { return fs.stalled.Load() == 1 })
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	var acked []mtypes.Position
	wg.Add(3)
	for i := 1; i <= 3; i++ {
		l.AppendAsync(payload(i), int64(i), func(p mtypes.Position, err error) {
			mu.Lock()
			if err != nil {
				failed++
			} else {
				acked = append(acked, p)
			}
			mu.Unlock()
			wg.Done()
		})
	}
	// The applier's write to the first segment fails; the write to the new one succeeds.
	firstSeg := segPath(l.dirPath(), first.LedgerID)
	mem.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpWrite && name == firstSeg {
			return vfs.EIO
		}
		return nil
	})
	fs.release()
	wg.Wait()
	if err := <-otherDone; err != nil {
		t.Fatal(err)
	}
	mem.SetInjector(nil)
	acknowledged := mtypes.Position{LedgerID: first.LedgerID, EntryID: first.EntryID + 1}
	if failed != 2 || len(acked) != 1 || acked[0] != acknowledged || l.Err() == nil {
		t.Fatalf("%d of 3 appends failed (acked %v), ledger error %v: want %v acknowledged, the rest failed and the ledger fenced", failed, acked, acknowledged, l.Err())
	}
	segs := l.Segments()
	second := segs[len(segs)-1].ID
	if second == first.LedgerID {
		t.Fatalf("no new segment after the first one filled: %+v", segs)
	}
	// The void record is queued before the failures are reported: this append makes it durable.
	appendN(t, other, 1)
	secondSeg := segPath(l.dirPath(), second)
	live, err := mem.Stat(secondSeg)
	if err != nil {
		t.Fatalf("the new segment was not made: %v", err)
	}
	if live.Size != headerSize {
		// The applier wrote the unconfirmed records and cut them off again (unconfirmed.go).
		t.Fatalf("new segment holds %d bytes, want its header only", live.Size)
	}
	// What the applier wrote there: its header and the two records that failed.
	content := appendHeader(nil, magicSegment, uint64(second))
	content = appendSegRecord(content, 0, 2, payload(2))
	content = appendSegRecord(content, 1, 3, payload(3))
	// The directory entries became durable (a checkpoint of an earlier journal file fsyncs the
	// ledger's directory), the new segment's data and its cut did not: the disk kept a torn
	// prefix of the write.
	for _, d := range []string{"/data", "/data/ledgers", l.dirPath()} {
		if err := mem.SyncDir(d); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.Crash(nil)
	_ = e.Close()
	f, err := crashed.OpenFile(secondSeg, vfs.ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(content[:headerSize+30], 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	_ = f.Close()

	e = openMem(t, crashed, mod)
	defer e.Close()
	l = openUnfenced(t, e, "void/torn")
	es, err := l.Read(ctx, mtypes.Earliest, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Position != first || string(es[0].Data) != string(payload(0)) ||
		es[1].Position != acknowledged || string(es[1].Data) != string(payload(1)) {
		t.Fatalf("entries after the crash: %+v, want only the acknowledged %v and %v (replayed from the journal)", es, first, acknowledged)
	}
	if _, err := crashed.Stat(secondSeg); err == nil {
		if st, _ := crashed.Stat(secondSeg); st.Size > headerSize {
			t.Fatalf("the voided segment still holds %d bytes", st.Size)
		}
	}
}

// TestRecoveryReplaysTrimmedSegment: a segment whose first entries were checkpointed, whose last
// entries are in the current journal file, and which is then trimmed. The checkpoint of the earlier
// journal file, running late, fsyncs the ledger's directory after the trim removed the segment
// file. After a crash, replay meets entries of a segment that no longer exists and is trimmed
// later in the same journal: that is no gap (the trim removes those entries anyway), and recovery
// must not fence the ledger for it ("ledger was fenced by recovery").
func TestRecoveryReplaysTrimmedSegment(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	fs := &stallFS{FS: mem}
	mod := func(o *Options) {
		o.JournalFileBytes = 8 << 10
		o.DirectWriteBytes = -1
		o.SegmentMaxEntries = 1000
	}
	e := openMem(t, fs, mod)
	l, err := e.OpenLedger(ctx, "trim/replayed")
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.OpenCursor(ctx, "sub", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	// The checkpoint of journal file 1 stalls at its first segment fsync.
	fs.mu.Lock()
	fs.segGate = make(chan struct{})
	fs.mu.Unlock()
	defer fs.release()
	jseq := func() uint64 {
		e.queue.mu.Lock()
		defer e.queue.mu.Unlock()
		return e.queue.pendingSeq
	}
	big := make([]byte, 1000)
	var last mtypes.Position
	for i := 0; jseq() == 1; i++ {
		if i == 100 {
			t.Fatal("journal file 1 not rotated after 100 KB")
		}
		if last, err = l.Append(ctx, big, 1); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 10*time.Second, "the checkpoint of journal file 1 to stall", func() bool { return fs.segStalled.Load() > 0 })
	// Two more entries of the segment, in journal file 2; then the segment is sealed and trimmed.
	for range 2 {
		if last, err = l.Append(ctx, big, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Roll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkDelete(ctx, last); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil { // Trim goes by persisted positions
		t.Fatal(err)
	}
	if err := l.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	if segs := l.Segments(); len(segs) != 1 || segs[0].ID == last.LedgerID {
		t.Fatalf("segments after the trim: %+v", segs)
	}
	fs.release()
	poll.Until(t, 10*time.Second, "the checkpoint of journal file 1", func() bool { return e.Metrics().Checkpoints >= 1 })
	if _, err := mem.Stat(segPath(l.dirPath(), last.LedgerID)); err == nil {
		t.Fatal("trimmed segment file still exists")
	}
	crashed := mem.Crash(nil)
	_ = e.Close()

	e = openMem(t, crashed, mod)
	defer e.Close()
	l = openUnfenced(t, e, "trim/replayed")
	if n := l.Entries(); n != 0 {
		t.Fatalf("%d entries after the crash, want none (all trimmed)", n)
	}
	if _, err := crashed.Stat(segPath(l.dirPath(), last.LedgerID)); !errors.Is(err, nil) && !vfs.IsNotExist(err) {
		t.Fatal(err)
	} else if err == nil {
		t.Fatal("recovery left the trimmed segment's file behind")
	}
}

// openUnfenced opens ledger name of a recovered engine and fails the test unless it opens
// writable (recovery neither dropped nor fenced it).
func openUnfenced(t *testing.T, e *Engine, name string) *Ledger {
	t.Helper()
	l, err := e.OpenLedger(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("ledger %s fenced after a crash: %v", name, err)
	}
	return l
}

// TestLostSegmentHeaderKeepsTheEntriesBehindIt: a segment whose header no longer reads (damaged
// after its entries were checkpointed; the journal holds only later entries) keeps its entries:
// recovery writes the header again and, since entry 0's record follows it, scans the records as
// in any segment, so the journal's later entries continue them. Before, replay took the entries
// behind the header for a hole, found a gap to the journal, fenced the ledger and cut the segment:
// every checkpointed entry was lost.
func TestLostSegmentHeaderKeepsTheEntriesBehindIt(t *testing.T) {
	ctx := context.Background()
	mem, mod, e, l := pageCacheLedger(t, "lost/header")
	acked := map[mtypes.Position]string{}
	appendSome := func(from, n int) {
		for i := from; i < from+n; i++ {
			d := "entry-" + strconv.Itoa(i)
			p, err := l.Append(ctx, []byte(d), 1)
			if err != nil {
				t.Fatal(err)
			}
			acked[p] = d
		}
	}
	appendSome(0, 10)
	checkpointAll(t, e)
	appendSome(10, 5) // in the journal only: the crash drops the segment's unsynced writes
	seg := segPath(l.dirPath(), l.Segments()[0].ID)
	crashed := mem.Crash(nil)
	_ = e.Close()

	damageAfterCrash(t, crashed, seg, []byte("damaged!")) // the header only

	e = openMem(t, crashed, mod)
	defer e.Close()
	verifyAcked(t, e, "lost/header", acked)
}

// TestDamagedSegmentHeaderLoadsItsEntries: a segment no journal file names any more (its entries
// checkpointed) whose header alone was damaged afterwards. Loading gets the header written again
// and serves every entry, as replay does for a segment the journal names
// (TestLostSegmentHeaderKeepsTheEntriesBehindIt): each record has its own checksum and id, and
// fencing the ledger would stop a topic whose data is all there. Repair finds nothing to do.
func TestDamagedSegmentHeaderLoadsItsEntries(t *testing.T) {
	ctx := context.Background()
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	crashed, seg, acked := checkpointedLedger(t, "damaged/header", mod, 10)

	damageAfterCrash(t, crashed, seg, []byte("damaged!")) // the header only
	if r := repairT(t, crashed, "damaged/header", false); len(r.Actions) != 0 {
		t.Fatalf("repair reports %+v for a segment loading reads whole", r.Actions)
	}
	for open := 1; open <= 2; open++ {
		e := openMem(t, crashed, mod)
		verifyAcked(t, e, "damaged/header", acked)
		l, err := e.OpenLedger(ctx, "damaged/header")
		if err != nil || l.Err() != nil {
			t.Fatalf("open %d: %v, %v", open, err, l.Err())
		}
		_ = e.Close()
	}
	if _, err := parseHeader(segHeaderOf(t, crashed, seg), magicSegment); err != nil {
		t.Fatalf("the header was not written again: %v", err)
	}
}

// checkpointedLedger appends n entries ("entry-N") to a new ledger (mod applied), checkpoints them
// and returns a crashed copy of the files, the segment path and the acknowledged entries.
func checkpointedLedger(t *testing.T, name string, mod func(*Options), n int) (*vfs.Mem, string, map[mtypes.Position]string) {
	t.Helper()
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, mod)
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[mtypes.Position]string{}
	for i := range n {
		d := "entry-" + strconv.Itoa(i)
		p, err := l.Append(ctx, []byte(d), 1)
		if err != nil {
			t.Fatal(err)
		}
		acked[p] = d
	}
	checkpointAll(t, e)
	seg := segPath(l.dirPath(), l.Segments()[0].ID)
	crashed := mem.Crash(nil)
	_ = e.Close()
	return crashed, seg, acked
}

// overwriteSynced writes b at off of file p, durably: damage found on the disk.
func overwriteSynced(t *testing.T, fs vfs.FS, p string, off int64, b []byte) {
	t.Helper()
	f, err := fs.OpenFile(p, vfs.ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestSegmentHeaderOfAnotherVersionIsNotRewritten: a well-formed header of another format version
// (a newer build's segment) is not damage: neither loading nor repair writes this build's header
// over it (errUnsupportedVersion is never treated as torn).
func TestSegmentHeaderOfAnotherVersionIsNotRewritten(t *testing.T) {
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	crashed, seg, _ := checkpointedLedger(t, "other/version", mod, 10)
	id, err := parseHeader(segHeaderOf(t, crashed, seg), magicSegment)
	if err != nil {
		t.Fatal(err)
	}
	v2 := appendHeaderVersion(nil, magicSegment, id, 0, FormatVersion+1)
	overwriteSynced(t, crashed, seg, 0, v2)
	if _, err := Repair(context.Background(), RepairOptions{Dir: "/data", FS: crashed, Ledger: "other/version", Logger: testLogger()}); !errors.Is(err, errUnsupportedVersion) {
		t.Errorf("repair: %v; want the version error", err)
	}
	e := openMem(t, crashed, mod)
	if l, err := e.OpenLedger(context.Background(), "other/version"); err == nil && l.Err() == nil {
		t.Errorf("a segment of format version %d loads as this build's (%d entries)", FormatVersion+1, l.Entries())
	}
	_ = e.Close()
	h := segHeaderOf(t, crashed, seg)
	if v := h[8]; v != FormatVersion+1 {
		t.Fatalf("a segment header of format version %d was overwritten with version %d", FormatVersion+1, v)
	}
}

// TestDamagedHeaderKeptWhenRecordsAreDamagedToo: the header is written again only once the
// records check out; a segment whose records are damaged in the middle too is fenced and kept for
// Repair as it is.
func TestDamagedHeaderKeptWhenRecordsAreDamagedToo(t *testing.T) {
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	crashed, seg, _ := checkpointedLedger(t, "damaged/both", mod, 10)
	orig := segHeaderOf(t, crashed, seg)
	overwriteSynced(t, crashed, seg, 0, []byte("damaged!"))
	// damage entry 3's record data (entries are "entry-N": 8+16+7 = 31 bytes each)
	overwriteSynced(t, crashed, seg, headerSize+3*31+24, []byte("XX"))
	e := openMem(t, crashed, mod)
	l, err := e.OpenLedger(context.Background(), "damaged/both")
	if err == nil && l.Err() == nil {
		t.Fatalf("loads with a damaged record: %d entries", l.Entries())
	}
	t.Logf("open: %v %v", err, l.Err())
	_ = e.Close()
	h := segHeaderOf(t, crashed, seg)
	if string(h) == string(orig) {
		t.Fatalf("the file of a segment refused as corrupt was changed: its header was written again")
	}
}

// TestSyncIntervalKeepsDamageBehindALostHeader: with SyncInterval a bad record is taken for a torn
// tail (segment data may run ahead of the journal), but not in a segment whose header was damaged
// after its entries became durable: a damaged record with valid ones after it fences the ledger and
// the file is kept, instead of being cut there.
func TestSyncIntervalKeepsDamageBehindALostHeader(t *testing.T) {
	mod := func(o *Options) { o.DirectWriteBytes = -1; o.Sync = SyncInterval; o.SyncInterval = time.Millisecond }
	crashed, seg, acked := checkpointedLedger(t, "interval/header", mod, 10)
	overwriteSynced(t, crashed, seg, 0, []byte("damaged!"))
	overwriteSynced(t, crashed, seg, headerSize+3*31+24, []byte("XX")) // entry 3's data ("entry-N": 31-byte records)
	e := openMem(t, crashed, mod)
	defer e.Close()
	l, err := e.OpenLedger(context.Background(), "interval/header")
	if err != nil {
		t.Fatal(err)
	}
	if l.Err() == nil && l.Entries() < int64(len(acked)) {
		t.Fatalf("checkpointed entries silently cut: %d of %d left, ledger not fenced", l.Entries(), len(acked))
	}
}

// TestVoidDoesNotExplainAGapBelowIt: a ledger fenced at runtime has a void record naming the
// entries from which nothing was acknowledged. A gap in its segment that starts below that entry
// misses acknowledged entries all the same (here the segment's header and first record were
// damaged after a checkpoint, so it holds nothing the journal can continue): the ledger must open
// fenced, not as an empty ledger that silently lost every entry.
func TestVoidDoesNotExplainAGapBelowIt(t *testing.T) {
	ctx := context.Background()
	mem, mod, e, l, seg := journalTailLedger(t, "void/gap", 10, 5)
	l.fence(errors.New("test: fenced at runtime")) // a void record from entry 15 on
	other, err := e.OpenLedger(ctx, "void/other")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, other, 1) // a group commit after the void record: it is durable
	crashed := mem.Crash(nil)
	_ = e.Close()

	damageAfterCrash(t, crashed, seg, []byte(strings.Repeat("damaged!", 8))) // the header and entry 0

	e = openMem(t, crashed, mod)
	defer e.Close()
	l, err = e.OpenLedger(ctx, "void/gap")
	if err == nil && l.Err() == nil {
		t.Fatalf("ledger opens unfenced with %d entries after losing its 15 acknowledged ones", l.Entries())
	}
}

// checkpointAll rotates the journal and waits for a checkpoint: what was appended so far is
// durable in its segment files, and no journal file to replay holds it.
func checkpointAll(t *testing.T, e *Engine) {
	t.Helper()
	start := e.Metrics().Checkpoints
	if err := e.rotateJournalThrough(context.Background(), "checkpoint-barrier", pendingJournalSeq(e)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "a checkpoint of everything appended so far", func() bool { return e.Metrics().Checkpoints > start })
}

// checkpointThrough rotates the journal and waits until a checkpoint has retired every journal
// file up to the one pending now: recovery no longer replays anything appended before.
func checkpointThrough(t *testing.T, e *Engine) {
	t.Helper()
	target := pendingJournalSeq(e)
	if err := e.rotateJournalThrough(context.Background(), "checkpoint-through", target); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "a checkpoint retiring the journal", func() bool {
		e.stateMu.Lock()
		defer e.stateMu.Unlock()
		return e.firstJournal > target
	})
}

// damageAfterCrash overwrites the start of segment file p, which must hold more than its header,
// with b, durably: damage found on the disk after a crash.
func damageAfterCrash(t *testing.T, fs vfs.FS, p string, b []byte) {
	t.Helper()
	f, err := fs.OpenFile(p, vfs.ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if size, err := f.Size(); err != nil || size <= headerSize {
		t.Fatalf("segment size %d (%v) after the crash: the checkpointed entries are not in it", size, err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptSegmentWithNoReadableEntryIsKept: a segment no journal file names any more (its
// entries checkpointed) whose first record is damaged (with its header, or alone) holds no entry
// loading can read. The ledger opens fenced as corrupt, and the file must stay for Repair:
// removed as an empty segment, the next open would show an empty, healthy ledger that silently
// lost them all.
func TestCorruptSegmentWithNoReadableEntryIsKept(t *testing.T) {
	mem, mod, e, l := pageCacheLedger(t, "corrupt/first")
	appendN(t, l, 10)
	checkpointAll(t, e)
	seg := segPath(l.dirPath(), l.Segments()[0].ID)
	crashed := mem.Crash(nil)
	_ = e.Close()
	for _, damage := range [][]byte{
		[]byte(strings.Repeat("damaged!", 8)),                                               // the header and entry 0
		append(append([]byte(nil), segHeaderOf(t, crashed, seg)...), []byte("damaged!")...), // entry 0 only
	} {
		checkDamagedSegmentKept(t, crashed, mod, seg, damage)
	}
}

// segHeaderOf reads the header of segment file p.
func segHeaderOf(t *testing.T, fs vfs.FS, p string) []byte {
	t.Helper()
	f, err := fs.OpenFile(p, vfs.ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := make([]byte, headerSize)
	if _, err := f.ReadAt(h, 0); err != nil {
		t.Fatal(err)
	}
	return h
}

// checkDamagedSegmentKept damages a copy of fs's segment p with damage and opens its ledger
// twice: fenced both times, the file still there.
func checkDamagedSegmentKept(t *testing.T, fs *vfs.Mem, mod func(*Options), seg string, damage []byte) {
	t.Helper()
	ctx := context.Background()
	crashed := fs.Crash(nil) // a copy: each kind of damage starts from the same files
	damageAfterCrash(t, crashed, seg, damage)
	for open := 1; open <= 2; open++ {
		e := openMem(t, crashed, mod)
		l, err := e.OpenLedger(ctx, "corrupt/first")
		if err == nil && l.Err() == nil {
			_ = e.Close()
			t.Fatalf("open %d: ledger unfenced with %d entries after its only segment was damaged", open, l.Entries())
		}
		if _, err := crashed.Stat(seg); err != nil {
			_ = e.Close()
			t.Fatalf("open %d: the damaged segment is gone (%v): nothing is left to repair", open, err)
		}
		_ = e.Close()
	}
}

// pageCacheLedger opens an engine on a new Mem that writes every segment through the page cache
// (no direct writes), and ledger name in it.
// journalTailLedger is a pageCacheLedger with checkpointed entries in its segment and journalOnly
// more that a crash leaves in the journal only (it drops the segment's unsynced writes), and the
// path of its segment.
func journalTailLedger(t *testing.T, name string, checkpointed, journalOnly int) (*vfs.Mem, func(*Options), *Engine, *Ledger, string) {
	t.Helper()
	mem, mod, e, l := pageCacheLedger(t, name)
	appendN(t, l, checkpointed)
	checkpointAll(t, e)
	appendN(t, l, journalOnly)
	return mem, mod, e, l, segPath(l.dirPath(), l.Segments()[0].ID)
}

func pageCacheLedger(t *testing.T, name string) (*vfs.Mem, func(*Options), *Engine, *Ledger) {
	t.Helper()
	mem := vfs.NewMem()
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	e := openMem(t, mem, mod)
	l, err := e.OpenLedger(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return mem, mod, e, l
}
