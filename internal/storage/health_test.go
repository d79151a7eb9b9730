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
	const jfb = 8 << 10
	mod := func(o *Options) {
		o.JournalFileBytes = jfb
		o.MaxJournalBacklog = 3 * jfb
		o.DirectWriteBytes = -1
	}
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
