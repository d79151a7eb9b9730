package storage

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// directOpts makes a ledger's entries go direct from 4 KiB per group commit.
func directOpts(o *Options) {
	o.DirectWriteBytes = 4 << 10
	o.SyncPipelineDepth = 2
}

func directPayload(i int) []byte {
	return append([]byte(fmt.Sprintf("d-%06d-", i)), bytes.Repeat([]byte{byte('a' + i%26)}, 1000)...)
}

// burst appends entries first..first+n-1 concurrently and waits for all of them; it returns the
// acknowledged positions by entry number and the number of failures.
func burst(l *Ledger, first, n int) (map[int]mtypes.Position, int) {
	var mu sync.Mutex
	acked := map[int]mtypes.Position{}
	failed := 0
	var wg sync.WaitGroup
	wg.Add(n)
	for i := first; i < first+n; i++ {
		l.AppendAsync(directPayload(i), int64(i), func(p mtypes.Position, err error) {
			mu.Lock()
			if err == nil {
				acked[i] = p
			} else {
				failed++
			}
			mu.Unlock()
			wg.Done()
		})
	}
	wg.Wait()
	return acked, failed
}

// intoDirectMode appends bursts to l until the engine has written one more group directly (one
// of l's: nothing else is appended meanwhile), so l is in direct mode even when another ledger
// already is; it returns the number of entries appended (all acknowledged).
func intoDirectMode(t *testing.T, e *Engine, l *Ledger) int {
	t.Helper()
	n := 0
	start := e.Metrics().DirectWrites
	for round := 0; e.Metrics().DirectWrites == start; round++ {
		if round == 50 {
			t.Fatal("no direct write after 50 bursts of 64 KiB")
		}
		acked, failed := burst(l, n, 64)
		if failed != 0 || len(acked) != 64 {
			t.Fatalf("burst: %d acknowledged, %d failed", len(acked), failed)
		}
		n += 64
	}
	return n
}

// checkEntries reads the whole ledger and checks it holds exactly entries 0..n-1 in order.
func checkEntries(t *testing.T, l *Ledger, n int) {
	t.Helper()
	es, err := l.Read(context.Background(), mtypes.Earliest, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != n {
		t.Fatalf("%d entries, want %d", len(es), n)
	}
	for i, en := range es {
		if !bytes.Equal(en.Data, directPayload(i)) {
			t.Fatalf("entry %d (%v) holds %.12q", i, en.Position, en.Data)
		}
		if en.PublishTime != int64(i) {
			t.Fatalf("entry %d publish time %d", i, en.PublishTime)
		}
	}
}

// TestDirectWriteRoundTrip: large groups are written once, straight to the segment, and the
// journal carries only references; everything reads back in order from the cache, from the files,
// after a clean reopen and after a crash at rest.
func TestDirectWriteRoundTrip(t *testing.T) {
	for _, cache := range []int64{0, -1} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			fs := vfs.NewMem()
			mod := func(o *Options) { directOpts(o); o.CacheBytes = cache }
			e, l := openDirect(t, fs, mod, "direct/rt")
			n := intoDirectMode(t, e, l)
			for range 10 {
				if acked, failed := burst(l, n, 64); failed != 0 || len(acked) != 64 {
					t.Fatalf("burst: %d acknowledged, %d failed", len(acked), failed)
				}
				n += 64
			}
			m := e.Metrics()
			if m.DirectWrites < 5 || m.DirectBytes < 5*64<<10 {
				t.Fatalf("direct writes %d (%d bytes): large groups were not written directly", m.DirectWrites, m.DirectBytes)
			}
			if m.BytesWritten >= m.DirectBytes {
				t.Fatalf("journal bytes %d >= direct bytes %d: the journal still carries the data", m.BytesWritten, m.DirectBytes)
			}
			checkEntries(t, l, n)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e, l = openDirect(t, fs, mod, "direct/rt")
			checkEntries(t, l, n)
			// A crash at rest: everything acknowledged is durable.
			crashed := fs.Crash(nil)
			_ = e.Close()
			_, l = openDirect(t, crashed, mod, "direct/rt")
			checkEntries(t, l, n)
		})
	}
}

// TestDirectWriteCrashBeforeSegmentFsync: a crash after the journal's fsync made a batch's
// references durable but before the segment's fsync finished. That batch was never acknowledged:
// recovery drops it (and everything after it on that ledger), does not fence the ledger, and
// everything acknowledged before is there.
func TestDirectWriteCrashBeforeSegmentFsync(t *testing.T) {
	mem := vfs.NewMem()
	fs := &stallFS{FS: mem}
	e, l := openDirect(t, fs, directOpts, "direct/crash")
	n := intoDirectMode(t, e, l)
	fs.mu.Lock()
	fs.segGate = make(chan struct{})
	fs.mu.Unlock()
	before := fs.journalSynced.Load()
	var acked atomic.Int32
	for i := n; i < n+64; i++ {
		l.AppendAsync(directPayload(i), int64(i), func(_ mtypes.Position, err error) {
			if err == nil {
				acked.Add(1)
			}
		})
	}
	poll.Until(t, 10*time.Second, "a segment fsync to stall after its batch's journal fsync", func() bool {
		return fs.segStalled.Load() > 0 && fs.journalSynced.Load() > before
	})
	if a := acked.Load(); a != 0 {
		t.Fatalf("%d appends acknowledged while their segment fsync is stalled", a)
	}
	crashed := mem.Crash(nil)
	fs.release()
	_ = e.Close()

	e, l = openDirect(t, crashed, directOpts, "direct/crash")
	if m := e.Metrics(); m.RecoveredTornTails == 0 {
		t.Fatal("recovery found no unacknowledged direct data to drop")
	}
	checkEntries(t, l, n)
	// The ledger goes on: new entries (direct again) and a clean reopen.
	n2 := n
	for range 4 {
		if a, failed := burst(l, n2, 64); failed != 0 || len(a) != 64 {
			t.Fatalf("burst after recovery: %d acknowledged, %d failed", len(a), failed)
		}
		n2 += 64
	}
	checkEntries(t, l, n2)
}

// TestDirectWriteFsyncFailureTruncates: a failed fdatasync of a direct write fails the batch and
// fences the ledger; the reopened ledger, and the engine after a crash, show none of the failed
// entries. The failure is the direct write's own (a checkpoint's failed fsync of the segment fails
// no batch: TestRepairOfSegmentFencedInsideADirectGroup). The writeback failure is reported to
// the file cache's descriptor of the segment too, at the checkpoint's fsync: the segment is then
// rewritten from the journal first, and OpenLedger refuses the ledger until that repair is done.
func TestDirectWriteFsyncFailureTruncates(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	fs := &directSyncFailFS{Mem: mem, lose: true}
	e, l := openDirect(t, fs, directOpts, "direct/fail")
	n := intoDirectMode(t, e, l)
	fs.armed.Store(true)
	acked, failed := burst(l, n, 64)
	if fs.hit.Load() != 1 || failed == 0 || l.Err() == nil {
		t.Fatalf("%d injected failures, %d failed, ledger error %v: a failed segment fsync must fail its batch and fence", fs.hit.Load(), failed, l.Err())
	}
	// Entries acknowledged in this burst came before the failed batch (acknowledgements are in order).
	got := len(acked)
	for i := n; i < n+got; i++ {
		if _, ok := acked[i]; !ok {
			t.Fatalf("entry %d not acknowledged but a later one was", i)
		}
	}
	n += got
	_ = l.Close()
	poll.UntilNil(t, 10*time.Second, "the ledger open again", func() (err error) {
		l, err = e.OpenLedger(ctx, "direct/fail")
		return err
	})
	checkEntries(t, l, n)
	crashed := mem.Crash(nil)
	_ = e.Close()
	_, l = openDirect(t, crashed, directOpts, "direct/fail")
	checkEntries(t, l, n)
}

// TestDirectTailTruncatedByRecovery: unacknowledged direct data can reach a segment out of order
// (a valid-looking record after garbage). Recovery truncates after the last valid entry of every
// segment the journal says got direct writes, so loading does not take it for corruption.
func TestDirectTailTruncatedByRecovery(t *testing.T) {
	mem := vfs.NewMem()
	e, l := openDirect(t, mem, directOpts, "direct/tail")
	n := intoDirectMode(t, e, l)
	crashed := mem.Crash(nil)
	_ = e.Close()

	dir := "/data/ledgers/" + mustDirName(t, "direct/tail")
	des, err := crashed.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, de := range des {
		if strings.HasSuffix(de.Name, ".seg") {
			segs = append(segs, de.Name)
		}
	}
	sort.Strings(segs)
	f, err := crashed.OpenFile(dir+"/"+segs[len(segs)-1], vfs.ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := f.Size()
	junk := append(bytes.Repeat([]byte{0xab}, 37), appendSegRecord(nil, int64(n+5), 1, []byte("late page"))...)
	if _, err := f.WriteAt(junk, size); err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	_ = f.Close()

	_, l = openDirect(t, crashed, directOpts, "direct/tail")
	checkEntries(t, l, n)
}

// openDirect opens an engine on fs (closed when the test ends) and ledger name, which must not be
// fenced.
func openDirect(t *testing.T, fs vfs.FS, mod func(*Options), name string) (*Engine, *Ledger) {
	t.Helper()
	e := openMem(t, fs, mod)
	t.Cleanup(func() { _ = e.Close() })
	l, err := e.OpenLedger(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("ledger %s fenced: %v", name, err)
	}
	return e, l
}

func mustDirName(t *testing.T, name string) string {
	t.Helper()
	d, _ := dirName(name)
	return d
}

// TestDirectWriteAcrossRotations: ledgers stay in direct mode across journal rotations (their
// directstart records open the next file), so rotations do not send data through the journal.
func TestDirectWriteAcrossRotations(t *testing.T) {
	fs := vfs.NewMem()
	mod := func(o *Options) { directOpts(o); o.JournalFileBytes = 256 << 10 }
	e, l := openDirect(t, fs, mod, "direct/rotate")
	n := intoDirectMode(t, e, l)
	before, seq0 := e.Metrics(), pendingJournalSeq(e)
	var appended int64
	for i := range 40 {
		if acked, failed := burst(l, n, 64); failed != 0 || len(acked) != 64 {
			t.Fatalf("burst: %d acknowledged, %d failed", len(acked), failed)
		}
		n += 64
		appended += 64 * int64(len(directPayload(0))+segRecordOverhead)
		if i%8 == 7 {
			// Besides the rotations the entries' size causes, one is asked for now and then, as
			// an import asks for one.
			if err := e.rotateJournalThrough(context.Background(), "direct/rotate-barrier", pendingJournalSeq(e)); err != nil {
				t.Fatal(err)
			}
		}
	}
	after := e.Metrics()
	if rotations := pendingJournalSeq(e) - seq0; rotations < 5 {
		t.Fatalf("%d rotations, want 5", rotations)
	}
	if share := float64(after.DirectBytes-before.DirectBytes) / float64(appended); share < 0.9 {
		t.Fatalf("%.0f%% of the data written directly across rotations, want >= 90%%", share*100)
	}
	checkEntries(t, l, n)
	crashed := fs.Crash(nil)
	_ = e.Close()
	_, l = openDirect(t, crashed, mod, "direct/rotate")
	checkEntries(t, l, n)
}

// TestDirectWritesRotateTheJournal: entries written straight to their segment files put only a
// reference in the journal, yet count their full size against the journal file, so the journal
// rotates (and a checkpoint moves recovery's start) every JournalFileBytes of entry data: recovery
// scans the segments a journal file references, and that scan stays bounded.
func TestDirectWritesRotateTheJournal(t *testing.T) {
	fs := vfs.NewMem()
	const journalBytes = 256 << 10
	e, l := openDirect(t, fs, func(o *Options) { directOpts(o); o.JournalFileBytes = journalBytes }, "direct/journal-size")
	n := intoDirectMode(t, e, l)
	before, seq0 := e.Metrics(), pendingJournalSeq(e)
	for range 40 { // 2.6 MB of entries, ten journal files' worth
		if acked, failed := burst(l, n, 64); failed != 0 || len(acked) != 64 {
			t.Fatalf("burst: %d acknowledged, %d failed", len(acked), failed)
		}
		n += 64
	}
	after := e.Metrics()
	journaled, direct := after.BytesWritten-before.BytesWritten, after.DirectBytes-before.DirectBytes
	if direct < 8*journalBytes {
		t.Fatalf("%d bytes written directly: the ledger left direct mode", direct)
	}
	// The rotation check at the cut sees the group commit before it is written, so a file may
	// close one group early or late: one rotation less at the most.
	least := (journaled+direct)/journalBytes - 1
	if rotations := int64(pendingJournalSeq(e) - seq0); rotations < least {
		t.Fatalf("the journal rotated %d times while %d bytes were written to it and %d directly (%d per file): want %d at the least",
			rotations, journaled, direct, journalBytes, least)
	}
	checkEntries(t, l, n)
}

// pendingJournalSeq is the sequence number of the journal file the next group commit goes to.
func pendingJournalSeq(e *Engine) uint64 {
	e.queue.mu.Lock()
	defer e.queue.mu.Unlock()
	return e.queue.pending.seq
}

// TestUndoDirectNeverGrowsAFile: when a journal write fails while earlier batches' fsyncs are in
// flight and fail too, the sync loop first truncates the earlier batches' direct data and then the
// failed batch's, which starts later in the same file. The second truncation must not extend the
// file again with zeros over what the first one cut.
func TestUndoDirectNeverGrowsAFile(t *testing.T) {
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	defer e.Close()
	p := "/data/undo.seg"
	f, err := mem.OpenFile(p, vfs.Create|vfs.ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 10_000), 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	write := func(off int64) *batch {
		cf, err := e.files.acquire(p, false)
		if err != nil {
			t.Fatal(err)
		}
		return &batch{direct: []*segWrite{{cf: cf, off: off, direct: true}}}
	}
	earlier, failed := write(4_000), write(8_000)
	e.undoDirect(earlier) // the batches in flight (drainCommits)
	e.undoDirect(failed)  // then the batch whose journal write failed (commitAsync)
	f, err = mem.OpenFile(p, vfs.ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if size, err := f.Size(); err != nil || size != 4_000 {
		t.Fatalf("segment size %d (%v) after both undos, want 4000: the later undo grew the file", size, err)
	}
}

// TestRecreatedLedgerSurvivesReplayOfItsDelete: a ledger deleted and created again under the same
// name before a checkpoint retired the delete's journal file. A crash (or a kill) then replays the
// delete, which removes the ledger's directory, the new one's included; the new ledger's entries
// that went through the journal are replayed after it, but entries written directly to the segment
// are only in that file: the replay took their references for writes never acknowledged. So the
// new ledger does not go direct while the delete may be replayed.
func TestRecreatedLedgerSurvivesReplayOfItsDelete(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	mod := func(o *Options) { directOpts(o); o.JournalFileBytes = 64 << 20 }
	e, l := openDirect(t, mem, mod, "t")
	if _, failed := burst(l, 0, 8); failed != 0 {
		t.Fatal("first appends failed")
	}
	if err := e.DeleteLedger(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	l, err := e.OpenLedger(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range 10 {
		acked, failed := burst(l, n, 64)
		if failed != 0 || len(acked) != 64 {
			t.Fatalf("burst: %d acknowledged, %d failed", len(acked), failed)
		}
		n += 64
	}
	checkEntries(t, l, n)
	if e.Metrics().Checkpoints != 0 {
		t.Fatal("a checkpoint retired the delete's journal file")
	}
	crashed := mem.Crash(nil)
	_ = e.Close()
	_, l2 := openDirect(t, crashed, mod, "t")
	checkEntries(t, l2, n)
}
