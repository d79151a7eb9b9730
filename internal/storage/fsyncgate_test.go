package storage

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// The tests of this file run on vfs.Mem's model of a failed writeback (vfs/mem_writeback.go): the
// pages are marked clean, so a second fsync succeeds without writing them, and the error is
// reported once per open file description. Each fails on an engine that trusts a retried fsync.

// ownerLedger appends to a ledger the way its owner (the broker) uses it: when the ledger is fenced
// it closes it and opens it again, which the engine refuses while a file of it waits for a repair.
type ownerLedger struct {
	t     *testing.T
	e     *Engine
	name  string
	l     *Ledger
	acked map[mtypes.Position]string
	seq   int
}

func newOwnerLedger(t *testing.T, e *Engine, name string) *ownerLedger {
	o := &ownerLedger{t: t, e: e, name: name, acked: map[mtypes.Position]string{}}
	o.reopen()
	if o.l == nil {
		t.Fatalf("open %s failed", name)
	}
	return o
}

func (o *ownerLedger) reopen() {
	if o.l != nil {
		_ = o.l.Close()
		o.l = nil
	}
	if l, err := o.e.OpenLedger(context.Background(), o.name); err == nil {
		o.l = l
	} else if !errors.Is(err, ErrFenced) {
		o.t.Fatalf("open %s: %v", o.name, err)
	}
}

// appendSome appends n entries of size bytes; a fenced ledger is reopened (when the engine lets it).
func (o *ownerLedger) appendSome(n, size int) {
	for range n {
		if o.l == nil || o.l.Err() != nil {
			o.reopen()
			if o.l == nil {
				return
			}
		}
		o.seq++
		data := o.name + "#" + strings.Repeat("x", size) + "#" + strconv.Itoa(o.seq)
		p, err := o.l.Append(context.Background(), []byte(data), 1)
		if err == nil {
			o.acked[p] = data
		}
	}
}

// smallJournalsThroughCache: journal files of 16 KiB, so that a few appends make checkpoints; every
// entry written through the journal and the page cache (no direct writes, no entry cache).
func smallJournalsThroughCache(o *Options) {
	o.JournalFileBytes = 16 << 10
	o.DirectWriteBytes = -1
	o.CacheBytes = -1
}

// verifyAcked opens the ledger in e and checks that every acknowledged entry reads back intact.
func verifyAcked(t *testing.T, e *Engine, name string, acked map[mtypes.Position]string) {
	t.Helper()
	ctx := context.Background()
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("%s fenced: %v", name, err)
	}
	es, err := l.Read(ctx, mtypes.Earliest, 0, 0)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	present := map[mtypes.Position]string{}
	for _, en := range es {
		present[en.Position] = string(en.Data)
	}
	lost := 0
	for p, d := range acked {
		if present[p] != d {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%s: %d of %d acknowledged entries lost (%d entries present)", name, lost, len(acked), len(es))
	}
}

// TestCheckpointFsyncFailureNeverRetiresJournal: a checkpoint's fsync of a segment file fails
// once. Retried at the next checkpoint, the fsync succeeds without writing anything (the failed
// pages are clean), and the journal files holding the only durable copy of the entries were
// retired: after a power loss the segment lacks acknowledged entries. The engine instead rewrites
// the segment from the journal before any checkpoint retires it.
func TestCheckpointFsyncFailureNeverRetiresJournal(t *testing.T) {
	mem := vfs.NewMem()
	var failed atomic.Bool
	mem.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, ".seg") && failed.CompareAndSwap(false, true) {
			return vfs.EIO
		}
		return nil
	})
	mod := smallJournalsThroughCache
	e := openMem(t, mem, mod)
	o := newOwnerLedger(t, e, "gate")
	var atFailure int64 = -1
	poll.Until(t, 10*time.Second, "two checkpoints after the failed fsync", func() bool {
		o.appendSome(10, 200)
		if atFailure < 0 && failed.Load() {
			atFailure = e.Metrics().Checkpoints
		}
		return atFailure >= 0 && e.Metrics().Checkpoints >= atFailure+2
	})
	fsyncErrors := e.Metrics().FsyncErrors
	crashed := mem.Crash(nil)
	mem.SetInjector(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	verifyAcked(t, e2, "gate", o.acked)
	if fsyncErrors < 1 {
		t.Fatalf("%d fsync errors counted, want the injected one", fsyncErrors)
	}
}

// TestWritebackErrorOfEvictedDescriptor: the kernel's background writeback of a segment file fails
// while the file cache holds its descriptor; the cache then closes it to make room. Nobody holds
// the file open any more, so the inode and its unreported error may be evicted: the checkpoint's
// fsync through a new descriptor succeeds although the data is not on disk. The cache fsyncs a
// written descriptor before closing it (fdretire.go), which reports the error, and the segment is
// rewritten from the journal.
func TestWritebackErrorOfEvictedDescriptor(t *testing.T) {
	mem := vfs.NewMem()
	mod := func(o *Options) {
		o.JournalFileBytes = 64 << 10
		o.MaxOpenFiles = 2
		o.DirectWriteBytes = -1
		o.CacheBytes = -1
	}
	e := openMem(t, mem, mod)
	a := newOwnerLedger(t, e, "a")
	b := newOwnerLedger(t, e, "b")
	a.appendSome(5, 100)
	poll.Until(t, 10*time.Second, "a's entries in its segment file", func() bool { return segmentWrittenEntries(a.l) == 5 })
	seg := segPath(a.l.dirPath(), a.l.LastConfirmed().LedgerID)
	if err := mem.FailWriteback(seg, vfs.EIO); err != nil {
		t.Fatal(err)
	}
	if n, _ := mem.LostBytes(seg); n == 0 {
		t.Fatal("the failed writeback lost nothing: a checkpoint ran before it")
	}
	start := e.Metrics().Checkpoints
	// b's writes need the cache's descriptors: a's is closed; the journal rotates and checkpoints.
	poll.Until(t, 10*time.Second, "two checkpoints", func() bool {
		b.appendSome(5, 1000)
		return e.Metrics().Checkpoints >= start+2
	})
	crashed := mem.Crash(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	verifyAcked(t, e2, "a", a.acked)
	verifyAcked(t, e2, "b", b.acked)
}

// TestRestartOverFailedSegmentWriteback: a segment's fsync fails and the broker is restarted (the
// process, not the machine) before the segment could be rewritten. The page cache still shows the
// entries, so a replay that skipped entries already in their segment found them all there,
// fsynced nothing and retired the journal: after a power loss they are gone. Replay rewrites them
// (replayrewrite.go). The segment's header and first entry are durable here (a checkpoint fsynced
// them before the failure); TestRestartOverFailedWritebackOfNewSegment is the case where they are
// not.
func TestRestartOverFailedSegmentWriteback(t *testing.T) {
	restartOverFailedWriteback(t, true)
}

// TestCheckpointFsyncFailureOfClosedLedger: the segment whose checkpoint fsync fails belongs to a
// ledger its owner closed after writing it. The engine keeps closed ledgers until a checkpoint
// covers them, so it still rewrites the segment from the journal; the ledger cannot be opened
// until then, and every acknowledged entry survives a crash afterwards.
func TestCheckpointFsyncFailureOfClosedLedger(t *testing.T) {
	mem := vfs.NewMem()
	mod := smallJournalsThroughCache
	e := openMem(t, mem, mod)
	closed := newOwnerLedger(t, e, "closed")
	closed.appendSome(10, 100)
	poll.Until(t, 10*time.Second, "the entries in their segment file", func() bool { return segmentWrittenEntries(closed.l) == 10 })
	seg := segPath(closed.l.dirPath(), closed.l.LastConfirmed().LedgerID)
	if err := closed.l.Close(); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Bool
	mem.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == seg && failed.CompareAndSwap(false, true) {
			return vfs.EIO
		}
		return nil
	})
	other := newOwnerLedger(t, e, "other")
	poll.Until(t, 10*time.Second, "the closed ledger's segment fsync to fail and be repaired", func() bool {
		other.appendSome(10, 500)
		return failed.Load() && e.Metrics().Repairs >= 1
	})
	poll.Until(t, 10*time.Second, "the engine to be healthy", func() bool { return e.Health() == nil })
	crashed := mem.Crash(nil)
	mem.SetInjector(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	verifyAcked(t, e2, "closed", closed.acked)
	verifyAcked(t, e2, "other", other.acked)
}

// TestCursorLogFsyncFailureRewritesItFromMemory: a checkpoint's fsync of a cursor log fails once.
// Retried, it would succeed without writing the lost records, and after a crash the log would end
// where they start: the cursor created since would be gone (its subscription recreated at the
// latest position, skipping the backlog). The engine replaces the log with the cursors' state in
// memory instead.
func TestCursorLogFsyncFailureRewritesItFromMemory(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	mod := smallJournalsThroughCache
	e := openMem(t, mem, mod)
	o := newOwnerLedger(t, e, "cursors")
	o.appendSome(20, 100)
	c, err := o.l.OpenCursor(ctx, "sub", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	md := o.l.LastConfirmed()
	md.EntryID = 9
	if err := c.MarkDelete(ctx, md); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	log := cursorLogPath(o.l.dirPath())
	var failed atomic.Bool
	mem.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == log && failed.CompareAndSwap(false, true) {
			return vfs.EIO
		}
		return nil
	})
	other := newOwnerLedger(t, e, "other")
	start := e.Metrics().Checkpoints
	poll.Until(t, 10*time.Second, "the cursor log's fsync to fail, and two checkpoints after it", func() bool {
		other.appendSome(10, 500)
		return failed.Load() && e.Metrics().Checkpoints >= start+2
	})
	crashed := mem.Crash(nil)
	mem.SetInjector(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	l2, err := e2.OpenLedger(ctx, "cursors")
	if err != nil {
		t.Fatal(err)
	}
	c2 := l2.Cursor("sub")
	if c2 == nil {
		t.Fatal("the durable cursor is gone after the crash")
	}
	if got := c2.MarkDeletePosition(); got.Compare(md) < 0 {
		t.Fatalf("cursor at %v after the crash, want at least the flushed %v", got, md)
	}
	verifyAcked(t, e2, "cursors", o.acked)
}

// TestCheckpointWithFailedIndexFsyncSyncsDirectories: a checkpoint's fsync of a segment index
// fails. The index is derived data, so the checkpoint removes it instead of repairing it, and
// nothing is left to repair; the checkpoint went on and retired the journal, but it had stopped
// before fsyncing the directories its job named, so after a crash a segment created in that
// journal file was gone from its directory together with its acknowledged entries.
func TestCheckpointWithFailedIndexFsyncSyncsDirectories(t *testing.T) {
	mem := vfs.NewMem()
	var engine atomic.Pointer[Engine]
	var failedIdx atomic.Bool
	var checkpointsBefore atomic.Int64 // when the index fsync failed
	mem.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, ".idx") && failedIdx.CompareAndSwap(false, true) {
			checkpointsBefore.Store(engine.Load().Metrics().Checkpoints)
			return vfs.EIO
		}
		return nil
	})
	mod := func(o *Options) {
		o.JournalFileBytes = 3 << 20
		o.SegmentMaxBytes = minIndexedSegment + 64<<10 // sealed segments get an index
		o.DirectWriteBytes = -1
		o.CacheBytes = -1
	}
	e := openMem(t, mem, mod)
	engine.Store(e)
	o := newOwnerLedger(t, e, "idx")
	poll.Until(t, 20*time.Second, "a checkpoint whose index fsync failed", func() bool {
		o.appendSome(4, 32<<10)
		return failedIdx.Load() && e.Metrics().Checkpoints > checkpointsBefore.Load()
	})
	crashed := mem.Crash(nil)
	mem.SetInjector(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	verifyAcked(t, e2, "idx", o.acked)
}
