package e2e

import (
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestExclusiveSubscription checks that a second consumer on an Exclusive subscription is refused
// and that another subscription on the same topic sees every message independently.
func TestExclusiveSubscription(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	c1 := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ex", Type: pulsar.Exclusive})
	if c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ex", Type: pulsar.Exclusive}); err == nil {
		c.Close()
		t.Fatal("second consumer accepted on an Exclusive subscription")
	}
	other := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "other", Type: pulsar.Exclusive})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
	sendAsync(t, chk, prod, "p", 0, 100, 64)
	receiveN(t, chk, "ex", c1, 100, 30*time.Second, false)
	receiveN(t, chk, "other", other, 100, 30*time.Second, false)
	verify(t, chk, "ex", checker.Expect{})
	verify(t, chk, "other", checker.Expect{})
}

// TestSharedSubscription checks that two consumers on a Shared subscription split the messages
// between them (both get some) and together get every message exactly once.
func TestSharedSubscription(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "shared", Type: pulsar.Shared, ReceiverQueueSize: 10}
	c1 := newConsumer(t, client, opts)
	c2 := newConsumer(t, client, opts)
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 400
	sendAsync(t, chk, prod, "p", 0, n, 64)

	ctx := testCtx(t, 30*time.Second)
	var mu sync.Mutex
	got := map[string]int{}
	total := 0
	var wg sync.WaitGroup
	done := make(chan struct{})
	for name, c := range map[string]pulsar.Consumer{"c1": c1, "c2": c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := c.Receive(ctx)
				if err != nil {
					return
				}
				chk.Received("shared", m.Payload(), m.ID().String())
				_ = c.Ack(m)
				mu.Lock()
				got[name]++
				total++
				if total == n {
					close(done)
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // a slow consumer, so both get a share
			}
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	counts := map[string]int{"c1": got["c1"], "c2": got["c2"]}
	mu.Unlock()
	// Stop both receivers: cancel by closing the consumers' context through the test context's
	// deadline is too slow, so close the consumers (Cleanup's second Close is a no-op).
	c1.Close()
	c2.Close()
	wg.Wait()
	verify(t, chk, "shared", checker.Expect{NoOrder: true})
	if counts["c1"] == 0 || counts["c2"] == 0 {
		t.Fatalf("Shared subscription did not spread messages: %v", counts)
	}
}

// failoverListener records ACTIVE_CONSUMER_CHANGE events of one consumer.
type failoverListener struct {
	mu     sync.Mutex
	active bool
	events int
}

func (l *failoverListener) BecameActive(pulsar.Consumer, string, int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active = true
	l.events++
}

func (l *failoverListener) BecameInactive(pulsar.Consumer, string, int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active = false
	l.events++
}

func (l *failoverListener) isActive() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active
}

// TestFailoverSubscription checks that exactly one consumer of a Failover subscription receives,
// that both are told who is active (ACTIVE_CONSUMER_CHANGE), and that the standby takes over every
// unacknowledged message when the active one closes.
func TestFailoverSubscription(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	l1, l2 := &failoverListener{}, &failoverListener{}
	c1 := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "fo", Type: pulsar.Failover, Name: "a-consumer", EventListener: l1})
	c2 := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "fo", Type: pulsar.Failover, Name: "b-consumer", EventListener: l2})
	harness.Eventually(t, 10*time.Second, "one active consumer", func() error {
		if l1.isActive() == l2.isActive() {
			return errorf("active: a=%v b=%v", l1.isActive(), l2.isActive())
		}
		return nil
	})
	active, standby, standbyName := c1, c2, "b-consumer"
	if l2.isActive() {
		active, standby, standbyName = c2, c1, "a-consumer"
	}
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
	sendAsync(t, chk, prod, "p", 0, 100, 64)
	// The active consumer acks the first half only.
	receiveN(t, chk, "fo", active, 50, 30*time.Second, false)
	// The broker counts what it dispatches to each consumer: the 50 received went to the active
	// one, and none of what was dispatched so far to the standby.
	stats, err := harness.NewAdmin(t, b).Topics().GetStats(*mustTopicName(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	var standbyStats *utils.ConsumerStats
	for i, c := range stats.Subscriptions["fo"].Consumers {
		if c.ConsumerName == standbyName {
			standbyStats = &stats.Subscriptions["fo"].Consumers[i]
		}
	}
	if standbyStats == nil || standbyStats.MsgOutCounter != 0 {
		t.Fatalf("standby %s: %+v (consumers %+v)", standbyName, standbyStats, stats.Subscriptions["fo"].Consumers)
	}
	active.Close()
	// The standby gets the rest (at least; unacked messages in flight may come again).
	ctx := testCtx(t, 30*time.Second)
	for chk.DistinctReceived("fo", checker.Expect{}) < 100 {
		m, err := standby.Receive(ctx)
		if err != nil {
			t.Fatalf("standby after failover: %v (have %d distinct)", err, chk.DistinctReceived("fo", checker.Expect{}))
		}
		chk.Received("fo", m.Payload(), m.ID().String())
		if err := standby.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	verify(t, chk, "fo", checker.Expect{AllowDuplicates: true})
}

// TestUnsubscribe checks that an unsubscribed subscription is gone: a new consumer with the same
// name and initial position Latest does not see the old backlog.
func TestUnsubscribe(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	c1 := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "gone"})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
	sendSync(t, chk, prod, "p", 0, 10, 64)
	if err := c1.Unsubscribe(); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	c1.Close()
	admin := harness.NewAdmin(t, b)
	tn := mustTopicName(t, topic)
	harness.Eventually(t, 10*time.Second, "subscription removed", func() error {
		subs, err := admin.Subscriptions().List(*tn)
		if err != nil {
			return err
		}
		for _, s := range subs {
			if s == "gone" {
				return errorf("subscriptions still %v", subs)
			}
		}
		return nil
	})
	// p#10, sent after the new subscription exists, must be the first message it gets: nothing of
	// the old backlog comes before it.
	c2 := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "gone", SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
	sendSync(t, chk, prod, "p", 10, 11, 64)
	m := receiveN(t, chk, "gone2", c2, 1, 10*time.Second, false)
	if k := keyOf(t, m[0]); k.Seq != 10 {
		t.Fatalf("after re-subscribe got %s, want p#10", k)
	}
}

// TestSubscriptionInitialPosition checks earliest and latest initial positions of new durable
// subscriptions, and that a durable subscription keeps its position across consumer restarts.
func TestSubscriptionInitialPosition(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
	sendSync(t, chk, prod, "p", 0, 10, 64)

	early := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "early", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	late := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "late", SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
	sendSync(t, chk, prod, "p", 10, 20, 64)
	first := receiveN(t, chk, "early", early, 15, 30*time.Second, false)
	if k := keyOf(t, first[0]); k.Seq != 0 {
		t.Fatalf("earliest subscription started at %s, want p#0", k)
	}
	late1 := receiveN(t, chk, "late", late, 10, 30*time.Second, false)
	if k := keyOf(t, late1[0]); k.Seq != 10 {
		t.Fatalf("latest subscription started at %s, want p#10", k)
	}
	expectNothingBefore(t, client, late, topic)
	// Reconnect "early": it resumes after the last acknowledged message (p#14).
	early.Close()
	early2 := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "early", SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
	receiveN(t, chk, "early", early2, 5, 30*time.Second, false)
	verify(t, chk, "early", checker.Expect{})
	verify(t, chk, "late", checker.Expect{Partial: true})
}

// TestNonDurableSubscription checks that a non-durable subscription receives and leaves nothing
// behind.
func TestNonDurableSubscription(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
	sendSync(t, chk, prod, "p", 0, 5, 64)
	c := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "nd",
		SubscriptionMode: pulsar.NonDurable, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	receiveN(t, chk, "nd", c, 5, 30*time.Second, false)
	verify(t, chk, "nd", checker.Expect{})
	c.Close()
	admin := harness.NewAdmin(t, b)
	tn := mustTopicName(t, topic)
	harness.Eventually(t, 10*time.Second, "non-durable subscription gone", func() error {
		subs, err := admin.Subscriptions().List(*tn)
		if err != nil {
			return err
		}
		if len(subs) != 0 {
			return errorf("subscriptions %v", subs)
		}
		return nil
	})
}
