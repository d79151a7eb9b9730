// Command natsload drives NATS JetStream, the peer every benchmark in scripts/bench-*.sh measures
// Meridian against. Every load loop is bounded by a message count and a wall-clock limit, and it only
// connects where it is told (the scripts use loopback).
//
//	natsload stream  -url U -name S -subjects 'orders.>'      (re)create a file-backed stream
//	natsload pub     -url U -subject orders.x -mode async -window 1000 -size 1024 -rate 20000 -n N -maxdur 30s
//	natsload consume -url U -stream S -n N -maxdur 30s         read a stream with an ordered consumer
//	natsload mirror  -url U -name M -source S -domain hub -expect N -timeout 300s
//	natsload latency -urla A -urlb B -stream S -mirror M -subject s.x -rate 5000 -dur 30s -size 1024
//
// Each command prints one result line of key=value pairs that the scripts read (msgs=, rate=, p50=, ...).
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: natsload stream|pub|consume|mirror|latency [flags]")
		os.Exit(2)
	}
	commands := map[string]func([]string) error{
		"stream": runStream, "pub": runPub, "consume": runConsume, "mirror": runMirror, "latency": runLatency,
	}
	run, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "natsload: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "natsload %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// connect opens a connection and a JetStream context; domain is empty for the local domain.
func connect(url, domain string, opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name("natsload"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	var js jetstream.JetStream
	if domain == "" {
		js, err = jetstream.New(nc, opts...)
	} else {
		js, err = jetstream.NewWithDomain(nc, domain, opts...)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func runStream(args []string) error {
	fs := flag.NewFlagSet("stream", flag.ExitOnError)
	url := fs.String("url", nats.DefaultURL, "server URL")
	name := fs.String("name", "ORDERS", "stream name")
	subjects := fs.String("subjects", "orders.>", "comma-separated subjects")
	_ = fs.Parse(args)
	nc, js, err := connect(*url, "")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, *name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete %s: %w", *name, err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: *name, Subjects: strings.Split(*subjects, ","), Storage: jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("create %s: %w", *name, err)
	}
	fmt.Printf("stream name=%s created\n", *name)
	return nil
}

// pacer spreads sends over time: Allowed says how many messages may have been sent by now.
type pacer struct {
	rate  int // messages per second; 0 = unthrottled
	start time.Time
}

func (p pacer) allowed(now time.Time) int64 {
	if p.rate <= 0 {
		return 1 << 62
	}
	return int64(now.Sub(p.start).Seconds()*float64(p.rate)) + 1
}

// waitTurn blocks until message number sent may go out.
func (p pacer) waitTurn(sent int64) {
	for sent >= p.allowed(time.Now()) {
		time.Sleep(200 * time.Microsecond)
	}
}

func runPub(args []string) error {
	fs := flag.NewFlagSet("pub", flag.ExitOnError)
	url := fs.String("url", nats.DefaultURL, "server URL")
	subject := fs.String("subject", "orders.x", "subject bound to a stream")
	mode := fs.String("mode", "async", "sync (wait for each ack) or async (a window of acks in flight)")
	window := fs.Int("window", 1000, "acks in flight in async mode")
	size := fs.Int("size", 1024, "payload bytes")
	rate := fs.Int("rate", 0, "messages per second (0 = as fast as acks allow)")
	n := fs.Int64("n", 1_000_000, "messages to publish at most")
	maxDur := fs.Duration("maxdur", 60*time.Second, "wall-clock limit")
	_ = fs.Parse(args)
	if *mode != "sync" && *mode != "async" {
		return fmt.Errorf("-mode %q: want sync or async", *mode)
	}
	nc, js, err := connect(*url, "", jetstream.WithPublishAsyncMaxPending(*window))
	if err != nil {
		return err
	}
	defer nc.Close()
	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	start := time.Now()
	deadline := start.Add(*maxDur)
	pace := pacer{rate: *rate, start: start}
	var sent int64
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(30*time.Second))
	defer cancel()
	for sent < *n && time.Now().Before(deadline) {
		pace.waitTurn(sent)
		if *mode == "sync" {
			if _, err := js.Publish(ctx, *subject, payload); err != nil {
				return fmt.Errorf("publish %d: %w", sent, err)
			}
		} else if _, err := js.PublishAsync(*subject, payload); err != nil {
			return fmt.Errorf("publish %d: %w", sent, err)
		}
		sent++
	}
	if *mode == "async" {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return fmt.Errorf("%d acks still pending", js.PublishAsyncPending())
		}
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("pub mode=%s size=%d msgs=%d secs=%.2f rate=%.0f\n", *mode, *size, sent, secs, float64(sent)/secs)
	return nil
}

func runConsume(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	url := fs.String("url", nats.DefaultURL, "server URL")
	stream := fs.String("stream", "ORDERS", "stream to read")
	n := fs.Int64("n", 1_000_000, "messages to read at most")
	maxDur := fs.Duration("maxdur", 60*time.Second, "wall-clock limit")
	_ = fs.Parse(args)
	nc, js, err := connect(*url, "")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *maxDur)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, *stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("consumer on %s: %w", *stream, err)
	}
	start := time.Now()
	var got int64
	iter, err := cons.Messages()
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); iter.Stop() }()
	for got < *n {
		if _, err := iter.Next(); err != nil {
			break // stopped by the deadline
		}
		got++
	}
	iter.Stop()
	secs := time.Since(start).Seconds()
	fmt.Printf("consume msgs=%d secs=%.2f rate=%.0f\n", got, secs, float64(got)/secs)
	return nil
}

// createMirror makes stream name on the server of js a mirror of source in the JetStream domain.
func createMirror(ctx context.Context, js jetstream.JetStream, name, source, domain string) error {
	if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Storage: jetstream.FileStorage,
		Mirror: &jetstream.StreamSource{
			Name: source, External: &jetstream.ExternalStream{APIPrefix: "$JS." + domain + ".API"},
		},
	})
	if err != nil {
		return fmt.Errorf("create mirror %s of %s: %w", name, source, err)
	}
	return nil
}

func runMirror(args []string) error {
	fs := flag.NewFlagSet("mirror", flag.ExitOnError)
	url := fs.String("url", nats.DefaultURL, "URL of the mirror's server")
	name := fs.String("name", "ORDERS_MIRROR", "mirror stream name")
	source := fs.String("source", "ORDERS", "origin stream")
	domain := fs.String("domain", "hub", "the origin's JetStream domain")
	expect := fs.Uint64("expect", 0, "wait until the mirror holds this many messages (0 = only create it)")
	consume := fs.Bool("consume", false, "also receive the -expect messages from the mirror with an ordered consumer started with the mirror, and report when it has them (the catch-up end to end)")
	timeout := fs.Duration("timeout", 300*time.Second, "wall-clock limit")
	_ = fs.Parse(args)
	nc, js, err := connect(*url, "")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	if err := createMirror(ctx, js, *name, *source, *domain); err != nil {
		return err
	}
	if *expect == 0 {
		fmt.Printf("mirror name=%s created\n", *name)
		return nil
	}
	var received chan error
	if *consume {
		received = make(chan error, 1)
		go func() { received <- receiveMirror(ctx, js, *name, *expect, start) }()
	}
	for {
		st, err := js.Stream(ctx, *name)
		if err != nil {
			return fmt.Errorf("mirror %s: %w", *name, err)
		}
		if msgs := st.CachedInfo().State.Msgs; msgs >= *expect {
			secs := time.Since(start).Seconds()
			fmt.Printf("mirror caught up msgs=%d secs=%.2f rate=%.0f\n", msgs, secs, float64(msgs)/secs)
			if received != nil {
				return <-received
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("mirror %s holds %d of %d after %s", *name, st.CachedInfo().State.Msgs, *expect, *timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// receiveMirror receives n messages from stream name with an ordered consumer (no acknowledgements:
// the client tracks its position) and prints when it had them, counted from start.
func receiveMirror(ctx context.Context, js jetstream.JetStream, name string, n uint64, start time.Time) error {
	cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("consumer on %s: %w", name, err)
	}
	iter, err := cons.Messages()
	if err != nil {
		return err
	}
	defer iter.Stop()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			iter.Stop()
		case <-stopped:
		}
	}()
	cpu0 := processCPU()
	var got uint64
	for got < n {
		if _, err := iter.Next(); err != nil {
			return fmt.Errorf("mirror consumer on %s received %d of %d: %w", name, got, n, err)
		}
		got++
	}
	secs := time.Since(start).Seconds()
	// The process's CPU while it received: the consumer's, and the mirror's state polls (a few a second).
	cpu := processCPU() - cpu0
	fmt.Printf("mirror consumer received msgs=%d secs=%.2f rate=%.0f consumer_cpu_us_per_msg=%.2f\n", got, secs, float64(got)/secs,
		float64(cpu.Microseconds())/float64(got))
	return nil
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runLatency publishes at a fixed rate to the origin and measures, for each message, the time until an
// ordered consumer of the mirror on the other server receives it (both ends on this host's clock).
func runLatency(args []string) error {
	fs := flag.NewFlagSet("latency", flag.ExitOnError)
	urlA := fs.String("urla", nats.DefaultURL, "origin server")
	urlB := fs.String("urlb", nats.DefaultURL, "mirror's server")
	mirror := fs.String("mirror", "LAT_MIRROR", "mirror stream on B")
	subject := fs.String("subject", "lat.x", "subject of the origin stream")
	rate := fs.Int("rate", 5000, "messages per second")
	size := fs.Int("size", 1024, "payload bytes (at least 8)")
	dur := fs.Duration("dur", 30*time.Second, "publishing time")
	warmup := fs.Duration("warmup", 2*time.Second, "messages sent in this first part are not counted")
	drain := fs.Duration("drain", 15*time.Second, "how long to wait for the last messages")
	_ = fs.Parse(args)
	if *size < 8 {
		*size = 8
	}
	ncA, jsA, err := connect(*urlA, "", jetstream.WithPublishAsyncMaxPending(1000))
	if err != nil {
		return err
	}
	defer ncA.Close()
	ncB, jsB, err := connect(*urlB, "")
	if err != nil {
		return err
	}
	defer ncB.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *dur+*drain+30*time.Second)
	defer cancel()
	cons, err := jsB.OrderedConsumer(ctx, *mirror, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return fmt.Errorf("consumer on %s: %w", *mirror, err)
	}
	start := time.Now()
	countFrom := start.Add(*warmup).UnixNano()
	var mu sync.Mutex // guards latencies and received, written by the consumer's callback
	var latencies []time.Duration
	var received int64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		data := m.Data()
		if len(data) < 8 {
			return
		}
		sentAt := int64(binary.BigEndian.Uint64(data))
		mu.Lock()
		if sentAt >= countFrom {
			latencies = append(latencies, time.Duration(time.Now().UnixNano()-sentAt))
		}
		received++
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	pace := pacer{rate: *rate, start: start}
	var sent int64
	for time.Since(start) < *dur {
		pace.waitTurn(sent)
		payload := make([]byte, *size)
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		if _, err := jsA.PublishAsync(*subject, payload); err != nil {
			return fmt.Errorf("publish %d: %w", sent, err)
		}
		sent++
	}
	for drainEnd := time.Now().Add(*drain); time.Now().Before(drainEnd); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		done := received >= sent
		mu.Unlock()
		if done {
			break
		}
	}
	cc.Stop()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(latencies)
	fmt.Printf("latency rate=%d size=%d sent=%d received=%d counted=%d p50=%s p99=%s max=%s\n",
		*rate, *size, sent, received, len(latencies), quantile(latencies, 0.50), quantile(latencies, 0.99), quantile(latencies, 1))
	return nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i].Round(10 * time.Microsecond)
}
