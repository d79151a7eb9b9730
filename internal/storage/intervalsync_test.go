package storage

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// stallFS wraps a filesystem so that fsyncs of journal files holding records (not the header
// fsync of a new file) block while a gate is set, or fail.
type stallFS struct {
	vfs.FS
	mu      sync.Mutex
	gate    chan struct{} // non-nil: journal fsyncs wait until it is closed
	fail    error         // non-nil: journal fsyncs fail with it
	stalled atomic.Int32  // journal fsyncs waiting at the gate now
	// segGate non-nil: segment fsyncs (the checkpoint's) wait until it is closed.
	segGate chan struct{}
	// failFirst > 0: that many journal fsyncs, in the order they start, fail with EIO.
	failFirst atomic.Int32
	// segStalled: segment fsyncs waiting at segGate now; journalSynced: journal fsyncs finished.
	segStalled, journalSynced atomic.Int32
	// gated: journal fsyncs that met a gate so far; onSyncer records, in order, whether each
	// such fsync ran on a commit syncer (true) or on the sync loop itself (false).
	gated    atomic.Int32
	onSyncer []bool // under mu
}

func (s *stallFS) OpenFile(name string, flag int) (vfs.File, error) {
	f, err := s.FS.OpenFile(name, flag)
	if err != nil {
		return f, err
	}
	if strings.HasSuffix(name, ".seg") {
		return &stallSegment{File: f, fs: s}, nil
	}
	if !strings.HasSuffix(name, ".jnl") {
		return f, err
	}
	return &stallFile{File: f, fs: s}, nil
}

type stallSegment struct {
	vfs.File
	fs *stallFS
}

func (f *stallSegment) Sync() error {
	f.fs.mu.Lock()
	gate := f.fs.segGate
	f.fs.mu.Unlock()
	if gate != nil {
		f.fs.segStalled.Add(1)
		<-gate
		f.fs.segStalled.Add(-1)
	}
	return f.File.Sync()
}

func (s *stallFS) stall() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

// swapGate lets the fsyncs waiting at the gate go and makes later ones wait at a new gate.
func (s *stallFS) swapGate() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
	}
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

// syncerOf reports whether the i-th gated journal fsync ran on a commit syncer.
func (s *stallFS) syncerOf(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.onSyncer[i]
}

// onGoroutine reports whether the calling goroutine's stack holds a frame of fn.
func onGoroutine(fn string) bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), fn)
}

func (s *stallFS) release() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	if s.segGate != nil {
		close(s.segGate)
		s.segGate = nil
	}
	s.mu.Unlock()
}

type stallFile struct {
	vfs.File
	fs *stallFS
}

func (f *stallFile) Sync() error {
	if f.holdsRecords() {
		f.fs.mu.Lock()
		gate, fail := f.fs.gate, f.fs.fail
		if f.fs.failFirst.Load() > 0 {
			f.fs.failFirst.Add(-1)
			fail = vfs.EIO
		}
		f.fs.mu.Unlock()
		if gate != nil {
			f.fs.mu.Lock()
			f.fs.onSyncer = append(f.fs.onSyncer, onGoroutine("(*Engine).commitSyncer"))
			f.fs.mu.Unlock()
			f.fs.gated.Add(1)
			f.fs.stalled.Add(1)
			<-gate
			f.fs.stalled.Add(-1)
		}
		if fail != nil {
			return fail
		}
	}
	err := f.File.Sync()
	f.fs.journalSynced.Add(1)
	return err
}

// holdsRecords reports whether the journal file has bytes after its header that are not zeros: the
// file in use, not one being made (header only, or zero-filled to full size; nextjournal.go).
func (f *stallFile) holdsRecords() bool {
	n, _ := f.File.Size()
	if n <= headerSize {
		return false
	}
	first := make([]byte, min(n-headerSize, recHeaderSize))
	_, _ = f.File.ReadAt(first, headerSize)
	return !allZero(first)
}

// TestSyncIntervalFsyncOffThePath: in SyncInterval mode a stalled journal fsync must not hold up
// the acknowledgements of later appends (they are acknowledged once written).
func TestSyncIntervalFsyncOffThePath(t *testing.T) {
	ctx := context.Background()
	fs := &stallFS{FS: vfs.NewMem()}
	e := openMem(t, fs, func(o *Options) { o.Sync = SyncInterval; o.SyncInterval = time.Millisecond })
	defer e.Close()
	defer fs.release()
	l, err := e.OpenLedger(ctx, "interval")
	if err != nil {
		t.Fatal(err)
	}
	fs.stall()
	appendN(t, l, 10)
	poll.Until(t, 10*time.Second, "an fsync to stall", func() bool { return fs.stalled.Load() == 1 })
	// The fsync is stuck; appends keep being acknowledged.
	before := l.Entries()
	for i := 0; i < 500; i++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := l.Append(actx, payload(i), 1)
		cancel()
		if err != nil {
			t.Fatalf("append %d while an fsync is stalled: %v", i, err)
		}
	}
	if got := l.Entries() - before; got != 500 || fs.stalled.Load() != 1 {
		t.Fatalf("%d appends acknowledged, %d fsyncs stalled", got, fs.stalled.Load())
	}
	fsyncs := e.Metrics().Fsyncs
	fs.release()
	poll.Until(t, 10*time.Second, "the stalled fsync to finish and the next one to run", func() bool { return e.Metrics().Fsyncs >= fsyncs+2 })
	if m := e.Metrics(); m.UnsyncedAcks < 510 || m.FsyncErrors != 0 {
		t.Fatalf("metrics %+v", m)
	}
}

// TestSyncIntervalFsyncFailureFences: a failed background fsync fences the ledgers whose
// acknowledged appends it covered, as an inline one did.
func TestSyncIntervalFsyncFailureFences(t *testing.T) {
	ctx := context.Background()
	fs := &stallFS{FS: vfs.NewMem()}
	e := openMem(t, fs, func(o *Options) { o.Sync = SyncInterval; o.SyncInterval = time.Millisecond })
	defer e.Close()
	l, err := e.OpenLedger(ctx, "failing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, []byte("kept"), 1); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	fs.fail = vfs.EIO
	fs.mu.Unlock()
	// Acknowledged once written, unless the failing background fsync (which may already run for
	// it) fences the ledger first.
	if _, err := l.Append(ctx, []byte("lost"), 1); err != nil && !errors.Is(err, ErrFenced) {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the ledger to be fenced", func() bool { return l.Err() != nil })
	if !errors.Is(l.Err(), ErrFenced) {
		t.Fatalf("ledger error %v", l.Err())
	}
	if _, err := l.Append(ctx, []byte("after"), 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after a failed fsync: %v", err)
	}
	if e.Metrics().FsyncErrors == 0 {
		t.Fatal("fsync error not counted")
	}
}

// TestSyncIntervalRotationWhileFsyncStalls rotates journal files while the fsync of the first
// one (and the checkpoint, so the journal files stay) is stalled, then crashes (keeping random
// prefixes of unsynced data): the next file says its predecessor may end torn, so recovery must
// open cleanly whatever survived.
func TestSyncIntervalRotationWhileFsyncStalls(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	fs := &stallFS{FS: mem}
	e := openMem(t, fs, func(o *Options) {
		o.Sync = SyncInterval
		o.SyncInterval = time.Millisecond
		o.JournalFileBytes = 16 << 10
	})
	defer e.Close()
	defer fs.release()
	l, err := e.OpenLedger(ctx, "rotating")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 20)
	fs.stall()
	fs.mu.Lock()
	fs.segGate = make(chan struct{})
	fs.mu.Unlock()
	big := make([]byte, 1000)
	for i := 0; i < 40; i++ { // ~40 KiB: two or three rotations behind the stalled fsync
		if _, err := l.Append(ctx, big, 1); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	poll.Until(t, 10*time.Second, "the fsync of a rotated file to stall", func() bool { return fs.stalled.Load() == 1 })
	for seed := uint64(1); seed <= 20; seed++ {
		crashed := mem.Crash(rand.New(rand.NewPCG(seed, 7)))
		e2, err := Open(ctx, Options{Dir: "/data", FS: crashed, Logger: testLogger(), Sync: SyncInterval})
		if err != nil {
			t.Fatalf("seed %d: open after crash: %v", seed, err)
		}
		if _, err := e2.OpenLedger(ctx, "rotating"); err != nil {
			t.Fatalf("seed %d: open ledger after crash: %v", seed, err)
		}
		if err := e2.Close(); err != nil {
			t.Fatalf("seed %d: close: %v", seed, err)
		}
	}
}
