// Command e2e-producer publishes checker payloads (tests/internal/checker) with pulsar-client-go and
// reports every send's outcome as one JSON line on stdout, for end-to-end tests that kill the broker
// while messages are in flight.
//
// It runs as a separate process, built without the race detector, because pulsar-client-go v0.19.0
// has a data race of its own on that path: a reconnect writes the producer name
// (partitionProducer.grabCnx) while the send loop serializes a message with it. Under `go test -race`
// that would fail the test for the client's bug, not the broker's.
//
// Output, one JSON object per line: {"seq":N,"id":"..."} for a receipt, {"seq":N,"err":"..."} for a
// failed send, and finally {"done":true}. Exit status 0 once every send has an outcome.
//
// With -interactive the test drives one producer through a fault (a full disk, say): the tool prints
// {"ready":true} once its producer exists, then reads counts from stdin, one per line; for each count
// k it sends the next k messages, prints their outcomes and then {"batch":true}. End of stdin ends the
// run ({"done":true}). -n and -rate do not apply.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/prometheus/client_golang/prometheus"
)

type result struct {
	Seq   int64  `json:"seq"`
	ID    string `json:"id,omitempty"`
	Err   string `json:"err,omitempty"`
	Done  bool   `json:"done,omitempty"`
	Ready bool   `json:"ready,omitempty"`
	Batch bool   `json:"batch,omitempty"`
}

func main() {
	url := flag.String("url", "", "service URL (pulsar://host:port)")
	topic := flag.String("topic", "", "topic")
	name := flag.String("name", "", "producer name (also the checker producer)")
	from := flag.Int64("from", 0, "first sequence number")
	count := flag.Int64("n", 1000, "messages to send")
	size := flag.Int("size", 256, "payload size")
	batching := flag.Bool("batching", false, "enable batching")
	explicitSeq := flag.Bool("explicit-seq", true, "set the Pulsar sequence id to the checker sequence")
	sendTimeout := flag.Duration("send-timeout", 2*time.Minute, "producer send timeout")
	maxPending := flag.Int("max-pending", 500, "producer MaxPendingMessages")
	deadline := flag.Duration("deadline", 5*time.Minute, "give up after this long")
	rate := flag.Float64("rate", 0, "messages per second (0: as fast as the producer takes them)")
	interactive := flag.Bool("interactive", false, "send the counts of messages read from stdin, one batch per line")
	flag.Parse()
	if *url == "" || *topic == "" || *name == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*url, *topic, *name, *from, *count, *size, *batching, *explicitSeq, *sendTimeout, *maxPending, *deadline, *rate, *interactive); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-producer:", err)
		os.Exit(1)
	}
}

func run(url, topic, name string, from, count int64, size int, batching, explicitSeq bool,
	sendTimeout time.Duration, maxPending int, deadline time.Duration, rate float64, interactive bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	client, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               url,
		ConnectionTimeout: 10 * time.Second,
		OperationTimeout:  30 * time.Second,
		Logger:            pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		MetricsRegisterer: prometheus.NewRegistry(),
	})
	if err != nil {
		return err
	}
	defer client.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{
		Topic: topic, Name: name,
		SendTimeout:             sendTimeout,
		DisableBatching:         !batching,
		BatchingMaxPublishDelay: 2 * time.Millisecond,
		MaxPendingMessages:      maxPending,
	})
	if err != nil {
		return fmt.Errorf("create producer: %w", err)
	}
	defer prod.Close()

	var outMu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(r result) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = enc.Encode(r)
	}
	// send sends messages from..from+count-1 and returns once each has an outcome.
	send := func(from, count int64, rate float64) {
		var wg sync.WaitGroup
		start := time.Now()
		for seq := from; seq < from+count; seq++ {
			if rate > 0 {
				// Pace the sends: message i goes out i/rate seconds after the first.
				due := start.Add(time.Duration(float64(seq-from) / rate * float64(time.Second)))
				if wait := time.Until(due); wait > 0 {
					time.Sleep(wait)
				}
			}
			msg := &pulsar.ProducerMessage{Payload: checker.Payload(name, seq, size)}
			if explicitSeq {
				s := seq
				msg.SequenceID = &s
			}
			wg.Add(1)
			prod.SendAsync(ctx, msg, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer wg.Done()
				if err != nil {
					emit(result{Seq: seq, Err: err.Error()})
					return
				}
				emit(result{Seq: seq, ID: id.String()})
			})
		}
		if err := prod.FlushWithCtx(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "e2e-producer: flush:", err)
		}
		wg.Wait()
	}
	if !interactive {
		send(from, count, rate)
		emit(result{Done: true})
		return nil
	}
	emit(result{Ready: true})
	lines := bufio.NewScanner(os.Stdin)
	next := from
	for lines.Scan() {
		k, err := strconv.ParseInt(strings.TrimSpace(lines.Text()), 10, 64)
		if err != nil || k < 1 {
			return fmt.Errorf("stdin: want a count of messages, got %q", lines.Text())
		}
		send(next, k, 0)
		next += k
		emit(result{Batch: true})
	}
	if err := lines.Err(); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	emit(result{Done: true})
	return nil
}
