package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// A segment's first entries, written by the applier and not yet fsynced, are lost to a failed
// writeback that an fsync on another descriptor reported (a checkpoint's, a retired descriptor's)
// before the ledger was fenced; the ledger's next group commits write directly to the segment,
// their own descriptor's fdatasync succeeds and they are acknowledged. The journal still holds the
// lost entries (no checkpoint retires it while the repair is pending). A crash before the repair:
// recovery must fill the hole from the journal and keep the direct entries after it, not cut the
// segment at the hole (recover.go, adoptAfterHole).

func holeRefillOptions(o *Options) {
	o.DirectWriteBytes = 100
	o.BypassCacheBytes = -1
	o.SyncPipelineDepth = 1
	o.JournalFileBytes = 1 << 20
	o.CursorFlushInterval = time.Hour
	o.TrimInterval = time.Hour
}

func holeRefillData(i int) []byte {
	return []byte(fmt.Sprintf("x#%d#%s", i, bytes.Repeat([]byte{'z'}, 300)))
}

// appendAcked appends entry i to l and records it as acknowledged.
func appendAcked(t *testing.T, l *Ledger, acked map[mtypes.Position][]byte, i int) {
	t.Helper()
	p, err := l.Append(context.Background(), holeRefillData(i), 1)
	if err != nil {
		t.Fatalf("append %d: %v", i, err)
	}
	acked[p] = holeRefillData(i)
}

// verifyHoleRefilled reopens the crashed files and checks that every acknowledged entry of ledger x is
// there, intact, and that x is not fenced.
func verifyHoleRefilled(t *testing.T, fs *vfs.Mem, mod func(*Options), acked map[mtypes.Position][]byte) {
	t.Helper()
	ctx := context.Background()
	e := openMem(t, fs, mod)
	defer e.Close()
	x, err := e.OpenLedger(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Err(); err != nil {
		t.Fatalf("x fenced after the crash: %v", err)
	}
	es, err := x.Read(ctx, mtypes.Earliest, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	present := map[mtypes.Position][]byte{}
	for _, en := range es {
		present[en.Position] = en.Data
	}
	for p, d := range acked {
		got, ok := present[p]
		if !ok {
			t.Errorf("acknowledged entry %v lost", p)
		} else if !bytes.Equal(got, d) {
			t.Errorf("acknowledged entry %v corrupted", p)
		}
	}
}

// The hole covers the header and both inline entries (a failed writeback stands for the error
// reported elsewhere).
func TestReplayRefillsHoleBeforeDirectEntries(t *testing.T) {
	crashed, mod, acked := holeBeforeDirectEntries(t)
	verifyHoleRefilled(t, crashed, mod, acked)
}

// TestRepairKeepsDirectEntriesAfterAHoleTheReplayRefills: the same files, repaired with
// AcceptLoss before the broker opens them. Before the replay the segment shows a hole with valid
// records after it, which in a segment no journal names is damage; this one the journal still
// names, and the replay refills the hole and keeps the acknowledged direct entries after it.
// Repair cut the segment at the hole, losing them.
func TestRepairKeepsDirectEntriesAfterAHoleTheReplayRefills(t *testing.T) {
	crashed, mod, acked := holeBeforeDirectEntries(t)
	r, err := Repair(context.Background(), RepairOptions{Dir: "/data", FS: crashed, AcceptLoss: true, Logger: testLogger()})
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	for _, a := range r.Actions {
		t.Errorf("repair changed %s: %s (%s)", a.File, a.Problem, a.Loss)
	}
	verifyHoleRefilled(t, crashed, mod, acked)
}

// holeBeforeDirectEntries makes the files of TestReplayRefillsHoleBeforeDirectEntries: ledger x's
// segment lost its header and two inline entries to a failed writeback, two acknowledged direct
// entries follow the hole, and the journal holds all four.
func holeBeforeDirectEntries(t *testing.T) (*vfs.Mem, func(*Options), map[mtypes.Position][]byte) {
	t.Helper()
	ctx := context.Background()
	fs := vfs.NewMem()
	mod := func(o *Options) {
		holeRefillOptions(o)
		o.MaxOpenFiles = 2
	}
	e := openMem(t, fs, mod)
	x, err := e.OpenLedger(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	acked := map[mtypes.Position][]byte{}
	appendAcked(t, x, acked, 0) // inline; the first large batch
	appendAcked(t, x, acked, 1) // inline; arms direct mode
	seg := segPath(x.dirPath(), x.Segments()[0].ID)
	z, err := e.OpenLedger(ctx, "z")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := z.Append(ctx, []byte("z"), 1); err != nil { // evicts x's segment descriptor
		t.Fatal(err)
	}
	e.files.waitRetired()
	if err := fs.FailWriteback(seg, vfs.EIO); err != nil {
		t.Fatal(err)
	}
	if lost, _ := fs.LostBytes(seg); lost == 0 {
		t.Fatal("nothing of the segment was lost: the test does not make a hole")
	}
	appendAcked(t, x, acked, 2) // direct
	appendAcked(t, x, acked, 3) // direct
	if e.m.directWrites.Load() == 0 {
		t.Fatal("no direct write: the test does not reach the case")
	}
	crashed := fs.Crash(nil)
	_ = e.Close()
	return crashed, mod, acked
}

// The checkpoint's fsync of the segment fails and, before the checkpointer fences the ledger
// (held back here by e.table.mu), the ledger's next group commits go direct and are acknowledged.
func TestReplayRefillsHoleLeftByCheckpointFsyncFailure(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	mod := func(o *Options) {
		holeRefillOptions(o)
		o.MaxOpenFiles = 64
	}
	e := openMem(t, fs, mod)
	x, err := e.OpenLedger(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	y, err := e.OpenLedger(ctx, "y")
	if err != nil {
		t.Fatal(err)
	}
	acked := map[mtypes.Position][]byte{}
	appendAcked(t, x, acked, 0)
	appendAcked(t, x, acked, 1)
	if _, err := y.Append(ctx, []byte("y"), 1); err != nil {
		t.Fatal(err)
	}
	seg := segPath(x.dirPath(), x.Segments()[0].ID)
	var segFailed, journalFails atomic.Bool
	fs.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == seg && segFailed.CompareAndSwap(false, true) {
			return vfs.EIO
		}
		if op == vfs.OpSync && journalFails.Load() && strings.Contains(name, "/journal/") {
			return vfs.EIO
		}
		return nil
	})
	e.table.mu.Lock() // the checkpointer's needRepair waits here
	locked := true
	defer func() {
		if locked {
			e.table.mu.Unlock()
		}
		fs.SetInjector(nil)
		_ = e.Close()
	}()
	// A failed journal fsync abandons the journal file: the checkpointer syncs x's segment.
	journalFails.Store(true)
	if _, err := y.Append(ctx, []byte("y2"), 1); err == nil {
		t.Fatal("y's append did not fail")
	}
	journalFails.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for !segFailed.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !segFailed.Load() {
		t.Fatal("the checkpoint never synced x's segment")
	}
	appendAcked(t, x, acked, 2) // inline (carries y's void records)
	appendAcked(t, x, acked, 3) // inline; arms direct mode
	appendAcked(t, x, acked, 4) // direct
	if e.m.directWrites.Load() == 0 {
		t.Fatal("no direct write: the test does not reach the case")
	}
	crashed := fs.Crash(nil)
	e.table.mu.Unlock()
	locked = false
	verifyHoleRefilled(t, crashed, mod, acked)
}

// A fenced ledger is reopened in the same engine; loading its unsealed segment cuts the padding
// after its last block written around the page cache and fsyncs, and that fsync fails: the
// entries acknowledged since the segment's last fsync may be lost on disk, and this descriptor
// took the error. The segment must become a repair target (ledgerload.go, syncLoaded) so that
// no checkpoint retires the journal holding those entries before they are rewritten.
func TestLoadSyncFailureMakesSegmentRepairTarget(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	mod := func(o *Options) {
		o.DirectWriteBytes = -1
		o.BypassCacheBytes = 1
		o.MaxOpenFiles = 2
		o.SyncPipelineDepth = 1
		o.JournalFileBytes = 64 << 10
		o.SegmentMaxEntries = 6
		o.CursorFlushInterval = time.Hour
		o.TrimInterval = time.Hour
	}
	e := openMem(t, fs, mod)
	closed := false
	defer func() {
		fs.SetInjector(nil)
		if !closed {
			_ = e.Close()
		}
	}()
	x, err := e.OpenLedger(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	acked := map[mtypes.Position][]byte{}
	for i := 0; i < 3; i++ {
		appendAcked(t, x, acked, i)
	}
	// A checkpoint makes the segment's first entries durable.
	y, err := e.OpenLedger(ctx, "y")
	if err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, 10*time.Second, "a checkpoint", func() error {
		if e.Metrics().Checkpoints > 0 {
			return nil
		}
		if _, err := y.Append(ctx, bytes.Repeat([]byte{'y'}, 1000), 1); err != nil {
			t.Fatal(err)
		}
		return errors.New("none yet")
	})
	for i := 3; i < 6; i++ { // acknowledged, written around the page cache, not fsynced
		appendAcked(t, x, acked, i)
	}
	seg := segPath(x.dirPath(), x.Segments()[0].ID)
	ys := y.Segments()
	ySeg := segPath(y.dirPath(), ys[len(ys)-1].ID)
	// y's segment keeps failing: a repair stays pending, so checkpoints wait (syncing nothing).
	var journalFails atomic.Bool
	fs.SetInjector(func(op vfs.Op, name string) error {
		if (op == vfs.OpSync || op == vfs.OpWrite) && name == ySeg {
			return vfs.EIO
		}
		if journalFails.Load() && op == vfs.OpSync && strings.Contains(name, "/journal/") {
			return vfs.EIO
		}
		return nil
	})
	_, _ = y.Append(ctx, []byte("y fails after its ack"), 1)
	poll.UntilNil(t, 10*time.Second, "y's segment a repair target", func() error {
		if e.repairsPending() > 0 {
			return nil
		}
		return errors.New("no repair pending")
	})
	// The group commit of the auto-roll (the full segment's seal and entry 0 of the next) fails:
	// x is fenced with its segment unsealed and padded.
	journalFails.Store(true)
	if _, err := x.Append(ctx, holeRefillData(6), 1); err == nil {
		t.Fatal("append 6 did not fail")
	}
	journalFails.Store(false)
	if x.Err() == nil {
		t.Fatal("x not fenced")
	}
	// Other files push x's segment descriptor out of the cache (MaxOpenFiles 2).
	z, err := e.OpenLedger(ctx, "z")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := z.Append(ctx, []byte("zz"), 1); err != nil {
			t.Fatal(err)
		}
	}
	_ = x.Close()
	openFailingLoadSync(t, e, fs, seg, func(op vfs.Op, name string) bool {
		return (op == vfs.OpSync || op == vfs.OpWrite) && name == ySeg
	})
	poll.UntilNil(t, 10*time.Second, "the repairs done", func() error {
		if n := e.repairsPending(); n > 0 {
			return fmt.Errorf("%d pending", n)
		}
		return nil
	})
	if _, err := e.OpenLedger(ctx, "x"); err != nil {
		t.Fatalf("reopening x after the repair: %v", err)
	}
	closed = true
	_ = e.Close() // the final checkpoint retires the journal
	verifyHoleRefilled(t, fs.Crash(nil), mod, acked)
}

// openFailingLoadSync opens ledger x while the first fsync of its segment seg fails (and whatever
// else alsoFails names): the open must reach that fsync and fail. The failures end after it.
func openFailingLoadSync(t *testing.T, e *Engine, fs *vfs.Mem, seg string, alsoFails func(op vfs.Op, name string) bool) {
	t.Helper()
	var failed atomic.Bool
	fs.SetInjector(func(op vfs.Op, name string) error {
		if alsoFails != nil && alsoFails(op, name) {
			return vfs.EIO
		}
		if op == vfs.OpSync && name == seg && failed.CompareAndSwap(false, true) {
			return vfs.EIO
		}
		return nil
	})
	_, err := e.OpenLedger(context.Background(), "x")
	fs.SetInjector(nil)
	if err == nil || !failed.Load() {
		t.Fatalf("opening x: %v, its segment's fsync failed: %v (the test does not reach the case)", err, failed.Load())
	}
}

// TestLoadSyncFailureOfDurableSegmentRetriedByReopening: a segment made durable by an earlier run
// (nothing of it waits for a checkpoint in this process) gets its padding cut when loaded, and
// that cut's fsync fails. Opening the ledger fails, but nothing acknowledged is at risk and no
// journal of this process holds its entries, so the file is no repair target: one that no repair
// can finish would hold back every checkpoint until a restart. Opening it again succeeds.
func TestLoadSyncFailureOfDurableSegmentRetriedByReopening(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	mod := func(o *Options) {
		o.CursorFlushInterval = time.Hour
		o.TrimInterval = time.Hour
	}
	e := openMem(t, fs, mod)
	x, err := e.OpenLedger(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	acked := map[mtypes.Position][]byte{}
	for i := 0; i < 3; i++ {
		appendAcked(t, x, acked, i)
	}
	segID := x.Segments()[0].ID
	dir := x.dirPath()
	if err := e.Close(); err != nil { // the final checkpoint makes the segment durable
		t.Fatal(err)
	}
	// Zeros after the last entry (padding, as a direct write leaves), and no index: loading
	// scans the segment, cuts the padding and fsyncs the cut.
	seg := segPath(dir, segID)
	f, err := fs.OpenFile(seg, vfs.ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	size, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 100), size); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	_ = fs.Remove(idxPath(dir, segID))

	e = openMem(t, fs, mod)
	defer func() { _ = e.Close() }()
	openFailingLoadSync(t, e, fs, seg, nil)
	if n := e.repairsPending(); n > 0 {
		t.Fatalf("%d repairs pending for a segment no journal of this process holds", n)
	}
	x, err = e.OpenLedger(ctx, "x")
	if err != nil {
		t.Fatalf("opening x again: %v", err)
	}
	es, err := x.Read(ctx, mtypes.Earliest, 0, 0)
	if err != nil || len(es) != len(acked) {
		t.Fatalf("read x: %d entries, %v; %d acknowledged", len(es), err, len(acked))
	}
	for _, en := range es {
		if !bytes.Equal(en.Data, acked[en.Position]) {
			t.Fatalf("entry %v: %q, want %q", en.Position, en.Data, acked[en.Position])
		}
	}
}

// TestReplayRefillOfLongHoleReadsLittle: a segment whose applied entries were all lost to a
// failed writeback, while a later fsync made its size durable (zeros where the entries were),
// gets them back from the journal one by one. After each, replay looks whether valid entries
// continue it (adoptAfterHole); with zeros there, that look must stay small: a scan of the rest
// of the file per refilled entry made such a recovery read the hole once per entry (seconds for
// thousands of entries, minutes for a journal backlog of them).
func TestReplayRefillOfLongHoleReadsLittle(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	mod := func(o *Options) {
		o.DirectWriteBytes = -1
		o.BypassCacheBytes = -1
		o.CursorFlushInterval = time.Hour
		o.TrimInterval = time.Hour
	}
	e := openMem(t, fs, mod)
	x, err := e.OpenLedger(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	const entries = 2000
	acked := map[mtypes.Position][]byte{}
	for i := range entries {
		appendAcked(t, x, acked, i)
	}
	seg := segPath(x.dirPath(), x.Segments()[0].ID)
	var segSize int64
	poll.UntilNil(t, 10*time.Second, "the entries applied to the segment", func() error {
		fi, err := fs.Stat(seg)
		if err != nil {
			return err
		}
		segSize = fi.Size
		if segSize < int64(entries*len(holeRefillData(0))) {
			return fmt.Errorf("segment %d bytes", segSize)
		}
		return nil
	})
	if err := fs.FailWriteback(seg, vfs.EIO); err != nil {
		t.Fatal(err)
	}
	if lost, _ := fs.LostBytes(seg); int64(lost) < segSize/2 {
		t.Fatalf("%d bytes of the segment lost: the test does not make a long hole", lost)
	}
	// A later fsync makes the file's size durable over the lost bytes (the first one reports the
	// failed writeback).
	f, err := fs.OpenFile(seg, vfs.ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{x.dirPath(), e.ledgersDir} {
		if err := fs.SyncDir(d); err != nil {
			t.Fatal(err)
		}
	}
	_ = f.Close()
	crashed := fs.Crash(nil)
	_ = e.Close()

	fi, err := crashed.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	e = openMem(t, readCountingFS{crashed, &read}, mod)
	_ = e.Close()
	if n := read.Load(); n > 4*fi.Size {
		t.Fatalf("recovery read %d bytes of segments; the segment holds %d", n, fi.Size)
	}
	verifyHoleRefilled(t, crashed, mod, acked)
}
