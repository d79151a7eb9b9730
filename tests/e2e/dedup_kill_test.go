package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestDedupKill9 is the promise of producer deduplication across crashes: a named producer streams
// messages (explicit sequence ids) to a real `meridian standalone --dedup` while the broker is killed
// with SIGKILL and restarted on the same ports and data dir, several times. The client resends what
// was pending at each crash; the broker must store every acknowledged message exactly once, in
// order. A live consumer must see everything (at least once), and a reader from the earliest
// position afterwards must see every message exactly once. Finally a new producer with the same name
// learns the last persisted sequence id and its resends are dropped as duplicates.
func TestDedupKill9(t *testing.T) {
	total, kills := 20000, 10
	if testing.Short() {
		total, kills = 3000, 2
	}
	for _, batching := range []bool{false, true} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			runDedupKill9(t, batching, total, kills)
		})
	}
}

func runDedupKill9(t *testing.T, batching bool, total, kills int) {
	p := harness.StartStandalone(t, harness.Options{Dedup: true})
	client := harness.NewClient(t, p, func(o *pulsar.ClientOptions) {
		o.OperationTimeout = 30 * time.Second
	})
	// Every wait below ends early if the broker process dies on its own (the client would otherwise
	// retry forever); the failure then says so and the harness prints the broker's log.
	runCtx, cancelRun := p.CrashContext(testCtx(t, 5*time.Minute))
	defer cancelRun()
	topic := harness.Topic(t)
	chk := checker.New()
	const name = "dedup-producer"
	const size = 256

	// The live consumer: durable, Exclusive, acks every message; runs through the crashes.
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "live",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	consCtx, stopConsumer := context.WithCancel(context.Background())
	var consWG sync.WaitGroup
	consWG.Add(1)
	go func() {
		defer consWG.Done()
		for {
			m, err := cons.Receive(consCtx)
			if err != nil {
				return
			}
			chk.Received("live", m.Payload(), m.ID().String())
			_ = cons.Ack(m)
		}
	}()
	defer func() { stopConsumer(); consWG.Wait() }()

	// The producer runs in its own process (cmd/e2e-producer, see there why) and reports every
	// outcome; a killer goroutine kills and restarts the broker every total/(kills+1) receipts.
	for seq := int64(0); seq < int64(total); seq++ {
		chk.Sent(name, seq, size)
	}
	var acked atomic.Int64
	sendCtx := runCtx
	killErr := make(chan error, 1)
	go func() {
		defer close(killErr)
		for k := 1; k <= kills; k++ {
			threshold := int64(total * k / (kills + 1))
			for acked.Load() < threshold {
				select {
				case <-sendCtx.Done():
					killErr <- fmt.Errorf("kill %d: acked stuck at %d < %d: %v", k, acked.Load(), threshold, context.Cause(sendCtx))
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
			ackedAtKill := acked.Load()
			if err := p.RestartE(); err != nil { // SIGKILL, start, wait for ready
				killErr <- fmt.Errorf("kill %d: %w", k, err)
				return
			}
			t.Logf("kill %d: %d of %d acked when killed", k, ackedAtKill, total)
		}
	}()
	failed, firstErr := runProducerProcess(t, sendCtx, chk, producerRun{
		url: p.ServiceURL(), topic: topic, name: name, from: 0, n: int64(total), size: size, batching: batching,
	}, func() { acked.Add(1) })
	if err := <-killErr; err != nil {
		t.Fatal(err)
	}
	ackedN, failedN, pendingN := chk.Counts()
	t.Logf("%d kills: acked %d, failed %d, pending %d (first error: %v)", kills, ackedN, failedN, pendingN, firstErr)
	if failed > 0 {
		// With a 2-minute send timeout nothing should fail; failures are still checked below (at most once).
		t.Errorf("%d sends failed, first: %v", failed, firstErr)
	}

	// The live consumer catches up: every acked message at least once.
	catchUp, cancelCatchUp := context.WithTimeout(runCtx, 60*time.Second)
	defer cancelCatchUp()
	if err := harness.WaitFor(catchUp, func(context.Context) error {
		if n := chk.DistinctReceived("live", checker.Expect{}); n < ackedN {
			return fmt.Errorf("live consumer has %d of %d", n, ackedN)
		}
		return nil
	}); err != nil {
		t.Fatalf("live consumer catching up: %v (%v)", err, context.Cause(catchUp))
	}
	stopConsumer()
	consWG.Wait()
	verify(t, chk, "live", checker.Expect{AllowDuplicates: true})

	// What is stored: every message exactly once, in order.
	r := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	readCtx, cancelRead := context.WithTimeout(runCtx, 2*time.Minute)
	defer cancelRead()
	for r.HasNext() {
		m, err := r.Next(readCtx)
		if err != nil {
			t.Fatalf("reader: %v (%v)", err, context.Cause(readCtx))
		}
		chk.Received("stored", m.Payload(), m.ID().String())
	}
	verify(t, chk, "stored", checker.Expect{})

	// A new producer with the same name resumes after the last persisted sequence id, and resending
	// the last messages does not store them again. (The producer process has exited.)
	p.Restart()
	prod2 := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
	// pulsar-client-go seeds its next sequence id from PRODUCER_SUCCESS.last_sequence_id, but
	// LastSequenceID() reflects receipts only: send one message without a sequence id and check the
	// id it got.
	ctx := readCtx
	chk.Sent(name, int64(total), size)
	id, err := prod2.Send(ctx, &pulsar.ProducerMessage{Payload: checker.Payload(name, int64(total), size)})
	if err != nil {
		t.Fatalf("send after reconnect: %v", err)
	}
	chk.Acked(name, int64(total), id.String())
	if got := prod2.LastSequenceID(); got != int64(total) {
		t.Fatalf("a reconnected producer continued at sequence id %d, want %d (PRODUCER_SUCCESS.last_sequence_id should be %d)", got, total, total-1)
	}
	for seq := int64(total - 5); seq < int64(total); seq++ {
		s := seq
		if _, err := prod2.Send(ctx, &pulsar.ProducerMessage{Payload: checker.Payload(name, seq, size), SequenceID: &s}); err != nil {
			t.Fatalf("resend of %d: %v", seq, err)
		}
	}
	r2 := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	for r2.HasNext() {
		m, err := r2.Next(readCtx)
		if err != nil {
			t.Fatalf("reader: %v", err)
		}
		chk.Received("stored-after-resend", m.Payload(), m.ID().String())
	}
	verify(t, chk, "stored-after-resend", checker.Expect{})
}

// TestKill9NoAckedLoss: without deduplication, kill -9 must still never lose an acknowledged message
// (fsync before the receipt). Nothing is in flight at the kills, so nothing may be duplicated either.
func TestKill9NoAckedLoss(t *testing.T) {
	p := harness.StartStandalone(t, harness.Options{})
	client := harness.NewClient(t, p, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Minute})
	n := int64(2000)
	if testing.Short() {
		n = 500
	}
	sendAsync(t, chk, prod, "p", 0, n, 512)
	p.Restart()
	sendAsync(t, chk, prod, "p", n, 2*n, 512)
	p.Restart()
	r := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	ctx := testCtx(t, 60*time.Second)
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		chk.Received("stored", m.Payload(), m.ID().String())
	}
	verify(t, chk, "stored", checker.Expect{})
}

// TestGracefulStopKeepsData stops the broker with SIGTERM (it must exit 0 within 5 s) and checks that
// everything acknowledged and the subscription's acknowledgements survive. The producer does not
// batch: the Go client sends no acknowledgement of a partly acknowledged batch (without batch-index
// acknowledgement), so with all 100 messages in one batch the broker rightly redelivers the whole
// batch, and whether the consumer then resumes at p#60 depended on what its receive queue held
// when it reconnected.
func TestGracefulStopKeepsData(t *testing.T) {
	p := harness.StartStandalone(t, harness.Options{})
	client := harness.NewClient(t, p, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", AckWithResponse: true}
	cons := newConsumer(t, client, opts)
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, SendTimeout: time.Minute, DisableBatching: true})
	sendAsync(t, chk, prod, "p", 0, 100, 128)
	receiveN(t, chk, "first", cons, 60, 30*time.Second, false)
	if err := p.Stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	p.Start()
	// The consumer reconnects by itself. What was delivered and not acknowledged before the stop
	// may come twice (at-least-once); an acknowledged message must never come back.
	ctx := testCtx(t, 60*time.Second)
	seen := map[int64]bool{}
	for len(seen) < 40 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive after the restart: %d of p#60-99 seen: %v", len(seen), err)
		}
		chk.Received("rest", m.Payload(), m.ID().String())
		k := keyOf(t, m)
		if k.Seq < 60 {
			t.Fatalf("after a graceful restart %s came back, acknowledged before the stop", k)
		}
		seen[k.Seq] = true
		if err := cons.Ack(m); err != nil {
			t.Fatalf("Ack %v: %v", m.ID(), err)
		}
	}
	verify(t, chk, "rest", checker.Expect{Partial: true, AllowDuplicates: true})
}

// producerRun describes one cmd/e2e-producer run.
type producerRun struct {
	url, topic, name string
	from, n          int64
	size             int
	batching         bool
	rate             float64 // messages per second; 0: unpaced
}

// runProducerProcess runs cmd/e2e-producer and records its outcomes in chk (the sends must already
// be recorded with chk.Sent); onAck runs for every receipt. It returns the number of failed sends and
// the first error, and fails the test if the process fails or ctx ends first.
func runProducerProcess(t *testing.T, ctx context.Context, chk *checker.Checker, r producerRun, onAck func()) (int, error) {
	t.Helper()
	bin := harness.ToolBinary(t, "e2e-producer")
	cmd := exec.CommandContext(ctx, bin, "-url", r.url, "-topic", r.topic, "-name", r.name,
		"-from", fmt.Sprint(r.from), "-n", fmt.Sprint(r.n), "-size", fmt.Sprint(r.size),
		fmt.Sprintf("-batching=%v", r.batching), "-rate", fmt.Sprint(r.rate))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start e2e-producer: %v", err)
	}
	failed, done := 0, false
	var firstErr error
	dec := json.NewDecoder(out)
	for {
		var res struct {
			Seq  int64  `json:"seq"`
			ID   string `json:"id"`
			Err  string `json:"err"`
			Done bool   `json:"done"`
		}
		if err := dec.Decode(&res); err != nil {
			break // EOF when the process ends (or is killed by ctx)
		}
		switch {
		case res.Done:
			done = true
		case res.Err != "":
			failed++
			if firstErr == nil {
				firstErr = errors.New(res.Err)
			}
			chk.Failed(r.name, res.Seq, firstErr)
		default:
			chk.Acked(r.name, res.Seq, res.ID)
			onAck()
		}
	}
	werr := cmd.Wait()
	if !done || werr != nil {
		t.Fatalf("e2e-producer did not finish (%v, context: %v); stderr:\n%s", werr, context.Cause(ctx), tail(stderr.String(), 40))
	}
	return failed, firstErr
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
