package node

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestIdleTopicHeap measures the live heap an idle topic costs the whole broker (storage, broker
// core, replication index, catalog): it creates topics through the admin API's topic service (what
// PUT /admin/v2/persistent/public/default/idle-N calls), lets background work run (replication
// scans, index snapshots), and reports the HeapAlloc growth per topic after a GC, at several points.
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

	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	before := heap()
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
	perTopic := func() int64 { return (heap() - before) / int64(topics) }
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
