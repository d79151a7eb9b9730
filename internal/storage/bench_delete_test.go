package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// BenchmarkPublishWhileDeleting1GiB: topic A takes 1 KiB appends at 5,000/s (open loop, every
// append timed from AppendAsync to its receipt) while topic B, holding 1 GiB of 64 KiB entries on
// disk (written, then the engine closed and reopened), is deleted. It reports A's receipt latency
// over the deletion window (from DeleteLedger until B's files are gone from the disk, plus 200 ms):
// p50, p99, max, and how long the files took to go. On the real file system; one iteration.
//
//	go test -run '^$' -bench PublishWhileDeleting1GiB -benchtime 1x ./internal/storage/
func BenchmarkPublishWhileDeleting1GiB(b *testing.B) {
	if testing.Short() {
		b.Skip("writes 1 GiB")
	}
	ctx := context.Background()
	dir := b.TempDir()
	e, err := Open(ctx, Options{Dir: dir, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	big, err := e.OpenLedger(ctx, "bench/b")
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 64<<10)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for range (1 << 30) / len(data) {
		sem <- struct{}{}
		wg.Add(1)
		big.AppendAsync(data, time.Now().UnixMilli(), func(_ mtypes.Position, err error) {
			if err != nil {
				panic(err)
			}
			<-sem
			wg.Done()
		})
	}
	wg.Wait()
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	e, err = Open(ctx, Options{Dir: dir, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	a, err := e.OpenLedger(ctx, "bench/a")
	if err != nil {
		b.Fatal(err)
	}
	bDir := e.ledgerDir("bench/b")
	gone := func() bool {
		if _, err := os.Stat(bDir); !os.IsNotExist(err) {
			return false
		}
		des, _ := os.ReadDir(filepath.Join(dir, "trash"))
		return len(des) == 0
	}

	type sample struct {
		at  time.Time
		lat time.Duration
	}
	var mu sync.Mutex
	var samples []sample
	stop := make(chan struct{})
	pubDone := make(chan struct{})
	msg := make([]byte, 1<<10)
	go func() {
		defer close(pubDone)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for range 5 {
				start := time.Now()
				a.AppendAsync(msg, start.UnixMilli(), func(_ mtypes.Position, err error) {
					if err != nil {
						panic(err)
					}
					mu.Lock()
					samples = append(samples, sample{start, time.Since(start)})
					mu.Unlock()
				})
			}
		}
	}()
	b.ResetTimer()
	time.Sleep(500 * time.Millisecond)
	from := time.Now()
	deleted := make(chan error, 1)
	go func() { deleted <- e.DeleteLedger(ctx, "bench/b") }()
	for !gone() {
		time.Sleep(time.Millisecond)
	}
	removed := time.Since(from)
	if err := <-deleted; err != nil {
		b.Fatal(err)
	}
	to := time.Now().Add(200 * time.Millisecond)
	time.Sleep(time.Until(to) + 100*time.Millisecond)
	close(stop)
	<-pubDone
	b.StopTimer()

	mu.Lock()
	var lats []time.Duration
	for _, s := range samples {
		if !s.at.Before(from) && s.at.Before(to) {
			lats = append(lats, s.lat)
		}
	}
	mu.Unlock()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	if len(lats) == 0 {
		b.Fatal("no appends in the deletion window")
	}
	q := func(f float64) float64 { return float64(lats[int(f*float64(len(lats)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(lats[len(lats)-1])/1e6, "max-ms")
	b.ReportMetric(float64(removed)/1e6, "removal-ms")
	b.ReportMetric(float64(len(lats)), "appends")
	fmt.Fprintf(os.Stderr, "delete 1 GiB: removal %v, A's receipts in the window: n=%d p50=%.2fms p99=%.2fms max=%.2fms\n",
		removed, len(lats), q(0.5), q(0.99), float64(lats[len(lats)-1])/1e6)
}
