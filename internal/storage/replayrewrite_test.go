package storage

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// TestRestartOverFailedWritebackOfNewSegment: the first fsync of a new segment fails, so nothing
// of it reached the disk, its header included (written when the segment was created, in the same
// apply as its first entry), and the broker restarts before a repair could rewrite it. The replay
// rewrites every entry the journal holds; it must rewrite the header too, or after a power loss
// the segment starts with zeros and its ledger is fenced as corrupt.
func TestRestartOverFailedWritebackOfNewSegment(t *testing.T) {
	restartOverFailedWriteback(t, false)
}

// restartOverFailedWriteback: a checkpoint's fsync of the victim's segment fails; from then on
// every write of it fails too (the repair's rewrite), so it is still unrepaired when the engine
// is closed and opened again over the same files and page cache (a restart of the process); a
// power loss follows. Every acknowledged entry must be there. With headerDurable a checkpoint
// fsyncs the segment (its header and first entry) successfully before the failures start;
// without, every fsync of it fails from the start, so nothing of it is durable. Which one happens
// does not depend on when checkpoints run.
func restartOverFailedWriteback(t *testing.T, headerDurable bool) {
	mem := vfs.NewMem()
	mod := smallJournalsThroughCache
	e := openMem(t, mem, mod)
	victim := newOwnerLedger(t, e, "victim")
	other := newOwnerLedger(t, e, "other")
	seg := segPath(victim.l.dirPath(), victim.l.LastConfirmed().LedgerID)
	w := injectWritebackFailure(mem, seg, !headerDurable)
	if headerDurable {
		victim.appendSome(1, 100)
		w.waitForGoodSync(t, other)
		w.failing.Store(true)
	}
	victim.appendSome(20, 100)
	if len(victim.acked) == 0 {
		t.Fatal("no entry of the victim acknowledged")
	}
	e3 := w.restartThenCrash(t, e, other, mod)
	defer e3.Close()
	verifyAcked(t, e3, "victim", victim.acked)
	verifyAcked(t, e3, "other", other.acked)
}

// writebackFailure fails the fsyncs of the files whose path starts with prefix while failing is
// set, and every write of them after the first failed fsync (so a repair cannot rewrite them).
type writebackFailure struct {
	mem     *vfs.Mem
	prefix  string
	failing atomic.Bool
	failed  atomic.Bool
	synced  atomic.Int32 // good fsyncs
}

func injectWritebackFailure(mem *vfs.Mem, prefix string, failing bool) *writebackFailure {
	w := &writebackFailure{mem: mem, prefix: prefix}
	w.failing.Store(failing)
	mem.SetInjector(func(op vfs.Op, name string) error {
		switch {
		case !strings.HasPrefix(name, prefix):
		case op == vfs.OpSync && w.failing.Load():
			w.failed.Store(true)
			return vfs.EIO
		case op == vfs.OpSync:
			w.synced.Add(1)
		case op == vfs.OpWrite && w.failed.Load():
			return vfs.EIO
		}
		return nil
	})
	return w
}

// waitForGoodSync waits for a checkpoint to fsync the files (other's appends make checkpoints).
func (w *writebackFailure) waitForGoodSync(t *testing.T, other *ownerLedger) {
	poll.Until(t, 10*time.Second, "a checkpoint to fsync "+w.prefix, func() bool {
		other.appendSome(10, 500)
		return w.synced.Load() > 0
	})
}

// restartThenCrash waits for a checkpoint's fsync of the files to fail, closes e (its final
// checkpoint fails too: the journal stays), opens the engine again over the same files and page
// cache (a restart of the process, everything still reads back) and closes it, and returns the
// engine opened after a power loss that follows.
func (w *writebackFailure) restartThenCrash(t *testing.T, e *Engine, other *ownerLedger, mod func(*Options)) *Engine {
	t.Helper()
	poll.Until(t, 10*time.Second, "a checkpoint's fsync of "+w.prefix+" to fail", func() bool {
		other.appendSome(10, 500)
		return w.failed.Load() && e.Metrics().LastCheckpointError != ""
	})
	_ = e.Close()
	w.mem.SetInjector(nil)
	if lost, _ := w.mem.LostBytes(w.prefix); lost == 0 {
		t.Fatalf("nothing of %s lost", w.prefix)
	}
	e2 := openMem(t, w.mem, mod)
	_ = e2.Close()
	return openMem(t, w.mem.Crash(nil), mod)
}

// TestRestartOverFailedCursorLogWriteback: a checkpoint's fsync of a cursor log fails, so the
// records appended since the last good fsync are lost on disk while the page cache still shows
// them; every write of the log fails from then on (the repair's rewrite too), and the process
// restarts over the same files and page cache, then loses power. The replay appends the journal's
// cursor records after the log's end as the page cache shows it and fsyncs the log: the records
// it appends become durable, the lost ones before them do not. After the power loss the log has a
// hole before the replayed records; a cursor created or moved in the lost part must still be
// there, at its flushed position.
func TestRestartOverFailedCursorLogWriteback(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	mod := smallJournalsThroughCache
	e := openMem(t, mem, mod)
	victim := newOwnerLedger(t, e, "victim")
	other := newOwnerLedger(t, e, "other")
	victim.appendSome(20, 100)
	// The log and its rewrite's temporary file.
	w := injectWritebackFailure(mem, cursorLogPath(victim.l.dirPath()), false)
	first := victim.l.LastConfirmed()
	first.EntryID = 3
	early, err := victim.l.OpenCursor(ctx, "early", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := early.MarkDelete(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := early.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.waitForGoodSync(t, other)
	w.failing.Store(true)
	// Written to the log after its last good fsync: lost on disk, shown by the page cache.
	moved := first
	moved.EntryID = 9
	if err := early.MarkDelete(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if err := early.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.l.OpenCursor(ctx, "late", CursorOptions{Initial: mtypes.Earliest, Durable: true}); err != nil {
		t.Fatal(err)
	}
	e3 := w.restartThenCrash(t, e, other, mod)
	defer e3.Close()
	l, err := e3.OpenLedger(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if c := l.Cursor("early"); c == nil || c.MarkDeletePosition() != moved {
		t.Fatalf("cursor early: %v, want it at %v", c, moved)
	}
	if l.Cursor("late") == nil {
		t.Fatal("cursor late, created after the log's last good fsync, is gone")
	}
	verifyAcked(t, e3, "victim", victim.acked)
	verifyAcked(t, e3, "other", other.acked)
}
