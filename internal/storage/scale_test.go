package storage

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

func openFDs(t *testing.T) int {
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(des)
}

// TestTenThousandTopics opens 10,000 ledgers (each with one entry and a durable cursor) on the
// real filesystem and asserts that open files stay bounded and an idle topic costs at most 2 KiB.
func TestTenThousandTopics(t *testing.T) {
	const topics = 10000
	const maxOpen = 64
	ctx := context.Background()
	fdBefore := openFDs(t)
	e, err := Open(ctx, Options{Dir: t.TempDir(), Logger: testLogger(), CacheBytes: -1, MaxOpenFiles: maxOpen})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	ledgers := make([]*Ledger, topics)
	// Creating a ledger is durable (a journal record): open them concurrently so the
	// creations share group commits, as a broker loading many topics does.
	var openWG sync.WaitGroup
	openErrs := make(chan error, topics)
	sem := make(chan struct{}, 256)
	for i := range ledgers {
		openWG.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; openWG.Done() }()
			l, err := e.OpenLedger(ctx, fmt.Sprintf("persistent://public/default/topic-%05d", i))
			if err != nil {
				openErrs <- err
				return
			}
			ledgers[i] = l
		}()
	}
	openWG.Wait()
	close(openErrs)
	for err := range openErrs {
		t.Fatal(err)
	}
	t.Logf("opened in %v", time.Since(start))
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	// Every topic gets an entry (a segment file) in the full run; -short writes to 500 of them,
	// still far more than the open-file bound.
	written := ledgers
	if testing.Short() {
		written = ledgers[:500]
	}
	for _, l := range written {
		wg.Add(1)
		l.AppendAsync([]byte("hello, idle topic"), 1, func(_ mtypes.Position, err error) {
			if err != nil {
				errMu.Lock()
				firstErr = err
				errMu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	t.Logf("appended in %v", time.Since(start))
	if !testing.Short() {
		for _, l := range ledgers {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if _, err := l.OpenCursor(ctx, "sub", CursorOptions{Initial: mtypes.Earliest, Durable: true}); err != nil {
					errMu.Lock()
					firstErr = err
					errMu.Unlock()
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
	}
	t.Logf("cursors in %v", time.Since(start))
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// Descriptors the cache evicted after writing through them are fsynced before they are closed
	// (fdretire.go); count once those are done.
	e.files.waitRetired()
	perTopic := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / topics
	fds := openFDs(t) - fdBefore
	t.Logf("%d topics: %d bytes of heap per idle topic, %d open files (limit %d + journal), metrics %+v", topics, perTopic, fds, maxOpen, e.Metrics().OpenFiles)
	if perTopic > 2048 {
		t.Errorf("idle topic costs %d bytes, budget 2048", perTopic)
	}
	if fds > maxOpen+4 {
		t.Errorf("%d files open, bound %d", fds, maxOpen+4)
	}
	runtime.KeepAlive(ledgers)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("closed in %v", time.Since(start))
}
