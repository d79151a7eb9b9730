package storage

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// heldFlush runs l.flushCursors(nil, nil) (the periodic flush) on a goroutine and stops it after
// it took c's state and before it queues it. release lets it go on; done is closed when it
// returned; waiting is closed when another flush or delete of c waits for it.
type heldFlush struct {
	release, done, waiting chan struct{}
}

func holdPeriodicFlush(t *testing.T, l *Ledger, c *Cursor) *heldFlush {
	t.Helper()
	h := &heldFlush{release: make(chan struct{}), done: make(chan struct{}), waiting: make(chan struct{})}
	taken := make(chan struct{})
	var held atomic.Bool
	var waiting sync.Once
	cursorFlushHooks.Store(&cursorFlushHookSet{
		taken: func(hc *Cursor) {
			if hc == c && held.CompareAndSwap(false, true) { // only the first flush to take it
				close(taken)
				<-h.release
			}
		},
		waiting: func(hc *Cursor) {
			if hc == c {
				waiting.Do(func() { close(h.waiting) })
			}
		},
	})
	t.Cleanup(func() { cursorFlushHooks.Store(nil) })
	go func() {
		defer close(h.done)
		l.flushCursors(nil, nil)
	}()
	<-taken
	return h
}

// noPeriodicFlush: the tests run the periodic flush themselves.
func noPeriodicFlush(o *Options) { o.CursorFlushInterval = time.Hour }

func testProps(v string) map[string]string { return map[string]string{"snapshot": v} }

// TestCloseQueuesAStateTakenBeforeIt: the periodic flush took a cursor's state (its version is
// queued) and Close runs before that flush queued the record. Close's own flush skips the
// cursor; unless Close waits for the flush in progress, the record lands after the ledger's seal,
// the applier no longer writes it, and the state is lost at a clean shutdown.
func TestCloseQueuesAStateTakenBeforeIt(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, noPeriodicFlush)
	l, err := e.OpenLedger(ctx, "flush/close")
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.OpenCursor(ctx, "sub", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetProperties(ctx, testProps("1")); err != nil {
		t.Fatal(err)
	}
	h := holdPeriodicFlush(t, l, c)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed: // Close did not wait for the flush in progress
		if err != nil {
			t.Fatal(err)
		}
		close(h.release)
	case <-h.waiting:
		close(h.release)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
	}
	<-h.done
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	l, err = e.OpenLedger(ctx, "flush/close")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Cursor("sub").Properties(); !reflect.DeepEqual(got, testProps("1")) {
		t.Fatalf("properties after a clean restart: %v, want %v", got, testProps("1"))
	}
}

// TestFlushOrderFollowsStates: the periodic flush took a cursor's state and is held before
// queueing it; the cursor changes and Flush persists the newer state. The older record must not
// be queued after the newer one: the log's last record wins at load, and the state Flush
// reported durable would be gone after a restart.
func TestFlushOrderFollowsStates(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, noPeriodicFlush)
	l, err := e.OpenLedger(ctx, "flush/order")
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.OpenCursor(ctx, "sub", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetProperties(ctx, testProps("old")); err != nil {
		t.Fatal(err)
	}
	h := holdPeriodicFlush(t, l, c)
	if err := c.SetProperties(ctx, testProps("new")); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- c.Flush(ctx) }()
	select {
	case err := <-flushed: // the newer state went ahead of the older one
		if err != nil {
			t.Fatal(err)
		}
		close(h.release)
	case <-h.waiting:
		close(h.release)
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
	}
	<-h.done
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	l, err = e.OpenLedger(ctx, "flush/order")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Cursor("sub").Properties(); !reflect.DeepEqual(got, testProps("new")) {
		t.Fatalf("properties after a restart: %v, want the flushed %v", got, testProps("new"))
	}
}
