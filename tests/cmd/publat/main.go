// Command publat measures publish latency the way the Pulsar Go client's perf tool
// (github.com/apache/pulsar-client-go/perf, "pulsar-perf produce") does, with exact percentiles and
// a per-message timeline.
//
// Why it exists: pulsar-perf v0.19.0 summarises its latencies with github.com/bmizerany/perks, whose
// targeted-quantile stream keeps so few samples of the tail that its "99%" and "99.9%" are the
// maximum of the 10 s window: one slow message in 50,000 is reported as the p99 (measured, see
// docs/publish-latency.md). Its first window also holds a burst of RATE messages sent at once (its
// rate limiter starts with a full bucket of RATE tokens). publat keeps pulsar-perf's producer loop
// exactly (start taken before the rate limiter, SendAsync, the callback handing the latency to a
// collector over an unbuffered channel, same producer options) and reports:
//
//   - per window: exact nearest-rank p50/p95/p99/p99.9/max of the callbacks received in it;
//   - a summary without the first --warmup, and where the time went: the rate limiter's wait, the
//     SendAsync call (blocks when --queue-size sends are pending), SendAsync's return to the
//     receipt callback (batching delay, client write, broker, client read);
//   - episodes of slow messages with wall-clock times, to line them up with broker-side logs;
//   - the client's own GC count and pauses;
//   - optionally every message's timeline as CSV (index,start,waited,queued,done in unix ns; the
//     message's Pulsar sequence id is its index, so a broker-side log of SEND sequence ids joins).
//
// usage: publat --service-url pulsar://127.0.0.1:6650 --topic persistent://public/default/lat \
//
//	--rate 5000 --size 1024 --duration 30s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

type config struct {
	url, topic      string
	rate, size      int
	burst           int
	batchingTime    time.Duration
	batchingNum     uint
	batchingMaxKB   uint
	queueSize       int
	duration        time.Duration
	warmup, window  time.Duration
	threshold       time.Duration
	episodes        int
	csvPath         string
	maxConnsPerHost int
}

func main() {
	var c config
	flag.StringVar(&c.url, "service-url", "pulsar://127.0.0.1:6650", "service URL")
	flag.StringVar(&c.topic, "topic", "persistent://public/default/publat", "topic")
	flag.IntVar(&c.rate, "rate", 5000, "messages per second (> 0)")
	flag.IntVar(&c.size, "size", 1024, "payload bytes (all zero, as pulsar-perf)")
	flag.IntVar(&c.burst, "burst", -1, "rate limiter burst; -1 = rate, as pulsar-perf (a burst of rate messages at start)")
	flag.DurationVar(&c.batchingTime, "batching-time", time.Millisecond, "BatchingMaxPublishDelay (pulsar-perf -b, default 1 ms)")
	flag.UintVar(&c.batchingNum, "batching-num-messages", 1000, "BatchingMaxMessages")
	flag.UintVar(&c.batchingMaxKB, "batching-max-size", 128, "BatchingMaxSize in KiB")
	flag.IntVar(&c.queueSize, "queue-size", 1000, "MaxPendingMessages")
	flag.IntVar(&c.maxConnsPerHost, "max-connections", 1, "MaxConnectionsPerBroker")
	flag.DurationVar(&c.duration, "duration", 30*time.Second, "how long to send")
	flag.DurationVar(&c.warmup, "warmup", 2*time.Second, "sends started in this first stretch are left out of the summary")
	flag.DurationVar(&c.window, "window", 10*time.Second, "reporting window (pulsar-perf: 10 s)")
	flag.DurationVar(&c.threshold, "threshold", 5*time.Millisecond, "a message slower than this is an outlier")
	flag.IntVar(&c.episodes, "episodes", 15, "list this many slowest outlier episodes")
	flag.StringVar(&c.csvPath, "csv", "", "write every message's timeline here")
	flag.Parse()
	if c.rate <= 0 || c.size < 0 || c.duration <= 0 || c.window <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	if c.burst < 0 {
		c.burst = c.rate
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "publat:", err)
		os.Exit(1)
	}
}

// completion is one receipt: the message index and when its callback ran.
type completion struct {
	i    int
	done int64
	err  error
}

func run(c config) error {
	client, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:                     c.url,
		MaxConnectionsPerBroker: c.maxConnsPerHost,
		Logger:                  pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		MetricsRegisterer:       prometheus.NewRegistry(),
	})
	if err != nil {
		return err
	}
	defer client.Close()
	producer, err := client.CreateProducer(pulsar.ProducerOptions{
		Topic:                   c.topic,
		MaxPendingMessages:      c.queueSize,
		BatchingMaxPublishDelay: c.batchingTime,
		BatchingMaxSize:         c.batchingMaxKB * 1024,
		BatchingMaxMessages:     c.batchingNum,
	})
	if err != nil {
		return fmt.Errorf("create producer: %w", err)
	}
	defer producer.Close()

	capacity := int(float64(c.rate)*c.duration.Seconds()) + c.burst + 1
	samples := make([]sample, capacity)
	// Unbuffered, as pulsar-perf's: a callback blocks the client's receiving goroutine until the
	// collector takes it. quit releases callbacks still blocked when the collector has finished.
	completions := make(chan completion)
	quit := make(chan struct{})
	defer close(quit)
	sendCtx, stopSending := context.WithTimeout(context.Background(), c.duration)
	defer stopSending()
	sentCh := make(chan int, 1)

	payload := make([]byte, c.size)
	limiter := rate.NewLimiter(rate.Every(time.Duration(float64(time.Second)/float64(c.rate))), c.burst)
	began := time.Now()
	fmt.Printf("publat: %s rate %d/s size %d burst %d batching %v/%d msgs/%d KiB queue %d, %v, started %s\n",
		c.topic, c.rate, c.size, c.burst, c.batchingTime, c.batchingNum, c.batchingMaxKB, c.queueSize, c.duration, began.UTC().Format("15:04:05.000"))
	go func() {
		i := 0
		defer func() { sentCh <- i }()
		for ; i < capacity; i++ {
			start := time.Now()
			if err := limiter.Wait(sendCtx); err != nil {
				return
			}
			s := &samples[i]
			s.start, s.waited = start.UnixNano(), time.Now().UnixNano()
			seq := int64(i)
			idx := i
			producer.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload, SequenceID: &seq},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					select {
					case completions <- completion{i: idx, done: time.Now().UnixNano(), err: err}:
					case <-quit:
					}
				})
			s.queued = time.Now().UnixNano()
		}
	}()

	tick := time.NewTicker(c.window)
	defer tick.Stop()
	var window []time.Duration
	var errs, completed int
	var firstErr error
	sent := -1
	var drainDeadline <-chan time.Time
	for sent < 0 || completed < sent {
		select {
		case cp := <-completions:
			completed++
			if cp.err != nil {
				errs++
				if firstErr == nil {
					firstErr = cp.err
				}
				continue
			}
			samples[cp.i].done = cp.done
			window = append(window, time.Duration(cp.done-samples[cp.i].start))
		case <-tick.C:
			fmt.Printf("%s window %s\n", time.Now().UTC().Format("15:04:05.000"), exactQuantiles(window))
			window = window[:0]
		case sent = <-sentCh:
			drainDeadline = time.After(10 * time.Second)
		case <-drainDeadline:
			fmt.Printf("gave up waiting: %d of %d receipts\n", completed, sent)
			sent = completed
		}
	}
	if len(window) > 0 {
		fmt.Printf("%s window %s (last, partial)\n", time.Now().UTC().Format("15:04:05.000"), exactQuantiles(window))
	}
	if errs > 0 {
		fmt.Printf("send errors: %d (first: %v)\n", errs, firstErr)
	}
	samples = samples[:sent]
	report(c, began, samples)
	if c.csvPath != "" {
		if err := writeCSV(c.csvPath, samples); err != nil {
			return err
		}
	}
	if errs > 0 {
		return errors.New("some sends failed")
	}
	return nil
}

func report(c config, began time.Time, samples []sample) {
	b := breakdownOf(samples, began.Add(c.warmup).UnixNano())
	fmt.Printf("summary (sends started after the first %v):\n", c.warmup)
	fmt.Printf("  start -> receipt callback   %s\n", b.total)
	fmt.Printf("  rate limiter wait           %s\n", b.limiter)
	fmt.Printf("  SendAsync call              %s\n", b.enqueue)
	fmt.Printf("  SendAsync return -> receipt %s\n", b.receipt)
	warm := breakdownOf(samples[:countBefore(samples, began.Add(c.warmup).UnixNano())], 0)
	fmt.Printf("  (warm-up, left out: %s)\n", warm.total)

	eps := slowEpisodes(samples, c.threshold)
	fmt.Printf("outlier episodes (> %v, starts < %v apart): %d\n", c.threshold, episodeGap, len(eps))
	worst := append([]episode(nil), eps...)
	sortEpisodesByWorst(worst)
	for _, e := range worst[:min(len(worst), c.episodes)] {
		w := e.worst
		fmt.Printf("  %s (+%6.3f s) %5d msgs over %4.0f ms, worst %6.1f ms = limiter %.1f + SendAsync %.1f + to receipt %.1f\n",
			time.Unix(0, e.first).UTC().Format("15:04:05.000"), float64(e.first-began.UnixNano())/1e9, e.count,
			ms(time.Duration(e.last-e.first)), ms(w.total()), ms(w.limiter()), ms(w.enqueue()), ms(w.receipt()))
	}
	var gs debug.GCStats
	gs.PauseQuantiles = make([]time.Duration, 5)
	debug.ReadGCStats(&gs)
	fmt.Printf("client GC: %d cycles, pauses total %v, max %v\n", gs.NumGC, gs.PauseTotal, gs.PauseQuantiles[4])
}

// countBefore is the number of leading samples that started before t (samples are in start order).
func countBefore(samples []sample, t int64) int {
	for i, s := range samples {
		if s.start >= t {
			return i
		}
	}
	return len(samples)
}

func sortEpisodesByWorst(eps []episode) {
	for i := 1; i < len(eps); i++ { // insertion sort: a few hundred episodes at most
		for j := i; j > 0 && eps[j].worst.total() > eps[j-1].worst.total(); j-- {
			eps[j], eps[j-1] = eps[j-1], eps[j]
		}
	}
}

func writeCSV(path string, samples []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("csv: %w", err)
	}
	buf := make([]byte, 0, 64<<10)
	for i, s := range samples {
		buf = fmt.Appendf(buf, "%d,%d,%d,%d,%d\n", i, s.start, s.waited, s.queued, s.done)
		if len(buf) > 60<<10 {
			if _, err := f.Write(buf); err != nil {
				_ = f.Close()
				return fmt.Errorf("csv: %w", err)
			}
			buf = buf[:0]
		}
	}
	if _, err := f.Write(buf); err != nil {
		_ = f.Close()
		return fmt.Errorf("csv: %w", err)
	}
	return f.Close()
}
