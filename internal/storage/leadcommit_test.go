package storage

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// quietEngine turns off the engine's own periodic items (cursor flushes, trims), which would wake
// the sync loop while a test holds a lead.
func quietEngine(o *Options) { o.CursorFlushInterval, o.TrimInterval = time.Hour, time.Hour }

// warmLedger opens ledger name on e and appends to it until the journal file is open and the load
// measured light.
func warmLedger(t *testing.T, e *Engine, name string) *Ledger {
	t.Helper()
	l, err := e.OpenLedger(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3)
	return l
}

// openLead opens a lead on l's engine; none may be open.
func openLead(t *testing.T, l *Ledger) *Lead {
	t.Helper()
	lead := l.LeadCommitBegin()
	if lead == nil {
		t.Fatal("no lead although none is open")
	}
	return lead
}

// lastAfterReopen closes e, opens the engine on fs again and checks that ledger name ends at want.
func lastAfterReopen(t *testing.T, e *Engine, fs vfs.FS, mod func(*Options), name string, want mtypes.Position) {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, fs, mod)
	defer e.Close()
	l, err := e.OpenLedger(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.LastConfirmed(); got != want {
		t.Fatalf("after reopen the last entry is %v, want %v", got, want)
	}
}

// leadReady waits until a lead may commit on e: the sync loop idle under a light load.
func leadReady(t *testing.T, e *Engine) {
	t.Helper()
	poll.Until(t, 10*time.Second, "the sync loop to be idle under a light load", func() bool {
		e.queue.mu.Lock()
		defer e.queue.mu.Unlock()
		return e.queue.lead.syncLoopIdle && e.syncLoop.light && len(e.syncLoop.pipeline.inflight) == 0
	})
}

// TestLeadCommitsOnTheCaller: under a light load, appends made inside a lead are committed by
// Lead.End on the caller's goroutine: their callbacks have run when it returns, in order,
// and the entries read back after a reopen.
func TestLeadCommitsOnTheCaller(t *testing.T) {
	fs := vfs.NewMem()
	e := openMem(t, fs, quietEngine)
	l := warmLedger(t, e, "public/default/persistent/lead")
	var acked []mtypes.Position
	for round := range 20 {
		leadReady(t, e)
		before := e.Metrics().LeadCommits
		lead := openLead(t, l)
		var done atomic.Int32
		for i := range 3 {
			l.AppendAsyncIn(lead, payload(round*3+i), 1, func(p mtypes.Position, err error) {
				if err != nil {
					t.Errorf("append: %v", err)
				}
				acked = append(acked, p) // callbacks of one ledger run one at a time
				done.Add(1)
			})
		}
		if n := done.Load(); n != 0 {
			t.Fatalf("%d callbacks ran before the lead ended", n)
		}
		lead.End(nil)
		if e.Metrics().LeadCommits != before+1 {
			// Something else woke the sync loop first (a background item): it committed them.
			poll.Until(t, 10*time.Second, "the sync loop to commit", func() bool { return done.Load() == 3 })
			continue
		}
		if n := done.Load(); n != 3 {
			t.Fatalf("the lead committed, yet %d of 3 callbacks ran by its end", n)
		}
	}
	if e.Metrics().LeadCommits == 0 {
		t.Fatal("no lead committed in 20 rounds")
	}
	for i := 1; i < len(acked); i++ {
		if acked[i-1].Compare(acked[i]) >= 0 {
			t.Fatalf("positions out of order: %v", acked)
		}
	}
	lastAfterReopen(t, e, fs, quietEngine, l.Name(), acked[len(acked)-1])
}

// TestLeadHolderWaitsThroughStorage: a lead's holder that waits for storage inside the lead (a
// synchronous append, a durable cursor) is not left waiting for its own lead's end.
func TestLeadHolderWaitsThroughStorage(t *testing.T) {
	e := openMem(t, vfs.NewMem(), quietEngine) // no background item may wake the sync loop for it
	defer e.Close()
	l := warmLedger(t, e, "public/default/persistent/lead-wait")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	leadReady(t, e)
	lead := openLead(t, l)
	var first atomic.Bool
	l.AppendAsyncIn(lead, payload(1), 1, func(_ mtypes.Position, err error) { first.Store(err == nil) })
	if _, err := l.Append(ctx, payload(2), 1); err != nil {
		t.Fatalf("a synchronous append inside a lead: %v", err)
	}
	if !first.Load() {
		t.Fatal("the earlier append was not acknowledged before the later one")
	}
	l.AppendAsyncIn(lead, payload(3), 1, func(mtypes.Position, error) {})
	if _, err := l.OpenCursor(ctx, "inside-lead", CursorOptions{Initial: mtypes.Latest, Durable: true}); err != nil {
		t.Fatalf("a durable cursor opened inside a lead: %v", err)
	}
	lead.End(nil)
}

// TestLeadEndsAtOnceWhileTheSyncLoopIsBusy: with a group commit's fsync stalled, a lead's end
// does not wait for it: it wakes the sync loop, which commits the lead's appends after it.
func TestLeadEndsAtOnceWhileTheSyncLoopIsBusy(t *testing.T) {
	fs := &stallFS{FS: vfs.NewMem()}
	e := openMem(t, fs, nil)
	t.Cleanup(func() { _ = e.Close() })
	t.Cleanup(fs.release) // runs first: a stalled fsync would hold Close
	l := warmLedger(t, e, "public/default/persistent/lead-busy")
	res := &appendResult{errs: map[int]error{}, pos: map[int]mtypes.Position{}}
	fs.stall()
	l.AppendAsync(payload(1), 1, res.done(1))
	poll.Until(t, 10*time.Second, "the fsync to stall", func() bool { return fs.stalled.Load() == 1 })
	lead := openLead(t, l)
	l.AppendAsyncIn(lead, payload(2), 1, res.done(2))
	ended := make(chan struct{})
	go func() { lead.End(nil); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the lead's end waited for the stalled fsync")
	}
	if n := res.count(); n != 0 {
		t.Fatalf("%d appends acknowledged before the stalled fsync ended", n)
	}
	fs.release()
	poll.Until(t, 10*time.Second, "both appends to be acknowledged", func() bool { return res.count() == 2 })
	if res.order[0] != 1 || res.errs[1] != nil || res.errs[2] != nil || res.pos[1].Compare(res.pos[2]) >= 0 {
		t.Fatalf("order %v errs %v positions %v", res.order, res.errs, res.pos)
	}
}

// TestLeadsAmongPlainAppenders: goroutines that append inside leads and goroutines that append
// plainly, on shared ledgers: every append is answered, in order per ledger, and none is left
// waiting for a lead (run under -race).
func TestLeadsAmongPlainAppenders(t *testing.T) {
	e := openMem(t, vfs.NewMem(), nil)
	ledgers := make([]*Ledger, 3)
	for i := range ledgers {
		l, err := e.OpenLedger(context.Background(), "public/default/persistent/lead-mix-"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		ledgers[i] = l
	}
	const workers, rounds = 6, 150
	var (
		wg       sync.WaitGroup
		answered atomic.Int64
		mu       sync.Mutex
		last     = map[*Ledger]mtypes.Position{}
		issued   atomic.Int64
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				l := ledgers[(w+r)%len(ledgers)]
				var lead *Lead
				if w%2 == 0 {
					lead = l.LeadCommitBegin()
				}
				for i := range 1 + r%3 {
					issued.Add(1)
					l.AppendAsyncIn(lead, payload(i), 1, func(p mtypes.Position, err error) {
						answered.Add(1)
						if err != nil {
							t.Errorf("append: %v", err)
							return
						}
						mu.Lock()
						defer mu.Unlock()
						if prev, ok := last[l]; ok && prev.Compare(p) >= 0 {
							t.Errorf("ledger %s: %v acknowledged after %v", l.Name(), p, prev)
						}
						last[l] = p
					})
				}
				if lead != nil {
					lead.End(nil)
				}
			}
		}()
	}
	wg.Wait()
	poll.Until(t, 10*time.Second, "every append to be answered", func() bool { return answered.Load() == issued.Load() })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLeadLeavesOtherAppendersAwake: while a lead is open, and even while its holder's own
// appends wait for its end, another goroutine's append wakes the sync loop itself: a goroutine
// that waits for its append is never left waiting for someone else's lead.
func TestLeadLeavesOtherAppendersAwake(t *testing.T) {
	e := openMem(t, vfs.NewMem(), quietEngine)
	defer e.Close()
	l := warmLedger(t, e, "public/default/persistent/lead-other")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leadReady(t, e)
	lead := openLead(t, l)
	defer lead.End(nil)
	if _, err := l.Append(ctx, payload(1), 1); err != nil {
		t.Fatalf("an append beside an open lead: %v", err)
	}
	var led atomic.Bool
	l.AppendAsyncIn(lead, payload(2), 1, func(_ mtypes.Position, err error) { led.Store(err == nil) })
	if _, err := l.Append(ctx, payload(3), 1); err != nil {
		t.Fatalf("an append behind a lead's append: %v", err)
	}
	if !led.Load() {
		t.Fatal("the lead's earlier append was not acknowledged before the later one")
	}
}

// TestLeadCommitFailure: a journal fsync that fails in a lead's group commit fails its appends,
// on the lead's goroutine, and fences the ledger, as it does on the sync loop; the engine goes on
// for other ledgers.
func TestLeadCommitFailure(t *testing.T) {
	fs := &stallFS{FS: vfs.NewMem()}
	e := openMem(t, fs, quietEngine)
	defer e.Close()
	l := warmLedger(t, e, "public/default/persistent/lead-fail")
	leadReady(t, e)
	lead := openLead(t, l)
	fs.failFirst.Store(1)
	res := &appendResult{errs: map[int]error{}, pos: map[int]mtypes.Position{}}
	l.AppendAsyncIn(lead, payload(1), 1, res.done(1))
	lead.End(nil)
	poll.Until(t, 10*time.Second, "the append to be answered", func() bool { return res.count() == 1 })
	if res.errs[1] == nil {
		t.Fatal("an append whose fsync failed was acknowledged")
	}
	if _, err := l.Append(context.Background(), payload(2), 1); err == nil {
		t.Fatal("the ledger takes appends after a failed group commit")
	}
	other, err := e.OpenLedger(context.Background(), "public/default/persistent/lead-fail-other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Append(context.Background(), payload(3), 1); err != nil {
		t.Fatalf("another ledger after the failure: %v", err)
	}
}

// TestLeadsAcrossRotations: leads on an engine whose journal files fill every few group commits
// (a lead leaves a rotating commit to the sync loop): every append is acknowledged and reads
// back after a reopen.
func TestLeadsAcrossRotations(t *testing.T) {
	fs := vfs.NewMem()
	small := func(o *Options) { quietEngine(o); o.JournalFileBytes = 16 << 10 }
	e := openMem(t, fs, small)
	l := warmLedger(t, e, "public/default/persistent/lead-rotate")
	res := &appendResult{errs: map[int]error{}, pos: map[int]mtypes.Position{}}
	const n = 120
	for i := range n {
		lead := openLead(t, l)
		l.AppendAsyncIn(lead, payload(i), 1, res.done(i))
		lead.End(nil)
		poll.Until(t, 10*time.Second, "the append to be acknowledged", func() bool { return res.count() == i+1 })
	}
	for i := range n {
		if res.errs[i] != nil {
			t.Fatalf("append %d: %v", i, res.errs[i])
		}
	}
	if e.Metrics().LeadCommits == 0 {
		t.Fatal("no lead committed")
	}
	lastAfterReopen(t, e, fs, small, l.Name(), res.pos[n-1])
}

// TestCloseWithALeadOpen: Close while a lead holds an unwoken append answers that append, and the
// lead's end afterwards does nothing.
func TestCloseWithALeadOpen(t *testing.T) {
	e := openMem(t, vfs.NewMem(), quietEngine)
	l := warmLedger(t, e, "public/default/persistent/lead-close")
	leadReady(t, e)
	lead := openLead(t, l)
	res := &appendResult{errs: map[int]error{}, pos: map[int]mtypes.Position{}}
	l.AppendAsyncIn(lead, payload(1), 1, res.done(1))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the append to be answered", func() bool { return res.count() == 1 })
	lead.End(nil)
	if e.LeadCommitBegin() != nil {
		t.Fatal("a lead opened on a closed engine")
	}
}

// TestLeadArrivalsEndTheLightLoad: a lead whose holder's next appends arrived while it committed
// makes the load not light: the next lead leaves its group commit to the sync loop (which overlaps
// fsyncs), until the sync loop runs empty again and leads commit once more.
func TestLeadArrivalsEndTheLightLoad(t *testing.T) {
	e := openMem(t, vfs.NewMem(), quietEngine)
	defer e.Close()
	l := warmLedger(t, e, "public/default/persistent/lead-arrivals")
	leadOnce := func(arrived bool) (committedHere bool) {
		t.Helper()
		before := e.Metrics().LeadCommits
		lead := openLead(t, l)
		var done atomic.Bool
		l.AppendAsyncIn(lead, payload(1), 1, func(_ mtypes.Position, err error) { done.Store(err == nil) })
		lead.End(func() bool { return arrived })
		poll.Until(t, 10*time.Second, "the append to be acknowledged", done.Load)
		return e.Metrics().LeadCommits > before
	}
	leadReady(t, e)
	if !leadOnce(true) {
		t.Fatal("the first lead did not commit")
	}
	if leadOnce(false) {
		t.Fatal("a lead committed right after arrivals during the previous lead's commit")
	}
	leadReady(t, e) // the sync loop's pipeline ran empty with nothing pending
	if !leadOnce(false) {
		t.Fatal("leads did not commit again once the load was light")
	}
}

// TestAppendInAnEndedLead: an append made with a lead that has already ended is an ordinary
// append: it wakes the sync loop itself.
func TestAppendInAnEndedLead(t *testing.T) {
	e := openMem(t, vfs.NewMem(), quietEngine)
	defer e.Close()
	l := warmLedger(t, e, "public/default/persistent/lead-ended")
	leadReady(t, e)
	lead := openLead(t, l)
	lead.End(nil)
	var done atomic.Bool
	l.AppendAsyncIn(lead, payload(1), 1, func(_ mtypes.Position, err error) { done.Store(err == nil) })
	poll.Until(t, 10*time.Second, "the append to be acknowledged", done.Load)
}
