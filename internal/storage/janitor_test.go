package storage

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// gateFS blocks, while its gate is set, the removals (Remove, RemoveAll) and file fsyncs whose
// path block selects: a disk where unlinking a large file or a directory tree, or an fsync, takes
// as long as the test wants.
type gateFS struct {
	vfs.FS
	block   func(op, path string) bool
	mu      sync.Mutex
	gate    chan struct{}
	blocked atomic.Int32 // operations waiting at the gate now
}

func (g *gateFS) wait(op, path string) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate == nil || !g.block(op, path) {
		return
	}
	g.blocked.Add(1)
	<-gate
	g.blocked.Add(-1)
}

func (g *gateFS) hold() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gateFS) release() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *gateFS) Remove(name string) error {
	g.wait("remove", name)
	return g.FS.Remove(name)
}

func (g *gateFS) RemoveAll(name string) error {
	g.wait("remove", name)
	return g.FS.RemoveAll(name)
}

func (g *gateFS) OpenFile(name string, flag int) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag)
	if err != nil {
		return f, err
	}
	return &gateFile{File: f, g: g, name: name}, nil
}

type gateFile struct {
	vfs.File
	g    *gateFS
	name string
}

func (f *gateFile) Sync() error {
	f.g.wait("sync", f.name)
	return f.File.Sync()
}

// receiptWithin appends to l and fails the test unless the receipt arrives within the deadline:
// a receipt held behind another topic's blocked file operation never arrives.
func receiptWithin(t *testing.T, l *Ledger, what string) {
	t.Helper()
	done := make(chan error, 1)
	l.AppendAsync([]byte("a"), time.Now().UnixMilli(), func(_ mtypes.Position, err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no receipt for topic A while %s: the applier is blocked", what)
	}
}

// notUnder reports whether path is outside the journal directory (journal files are recycled and
// removed by the sync loop and checkpointer, which the tests do not block).
func notUnderJournal(path string) bool { return !strings.Contains(path, "/journal/") }

// TestDeleteDoesNotStallOtherTopics: deleting a topic whose files take long to remove does not
// hold up another topic's receipts (the applier, which delivers every topic's receipts, does not
// remove the directory itself), and the deleted topic stays deleted after a crash.
func TestDeleteDoesNotStallOtherTopics(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	g := &gateFS{FS: mem, block: func(op, path string) bool { return op == "remove" && notUnderJournal(path) }}
	e := openMem(t, g, func(o *Options) { o.SegmentMaxEntries = 10 })
	a, err := e.OpenLedger(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.OpenLedger(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, b, 35)
	g.hold()
	t.Cleanup(g.release)
	deleted := make(chan error, 1)
	go func() { deleted <- e.DeleteLedger(ctx, "b") }()
	poll.Until(t, 10*time.Second, "the removal of b's files to start", func() bool { return g.blocked.Load() > 0 })
	receiptWithin(t, a, "b's files are being removed")
	g.release()
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "b's files to be removed", func() bool { return dirEmptyOrMissing(mem, "/data/trash") })
	if ok, err := e.LedgerExists(ctx, "b"); err != nil || ok {
		t.Fatalf("b exists after DeleteLedger: %v %v", ok, err)
	}
	crashed := mem.Crash(nil)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, crashed, nil)
	defer e.Close()
	if ok, err := e.LedgerExists(ctx, "b"); err != nil || ok {
		t.Fatalf("b came back after a crash: %v %v", ok, err)
	}
}

// TestTrimDoesNotStallOtherTopics: trimming segments whose files take long to unlink does not hold
// up another topic's receipts, and trimmed segments stay trimmed after a crash.
func TestTrimDoesNotStallOtherTopics(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	g := &gateFS{FS: mem, block: func(op, path string) bool { return op == "remove" && notUnderJournal(path) }}
	e := openMem(t, g, func(o *Options) { o.SegmentMaxEntries = 10 })
	a, err := e.OpenLedger(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.OpenLedger(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, b, 35)
	g.hold()
	t.Cleanup(g.release)
	trimmed := make(chan error, 1)
	go func() { trimmed <- b.Trim(ctx) }() // no cursor, retention 0: the sealed segments go
	poll.Until(t, 10*time.Second, "the removal of b's segments to start", func() bool { return g.blocked.Load() > 0 })
	receiptWithin(t, a, "b's segments are being unlinked")
	g.release()
	if err := <-trimmed; err != nil {
		t.Fatal(err)
	}
	first := b.FirstPosition()
	if first.Compare(ps[30]) != 0 {
		t.Fatalf("first position after the trim %v, want %v", first, ps[30])
	}
	poll.Until(t, 10*time.Second, "the trimmed files to be removed", func() bool { return dirEmptyOrMissing(mem, "/data/trash") })
	crashed := mem.Crash(nil)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, crashed, nil)
	defer e.Close()
	b, err = e.OpenLedger(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.FirstPosition(); got != first {
		t.Fatalf("after a crash the first position is %v, want %v (trimmed segments came back)", got, first)
	}
}

// TestCursorLogCompactionDoesNotStallOtherTopics: compacting a cursor log (a new file, fsynced,
// renamed over the log) does not hold up another topic's receipts; the compacted log keeps every
// cursor, and the states written while it was compacted.
func TestCursorLogCompactionDoesNotStallOtherTopics(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	g := &gateFS{FS: mem, block: func(op, path string) bool {
		return op == "sync" && strings.HasSuffix(path, "/cursors.log.compact")
	}}
	e := openMem(t, g, nil)
	a, err := e.OpenLedger(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.OpenLedger(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, b, 20)
	keep := openCursorT(t, b, "keep")
	if err := keep.MarkDelete(ctx, ps[4]); err != nil {
		t.Fatal(err)
	}
	c := openCursorT(t, b, "big")
	g.hold()
	t.Cleanup(g.release)
	props := growUntilCompaction(t, c, func() bool { return g.blocked.Load() > 0 })
	receiptWithin(t, a, "b's cursor log is being compacted")
	// A state written while the compaction runs is kept.
	if err := keep.MarkDelete(ctx, ps[9]); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, keep)
	g.release()
	poll.Until(t, 10*time.Second, "the compaction to finish", func() bool {
		st, err := mem.Stat("/data/ledgers/b/cursors.log")
		return err == nil && st.Size < 1<<20
	})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	b, err = e.OpenLedger(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if c := b.Cursor("keep"); c == nil || c.MarkDeletePosition() != ps[9] {
		t.Fatalf("cursor keep after the compaction: %+v", c)
	}
	if c := b.Cursor("big"); c == nil || c.Properties()["n"] != props["n"] {
		t.Fatal("cursor big lost its last properties")
	}
}

func dirEmptyOrMissing(fs vfs.FS, dir string) bool {
	des, err := fs.ReadDir(dir)
	return vfs.IsNotExist(err) || (err == nil && len(des) == 0)
}

// flushWithin flushes c and fails the test unless that is done within the deadline.
func flushWithin(t *testing.T, c *Cursor) {
	t.Helper()
	flushed := make(chan error, 1)
	go func() { flushed <- c.Flush(context.Background()) }()
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cursor flush is held up: the applier is blocked by a cursor-log compaction")
	}
}

// TestTrashEmptiedAtOpen: what a crash left in the trash (a deleted ledger's directory whose
// removal the janitor had not finished) is removed by the next open.
func TestTrashEmptiedAtOpen(t *testing.T) {
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/data/trash/0000000000000001-1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/data/trash/0000000000000001-1/0000000000000005.seg", "/data/trash/0000000000000001-2"} {
		writeFileForTest(t, mem, p, []byte("deleted"))
	}
	for _, d := range []string{"/data/trash", "/data", "/"} {
		if err := mem.SyncDir(d); err != nil {
			t.Fatal(err)
		}
	}
	e := openMem(t, mem, nil)
	defer e.Close()
	poll.Until(t, 10*time.Second, "the trash to be emptied", func() bool { return dirEmptyOrMissing(mem, "/data/trash") })
}

// TestCursorLogRewriteDuringCompaction: a repair rewrites a cursor log from memory (on the applier)
// while the janitor compacts the same log. The compaction started from the older file; swapping it
// in, with the rewritten file's records after its snapshot's size copied behind it, would leave
// pieces of records in the log (the ledger stops as damaged at the next load). It must give up
// instead, and every cursor keeps its newest state.
func TestCursorLogRewriteDuringCompaction(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	g := &gateFS{FS: mem, block: func(op, path string) bool {
		return op == "sync" && strings.HasSuffix(path, "/ledgers/b/cursors.log.compact")
	}}
	e := openMem(t, g, nil)
	b, err := e.OpenLedger(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, b, 20)
	keep := openCursorT(t, b, "keep")
	c := openCursorT(t, b, "big")
	g.hold()
	t.Cleanup(g.release)
	props := growUntilCompaction(t, c, func() bool { return g.blocked.Load() > 0 })
	// The compaction waits for its snapshot's fsync. Now the log is rewritten wholesale, as a repair
	// does, and grows past the snapshot's size with newer states.
	if err := b.rewriteCursorLog(b.liveCursorRecords()); err != nil {
		t.Fatal(err)
	}
	if err := keep.MarkDelete(ctx, ps[9]); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, keep)
	for i := 0; i < 8; i++ {
		props["n"] = strings.Repeat("m", i)
		if err := c.SetProperties(ctx, props); err != nil {
			t.Fatal(err)
		}
		flushWithin(t, c)
	}
	g.release()
	poll.Until(t, 10*time.Second, "the compaction to end", func() bool {
		_, err := mem.Stat("/data/ledgers/b/cursors.log.compact")
		return vfs.IsNotExist(err)
	})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	b, err = e.OpenLedger(ctx, "b")
	if err != nil {
		t.Fatalf("the ledger does not load after a rewrite during a compaction: %v", err)
	}
	if c := b.Cursor("keep"); c == nil || c.MarkDeletePosition() != ps[9] {
		t.Fatalf("cursor keep: %+v", c)
	}
	if c := b.Cursor("big"); c == nil || c.Properties()["n"] != props["n"] {
		t.Fatal("cursor big lost its last properties")
	}
}

// TestCursorLogCompactionSyncsItsTail: the cursor states a compaction copies behind its snapshot
// (appended while it ran) are fsynced before the compacted log is renamed in, so a cursor state
// acknowledged meanwhile survives a writeback failure of the new file and a crash. Before, the
// tail was written through a descriptor closed at once with no fsync: the writeback failure had
// nobody to report to (fdretire.go), the checkpoint's fsync through a new descriptor succeeded and
// retired the journal holding the record, and the crash regressed the cursor.
func TestCursorLogCompactionSyncsItsTail(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	g := &gateFS{FS: mem, block: func(op, path string) bool {
		return op == "sync" && strings.HasSuffix(path, "/cursors.log.compact")
	}}
	mod := func(o *Options) {
		o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour
		o.JournalFileBytes = 256 << 20
	}
	e := openMem(t, g, mod)
	b, err := e.OpenLedger(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, b, 20)
	keep := openCursorT(t, b, "keep")
	if err := keep.MarkDelete(ctx, ps[4]); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, keep)
	c := openCursorT(t, b, "big")
	ckpts := e.Metrics().Checkpoints
	g.hold()
	t.Cleanup(g.release)
	growUntilCompaction(t, c, func() bool { return g.blocked.Load() > 0 })
	// Acknowledged while the compaction runs: lands in the tail copied behind the snapshot.
	if err := keep.MarkDelete(ctx, ps[9]); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, keep)
	g.release()
	const p = "/data/ledgers/b/cursors.log"
	poll.Until(t, 10*time.Second, "the compaction to finish", func() bool {
		st, err := mem.Stat(p)
		return err == nil && st.Size < 1<<20
	})
	if e.Metrics().Checkpoints != ckpts {
		t.Fatal("a checkpoint ran meanwhile: the scenario needs the compaction before the next checkpoint")
	}
	// The kernel's background writeback of the new log fails; no descriptor of it is open.
	if err := mem.FailWriteback(p, vfs.EIO); err != nil {
		t.Fatal(err)
	}
	checkpointThrough(t, e) // retires the journal that holds keep's ps[9] record
	crashed := mem.Crash(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	b2, err := e2.OpenLedger(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if got := b2.Cursor("keep"); got == nil || got.MarkDeletePosition() != ps[9] {
		var md mtypes.Position
		if got != nil {
			md = got.MarkDeletePosition()
		}
		t.Fatalf("cursor keep after the crash is at %v, want its acknowledged %v", md, ps[9])
	}
}

// TestCompactionTailSyncDoesNotStallOtherTopics: the fdatasync of the records a cursor-log
// compaction copies behind its snapshot runs outside the engine-wide cursor-log lock, so a slow one
// does not hold the applier (and every topic's receipts) behind another ledger's cursor flush.
func TestCompactionTailSyncDoesNotStallOtherTopics(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var n atomic.Int32
	first, firstIn := make(chan struct{}), make(chan struct{}, 1)
	second, secondIn := make(chan struct{}), make(chan struct{}, 1)
	g := &gateFS{FS: mem, block: func(op, path string) bool {
		if op != "sync" || !strings.HasSuffix(path, "/cursors.log.compact") {
			return false
		}
		switch n.Add(1) {
		case 1: // the snapshot's sync
			firstIn <- struct{}{}
			<-first
		case 2: // the copied tail's fdatasync: a slow disk
			secondIn <- struct{}{}
			<-second
		}
		return false
	}}
	mod := func(o *Options) { o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour }
	e := openMem(t, g, mod)
	defer e.Close()
	a, err := e.OpenLedger(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	aps := appendN(t, a, 3)
	ca := openCursorT(t, a, "ca")
	b, err := e.OpenLedger(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, b, 20)
	keep := openCursorT(t, b, "keep")
	c := openCursorT(t, b, "big")
	g.hold()
	defer g.release()
	defer close(second)
	growUntilCompaction(t, c, func() bool {
		select {
		case <-firstIn:
			return true
		default:
			return false
		}
	})
	if err := keep.MarkDelete(ctx, ps[9]); err != nil { // a tail to copy and fdatasync
		t.Fatal(err)
	}
	flushWithin(t, keep)
	close(first)
	select {
	case <-secondIn:
	case <-time.After(10 * time.Second):
		t.Fatal("the tail's fdatasync was not reached")
	}
	// Topic a's cursor flush goes through the applier first, then one of its appends.
	if err := ca.MarkDelete(ctx, aps[1]); err != nil {
		t.Fatal(err)
	}
	flushWithin(t, ca)
	done := make(chan error, 1)
	a.AppendAsync([]byte("x"), time.Now().UnixMilli(), func(_ mtypes.Position, err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no receipt for topic a while b's compaction fdatasyncs its copied tail")
	}
}

// growUntilCompaction writes and flushes 200 KiB states of cursor c, each a little different,
// until started reports that a compaction of its cursor log began (at most 20), and returns the
// last properties written.
func growUntilCompaction(t *testing.T, c *Cursor, started func() bool) map[string]string {
	t.Helper()
	props := map[string]string{"blob": strings.Repeat("p", 200<<10)}
	for i := 0; !started(); i++ {
		if i == 20 {
			t.Fatal("20 flushes of 200 KiB did not start a compaction")
		}
		props["n"] = strings.Repeat("n", i)
		if err := c.SetProperties(context.Background(), props); err != nil {
			t.Fatal(err)
		}
		flushWithin(t, c)
	}
	return props
}
