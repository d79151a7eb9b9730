package storage

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// orderedJournalSyncFS is a Mem whose journal fsyncs, once armed, run in a fixed order: the first
// waits at a gate until the second has finished its own fsync (which fails with EIO: a writeback
// error), and the second's result is held back until the test lets it go. That is the order in
// which Linux lets one fsync take the writeback error of another's pages: the later fsync reaches
// the error check first, the earlier one then finds nothing to report on a shared descriptor.
type orderedJournalSyncFS struct {
	*vfs.Mem
	armed        atomic.Bool
	calls        atomic.Int32
	failNext     atomic.Bool
	firstIn      chan struct{} // the first fsync waits at its gate
	releaseFirst chan struct{}
	firstResult  chan error    // the first fsync's result
	secondDone   chan struct{} // the second fsync has run (and failed)
	holdSecond   chan struct{} // its result goes back to the engine once closed
}

func newOrderedJournalSyncFS() *orderedJournalSyncFS {
	fs := &orderedJournalSyncFS{Mem: vfs.NewMem(), firstIn: make(chan struct{}), releaseFirst: make(chan struct{}),
		firstResult: make(chan error, 1), secondDone: make(chan struct{}), holdSecond: make(chan struct{})}
	fs.Mem.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, ".jnl") && fs.failNext.CompareAndSwap(true, false) {
			return vfs.EIO
		}
		return nil
	})
	return fs
}

func (fs *orderedJournalSyncFS) OpenFile(name string, flag int) (vfs.File, error) {
	f, err := fs.Mem.OpenFile(name, flag)
	if err != nil || !strings.HasSuffix(name, ".jnl") {
		return f, err
	}
	return &orderedJournalFile{File: f, fs: fs}, nil
}

type orderedJournalFile struct {
	vfs.File
	fs *orderedJournalSyncFS
}

func (f *orderedJournalFile) Sync() error {
	fs := f.fs
	if !fs.armed.Load() {
		return f.File.Sync()
	}
	switch fs.calls.Add(1) {
	case 1:
		close(fs.firstIn)
		<-fs.releaseFirst
		err := f.File.Sync()
		fs.firstResult <- err
		return err
	case 2:
		fs.failNext.Store(true)
		err := f.File.Sync()
		close(fs.secondDone)
		<-fs.holdSecond
		return err
	}
	return f.File.Sync()
}

// TestPipelinedFsyncErrorNotHiddenBySharedDescriptor: two group commits' fsyncs in flight; the
// second one's writeback fails and it reaches the error check first. On a descriptor shared by
// both, the first fsync then returns success and its batch was acknowledged (its result reached
// the sync loop first), although its data never reached the disk. With a descriptor per fsync in
// flight (pipelinesync.go) the first fsync reports the error too and nothing acknowledged is lost.
func TestPipelinedFsyncErrorNotHiddenBySharedDescriptor(t *testing.T) {
	ctx := context.Background()
	fs := newOrderedJournalSyncFS()
	mod := func(o *Options) {
		o.SyncPipelineDepth = 2
		o.AlwaysPipeline = true
		o.DirectWriteBytes = -1
		o.CacheBytes = -1
	}
	e := openMem(t, fs, mod)
	l, err := e.OpenLedger(ctx, "pipelined")
	if err != nil {
		t.Fatal(err)
	}
	acked := map[mtypes.Position]string{}
	for i, p := range appendN(t, l, 3) { // the journal file is open: the next batches are pipelined
		acked[p] = string(payload(i))
	}
	type result struct {
		p   mtypes.Position
		err error
	}
	results := make([]chan result, 2)
	appendAsync := func(i int) {
		results[i] = make(chan result, 1)
		l.AppendAsync([]byte("batch-"+string(rune('A'+i))), 1, func(p mtypes.Position, err error) { results[i] <- result{p, err} })
	}
	fs.armed.Store(true)
	appendAsync(0) // batch A: its fsync waits at the gate
	<-fs.firstIn
	appendAsync(1) // batch B: written while A's fsync is in flight; its fsync fails
	<-fs.secondDone
	close(fs.releaseFirst)
	var a result
	if err := <-fs.firstResult; err == nil {
		// A's fsync reported success: the sync loop hands A on before B's failure arrives.
		a = <-results[0]
		close(fs.holdSecond)
	} else {
		close(fs.holdSecond)
		a = <-results[0]
	}
	b := <-results[1]
	if b.err == nil {
		t.Fatal("batch B acknowledged although its fsync failed")
	}
	if a.err == nil {
		acked[a.p] = "batch-A"
	}
	crashed := fs.Mem.Crash(nil)
	fs.armed.Store(false)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	l2, err := e2.OpenLedger(ctx, "pipelined")
	if err != nil {
		t.Fatal(err)
	}
	es, err := l2.Read(ctx, mtypes.Earliest, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	present := map[mtypes.Position]string{}
	for _, en := range es {
		present[en.Position] = string(en.Data)
	}
	for p, d := range acked {
		if present[p] != d {
			t.Errorf("acknowledged entry %v (%q) lost after the crash (present: %v)", p, d, present)
		}
	}
}
