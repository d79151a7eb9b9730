package storage

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// BenchmarkAppend measures durable appends (SyncAlways: acknowledged after fsync, group commit)
// on the real filesystem: entry sizes 1 KiB and 64 KiB, 1, 16 and 256 concurrent appenders (each
// waits for its append before the next), over 1, 100 and 10,000 topics.
//
//	go test -run '^$' -bench 'Append' -benchtime 3s ./internal/storage/
func BenchmarkAppend(b *testing.B) {
	for _, topics := range []int{1, 100, 10000} {
		b.Run(fmt.Sprintf("topics=%d", topics), func(b *testing.B) {
			ctx := context.Background()
			e, err := Open(ctx, Options{Dir: b.TempDir(), Logger: testLogger()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = e.Close() })
			ledgers := make([]*Ledger, topics)
			for i := range ledgers {
				if ledgers[i], err = e.OpenLedger(ctx, fmt.Sprintf("persistent://public/default/bench-%d", i)); err != nil {
					b.Fatal(err)
				}
			}
			for _, size := range []int{1 << 10, 64 << 10} {
				for _, appenders := range []int{1, 16, 256} {
					b.Run(fmt.Sprintf("size=%dKiB/appenders=%d", size>>10, appenders), func(b *testing.B) {
						benchAppend(b, e, ledgers, size, appenders)
					})
				}
			}
		})
	}
}

func benchAppend(b *testing.B, e *Engine, ledgers []*Ledger, size, appenders int) {
	ctx := context.Background()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	before := e.Metrics()
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < appenders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				l := ledgers[int(i)%len(ledgers)]
				if _, err := l.Append(ctx, data, time.Now().UnixMilli()); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	after := e.Metrics()
	rounds := after.SyncRounds - before.SyncRounds
	b.ReportMetric(float64(b.N)/el.Seconds(), "entries/s")
	if rounds > 0 {
		b.ReportMetric(float64(b.N)/float64(rounds), "entries/fsync")
		b.ReportMetric(float64(after.FsyncLatencySum-before.FsyncLatencySum)/float64(rounds)/1e6, "ms/fsync")
	}
}

// BenchmarkRead measures sequential reads of 1,000-entry batches (1 KiB entries) and 16-entry
// batches (64 KiB entries) from the entry cache ("cached") and from segment files ("uncached":
// the entry cache is off; the OS page cache is warm, as for a consumer a little behind the tail).
func BenchmarkRead(b *testing.B) {
	for _, cached := range []bool{true, false} {
		for _, size := range []int{1 << 10, 64 << 10} {
			name := fmt.Sprintf("cached=%v/size=%dKiB", cached, size>>10)
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				cache := int64(256 << 20)
				if !cached {
					cache = -1
				}
				e, err := Open(ctx, Options{Dir: b.TempDir(), Logger: testLogger(), CacheBytes: cache})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				l, _ := e.OpenLedger(ctx, "read")
				total := 64 << 20
				data := make([]byte, size)
				var wg sync.WaitGroup
				for i := 0; i < total/size; i++ {
					wg.Add(1)
					l.AppendAsync(data, int64(i), func(_ mtypes.Position, err error) {
						if err != nil {
							b.Error(err)
						}
						wg.Done()
					})
				}
				wg.Wait()
				batch := 1000
				if size > 1<<10 {
					batch = 16
				}
				first := l.FirstPosition()
				from := first
				var n int64
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					es, err := l.Read(ctx, from, batch, 0)
					if err != nil {
						b.Fatal(err)
					}
					if len(es) == 0 {
						from = first
						continue
					}
					for _, en := range es {
						n += int64(len(en.Data))
					}
					from = mtypes.Position{LedgerID: es[len(es)-1].Position.LedgerID, EntryID: es[len(es)-1].Position.EntryID + 1}
				}
				b.StopTimer()
				b.ReportMetric(float64(n)/b.Elapsed().Seconds()/1e6, "MB/s")
				m := e.Metrics()
				if cached && m.CacheMisses > m.CacheHits/100 {
					b.Logf("cache hits %d misses %d", m.CacheHits, m.CacheMisses)
				}
			})
		}
	}
}

const recoveryWriterEnv = "MERIDIAN_STORAGE_RECOVERY_WRITER"

// runRecoveryWriter writes about 1 GiB of 64 KiB entries to one ledger (plus a cursor), says
// "done" and waits to be killed.
func runRecoveryWriter(dir string) {
	ctx := context.Background()
	e, err := Open(ctx, Options{Dir: dir, Logger: testLogger()})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	l, err := e.OpenLedger(ctx, "recovery/topic")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	c, _ := l.OpenCursor(ctx, "sub", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	data := make([]byte, 64<<10)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var last atomic.Value
	for i := 0; i < (1<<30)/len(data); i++ {
		sem <- struct{}{}
		wg.Add(1)
		l.AppendAsync(data, time.Now().UnixMilli(), func(p mtypes.Position, err error) {
			if err != nil {
				fmt.Println("error", err)
				os.Exit(2)
			}
			last.Store(p)
			<-sem
			wg.Done()
		})
		if i%1000 == 999 {
			_ = c.MarkDelete(ctx, last.Load().(mtypes.Position))
		}
	}
	wg.Wait()
	p := last.Load().(mtypes.Position)
	fmt.Printf("done %d %d\n", p.LedgerID, p.EntryID)
	time.Sleep(time.Hour)
}

func init() {
	if dir := os.Getenv(recoveryWriterEnv); dir != "" {
		runRecoveryWriter(dir)
		os.Exit(0)
	}
}

// BenchmarkRecovery1GiB: a writer process stores 1 GiB, is killed with SIGKILL, a torn record is
// appended to its last journal file, and the benchmark measures Open + OpenLedger + reading the
// last entry (what a restarted broker needs before it serves the topic). Run with -benchtime 1x:
// recovery changes the directory, so each iteration after the first would measure a clean start.
func BenchmarkRecovery1GiB(b *testing.B) {
	if testing.Short() {
		b.Skip("writes 1 GiB")
	}
	dir := b.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), recoveryWriterEnv+"="+dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var last mtypes.Position
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "done ") {
		_ = cmd.Process.Kill()
		b.Fatalf("writer: %q", sc.Text())
	}
	f := strings.Fields(sc.Text())
	last.LedgerID, _ = strconv.ParseInt(f[1], 10, 64)
	last.EntryID, _ = strconv.ParseInt(f[2], 10, 64)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	journals, _ := filepath.Glob(filepath.Join(dir, "journal", "*.jnl"))
	sort.Strings(journals)
	if len(journals) > 0 {
		jf, err := os.OpenFile(journals[len(journals)-1], os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			torn := appendSegRecord(nil, 1, 2, make([]byte, 1000))
			_, _ = jf.Write(torn[:len(torn)/2])
			_ = jf.Close()
		}
	}
	var size int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, _ error) error {
		if fi != nil && !fi.IsDir() {
			size += fi.Size()
		}
		return nil
	})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		ctx := context.Background()
		e, err := Open(ctx, Options{Dir: dir, Logger: testLogger()})
		if err != nil {
			b.Fatal(err)
		}
		l, err := e.OpenLedger(ctx, "recovery/topic")
		if err != nil {
			b.Fatal(err)
		}
		en, err := l.ReadEntry(ctx, last)
		if err != nil {
			b.Fatalf("last acknowledged entry %v: %v", last, err)
		}
		el := time.Since(start)
		b.StopTimer()
		b.ReportMetric(el.Seconds(), "s/recovery")
		b.ReportMetric(float64(size)/(1<<30), "GiB-on-disk")
		_ = en
		_ = e.Close()
		b.StartTimer()
	}
}

// BenchmarkAppendAsync measures what the broker does: AppendAsync with many appends in flight
// (a producer's pending-message window), 1 KiB and 64 KiB entries round-robin over 100 topics.
func BenchmarkAppendAsync(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		for _, window := range []int{256, 1024} {
			b.Run(fmt.Sprintf("topics=100/size=%dKiB/inflight=%d", size>>10, window), func(b *testing.B) {
				ctx := context.Background()
				e, err := Open(ctx, Options{Dir: b.TempDir(), Logger: testLogger()})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				ledgers := make([]*Ledger, 100)
				for i := range ledgers {
					ledgers[i], _ = e.OpenLedger(ctx, fmt.Sprintf("async-%d", i))
				}
				before := e.Metrics()
				el := appendWindowed(b, ledgers, size, window, 0)
				after := e.Metrics()
				b.ReportMetric(float64(b.N)/el.Seconds(), "entries/s")
				if r := after.SyncRounds - before.SyncRounds; r > 0 {
					b.ReportMetric(float64(b.N)/float64(r), "entries/fsync")
				}
			})
		}
	}
}

// BenchmarkWindowedProducer is one producer the way pulsar-perf drives a topic: 128 KiB batch
// entries (128 messages of 1 KiB), a window of 8 entries in flight (its 1,000 pending messages),
// with one, two or three group-commit fsyncs in flight (SyncPipelineDepth). With build > 0 the
// producer spends that long building each batch (a busy loop standing in for the client's CPU
// time per batch, ~5 µs per message for pulsar-perf), so batches arrive spread over a round as
// they do from a real client rather than all at once.
func BenchmarkWindowedProducer(b *testing.B) {
	for _, build := range []time.Duration{0, 600 * time.Microsecond} {
		for _, depth := range []int{1, 2, 3} {
			benchWindowedProducer(b, build, depth)
		}
	}
}

func benchWindowedProducer(b *testing.B, build time.Duration, depth int) {
	b.Run(fmt.Sprintf("build=%v/depth=%d", build, depth), func(b *testing.B) {
		e, l := openBenchLedger(b, Options{SyncPipelineDepth: depth})
		before := e.Metrics()
		el := appendWindowed(b, []*Ledger{l}, 128<<10, 8, build)
		after := e.Metrics()
		b.ReportMetric(float64(b.N)*128/el.Seconds(), "msgs/s")
		if r := after.SyncRounds - before.SyncRounds; r > 0 {
			b.ReportMetric(float64(b.N)/float64(r), "entries/fsync")
			b.ReportMetric(float64(after.FsyncLatencySum-before.FsyncLatencySum)/float64(r)/1e3, "µs/fsync")
		}
	})
}

// openBenchLedger opens an engine with opts in a temporary directory (closed when the benchmark
// ends) and one ledger on it.
func openBenchLedger(b *testing.B, opts Options) (*Engine, *Ledger) {
	ctx := context.Background()
	opts.Dir, opts.Logger = b.TempDir(), testLogger()
	e, err := Open(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	l, err := e.OpenLedger(ctx, "persistent://public/default/perf")
	if err != nil {
		b.Fatal(err)
	}
	return e, l
}

// appendWindowed appends b.N entries of size bytes round-robin to ledgers with at most window in
// flight, spending build (a busy loop) before each, and returns the time it took.
func appendWindowed(b *testing.B, ledgers []*Ledger, size, window int, build time.Duration) time.Duration {
	data := make([]byte, size)
	sem := make(chan struct{}, window)
	var wg sync.WaitGroup
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		sem <- struct{}{}
		for t := time.Now(); time.Since(t) < build; {
		}
		wg.Add(1)
		ledgers[i%len(ledgers)].AppendAsync(data, int64(i), func(_ mtypes.Position, err error) {
			if err != nil {
				b.Error(err)
			}
			<-sem
			wg.Done()
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	return el
}

// BenchmarkDirectWrite compares writing every entry twice (journal, then segment: direct=-1) with
// writing large groups once, straight to the segment (directwrite.go), for a producer with a
// bounded window of entries in flight: pulsar-perf-like batches (128 KiB, 8 in flight), a
// replicator catching up with batched entries (100 KiB, 64 in flight) and with one message per
// entry (1 KiB, 1,000 in flight).
func BenchmarkDirectWrite(b *testing.B) {
	for _, c := range []struct{ size, window int }{{128 << 10, 8}, {100 << 10, 64}, {1 << 10, 1000}} {
		for _, direct := range []int{-1, 0} {
			b.Run(fmt.Sprintf("size=%dKiB/window=%d/direct=%d", c.size>>10, c.window, direct), func(b *testing.B) {
				e, l := openBenchLedger(b, Options{DirectWriteBytes: direct})
				before := e.Metrics()
				el := appendWindowed(b, []*Ledger{l}, c.size, c.window, 0)
				after := e.Metrics()
				b.ReportMetric(float64(b.N)*float64(c.size)/el.Seconds()/1e6, "MB/s")
				if r := after.SyncRounds - before.SyncRounds; r > 0 {
					b.ReportMetric(float64(after.FsyncLatencySum-before.FsyncLatencySum)/float64(r)/1e3, "µs/fsync")
				}
				b.ReportMetric(float64(after.DirectBytes-before.DirectBytes)/float64(b.N)/float64(c.size), "direct-share")
			})
		}
	}
}
