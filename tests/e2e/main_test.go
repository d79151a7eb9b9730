// Package e2e drives Meridian with the real Pulsar Go client (pulsar-client-go v0.19.0) and its
// admin client (pulsaradmin): every feature of issue 3 against an in-process broker and against
// real `meridian standalone` processes (kill -9 and restart included).
//
// Tests that drive a feature the broker does not provide yet call harness.Pending and are skipped
// unless MERIDIAN_E2E_PENDING=1. MERIDIAN_E2E_TARGET=process runs the feature tests against a real
// process instead of the in-process broker (the kill/restart and bad-input tests always use real
// processes).
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/internal/node"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// brokerConfig are the knobs the feature tests need, applied to either kind of broker.
type brokerConfig struct {
	dedup          bool
	maxMessageSize int
}

// startBroker starts a fresh broker for one test: in-process by default, a real process when
// MERIDIAN_E2E_TARGET=process.
func startBroker(t *testing.T, cfg brokerConfig) harness.Broker {
	t.Helper()
	if os.Getenv("MERIDIAN_E2E_TARGET") == "process" {
		return harness.StartStandalone(t, harness.Options{Dedup: cfg.dedup, MaxMessageSize: cfg.maxMessageSize})
	}
	return harness.StartInProcess(t, func(o *node.Options) {
		o.Dedup = cfg.dedup
		if cfg.maxMessageSize > 0 {
			o.MaxMessageSize = cfg.maxMessageSize
		}
	})
}

// testCtx returns a context bounded by d and cancelled at the end of the test.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newProducer(t *testing.T, c pulsar.Client, opts pulsar.ProducerOptions) pulsar.Producer {
	t.Helper()
	p, err := c.CreateProducer(opts)
	if err != nil {
		t.Fatalf("CreateProducer(%s): %v", opts.Topic, err)
	}
	t.Cleanup(p.Close)
	return p
}

func newConsumer(t *testing.T, c pulsar.Client, opts pulsar.ConsumerOptions) pulsar.Consumer {
	t.Helper()
	cons, err := c.Subscribe(opts)
	if err != nil {
		t.Fatalf("Subscribe(%s, %s): %v", opts.Topic, opts.SubscriptionName, err)
	}
	t.Cleanup(cons.Close)
	return cons
}

func newReader(t *testing.T, c pulsar.Client, opts pulsar.ReaderOptions) pulsar.Reader {
	t.Helper()
	r, err := c.CreateReader(opts)
	if err != nil {
		t.Fatalf("CreateReader(%s): %v", opts.Topic, err)
	}
	t.Cleanup(r.Close)
	return r
}

// sendSync sends messages seq from..to-1 of producer name through p, one Send at a time, recording
// them in chk. It fails the test on the first error.
func sendSync(t *testing.T, chk *checker.Checker, p pulsar.Producer, name string, from, to int64, size int) []pulsar.MessageID {
	t.Helper()
	ctx := testCtx(t, 60*time.Second)
	ids := make([]pulsar.MessageID, 0, to-from)
	for seq := from; seq < to; seq++ {
		chk.Sent(name, seq, size)
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: checker.Payload(name, seq, size)})
		if err != nil {
			chk.Failed(name, seq, err)
			t.Fatalf("Send %s#%d: %v", name, seq, err)
		}
		chk.Acked(name, seq, id.String())
		ids = append(ids, id)
	}
	return ids
}

// sendAsync sends messages seq from..to-1 with SendAsync, then flushes and waits for every callback;
// it fails the test if any send failed.
func sendAsync(t *testing.T, chk *checker.Checker, p pulsar.Producer, name string, from, to int64, size int) {
	t.Helper()
	ctx := testCtx(t, 60*time.Second)
	errs := make(chan error, to-from)
	for seq := from; seq < to; seq++ {
		chk.Sent(name, seq, size)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: checker.Payload(name, seq, size)},
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					chk.Failed(name, seq, err)
					errs <- fmt.Errorf("SendAsync %s#%d: %w", name, seq, err)
					return
				}
				chk.Acked(name, seq, id.String())
				errs <- nil
			})
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	var failed []error
	for i := from; i < to; i++ {
		select {
		case err := <-errs:
			if err != nil {
				failed = append(failed, err)
			}
		case <-ctx.Done():
			t.Fatalf("waiting for send callbacks: %v", ctx.Err())
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d sends failed, first: %v", len(failed), errors.Join(failed[0]))
	}
}

// receiveN receives n messages from cons within timeout, records them as stream in chk and acks
// each one (individual ack) unless noAck. It returns the messages.
func receiveN(t *testing.T, chk *checker.Checker, stream string, cons pulsar.Consumer, n int, timeout time.Duration, noAck bool) []pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msgs := make([]pulsar.Message, 0, n)
	for len(msgs) < n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive: got %d of %d messages (%s): %v", len(msgs), n, describe(msgs), err)
		}
		chk.Received(stream, m.Payload(), m.ID().String())
		if !noAck {
			if err := cons.Ack(m); err != nil {
				t.Fatalf("Ack %v: %v", m.ID(), err)
			}
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// readN reads n messages from r within timeout and records them as stream in chk.
func readN(t *testing.T, chk *checker.Checker, stream string, r pulsar.Reader, n int, timeout time.Duration) []pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msgs := make([]pulsar.Message, 0, n)
	for len(msgs) < n {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("Reader.Next: got %d of %d messages (%s): %v", len(msgs), n, describe(msgs), err)
		}
		chk.Received(stream, m.Payload(), m.ID().String())
		msgs = append(msgs, m)
	}
	return msgs
}

// receiveUntil receives from cons, recording every message in chk as stream and acknowledging it,
// until stream has seen every acknowledged send that exp selects; it fails the test if that takes
// longer than timeout. It returns the messages it received.
func receiveUntil(t *testing.T, chk *checker.Checker, stream string, cons pulsar.Consumer, exp checker.Expect, timeout time.Duration) []pulsar.Message {
	t.Helper()
	return collectUntil(t, chk, stream, exp, timeout, func(ctx context.Context) (pulsar.Message, error) {
		m, err := cons.Receive(ctx)
		if err == nil {
			if err := cons.Ack(m); err != nil {
				t.Fatalf("%s: ack %v: %v", stream, m.ID(), err)
			}
		}
		return m, err
	})
}

// readUntil is receiveUntil for a reader.
func readUntil(t *testing.T, chk *checker.Checker, stream string, r pulsar.Reader, exp checker.Expect, timeout time.Duration) []pulsar.Message {
	t.Helper()
	return collectUntil(t, chk, stream, exp, timeout, r.Next)
}

func collectUntil(t *testing.T, chk *checker.Checker, stream string, exp checker.Expect, timeout time.Duration, next func(context.Context) (pulsar.Message, error)) []pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got []pulsar.Message
	for {
		want := chk.Verify(stream, checker.Expect{Producers: exp.Producers, AllowDuplicates: true, NoOrder: true}).Expected
		if have := chk.DistinctReceived(stream, exp); have >= want {
			return got
		}
		m, err := next(ctx)
		if err != nil {
			t.Fatalf("%s: %d of %d acknowledged messages received within %v: %v\n%s", stream,
				chk.DistinctReceived(stream, exp), want, timeout, err, chk.Verify(stream, exp))
		}
		chk.Received(stream, m.Payload(), m.ID().String())
		got = append(got, m)
	}
}

// expectNothingBefore proves that cons has nothing more to deliver of what topics hold now (used
// after everything was consumed, to catch duplicates, stray redeliveries and messages from before
// a subscription's start). It publishes a barrier message to each topic (for a partitioned topic:
// to each partition; not batched, not replicated) and fails if cons receives anything but the
// barriers before it has them all: a subscription delivers what is stored before a barrier before
// the barrier, so an extra message shows without waiting for time to pass. The barriers are
// acknowledged; barriers of earlier calls (another subscription's on the same topic) are skipped.
func expectNothingBefore(t *testing.T, client pulsar.Client, cons pulsar.Consumer, topics ...string) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	barriers := map[string]bool{}
	for i, topic := range topics {
		prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatalf("barrier producer on %s: %v", topic, err)
		}
		payload := fmt.Sprintf("%s%d/%d of %s", barrierPrefix, barrierSeq.Add(1), i, t.Name())
		_, err = prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload), DisableReplication: true})
		prod.Close()
		if err != nil {
			t.Fatalf("barrier to %s: %v", topic, err)
		}
		barriers[payload] = true
	}
	for len(barriers) > 0 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("waiting for %d barrier messages: %v", len(barriers), err)
		}
		if !barriers[string(m.Payload())] && !strings.HasPrefix(string(m.Payload()), barrierPrefix) {
			k, _, _ := checker.Parse(m.Payload())
			t.Fatalf("unexpected extra message %v (%s) before the barrier", m.ID(), k)
		}
		delete(barriers, string(m.Payload()))
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
}

// barrierPrefix starts every barrier message of expectNothingBefore; barrierSeq tells them apart.
const barrierPrefix = "e2e barrier "

var barrierSeq atomic.Int64

// waitAllAcknowledged waits until subscription sub of topic has no backlog and no unacknowledged
// message, so nothing is left that the broker could redeliver.
func waitAllAcknowledged(t *testing.T, b harness.Broker, topic, sub string) {
	t.Helper()
	admin := harness.NewAdmin(t, b)
	harness.Eventually(t, 10*time.Second, "everything acknowledged on "+sub, func() error {
		stats, err := admin.Topics().GetStats(*mustTopicName(t, topic))
		if err != nil {
			return err
		}
		if s := stats.Subscriptions[sub]; s.MsgBacklog != 0 || s.UnAckedMessages != 0 {
			return fmt.Errorf("backlog %d, unacknowledged %d", s.MsgBacklog, s.UnAckedMessages)
		}
		return nil
	})
}

// verify fails the test with the checker's report unless stream kept every promise in exp.
func verify(t *testing.T, chk *checker.Checker, stream string, exp checker.Expect) {
	t.Helper()
	rep := chk.Verify(stream, exp)
	if !rep.OK() {
		t.Fatal(rep.String())
	}
	t.Log(rep.String())
}

// keyOf parses the checker key of a message, failing the test if it is not a checker payload.
func keyOf(t *testing.T, m pulsar.Message) checker.Key {
	t.Helper()
	k, corrupt, err := checker.Parse(m.Payload())
	if err != nil || corrupt != "" {
		t.Fatalf("message %v: %v %s", m.ID(), err, corrupt)
	}
	return k
}

// describe summarizes received messages for failure messages: "p#6 (3:6:-1) ... p#19 (3:19:-1)".
func describe(msgs []pulsar.Message) string {
	one := func(m pulsar.Message) string {
		k, _, err := checker.Parse(m.Payload())
		if err != nil {
			return fmt.Sprintf("%q (%v)", m.Payload(), m.ID())
		}
		return fmt.Sprintf("%s (%v)", k, m.ID())
	}
	switch len(msgs) {
	case 0:
		return "none"
	case 1:
		return one(msgs[0])
	}
	return one(msgs[0]) + " ... " + one(msgs[len(msgs)-1])
}
