package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/internal/client"
)

// histogram records latencies in logarithmic buckets 2% wide (so every percentile is within 2% of
// the true value) from 1 µs to about 20 minutes, in constant memory.
type histogram struct {
	counts [1100]uint64
	n      uint64
	max    time.Duration
	sum    time.Duration
}

const histBase = 1.02

func (h *histogram) record(d time.Duration) {
	us := float64(d) / float64(time.Microsecond)
	i := 0
	if us > 1 {
		i = min(int(math.Log(us)/math.Log(histBase))+1, len(h.counts)-1)
	}
	h.counts[i]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the upper bound of the bucket holding quantile q (0..1).
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(math.Pow(histBase, float64(i))*float64(time.Microsecond)), h.max)
		}
	}
	return h.max
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (h *histogram) summary() string {
	return fmt.Sprintf("latency ms: p50 %.3f  p95 %.3f  p99 %.3f  p99.9 %.3f  max %.3f",
		ms(h.quantile(0.5)), ms(h.quantile(0.95)), ms(h.quantile(0.99)), ms(h.quantile(0.999)), ms(h.max))
}

// window accumulates one reporting interval under a lock (callbacks run on client goroutines).
type window struct {
	mu    sync.Mutex
	msgs  uint64
	bytes uint64
	lat   histogram
}

func (w *window) add(size int, lat time.Duration) {
	w.mu.Lock()
	w.msgs++
	w.bytes += uint64(size)
	if lat >= 0 {
		w.lat.record(lat)
	}
	w.mu.Unlock()
}

func (w *window) take() (uint64, uint64, histogram) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, b, h := w.msgs, w.bytes, w.lat
	w.msgs, w.bytes, w.lat = 0, 0, histogram{}
	return m, b, h
}

// reporter prints a line every interval and a summary at the end.
type reporter struct {
	a        *app
	verb     string
	interval time.Duration
	win      window
	total    histogram
	msgs     uint64
	bytes    uint64
	start    time.Time
}

func (r *reporter) tick(elapsed time.Duration) {
	m, b, h := r.win.take()
	r.msgs += m
	r.bytes += b
	r.total.merge(&h)
	secs := elapsed.Seconds()
	fmt.Fprintf(r.a.out, "%s rate: %.1f msg/s  %.2f MiB/s  %s\n", r.verb, float64(m)/secs, float64(b)/secs/(1<<20), h.summary())
}

// startLoop prints every interval until the returned stop function is called; stop waits for the
// loop to end, so final may then read the totals safely.
func (r *reporter) startLoop(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		r.run(ctx, done)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-finished
		})
	}
}

func (r *reporter) run(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case now := <-t.C:
			r.tick(now.Sub(last))
			last = now
		}
	}
}

func (r *reporter) final() {
	m, b, h := r.win.take()
	r.msgs += m
	r.bytes += b
	r.total.merge(&h)
	secs := time.Since(r.start).Seconds()
	fmt.Fprintf(r.a.out, "summary: %s %d messages in %.1f s: %.1f msg/s  %.2f MiB/s  %s\n", r.verb, r.msgs, secs,
		float64(r.msgs)/secs, float64(r.bytes)/secs/(1<<20), r.total.summary())
}

func perfCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "perf", Short: "Load generators printing rate and latency percentiles"}
	var (
		rate                      float64
		size, pending             int
		total                     int64
		duration, intv, batchTime time.Duration
		batchMsgs, batchKiB       int
		noBatch                   bool
	)
	produce := &cobra.Command{Use: "produce TOPIC", Short: "Publish at a rate; latency is send to receipt (after fsync on the broker)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, duration)
			defer cancel()
		}
		c, err := a.newClient()
		if err != nil {
			return err
		}
		defer c.Close()
		opts := client.ProducerOptions{MaxPending: pending}
		if !noBatch && batchMsgs > 1 {
			opts.BatchingMaxMessages = batchMsgs
			opts.BatchingMaxBytes = batchKiB << 10
			opts.BatchingMaxDelay = batchTime
		}
		mp, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (*multiProducer, error) { return openProducers(ctx, c, args[0], opts) })
		if err != nil {
			return a.serviceErr(args[0], err)
		}
		defer mp.close(context.WithoutCancel(ctx))
		payload := make([]byte, size)
		r := &reporter{a: a, verb: "produce", interval: intv, start: time.Now()}
		stop := r.startLoop(ctx)
		defer stop()
		var failed atomic.Pointer[error]
		var inflight sync.WaitGroup
		var sent int64
		for total <= 0 || sent < total {
			if rate > 0 {
				next := r.start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
				if d := time.Until(next); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
					}
				}
			}
			if ctx.Err() != nil || failed.Load() != nil {
				break
			}
			begin := time.Now()
			inflight.Add(1)
			err := mp.pick("").SendAsync(ctx, client.ProducerMessage{Payload: payload}, func(_ client.MessageID, err error) {
				defer inflight.Done()
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				r.win.add(size, time.Since(begin))
			})
			if err != nil {
				inflight.Done()
				if ctx.Err() != nil {
					break
				}
				return fmt.Errorf("after %d messages: %w", sent, err)
			}
			sent++
		}
		for _, p := range mp.ps {
			_ = p.Flush(context.WithoutCancel(ctx))
		}
		inflight.Wait()
		stop()
		r.final()
		if e := failed.Load(); e != nil && ctx.Err() == nil {
			return fmt.Errorf("a send failed: %w", *e)
		}
		return nil
	}}
	pf := produce.Flags()
	pf.Float64VarP(&rate, "rate", "r", 100, "messages per second (0 = as fast as possible)")
	pf.IntVarP(&size, "size", "s", 1024, "payload bytes")
	pf.IntVarP(&pending, "max-pending", "q", 1000, "sends awaiting their receipt, per partition")
	pf.Int64VarP(&total, "num-messages", "n", 0, "stop after this many (0 = until interrupted or --duration)")
	pf.DurationVarP(&duration, "duration", "d", 0, "stop after this long")
	pf.DurationVarP(&intv, "interval", "i", 5*time.Second, "reporting interval")
	pf.DurationVarP(&batchTime, "batching-time", "b", time.Millisecond, "how long a batch waits for more messages (like pulsar-perf)")
	pf.IntVar(&batchKiB, "batching-max-size", 128, "largest batch body in KiB")
	pf.IntVar(&batchMsgs, "batching-num-messages", 1000, "most messages per batch")
	pf.BoolVar(&noBatch, "disable-batching", false, "send every message as its own entry")

	var sub, typ, position string
	var queue int
	consume := &cobra.Command{Use: "consume TOPIC", Short: "Receive and acknowledge; latency is publish time to receipt", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, duration)
			defer cancel()
		}
		c, err := a.newClient()
		if err != nil {
			return err
		}
		defer c.Close()
		f, err := openConsumers(ctx, a.timeout, c, args[0], sub, typ, position, queue)
		if err != nil {
			return a.serviceErr(args[0], err)
		}
		defer f.close(context.WithoutCancel(ctx))
		r := &reporter{a: a, verb: "consume", interval: intv, start: time.Now()}
		stop := r.startLoop(ctx)
		defer stop()
		var got int64
		for total <= 0 || got < total {
			var rec received
			select {
			case rec = <-f.msgs:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			if rec.err != nil {
				return fmt.Errorf("after %d messages: %w", got, rec.err)
			}
			got++
			lat := time.Duration(-1)
			if !rec.m.PublishTime.IsZero() {
				lat = time.Since(rec.m.PublishTime)
			}
			r.win.add(len(rec.m.Payload), lat)
			if err := rec.c.Ack(ctx, rec.m.ID); err != nil && ctx.Err() == nil {
				return fmt.Errorf("acknowledging: %w", err)
			}
		}
		stop()
		r.final()
		return nil
	}}
	cf := consume.Flags()
	cf.StringVarP(&sub, "subscription", "S", "perf", "subscription name")
	cf.StringVarP(&typ, "subscription-type", "t", "Exclusive", "Exclusive, Shared, Failover or Key_Shared")
	cf.StringVarP(&position, "subscription-position", "p", "latest", "latest or earliest")
	cf.IntVarP(&queue, "receiver-queue-size", "q", 1000, "flow-control window per partition")
	cf.Int64VarP(&total, "num-messages", "n", 0, "stop after this many (0 = until interrupted or --duration)")
	cf.DurationVarP(&duration, "duration", "d", 0, "stop after this long")
	cf.DurationVarP(&intv, "interval", "i", 5*time.Second, "reporting interval")
	cmd.AddCommand(produce, consume)
	return cmd
}
