package replication

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
)

// TestMemoryBudgetWaitsAndAdmitsIntoEmpty runs in a synctest bubble: synctest.Wait returns once
// an Acquire is blocked, so "it did not return" is checked without waiting for time to pass.
func TestMemoryBudgetWaitsAndAdmitsIntoEmpty(t *testing.T) {
	synctest.Test(t, testMemoryBudgetWaitsAndAdmitsIntoEmpty)
}

func testMemoryBudgetWaitsAndAdmitsIntoEmpty(t *testing.T) {
	b := NewMemoryBudget(100)
	ctx := context.Background()
	if err := b.Acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Acquire(ctx, 60) }() // does not fit: waits
	synctest.Wait()
	select {
	case err := <-got:
		t.Fatalf("acquired over the limit (%v)", err)
	default:
	}
	b.Add(-30) // 30 + 60 fits now
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if u := b.Used(); u != 90 {
		t.Fatalf("used %d", u)
	}
	b.Add(-90)
	// Larger than the whole budget: admitted into an empty budget, so a replicator always progresses.
	if err := b.Acquire(ctx, 500); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { got <- b.Acquire(cctx, 1) }()
	synctest.Wait()
	select {
	case err := <-got:
		t.Fatalf("acquire past a full budget returned without room or cancellation (%v)", err)
	default:
	}
	cancel()
	if err := <-got; err == nil {
		t.Fatal("acquire past a full budget ended without an error when cancelled")
	}
	if b.TryAcquire(1) {
		t.Fatal("TryAcquire past a full budget")
	}
	b.Add(-500)
	if !b.TryAcquire(7) || b.Used() != 7 {
		t.Fatal("TryAcquire into an empty budget")
	}
	var nilBudget *MemoryBudget
	if err := nilBudget.Acquire(ctx, 1<<40); err != nil || nilBudget.Used() != 0 {
		t.Fatal("nil budget must be unlimited")
	}
	nilBudget.Add(5)
}

// TestRunnersShareMemoryBudget: three replicators catching up under a budget smaller than one
// read batch all finish, exactly once and in order, while the budget caps what they hold at once;
// once they are done and stopped, every byte is back.
func TestRunnersShareMemoryBudget(t *testing.T) {
	const perTopic = 1000
	const limit = 16 << 10
	pad := strings.Repeat("p", 1000) // ~1 KiB entries: one read batch (4 KiB) is a few of them
	budget := NewMemoryBudget(limit)
	var peak atomic.Int64
	var sawLimited atomic.Bool
	var watched atomic.Pointer[[]*Runner]
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if u := budget.Used(); u > peak.Load() {
				peak.Store(u)
			}
			if rs := watched.Load(); rs != nil {
				for _, r := range *rs {
					if r.Stats().MemoryLimited {
						sawLimited.Store(true)
					}
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	var pairs []pair
	var runners []*Runner
	for range 3 {
		p := newPair(t)
		p.remote.ackDelay = 2 * time.Millisecond // entries stay in flight, as behind a slow link
		for i := range perTopic {
			p.local.append(mkEntry(t, mtypes.Position{}, fmt.Sprintf("m%d", i)+pad, nil).Data, time.Now().UnixMilli())
		}
		pairs = append(pairs, p)
		runners = append(runners, p.start(t, StartEarliest, func(c *RunnerConfig) {
			c.Budget = budget
			c.Machine.ReadBatchEntries = 100
			c.Machine.ReadBatchBytes = 4 << 10
		}))
	}
	watched.Store(&runners)
	want := payloads(0, perTopic)
	for i := range want {
		want[i] += pad
	}
	for i, p := range pairs {
		poll.Until(t, 20*time.Second, "catch-up under the budget", func() bool { return remoteCount(p) == perTopic })
		checkRemote(t, p, want)
		poll.Until(t, 5*time.Second, "backlog 0", func() bool { return runners[i].Stats().ReplicationBacklog == 0 })
	}
	close(stop)
	sampler.Wait()
	// A read reserves its most (4 KiB) and can be admitted into an empty budget; what the
	// machines keep is trued up after every event (a read can bring a little more than its
	// bound: at least one entry, and metadata grows when re-headed). So at most the limit plus
	// about two reads.
	t.Logf("peak held %d bytes (budget %d)", peak.Load(), limit)
	if p := peak.Load(); p > limit+2*(4<<10)+2048 || p == 0 {
		t.Fatalf("peak held %d bytes with a budget of %d", p, limit)
	}
	if !sawLimited.Load() {
		t.Fatal("no replicator's stats ever showed memoryLimited while they waited for the budget")
	}
	for _, r := range runners {
		if r.Stats().MemoryLimited {
			t.Fatal("memoryLimited still set after catching up")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	if u := budget.Used(); u != 0 {
		t.Fatalf("%d bytes still held after every replicator stopped", u)
	}
}
