package storage

import (
	"sync/atomic"
	"testing"
	"time"

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
