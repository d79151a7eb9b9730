package node

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/poll"
)

// TestIdleTopicHeap measures the live heap an idle topic costs the whole broker (storage, broker
// core, replication index, catalog): it creates topics through the admin API's topic service (what
// PUT /admin/v2/persistent/public/default/idle-N calls), lets background work run (replication
// scans, index snapshots), and reports the growth of the live heap (quietLiveHeap) per topic, at
// several points.
// README budget: 2 KiB per idle topic, checked on the full run (10,000 topics, about 10 s).
// -short creates 500 topics and only guards against a gross regression.
//
//	IDLE_TOPICS=n        topics to create (default 10,000; 500 with -short)
//	IDLE_MEMPROFILE=f    write a heap profile (runtime.MemProfileRate = 64) after the last measurement
//	IDLE_DEDUP=1         with producer deduplication on by default (--dedup)
//	IDLE_SETTLE=d        how long to keep measuring after creation (default 8s; 35s covers the
//	                     replication manager's full resync, every 30 s)
func TestIdleTopicHeap(t *testing.T) {
	topics, settle, budget := 10000, 8*time.Second, int64(2048)
	if testing.Short() {
		topics, settle, budget = 500, 0, 4096
	}
	if v := os.Getenv("IDLE_SETTLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("IDLE_SETTLE=%q", v)
		}
		settle = d
	}
	if v := os.Getenv("IDLE_TOPICS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("IDLE_TOPICS=%q", v)
		}
		topics = n
	}
	profile := os.Getenv("IDLE_MEMPROFILE")
	if profile != "" {
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 64
		t.Cleanup(func() { runtime.MemProfileRate = old })
	}
	o := testOptions(t, t.TempDir())
	o.Dedup = os.Getenv("IDLE_DEDUP") == "1"
	n := startNode(t, o)
	c := &n.components
	svc := topicService{broker: c.broker, cat: c.catalog, repl: c.replication, schema: c.schemas}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	before := quietLiveHeap(t)
	start := time.Now()
	// Eight at a time, as the curl loop of docs/performance.md.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := svc.CreateTopic(ctx, fmt.Sprintf("persistent://public/default/idle-%d", i), nil); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	for i := range topics {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			t.Fatalf("create topic: %v", err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("create topic: %v", err)
	default:
	}
	created := time.Since(start)
	perTopic := func() int64 { return (quietLiveHeap(t) - before) / int64(topics) }
	last := perTopic()
	t.Logf("%d topics created in %v: %d B per idle topic right after creation", topics, created.Round(time.Millisecond), last)
	// Background work (the replication manager's scans, index snapshots every 5 s) runs on its
	// own schedule: measure every second until settle has passed, and keep the highest figure
	// from 6 s on (what an operator sees on an idle broker).
	worst := last
	for at := time.Second; at <= settle; at += time.Second {
		time.Sleep(time.Until(start.Add(created + at)))
		last = perTopic()
		t.Logf("after %v: %d B per idle topic", at, last)
		if at >= 6*time.Second || settle < 6*time.Second {
			worst = max(worst, last)
		}
	}
	if settle == 0 {
		worst = last
	}
	if profile != "" {
		runtime.GC()
		f, err := os.Create(profile)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := svc.ListTopics(ctx, "public/default"); err != nil || len(got) != topics {
		t.Fatalf("listed %d topics (%v), want %d", len(got), err, topics)
	}
	t.Logf("steady: %d B per idle topic (budget %d)", worst, budget)
	if worst > budget {
		t.Errorf("an idle topic costs %d B of live heap, budget %d", worst, budget)
	}
}

// A live-heap reading counts garbage too when something allocates while it is taken: an object
// allocated during a collection's mark phase is marked live by that collection, and the broker's
// background passes over every topic (cursor flushes and replication index maintenance every
// second, rate and console sampling every 5 s) allocate in bursts, each some hundred bytes per
// topic. So a reading only counts when the whole process allocated at most quietAllocBytes while
// its collection ran (an idle broker between passes allocates nothing), and a measurement keeps
// the smallest of quietReadings such readings: each is the steady live heap plus whatever a pass
// in progress held reachable at that moment, never less, so the smallest never under-reports.
const (
	quietAllocBytes = 16 << 10
	quietReadings   = 3
)

// quietLiveHeap returns the live heap in bytes, as the smallest of quietReadings quiet readings
// (see quietAllocBytes); it polls for quiet moments with a deadline.
func quietLiveHeap(t *testing.T) int64 {
	t.Helper()
	best := uint64(math.MaxUint64)
	for range quietReadings {
		poll.UntilNil(t, time.Minute, "a garbage collection while the broker allocates nothing", func() error {
			live, allocated := liveHeapReading()
			if allocated > quietAllocBytes {
				return fmt.Errorf("%d B allocated while collecting, at most %d B wanted", allocated, quietAllocBytes)
			}
			best = min(best, live)
			return nil
		})
	}
	return int64(best)
}

// liveHeapReading collects garbage and returns the bytes of heap objects the collection marked
// reachable (runtime/metrics /gc/heap/live:bytes: unlike MemStats.HeapAlloc, nothing allocated
// after the collection counts) and the bytes the process allocated while it ran.
func liveHeapReading() (live, allocated uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	runtime.GC() // moves sync.Pool caches to their victim caches, which the next collection drops
	metrics.Read(s)
	start := s[1].Value.Uint64()
	runtime.GC()
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64() - start
}
