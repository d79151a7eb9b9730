package storage

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// appendResult records the order and outcome of asynchronous appends.
type appendResult struct {
	mu    sync.Mutex
	order []int
	errs  map[int]error
	pos   map[int]mtypes.Position
}

func (r *appendResult) done(i int) func(mtypes.Position, error) {
	return func(p mtypes.Position, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.order = append(r.order, i)
		r.errs[i], r.pos[i] = err, p
	}
}

func (r *appendResult) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order)
}

// twoCommitsInFlight opens a ledger on an engine with SyncPipelineDepth 2 and leaves two
// appends, each in its own group commit, with both fsyncs stalled; with failFirst the first of
// those fsyncs will fail when released.
func twoCommitsInFlight(t *testing.T, name string, failFirst bool) (*Engine, *stallFS, *Ledger, *appendResult) {
	t.Helper()
	fs := &stallFS{FS: vfs.NewMem()}
	e := openMem(t, fs, func(o *Options) { o.SyncPipelineDepth, o.AlwaysPipeline = 2, true })
	t.Cleanup(func() { _ = e.Close() })
	t.Cleanup(fs.release) // runs first: a stalled fsync would hold Close
	l, err := e.OpenLedger(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3) // the journal file exists and holds records
	res := &appendResult{errs: map[int]error{}, pos: map[int]mtypes.Position{}}
	if failFirst {
		fs.failFirst.Store(1)
	}
	fs.stall()
	l.AppendAsync(payload(1), 1, res.done(1))
	poll.Until(t, 10*time.Second, "the first fsync to stall", func() bool { return fs.stalled.Load() == 1 })
	l.AppendAsync(payload(2), 1, res.done(2))
	poll.Until(t, 10*time.Second, "the second fsync to start while the first one runs", func() bool { return fs.stalled.Load() == 2 })
	return e, fs, l, res
}

// TestPipelinedCommitsOverlap: with SyncPipelineDepth 2, the next group commit is written and its
// fsync started while the previous fsync is still running; both are acknowledged only after
// their fsyncs, in append order.
func TestPipelinedCommitsOverlap(t *testing.T) {
	_, fs, _, res := twoCommitsInFlight(t, "pipe", false)
	if n := res.count(); n != 0 {
		t.Fatalf("%d appends acknowledged before their fsync finished", n)
	}
	fs.release()
	poll.Until(t, 10*time.Second, "both appends to be acknowledged", func() bool { return res.count() == 2 })
	if res.order[0] != 1 || res.errs[1] != nil || res.errs[2] != nil || res.pos[1].Compare(res.pos[2]) >= 0 {
		t.Fatalf("order %v errs %v positions %v", res.order, res.errs, res.pos)
	}
}

// TestPipelinedFsyncFailureFailsAllInFlight: when one of two fsyncs in flight fails, both batches
// fail (the second fsync's success does not prove the first batch's bytes durable), in order;
// the ledger is fenced, and after reopening it everything acknowledged before is there.
func TestPipelinedFsyncFailureFailsAllInFlight(t *testing.T) {
	ctx := context.Background()
	e, fs, l, res := twoCommitsInFlight(t, "pipefail", true)
	fs.release()
	poll.Until(t, 10*time.Second, "both appends to complete", func() bool { return res.count() == 2 })
	if res.order[0] != 1 || res.errs[1] == nil || res.errs[2] == nil {
		t.Fatalf("order %v errs %v: both appends in flight must fail, in order", res.order, res.errs)
	}
	if l.Err() == nil {
		t.Fatal("ledger not fenced after a failed fsync")
	}
	if m := e.Metrics(); m.FsyncErrors != 1 {
		t.Fatalf("fsync errors %d, want 1", m.FsyncErrors)
	}
	_ = l.Close()
	l2, err := e.OpenLedger(ctx, "pipefail")
	if err != nil {
		t.Fatal(err)
	}
	if n := l2.Entries(); n < 3 {
		t.Fatalf("%d entries after reopening, want at least the 3 acknowledged", n)
	}
	if _, err := l2.Append(ctx, payload(9), 1); err != nil {
		t.Fatalf("append after reopening: %v", err)
	}
}

// TestLightLoadCommitsInline: under a light load the sync loop runs a group commit's fsync and
// its apply itself (no hand-off to a commit syncer or the applier); an append that arrives during
// such an fsync makes the next group commits pipelined again, and once the pipeline runs empty
// with nothing pending the load counts as light again (commitLight, applyOnSyncLoop).
func TestLightLoadCommitsInline(t *testing.T) {
	fs := &stallFS{FS: vfs.NewMem()}
	e := openMem(t, fs, func(o *Options) { o.SyncPipelineDepth = 2; o.DirectWriteBytes = -1 })
	t.Cleanup(func() { _ = e.Close() })
	t.Cleanup(fs.release) // runs first: a stalled fsync would hold Close
	l, err := e.OpenLedger(context.Background(), "light")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3) // one at a time: a light load
	res := &appendResult{errs: map[int]error{}, pos: map[int]mtypes.Position{}}
	var mu sync.Mutex
	appliedBy := map[int]string{}
	appendAsync := func(i int) {
		done := res.done(i)
		l.AppendAsync(payload(i), 1, func(p mtypes.Position, err error) {
			mu.Lock()
			appliedBy[i] = "sync loop"
			if onGoroutine("(*Engine).runApplier") {
				appliedBy[i] = "applier"
			}
			mu.Unlock()
			done(p, err)
		})
	}

	fs.stall()
	appendAsync(1)
	poll.Until(t, 10*time.Second, "the first fsync to stall", func() bool { return fs.gated.Load() == 1 })
	if fs.syncerOf(0) {
		t.Fatal("under a light load the fsync ran on a commit syncer, not on the sync loop")
	}
	appendAsync(2) // arrives during the inline fsync: the next commits are pipelined
	if n := res.count(); n != 0 {
		t.Fatalf("%d appends acknowledged while the inline fsync was stalled", n)
	}
	fs.swapGate()
	poll.Until(t, 10*time.Second, "the second fsync to stall", func() bool { return fs.gated.Load() == 2 })
	if !fs.syncerOf(1) {
		t.Fatal("an append that arrived during an inline fsync was not pipelined")
	}
	appendAsync(3)
	poll.Until(t, 10*time.Second, "the third fsync to start while the second one runs", func() bool { return fs.stalled.Load() == 2 })
	fs.release()
	poll.Until(t, 10*time.Second, "all three appends to be acknowledged", func() bool { return res.count() == 3 })
	if res.order[0] != 1 || res.order[1] != 2 || res.order[2] != 3 {
		t.Fatalf("acknowledged in order %v", res.order)
	}
	mu.Lock()
	if appliedBy[1] != "applier" || appliedBy[2] != "applier" {
		// The first found the second pending: the applier applies it while the sync loop
		// commits the second.
		t.Fatalf("applied by %v: want the first two applied on the applier", appliedBy)
	}
	mu.Unlock()

	appendN(t, l, 2) // the pipeline ran empty with nothing pending: light again
	fs.stall()
	appendAsync(4)
	poll.Until(t, 10*time.Second, "the fourth fsync to stall", func() bool { return fs.gated.Load() == 4 })
	if fs.syncerOf(3) {
		t.Fatal("after the load fell the fsync still ran on a commit syncer")
	}
	fs.release()
	poll.Until(t, 10*time.Second, "the fourth append to be acknowledged", func() bool { return res.count() == 4 })
	mu.Lock()
	if appliedBy[4] != "sync loop" {
		t.Fatalf("a light commit with nothing pending was applied on the %s, not on the sync loop", appliedBy[4])
	}
	mu.Unlock()
	for i, err := range res.errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}
