package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// reconnect closes cons and subscribes again with the same options, returning the new consumer: a
// durable subscription must then redeliver exactly what was not acknowledged.
func reconnect(t *testing.T, client pulsar.Client, cons pulsar.Consumer, opts pulsar.ConsumerOptions) pulsar.Consumer {
	t.Helper()
	cons.Close()
	return newConsumer(t, client, opts)
}

// TestIndividualAck acknowledges every other message, reconnects, and checks that exactly the
// unacknowledged ones come back — with and without AckWithResponse (ACK_RESPONSE), batched and not
// (batch-index acknowledgement).
func TestIndividualAck(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	for _, tc := range []struct {
		batching, withResponse, batchIndexAck bool
	}{
		{false, false, false}, {false, true, false}, {true, true, false}, {true, true, true},
	} {
		t.Run(fmt.Sprintf("batching=%v/response=%v/batchIndex=%v", tc.batching, tc.withResponse, tc.batchIndexAck), func(t *testing.T) {
			topic := harness.Topic(t)
			chk := checker.New()
			opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
				AckWithResponse: tc.withResponse, EnableBatchIndexAcknowledgment: tc.batchIndexAck}
			cons := newConsumer(t, client, opts)
			prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: !tc.batching, BatchingMaxPublishDelay: 10 * time.Millisecond})
			sendAsync(t, chk, prod, "p", 0, 20, 64)
			msgs := receiveN(t, chk, "first", cons, 20, 30*time.Second, true)
			unacked := map[int64]bool{}
			for _, m := range msgs {
				k := keyOf(t, m)
				if k.Seq%2 == 0 {
					if err := cons.Ack(m); err != nil {
						t.Fatalf("Ack: %v", err)
					}
				} else {
					unacked[k.Seq] = true
				}
			}
			if tc.batching && !tc.batchIndexAck {
				// Without batch-index acks a partially acked batch is redelivered whole; only
				// check that every unacked message comes back.
				cons = reconnect(t, client, cons, opts)
				ctx := testCtx(t, 30*time.Second)
				for len(unacked) > 0 {
					m, err := cons.Receive(ctx)
					if err != nil {
						t.Fatalf("redelivery: still missing %v: %v", unacked, err)
					}
					delete(unacked, keyOf(t, m).Seq)
					_ = cons.Ack(m)
				}
				return
			}
			cons = reconnect(t, client, cons, opts)
			again := receiveN(t, chk, "second", cons, 10, 30*time.Second, false)
			for _, m := range again {
				if k := keyOf(t, m); !unacked[k.Seq] {
					t.Fatalf("redelivered %s, which was acknowledged", k)
				}
			}
			expectNothingBefore(t, client, cons, topic)
		})
	}
}

// TestCumulativeAck acknowledges cumulatively up to the 15th of 20 messages and checks that only the
// last 5 come back after a reconnect (also for batches: the ack of a batch index covers what
// precedes it).
func TestCumulativeAck(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	for _, batching := range []bool{false, true} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			topic := harness.Topic(t)
			chk := checker.New()
			opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Exclusive}
			cons := newConsumer(t, client, opts)
			// Batches are cut only when full (the delay is far beyond the test): exactly 4 of 5.
			// With a short delay a stall mid-batch cut a batch early, p#14 landed inside a
			// batch, and the client's cumulative ack then covered only up to the batch before.
			prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: !batching, BatchingMaxPublishDelay: time.Hour, BatchingMaxMessages: 5})
			sendAsync(t, chk, prod, "p", 0, 20, 64)
			msgs := receiveN(t, chk, "first", cons, 20, 30*time.Second, true)
			// With batches of 5, message 14 ends a batch, so the whole batch is covered.
			if err := cons.AckCumulative(msgs[14]); err != nil {
				t.Fatalf("AckCumulative: %v", err)
			}
			cons = reconnect(t, client, cons, opts)
			again := receiveN(t, chk, "second", cons, 5, 30*time.Second, false)
			if k := keyOf(t, again[0]); k.Seq != 15 {
				t.Fatalf("after cumulative ack of p#14, redelivery starts at %s", k)
			}
			verify(t, chk, "second", checker.Expect{Partial: true})
			expectNothingBefore(t, client, cons, topic)
		})
	}
}

// TestAckIDList acknowledges a list of ids in one call (ACK with several message ids).
func TestAckIDList(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared, AckWithResponse: true}
	cons := newConsumer(t, client, opts)
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendSync(t, chk, prod, "p", 0, 10, 64)
	msgs := receiveN(t, chk, "first", cons, 10, 30*time.Second, true)
	var ids []pulsar.MessageID
	for _, m := range msgs[:8] {
		ids = append(ids, m.ID())
	}
	if err := cons.AckIDList(ids); err != nil {
		t.Fatalf("AckIDList: %v", err)
	}
	cons = reconnect(t, client, cons, opts)
	again := receiveN(t, chk, "second", cons, 2, 30*time.Second, false)
	for _, m := range again {
		if k := keyOf(t, m); k.Seq < 8 {
			t.Fatalf("redelivered acknowledged %s", k)
		}
	}
	expectNothingBefore(t, client, cons, topic)
}

// TestNackRedelivery negatively acknowledges messages and checks that they come back with an
// increasing redelivery count, while acknowledged ones do not.
func TestNackRedelivery(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
		NackRedeliveryDelay: 100 * time.Millisecond})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendSync(t, chk, prod, "p", 0, 10, 64)
	msgs := receiveN(t, chk, "s", cons, 10, 30*time.Second, true)
	for _, m := range msgs {
		if m.RedeliveryCount() != 0 {
			t.Fatalf("first delivery of %v has redelivery count %d", m.ID(), m.RedeliveryCount())
		}
		if keyOf(t, m).Seq < 3 {
			cons.Nack(m)
		} else if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	for round := uint32(1); round <= 2; round++ {
		again := receiveN(t, chk, "s", cons, 3, 30*time.Second, true)
		for _, m := range again {
			k := keyOf(t, m)
			if k.Seq >= 3 {
				t.Fatalf("round %d: redelivered acknowledged %s", round, k)
			}
			if m.RedeliveryCount() != round {
				t.Fatalf("round %d: %s has redelivery count %d", round, k, m.RedeliveryCount())
			}
			if round == 1 {
				cons.Nack(m)
			} else if err := cons.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Nothing is left to redeliver once the acknowledgements are in; nothing more comes before a
	// barrier.
	waitAllAcknowledged(t, b, topic, "s")
	expectNothingBefore(t, client, cons, topic)
	verify(t, chk, "s", checker.Expect{AllowDuplicates: true, NoOrder: true})
}

// TestAckSurvivesRestart acknowledges half a backlog, restarts the broker gracefully, and checks
// that the subscription resumes after the acknowledged messages (cursor persisted on close).
func TestAckSurvivesRestart(t *testing.T) {
	b := harness.StartInProcess(t, nil)
	chk := checker.New()
	topic := harness.Topic(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", AckWithResponse: true}
	func() {
		client := harness.NewClient(t, b, nil)
		defer client.Close()
		cons, err := client.Subscribe(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		sendSync(t, chk, prod, "p", 0, 20, 64)
		receiveN(t, chk, "first", cons, 10, 30*time.Second, false)
	}()
	if err := b.Close(); err != nil {
		t.Fatalf("graceful close: %v", err)
	}
	b.Start()
	client := harness.NewClient(t, b, nil)
	cons := newConsumer(t, client, opts)
	again := receiveN(t, chk, "second", cons, 10, 30*time.Second, false)
	if k := keyOf(t, again[0]); k.Seq != 10 {
		t.Fatalf("after restart the subscription resumed at %s, want p#10", k)
	}
	verify(t, chk, "second", checker.Expect{Partial: true})
}
