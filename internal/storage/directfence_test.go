package storage

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// oneGroup appends entry first, holds its journal fsync at fs's gate, and appends entries
// first+1..first+n meanwhile, so that these reach the journal in one group commit (in direct
// mode, written straight to the segment as one group: the journal holds one reference to them).
// onAck runs on the applier with each acknowledgement, before the next entry of the batch is
// applied. It returns the acknowledged entry numbers, the number of failures, and the number of
// direct writes of entries first+1..first+n.
func oneGroup(t *testing.T, fs *stallFS, l *Ledger, first, n int, onAck func(i int)) (acked map[int]bool, failed int, directWrites int64) {
	t.Helper()
	fs.stall()
	var mu sync.Mutex
	acked = map[int]bool{}
	var wg sync.WaitGroup
	wg.Add(n + 1)
	cb := func(i int) func(mtypes.Position, error) {
		return func(_ mtypes.Position, err error) {
			if onAck != nil {
				onAck(i)
			}
			mu.Lock()
			if err == nil {
				acked[i] = true
			} else {
				failed++
			}
			mu.Unlock()
			wg.Done()
		}
	}
	l.AppendAsync(directPayload(first), int64(first), cb(first))
	poll.Until(t, 10*time.Second, "the first entry's journal fsync to wait at the gate", func() bool { return fs.stalled.Load() == 1 })
	before := l.e.Metrics().DirectWrites // the first entry's, if any, is written before its journal record
	for i := first + 1; i < first+n+1; i++ {
		l.AppendAsync(directPayload(i), int64(i), cb(i))
	}
	fs.release()
	wg.Wait()
	return acked, failed, l.e.Metrics().DirectWrites - before
}

// TestRepairOfSegmentFencedInsideADirectGroup: a checkpoint's fsync of a segment fails (the file
// becomes a repair target and its ledger is fenced) while the applier is in the middle of a batch
// whose entries of that segment were written directly: the journal references them as one group,
// the entries before the fence are confirmed and acknowledged, those after it fail. The repair
// must take the reference for the confirmed part only; refusing it ("straddles the confirmed
// end") failed every retry, and OpenLedger refused the ledger for good. The failed entries must
// not show in the reopened ledger (their bytes are in the file), nor after a crash.
func TestRepairOfSegmentFencedInsideADirectGroup(t *testing.T) {
	fencedInsideAGroup(t, true)
}

// TestFencedInsideABatchCutsFailedEntries: the same with entries written through the journal: the
// applier writes the batch's records of the segment in one write, the failed ones too, and must
// cut them off again.
func TestFencedInsideABatchCutsFailedEntries(t *testing.T) {
	fencedInsideAGroup(t, false)
}

func fencedInsideAGroup(t *testing.T, direct bool) {
	ctx := context.Background()
	mem := vfs.NewMem()
	fs := &stallFS{FS: mem}
	mod := func(o *Options) {
		directOpts(o)
		o.SyncPipelineDepth = 1
		if !direct {
			o.DirectWriteBytes = -1
		}
	}
	e, l := openDirect(t, fs, mod, "direct/fenced")
	n := 64
	if direct {
		n = intoDirectMode(t, e, l)
	} else if acked, failed := burst(l, 0, n); failed != 0 || len(acked) != n {
		t.Fatalf("burst: %d acknowledged, %d failed", len(acked), failed)
	}
	seg := segPath(l.dirPath(), l.LastConfirmed().LedgerID)
	fenceAt := n + 3 // acknowledged; the entries of the batch after it fail
	acked, failed, directWrites := oneGroup(t, fs, l, n, 16, func(i int) {
		if i == fenceAt {
			// What the checkpointer does when its fsync of the segment fails.
			e.needRepair(seg, nil, errors.New("injected: checkpoint fsync of the segment failed"))
		}
	})
	if direct && directWrites != 1 {
		t.Fatalf("%d direct writes for the held entries, want them in one", directWrites)
	}
	if failed == 0 || !acked[fenceAt] || acked[fenceAt+1] {
		t.Fatalf("%d failed, fence entry acknowledged %v, next %v: want the batch cut after entry %d", failed, acked[fenceAt], acked[fenceAt+1], fenceAt)
	}
	n = fenceAt + 1
	_ = l.Close()
	poll.UntilNil(t, 10*time.Second, "the ledger open again", func() (err error) {
		l, err = e.OpenLedger(ctx, "direct/fenced")
		return err
	})
	checkEntries(t, l, n)
	crashed := mem.Crash(nil)
	_ = e.Close()
	_, l = openDirect(t, crashed, mod, "direct/fenced")
	checkEntries(t, l, n)
}

// directSyncFailFS fails the next fdatasync of a direct write while armed (on the read-only
// descriptor the sync loop opens for it; no other fsync of a segment uses one). With lose, the
// writeback fails as vfs.Mem models it: what was written since the file's last fsync is lost and
// every descriptor open then reports the error once. Without, the data reaches the device and the
// call reports EIO anyway, as an fsync whose writeback partly succeeded does.
type directSyncFailFS struct {
	*vfs.Mem
	lose  bool
	armed atomic.Bool
	hit   atomic.Int32
}

func (s *directSyncFailFS) OpenFile(name string, flag int) (vfs.File, error) {
	f, err := s.Mem.OpenFile(name, flag)
	if err != nil || flag != vfs.ReadOnly || !strings.HasSuffix(name, ".seg") {
		return f, err
	}
	return &directSyncFailFile{File: f, fs: s, name: name}, nil
}

type directSyncFailFile struct {
	vfs.File
	fs   *directSyncFailFS
	name string
}

func (f *directSyncFailFile) Sync() error {
	if !f.fs.armed.CompareAndSwap(true, false) {
		return f.File.Sync()
	}
	f.fs.hit.Add(1)
	if f.fs.lose {
		if err := f.fs.Mem.FailWriteback(f.name, vfs.EIO); err != nil {
			return err
		}
		return f.File.Sync() // reports the error
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	return vfs.EIO
}

// TestDirectWriteFailureCutIsDurable: a direct write's fdatasync reports an error after its data
// reached the disk. The batch fails, the sync loop truncates the data off again, and the void
// records that make recovery cut it are in the journal only until a checkpoint retires them. That
// checkpoint must make the truncation durable: otherwise, after a crash, the failed entries are
// back in the segment.
func TestDirectWriteFailureCutIsDurable(t *testing.T) {
	mem := vfs.NewMem()
	fs := &directSyncFailFS{Mem: mem}
	mod := func(o *Options) { directOpts(o); o.JournalFileBytes = 256 << 10 }
	e, l := openDirect(t, fs, mod, "direct/cut")
	n := intoDirectMode(t, e, l)
	// Direct writes until the checkpoints of the entries written before direct mode (through the
	// page cache) are done: no checkpoint fsyncs the segment any more unless something marks it.
	// A rotation is asked for after each burst so as not to wait for a journal file's worth of
	// entries (the ledger stays in direct mode across it). Two direct writes at the least: one
	// checkpoint may retire two files at once.
	start, directStart := e.Metrics().Checkpoints, e.Metrics().DirectWrites
	poll.Until(t, 10*time.Second, "two checkpoints (of the entries written through the page cache) and two direct writes (the ledger stays in direct mode)", func() bool {
		if acked, failed := burst(l, n, 64); failed != 0 || len(acked) != 64 {
			t.Fatalf("burst: %d acknowledged, %d failed", len(acked), failed)
		}
		n += 64
		if err := e.rotateJournalThrough(context.Background(), "direct/cut-barrier", pendingJournalSeq(e)); err != nil {
			t.Fatal(err)
		}
		return e.Metrics().Checkpoints >= start+2 && e.Metrics().DirectWrites-directStart >= 2
	})
	fs.armed.Store(true)
	acked, failed := burst(l, n, 64)
	if fs.hit.Load() != 1 || failed == 0 || l.Err() == nil {
		t.Fatalf("%d injected failures, %d entries failed, ledger error %v: want the direct write's fsync to fail its batch", fs.hit.Load(), failed, l.Err())
	}
	for i := n; i < n+len(acked); i++ {
		if _, ok := acked[i]; !ok {
			t.Fatalf("entry %d not acknowledged but a later one was", i)
		}
	}
	n += len(acked)
	_ = l.Close()
	other := newOwnerLedger(t, e, "other")
	start = e.Metrics().Checkpoints
	poll.Until(t, 10*time.Second, "the journal files holding the failure and its void records to be retired", func() bool {
		other.appendSome(10, 500)
		return e.Metrics().Checkpoints >= start+3
	})
	crashed := mem.Crash(nil)
	_ = e.Close()
	_, l = openDirect(t, crashed, directOpts, "direct/cut")
	checkEntries(t, l, n)
}
