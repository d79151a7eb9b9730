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
	mod := func(o *Options) {
		o.JournalFileBytes = 16 << 10
		o.DirectWriteBytes = -1
		o.CacheBytes = -1
	}
	e := openMem(t, mem, mod)
	victim := newOwnerLedger(t, e, "victim")
	other := newOwnerLedger(t, e, "other")
	seg := segPath(victim.l.dirPath(), victim.l.LastConfirmed().LedgerID)
	var failSyncs, syncFailed atomic.Bool
	var synced atomic.Int32
	failSyncs.Store(!headerDurable)
	mem.SetInjector(func(op vfs.Op, name string) error {
		switch {
		case name != seg:
		case op == vfs.OpSync && failSyncs.Load():
			syncFailed.Store(true)
			return vfs.EIO
		case op == vfs.OpSync:
			synced.Add(1)
		case op == vfs.OpWrite && syncFailed.Load():
			return vfs.EIO
		}
		return nil
	})
	if headerDurable {
		victim.appendSome(1, 100)
		poll.Until(t, 10*time.Second, "a checkpoint to fsync the victim's segment", func() bool {
			other.appendSome(10, 500)
			return synced.Load() > 0
		})
		failSyncs.Store(true)
	}
	victim.appendSome(20, 100)
	if len(victim.acked) == 0 {
		t.Fatal("no entry of the victim acknowledged")
	}
	poll.Until(t, 10*time.Second, "the victim's segment fsync to fail at a checkpoint", func() bool {
		other.appendSome(10, 500)
		return syncFailed.Load() && e.Metrics().LastCheckpointError != ""
	})
	_ = e.Close() // its final checkpoint fails too: the journal stays
	mem.SetInjector(nil)
	if lost, _ := mem.LostBytes(seg); lost == 0 {
		t.Fatal("nothing of the segment lost")
	}
	// The restart: same files, same page cache (everything still reads back).
	e2 := openMem(t, mem, mod)
	_ = e2.Close()
	crashed := mem.Crash(nil)
	e3 := openMem(t, crashed, mod)
	defer e3.Close()
	verifyAcked(t, e3, "victim", victim.acked)
	verifyAcked(t, e3, "other", other.acked)
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
	mod := func(o *Options) {
		o.JournalFileBytes = 16 << 10
		o.DirectWriteBytes = -1
		o.CacheBytes = -1
	}
	e := openMem(t, mem, mod)
	victim := newOwnerLedger(t, e, "victim")
	other := newOwnerLedger(t, e, "other")
	victim.appendSome(20, 100)
	log := cursorLogPath(victim.l.dirPath())
	var failSyncs, syncFailed atomic.Bool
	var synced atomic.Int32
	mem.SetInjector(func(op vfs.Op, name string) error {
		switch {
		case !strings.HasPrefix(name, log): // the log and its rewrite's temporary file
		case op == vfs.OpSync && failSyncs.Load():
			syncFailed.Store(true)
			return vfs.EIO
		case op == vfs.OpSync:
			synced.Add(1)
		case op == vfs.OpWrite && syncFailed.Load():
			return vfs.EIO
		}
		return nil
	})
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
	poll.Until(t, 10*time.Second, "a checkpoint to fsync the cursor log", func() bool {
		other.appendSome(10, 500)
		return synced.Load() > 0
	})
	failSyncs.Store(true)
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
	poll.Until(t, 10*time.Second, "the cursor log's fsync to fail at a checkpoint", func() bool {
		other.appendSome(10, 500)
		return syncFailed.Load() && e.Metrics().LastCheckpointError != ""
	})
	_ = e.Close() // its final checkpoint fails too: the journal stays
	mem.SetInjector(nil)
	if lost, _ := mem.LostBytes(log); lost == 0 {
		t.Fatal("nothing of the cursor log lost")
	}
	// The restart: same files, same page cache (everything still reads back).
	e2 := openMem(t, mem, mod)
	_ = e2.Close()
	crashed := mem.Crash(nil)
	e3 := openMem(t, crashed, mod)
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
