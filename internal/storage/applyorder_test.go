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

// segWriteGateFS holds the applier's segment data writes (not the header written when a segment
// file is created) at a gate while it is closed, and fails them with failWith once released.
type segWriteGateFS struct {
	vfs.FS
	mu       sync.Mutex
	gate     chan struct{}
	failWith error
	held     atomic.Int32
}

func (g *segWriteGateFS) OpenFile(name string, flag int) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return f, err
	}
	return &gatedSegment{File: f, fs: g}, nil
}

func (g *segWriteGateFS) hold() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *segWriteGateFS) release(failWith error) {
	g.mu.Lock()
	g.failWith = failWith
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

type gatedSegment struct {
	vfs.File
	fs *segWriteGateFS
}

func (f *gatedSegment) WriteAt(p []byte, off int64) (int, error) {
	if off >= headerSize {
		f.fs.mu.Lock()
		gate := f.fs.gate
		f.fs.mu.Unlock()
		if gate != nil {
			f.fs.held.Add(1)
			<-gate
			f.fs.held.Add(-1)
		}
		f.fs.mu.Lock()
		err := f.fs.failWith
		f.fs.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	return f.File.WriteAt(p, off)
}

// readerWaiting reports whether a reader of l waits for a segment write (waitWritten).
func readerWaiting(l *Ledger) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.readHints != nil && l.readHints.wrote != nil
}

// segmentWrittenEntries returns how many entries of l's current segment are in its file.
func segmentWrittenEntries(l *Ledger) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.segs[len(l.segs)-1].written
}

type readResult struct {
	es  []mtypes.Entry
	err error
}

// ackedWithWriteHeld appends entry 1 to a new ledger of e while the applier's segment writes are
// held at g's gate, and returns the ledger and the entry's position once it is acknowledged (its
// segment write waiting at the gate), with a reader of it already waiting for that write.
func ackedWithWriteHeld(t *testing.T, e *Engine, g *segWriteGateFS, name string) (*Ledger, mtypes.Position, chan readResult) {
	t.Helper()
	ctx := context.Background()
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 1) // the segment file exists from here on
	poll.Until(t, 10*time.Second, "the first entry's segment write", func() bool { return segmentWrittenEntries(l) == 1 })
	g.hold()
	type ack struct {
		p   mtypes.Position
		err error
	}
	acked := make(chan ack, 1)
	l.AppendAsync(payload(1), 1, func(p mtypes.Position, err error) { acked <- ack{p, err} })
	a := <-acked
	if a.err != nil {
		t.Fatalf("append: %v, want it acknowledged before its segment write", a.err)
	}
	poll.Until(t, 10*time.Second, "the segment write to be held", func() bool { return g.held.Load() == 1 })
	done := make(chan readResult, 1)
	go func() {
		es, err := l.Read(ctx, a.p, 1, 0)
		done <- readResult{es, err}
	}()
	poll.Until(t, 10*time.Second, "the reader to wait for the write", func() bool { return readerWaiting(l) })
	return l, a.p, done
}

// TestReadWaitsForSegmentWrite: the applier acknowledges entries before it writes them to their
// segment file (Engine.apply). A reader that needs the file (no entry cache here) waits for that
// write instead of reading bytes that are not there yet, then reads the entry.
func TestReadWaitsForSegmentWrite(t *testing.T) {
	g := &segWriteGateFS{FS: vfs.NewMem()}
	e := openMem(t, g, func(o *Options) { o.CacheBytes = -1; o.DirectWriteBytes = -1 })
	defer e.Close()
	defer g.release(nil) // before Close, should the test stop early
	_, p, done := ackedWithWriteHeld(t, e, g, "wait/write")
	select {
	case r := <-done:
		t.Fatalf("the read returned before the segment write: %+v", r)
	default:
	}
	g.release(nil)
	r := <-done
	if r.err != nil || len(r.es) != 1 || r.es[0].Position != p || string(r.es[0].Data) != string(payload(1)) {
		t.Fatalf("read after the write: %+v, want entry %v with its payload", r, p)
	}
}

// TestSegmentWriteFailureAfterAck: a segment write that fails after its entry was acknowledged
// fences the ledger, ends the wait of a reader of that entry with the ledger's error, and makes the
// segment a repair target (repair.go): while writes keep failing, no checkpoint runs (the journal
// keeps the entry), the ledger cannot be opened again and the engine reports itself unhealthy;
// once writes work again, the engine rewrites the segment from the journal by itself, and the
// ledger opens with the entry, also after a crash.
func TestSegmentWriteFailureAfterAck(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	g := &segWriteGateFS{FS: mem}
	e := openMem(t, g, func(o *Options) { o.CacheBytes = -1; o.DirectWriteBytes = -1 })
	defer e.Close()
	defer g.release(nil)
	l, p, done := ackedWithWriteHeld(t, e, g, "wait/fail")
	g.release(vfs.EIO) // this write and every later segment write fail until release(nil)
	r := <-done
	if !errors.Is(r.err, ErrFenced) || len(r.es) != 0 {
		t.Fatalf("read of an entry whose segment write failed: %+v, want ErrFenced", r)
	}
	if !errors.Is(l.Err(), ErrFenced) {
		t.Fatalf("ledger error %v, want ErrFenced", l.Err())
	}
	if err := e.Health(); err == nil {
		t.Fatal("engine healthy with a segment that lacks an acknowledged entry")
	}
	if err := e.checkpoint(0, map[string]struct{}{}, map[string]struct{}{}); err == nil || !errors.Is(err, vfs.EIO) {
		t.Fatalf("checkpoint after a lost segment write: %v, want it refused with the write's error", err)
	}
	// Loaded again from its files, the ledger would lack the acknowledged entry.
	_ = l.Close()
	if l2, err := e.OpenLedger(ctx, "wait/fail"); !errors.Is(err, ErrFenced) {
		t.Fatalf("reopen after a lost segment write: %v, %v; want ErrFenced until the segment is repaired", l2, err)
	}
	// Writes work again: the engine repairs the segment by itself, without a restart.
	g.release(nil)
	poll.Until(t, 10*time.Second, "the engine to repair the segment and become healthy", func() bool { return e.Health() == nil })
	if m := e.Metrics(); m.Repairs != 1 || m.RepairsPending != 0 {
		t.Fatalf("repairs %d, pending %d; want 1 and 0", m.Repairs, m.RepairsPending)
	}
	check := func(l *Ledger, when string) {
		t.Helper()
		es, err := l.Read(ctx, mtypes.Earliest, 0, 0)
		if err != nil || len(es) < 2 || es[1].Position != p || string(es[1].Data) != string(payload(1)) {
			t.Fatalf("%s: %+v, %v; want both entries, %v rewritten", when, es, err, p)
		}
	}
	l, err := e.OpenLedger(ctx, "wait/fail")
	if err != nil {
		t.Fatal(err)
	}
	check(l, "reopened after the repair")
	appendN(t, l, 1)
	// Nothing acknowledged depends on the journal any more once a checkpoint has run.
	crashed := mem.Crash(nil)
	e2 := openMem(t, crashed, func(o *Options) { o.CacheBytes = -1; o.DirectWriteBytes = -1 })
	defer e2.Close()
	l, err = e2.OpenLedger(ctx, "wait/fail")
	if err != nil {
		t.Fatal(err)
	}
	check(l, "after a crash")
}
