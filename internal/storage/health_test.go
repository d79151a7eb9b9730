package storage

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// journalFileCount counts the journal files (*.jnl) in the data directory.
func journalFileCount(t *testing.T, fsys vfs.FS) int {
	t.Helper()
	return len(journalFiles(t, fsys))
}

// TestJournalBacklogBoundRefusesAppends: while checkpoints fail (here the state file cannot be
// written), the journal is never retired; instead of growing until the disk is full it stops at
// MaxJournalBacklog: appends fail with ErrUnavailable (the ledger is not fenced) and the engine is
// unhealthy. Once checkpoints work again they resume by themselves, the journal files are retired,
// appends are taken again, and nothing acknowledged is lost.
func TestJournalBacklogBoundRefusesAppends(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var failing atomic.Bool
	mem.SetInjector(func(op vfs.Op, name string) error {
		if failing.Load() && op == vfs.OpSync && name == "/data/meridian.state.tmp" {
			return vfs.EIO
		}
		return nil
	})
	mod := backlogOptions
	e := openMem(t, mem, mod)
	l, err := e.OpenLedger(ctx, "backlog") // its ledger id is reserved in the state file
	if err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	acked := map[mtypes.Position]string{}
	var refused error
	poll.Until(t, 10*time.Second, "an append refused at the backlog bound", func() bool {
		data := strings.Repeat("b", 1000) + itoaTest(len(acked))
		p, err := l.Append(ctx, []byte(data), 1)
		if err != nil {
			refused = err
			return true
		}
		acked[p] = data
		return false
	})
	if !errors.Is(refused, ErrUnavailable) {
		t.Fatalf("append refused with %v, want ErrUnavailable", refused)
	}
	if l.Err() != nil {
		t.Fatalf("ledger fenced by the backlog bound: %v", l.Err())
	}
	if n := journalFileCount(t, mem); n > 3+1 {
		t.Fatalf("%d journal files at the bound of 3 (and one made ahead)", n)
	}
	if err := e.Health(); err == nil || !strings.Contains(err.Error(), "journal files wait for a checkpoint") {
		t.Fatalf("health at the backlog bound: %v", err)
	}
	if m := e.Metrics(); !m.CheckpointFailing || m.JournalBacklogFiles < m.JournalBacklogLimit || m.Unhealthy == "" {
		t.Fatalf("metrics at the bound: failing %v, backlog %d of %d, unhealthy %q", m.CheckpointFailing, m.JournalBacklogFiles, m.JournalBacklogLimit, m.Unhealthy)
	}
	failing.Store(false)
	poll.Until(t, 10*time.Second, "checkpoints to resume by themselves", func() bool { return e.Health() == nil })
	if n := journalFileCount(t, mem); n > 2 {
		t.Fatalf("%d journal files after checkpoints resumed", n)
	}
	for i := range 5 {
		data := "after-" + itoaTest(i)
		p, err := l.Append(ctx, []byte(data), 1)
		if err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
		acked[p] = data
	}
	crashed := mem.Crash(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	verifyAcked(t, e2, "backlog", acked)
}

// backlogJournalBytes is the journal file size of the backlog tests: a backlog of 3 files fills
// after a few dozen 1 KiB appends.
const backlogJournalBytes = 8 << 10

// backlogOptions bounds the journal backlog at 3 small journal files, segments written through
// the page cache (so checkpoints fsync them).
func backlogOptions(o *Options) {
	o.JournalFileBytes = backlogJournalBytes
	o.MaxJournalBacklog = 3 * backlogJournalBytes
	o.DirectWriteBytes = -1
}

func itoaTest(i int) string { return string(rune('0'+i%10)) + strings.Repeat("i", i/10) }

// TestJournalFailureClearsWithoutTraffic: a failed journal fsync makes the engine unhealthy
// ("journal writes failing"); once the journal works again the checkpointer's probe record shows
// it, without any append, and the engine is healthy again (a broker nobody sends to while it is
// unready would otherwise never become ready).
func TestJournalFailureClearsWithoutTraffic(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var failing atomic.Bool
	mem.SetInjector(func(op vfs.Op, name string) error {
		if failing.Load() && strings.HasSuffix(name, ".jnl") && (op == vfs.OpSync || op == vfs.OpWrite || op == vfs.OpCreate) {
			return vfs.EIO
		}
		return nil
	})
	e := openMem(t, mem, nil)
	defer e.Close()
	l, err := e.OpenLedger(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 2)
	failing.Store(true)
	if _, err := l.Append(ctx, []byte("lost"), 1); err == nil {
		t.Fatal("append acknowledged although the journal fails")
	}
	if err := e.Health(); err == nil || !strings.Contains(err.Error(), "journal writes failing") {
		t.Fatalf("health with a failing journal: %v", err)
	}
	if m := e.Metrics(); !m.JournalFailing || m.FsyncErrors+1 < 1 {
		t.Fatalf("metrics with a failing journal: %+v", m)
	}
	failing.Store(false)
	poll.Until(t, 10*time.Second, "the journal probe to clear the failure", func() bool { return e.Health() == nil })
}

// TestLaggingCheckpointDelaysAppends: a checkpoint that is merely slow (its segment fsyncs take
// long, nothing failed) lets the journal files pile up to MaxJournalBacklog. Appends then wait for
// it, as for a slow disk, instead of failing: no producer gets an error for a disk that works.
// The bound still holds (no journal file beyond it is opened), the engine stays healthy, and
// once the checkpoint finishes every append is acknowledged and survives a crash.
func TestLaggingCheckpointDelaysAppends(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	fs := &stallFS{FS: mem}
	mod := backlogOptions
	e := openMem(t, fs, mod)
	l, err := e.OpenLedger(ctx, "lagging")
	if err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	fs.segGate = make(chan struct{}) // the checkpoint's segment fsyncs wait
	fs.mu.Unlock()
	defer fs.release()
	const n = 60 // about 8 journal files of 1 KiB entries: past the bound of 3
	type result struct {
		p   mtypes.Position
		err error
	}
	results := make(chan result, n)
	data := func(i int) string { return strings.Repeat("l", 1000) + itoaTest(i) }
	go func() { // one append at a time, each after the one before is acknowledged: a journal file every ~8
		for i := range n {
			p, err := l.Append(ctx, []byte(data(i)), int64(i))
			results <- result{p, err}
		}
	}()
	poll.Until(t, 10*time.Second, "the backlog at its bound with the checkpoint held in a segment fsync", func() bool {
		m := e.Metrics()
		return fs.segStalled.Load() > 0 && m.JournalBacklogFiles >= m.JournalBacklogLimit
	})
	acked := map[mtypes.Position]string{}
	i := 0
	take := func(r result) {
		if r.err != nil {
			t.Fatalf("append %d failed while a checkpoint was merely slow: %v", i, r.err)
		}
		acked[r.p] = data(i) // acknowledgements come in append order
		i++
	}
	// Everything that fits below the bound is acknowledged; the rest waits.
	for drained := false; !drained; {
		select {
		case r := <-results:
			take(r)
		case <-time.After(200 * time.Millisecond):
			drained = true
		}
	}
	if i == n {
		t.Fatalf("all %d appends acknowledged past a backlog bound of 3 journal files of %d bytes", n, backlogJournalBytes)
	}
	if c := journalFileCount(t, mem); c > 3+1 {
		t.Fatalf("%d journal files at the bound of 3 (and one made ahead)", c)
	}
	if err := e.Health(); err != nil {
		t.Fatalf("health while a checkpoint is only slow: %v", err)
	}
	fs.release()
	for i < n {
		select {
		case r := <-results:
			take(r)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d appends acknowledged 10 s after the checkpoint was let go", i, n)
		}
	}
	if m := e.Metrics(); m.JournalBacklogWaits == 0 || m.JournalBacklogWait <= 0 {
		t.Fatalf("backlog waits %d (%v): the journal did not wait at the bound", m.JournalBacklogWaits, m.JournalBacklogWait)
	}
	crashed := mem.Crash(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	verifyAcked(t, e2, "lagging", acked)
}

// TestJournalProbeDoesNotWaitForTheSyncLoop: the checkpointer's journal probe only queues its
// record. The sync loop may be waiting for a checkpoint (waitForCheckpoint); a checkpointer that
// waited for the probe's commit would then wait for the sync loop, and neither would go on.
// Here the sync loop is held in a journal fsync: the probe must return all the same, and its
// record is committed once the fsync is let go.
func TestJournalProbeDoesNotWaitForTheSyncLoop(t *testing.T) {
	ctx := context.Background()
	fs := &stallFS{FS: vfs.NewMem()}
	e := openMem(t, fs, nil)
	defer e.Close()
	defer fs.release() // before Close, also when the test fails
	l, err := e.OpenLedger(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 1)
	fs.stall() // journal fsyncs wait
	acked := make(chan error, 1)
	l.AppendAsync([]byte("held"), 1, func(_ mtypes.Position, err error) { acked <- err })
	poll.Until(t, 10*time.Second, "the sync loop held in a journal fsync", func() bool { return fs.stalled.Load() > 0 })
	probed := make(chan struct{})
	go func() {
		e.probeJournal()
		close(probed)
	}()
	select {
	case <-probed:
	case <-time.After(5 * time.Second):
		t.Fatal("the journal probe waited for the sync loop")
	}
	fs.release()
	if err := <-acked; err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the probe's record committed", func() bool { return !e.checkpointer.probeQueued.Load() })
}
