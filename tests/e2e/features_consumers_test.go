package e2e

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// keyedMsg is one received message of a keyed test: which consumer, key and per-key sequence, and
// a global arrival number.
type keyedMsg struct {
	consumer int
	key      string
	seq      int
	arrival  int
}

// keyedCollector receives from several consumers concurrently and records arrivals.
type keyedCollector struct {
	mu      sync.Mutex
	msgs    []keyedMsg
	arrival int
}

func (k *keyedCollector) add(consumer int, m pulsar.Message) {
	var seq int
	fmt.Sscanf(string(m.Payload()), "seq-%d", &seq)
	k.mu.Lock()
	k.arrival++
	k.msgs = append(k.msgs, keyedMsg{consumer: consumer, key: m.Key(), seq: seq, arrival: k.arrival})
	k.mu.Unlock()
}

func (k *keyedCollector) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.msgs)
}

// check verifies that every key went to exactly one consumer (when oneConsumerPerKey) and that
// each key's messages arrived in order without duplicates.
func (k *keyedCollector) check(t *testing.T, oneConsumerPerKey bool) map[int]int {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	owner := map[string]int{}
	last := map[string]int{}
	perConsumer := map[int]int{}
	for _, m := range k.msgs {
		perConsumer[m.consumer]++
		if o, ok := owner[m.key]; ok && o != m.consumer && oneConsumerPerKey {
			t.Errorf("key %s went to consumers %d and %d", m.key, o, m.consumer)
		}
		owner[m.key] = m.consumer
		if l, ok := last[m.key]; ok && m.seq <= l {
			t.Errorf("key %s: seq %d arrived after %d", m.key, m.seq, l)
		}
		last[m.key] = m.seq
	}
	return perConsumer
}

// receiveInto runs a receive loop for each consumer until ctx ends, acking what arrives unless
// hold returns true for the consumer.
func receiveInto(ctx context.Context, wg *sync.WaitGroup, col *keyedCollector, consumers []pulsar.Consumer, hold func(i int) bool) {
	for i, c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := c.Receive(ctx)
				if err != nil {
					return
				}
				col.add(i, m)
				if hold == nil || !hold(i) {
					_ = c.Ack(m)
				}
			}
		}()
	}
}

// sendKeyed sends n messages per key, round-robin over keys, asynchronously.
func sendKeyed(t *testing.T, p pulsar.Producer, keys []string, from, n int) {
	t.Helper()
	ctx := testCtx(t, 60*time.Second)
	for s := from; s < from+n; s++ {
		for _, k := range keys {
			p.SendAsync(ctx, &pulsar.ProducerMessage{Key: k, Payload: []byte(fmt.Sprintf("seq-%d", s))},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						t.Errorf("send: %v", err)
					}
				})
		}
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		t.Fatal(err)
	}
}

func waitCount(t *testing.T, col *keyedCollector, n int, d time.Duration) {
	t.Helper()
	harness.Eventually(t, d, fmt.Sprintf("%d messages", n), func() error {
		if c := col.count(); c < n {
			return fmt.Errorf("%d received", c)
		}
		return nil
	})
}

// TestKeySharedAutoSplit: three auto-split consumers; every key sticks to one consumer, order per
// key holds, with key-based batching on the producer.
func TestKeySharedAutoSplit(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	var consumers []pulsar.Consumer
	for i := 0; i < 3; i++ {
		consumers = append(consumers, newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks",
			Type: pulsar.KeyShared, Name: fmt.Sprintf("c%d", i)}))
	}
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, BatcherBuilderType: pulsar.KeyBasedBatchBuilder,
		BatchingMaxPublishDelay: 5 * time.Millisecond})
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	col := &keyedCollector{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	receiveInto(ctx, &wg, col, consumers, nil)
	defer func() { cancel(); wg.Wait() }()
	sendKeyed(t, prod, keys, 0, 25)
	waitCount(t, col, 25*len(keys), 30*time.Second)
	per := col.check(t, true)
	if len(per) < 2 {
		t.Errorf("only %d of 3 consumers got messages: %v", len(per), per)
	}
}

// TestKeySharedSticky: consumers with explicit hash ranges; each key sticks to one consumer and
// both halves of the hash space are served.
func TestKeySharedSticky(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	var consumers []pulsar.Consumer
	for _, r := range [][]int{{0, 32767}, {32768, 65535}} {
		policy, err := pulsar.NewKeySharedPolicySticky(r)
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks",
			Type: pulsar.KeyShared, KeySharedPolicy: policy}))
	}
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	col := &keyedCollector{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	receiveInto(ctx, &wg, col, consumers, nil)
	defer func() { cancel(); wg.Wait() }()
	sendKeyed(t, prod, keys, 0, 5)
	waitCount(t, col, 5*len(keys), 30*time.Second)
	if per := col.check(t, true); len(per) != 2 {
		t.Errorf("consumers served: %v", per)
	}
	// A sticky consumer whose range overlaps another's is refused (ConsumerAssignError).
	overlap, err := pulsar.NewKeySharedPolicySticky([]int{30000, 40000})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks", Type: pulsar.KeyShared,
		KeySharedPolicy: overlap}); err == nil {
		c.Close()
		t.Fatal("overlapping sticky ranges accepted")
	}
}

// TestKeySharedOrderingAcrossJoin: a consumer holds unacknowledged messages of every key when a
// second consumer joins; newer messages of those keys must not reach the newcomer before the older
// ones are acknowledged, so per-key order holds across both consumers.
func TestKeySharedOrderingAcrossJoin(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks", Type: pulsar.KeyShared}
	first := newConsumer(t, client, opts)
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	sendKeyed(t, prod, keys, 0, 2)
	// first receives everything and holds it unacknowledged.
	ctx := testCtx(t, 60*time.Second)
	var held []pulsar.Message
	for len(held) < 2*len(keys) {
		m, err := first.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, m)
	}
	second := newConsumer(t, client, opts)
	sendKeyed(t, prod, keys, 2, 2)
	// The newcomer must get nothing while older messages of its keys are unacknowledged at first.
	rctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	m, err := second.Receive(rctx)
	cancel()
	if err == nil {
		t.Fatalf("new consumer got %s/%q while older messages of keys are unacknowledged elsewhere", m.Key(), m.Payload())
	}
	// Acknowledge the held messages; then everything flows, in order per key.
	col := &keyedCollector{}
	for _, m := range held {
		col.add(0, m)
		if err := first.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	receiveInto(rctx, &wg, col, []pulsar.Consumer{first, second}, nil)
	defer func() { stop(); wg.Wait() }()
	waitCount(t, col, 4*len(keys), 30*time.Second)
	col.check(t, false)
}

// TestChunkedMessages: payloads larger than the chunk size are split by the producer into chunks
// that the broker stores and dispatches in order; consumers reassemble them, also on a Shared
// subscription and after a nack.
func TestChunkedMessages(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	// pulsar-client-go v0.19.0 starts a goroutine per chunked message that sleeps for
	// ExpireTimeOfIncompleteChunk (default 1 min) even after the message completed; keep it short and
	// wait for those goroutines at the end, so the package's leak check stays meaningful. (Other
	// tests' chunk timers, such as TestTopologyMessageFidelity's 1-min ones when -count > 1, are not
	// this test's to wait for.)
	earlier := chunkTimers()
	t.Cleanup(func() { waitChunkTimers(t, earlier) })
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
		NackRedeliveryDelay: 100 * time.Millisecond, ExpireTimeOfIncompleteChunk: 3 * time.Second})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, EnableChunking: true,
		ChunkMaxMessageSize: 1000})
	ctx := testCtx(t, 60*time.Second)
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 10_000+i) }
	for i := 0; i < 5; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: payload(i)}); err != nil {
			t.Fatal(err)
		}
	}
	nacked := false
	done := map[int]bool{}
	for len(done) < 5 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("got %v: %v", done, err)
		}
		i := int(m.Payload()[0] - 'a')
		if i < 0 || i >= 5 || !bytes.Equal(m.Payload(), payload(i)) {
			t.Fatalf("message of %d bytes does not match any sent payload", len(m.Payload()))
		}
		if done[i] {
			t.Fatalf("message %d delivered again after its ack", i)
		}
		if i == 2 && !nacked {
			nacked = true
			cons.Nack(m) // redelivered whole: every chunk again
			continue
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
		done[i] = true
	}
	// Everything acknowledged: the chunks leave no backlog (acks are grouped by the client, so poll).
	admin := harness.NewAdmin(t, b)
	harness.Eventually(t, 10*time.Second, "no backlog after acknowledging every chunked message", func() error {
		stats, err := admin.Topics().GetStats(*mustTopicName(t, topic))
		if err != nil {
			return err
		}
		if bl := stats.Subscriptions["s"].MsgBacklog; bl != 0 {
			return fmt.Errorf("backlog %d", bl)
		}
		return nil
	})
	// Nothing left to redeliver: no copy of a chunk comes before a barrier.
	expectNothingBefore(t, client, cons, topic)
}

// waitChunkTimers waits until no chunk-expiry goroutine of pulsar-client-go is left but those in
// earlier (started before the test).
func waitChunkTimers(t *testing.T, earlier map[string]bool) {
	harness.Eventually(t, 10*time.Second, "chunk expiry goroutines to end", func() error {
		for id := range chunkTimers() {
			if !earlier[id] {
				return fmt.Errorf("goroutine %s still running", id)
			}
		}
		return nil
	})
}

// chunkTimers returns the ids of the running chunk-expiry goroutines of pulsar-client-go.
func chunkTimers() map[string]bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	ids := map[string]bool{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		// Each goroutine's dump starts "goroutine <id> [<state>]:".
		if !bytes.Contains(g, []byte("discardChunkIfExpire")) {
			continue
		}
		if f := bytes.Fields(g); len(f) > 1 && string(f[0]) == "goroutine" {
			ids[string(f[1])] = true
		}
	}
	return ids
}

// TestZeroQueueConsumer: zero-queue consumers ask for one message per Receive (FLOW 1), so two of
// them on a Shared subscription split the messages without either buffering ahead.
func TestZeroQueueConsumer(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared, EnableZeroQueueConsumer: true}
	a := newConsumer(t, client, opts)
	bc := newConsumer(t, client, opts)
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ctx := testCtx(t, 60*time.Second)
	for i := 0; i < 10; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := a.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Ack(m)
	// a asked for one message only: the other nine are all for b.
	got := 0
	for got < 9 {
		m, err := bc.Receive(ctx)
		if err != nil {
			t.Fatalf("b got %d of 9: %v", got, err)
		}
		_ = bc.Ack(m)
		got++
	}
}

// TestMultiTopicAndPatternConsumers: a consumer on a list of topics and a regex consumer that
// discovers a topic created after it subscribed (GET_TOPICS_OF_NAMESPACE).
func TestMultiTopicAndPatternConsumers(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	base := harness.Topic(t)
	t1, t2, t3 := base+"-a", base+"-b", base+"-c"
	ctx := testCtx(t, 60*time.Second)

	multi := newConsumer(t, client, pulsar.ConsumerOptions{Topics: []string{t1, t2}, SubscriptionName: "multi",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	pattern := newConsumer(t, client, pulsar.ConsumerOptions{TopicsPattern: base + "-.*", SubscriptionName: "pattern",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, AutoDiscoveryPeriod: 500 * time.Millisecond})
	for _, tp := range []string{t1, t2, t3} {
		p := newProducer(t, client, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
		for i := 0; i < 3; i++ {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(tp[strings.LastIndex(tp, "-")+1:] + fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	receiveSet := func(c pulsar.Consumer, n int) map[string]bool {
		got := map[string]bool{}
		for len(got) < n {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatalf("got %v: %v", got, err)
			}
			got[string(m.Payload())] = true
			_ = c.Ack(m)
		}
		return got
	}
	if got := receiveSet(multi, 6); got["c0"] {
		t.Errorf("multi-topic consumer got a message of a topic it did not subscribe to: %v", got)
	}
	// t3 did not exist when the pattern consumer subscribed: auto-discovery finds it.
	if got := receiveSet(pattern, 9); !got["c2"] || !got["a0"] {
		t.Errorf("pattern consumer got %v", got)
	}
}

// TestNonPersistentTopic: a consumer connected to a non-persistent topic receives what is produced
// while it is connected; nothing is stored.
func TestNonPersistentTopic(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := strings.Replace(harness.Topic(t), "persistent://", "non-persistent://", 1)
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cons.Close)
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ctx := testCtx(t, 30*time.Second)
	// A non-persistent topic drops what a subscription has no permits for, and the client grants
	// its first permits (FLOW) just after SUBSCRIBE returns. sendUntilReceived publishes payload
	// until c receives a message and returns that message's payload: for the first consumer,
	// warm-up messages, so it is known to be ready before the counted ones. Nothing here is
	// acknowledged (a non-persistent subscription keeps nothing to acknowledge): every
	// non-persistent message has id 0:0 (as in Pulsar), and the client drops a message whose id it
	// acknowledged within its ack-grouping window.
	sendUntilReceived := func(c pulsar.Consumer, payload string) (received string) {
		t.Helper()
		harness.Eventually(t, 10*time.Second, "a "+payload+" message to arrive", func() error {
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
				return err
			}
			rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			m, err := c.Receive(rctx)
			if err == nil {
				received = string(m.Payload())
			}
			return err
		})
		return received
	}
	sendUntilReceived(cons, "warm-up")
	for i := 0; i < 10; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 10; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if string(m.Payload()) == "warm-up" { // sent before the first one arrived
			i--
			continue
		}
		if string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("message %d: %q", i, m.Payload())
		}
	}
	// A subscription created later sees nothing of the past: the first message it receives is one
	// sent after it subscribed (marker messages, sent until one arrives, as above).
	late := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "late",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if got := sendUntilReceived(late, "marker"); got != "marker" {
		t.Fatalf("the late subscription received %q, sent before it subscribed", got)
	}
}

// TestNonPersistentSlowConsumerDrops: a non-persistent topic never holds messages back for a slow
// consumer: a consumer that receives nothing while 300 messages go by gets at most what its permits
// allowed, and the producer is never blocked.
func TestNonPersistentSlowConsumerDrops(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := strings.Replace(harness.Topic(t), "persistent://", "non-persistent://", 1)
	slow := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "slow", ReceiverQueueSize: 10})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ctx := testCtx(t, 30*time.Second)
	for i := 0; i < 300; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	got := 0
	for {
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		m, err := slow.Receive(rctx)
		cancel()
		if err != nil {
			break
		}
		_ = slow.Ack(m)
		got++
	}
	if got == 0 || got >= 300 {
		t.Fatalf("slow consumer got %d of 300 messages; want some, but not all (the rest dropped)", got)
	}
	t.Logf("slow consumer got %d of 300", got)
}

// TestKeySharedOrderingAcrossLeave: three consumers hold unacknowledged messages of their keys; one
// leaves. Its messages go to the others, and no consumer may receive a message of a key whose older
// message another live consumer still holds unacknowledged (the keys of the consumers that stay
// must not move between them), so per-key order holds.
func TestKeySharedOrderingAcrossLeave(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks", Type: pulsar.KeyShared}
	var consumers []pulsar.Consumer
	for i := 0; i < 3; i++ {
		opts.Name = fmt.Sprintf("c%d", i)
		consumers = append(consumers, newConsumer(t, client, opts))
	}
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	var mu sync.Mutex
	holding := map[int]bool{0: true, 1: true, 2: true}
	held := map[int][]pulsar.Message{}
	holders := map[string]map[int]int{} // key -> consumer -> unacknowledged messages held
	var violations []string
	col := &keyedCollector{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := c.Receive(ctx)
				if err != nil {
					return
				}
				col.add(i, m)
				mu.Lock()
				for j, n := range holders[m.Key()] {
					if j != i && n > 0 {
						violations = append(violations, fmt.Sprintf("c%d got %s/%s while c%d holds %d older unacknowledged", i, m.Key(), m.Payload(), j, n))
					}
				}
				if holding[i] {
					held[i] = append(held[i], m)
					if holders[m.Key()] == nil {
						holders[m.Key()] = map[int]int{}
					}
					holders[m.Key()][i]++
					mu.Unlock()
					continue
				}
				mu.Unlock()
				_ = c.Ack(m)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	sendKeyed(t, prod, keys, 0, 1)
	waitCount(t, col, len(keys), 30*time.Second)
	// c0 leaves with its messages unacknowledged (they are redelivered to the others); c1 and c2
	// keep holding theirs while the next round is produced.
	mu.Lock()
	for k := range holders {
		delete(holders[k], 0)
	}
	mu.Unlock()
	consumers[0].Close()
	sendKeyed(t, prod, keys, 1, 1)
	harness.Eventually(t, 30*time.Second, "the redelivered and new messages of the keys that stay put", func() error {
		// Give the dispatcher a chance to misroute: wait until c0's old keys reached the others.
		if c := col.count(); c < len(keys)+len(keys)/3 {
			return fmt.Errorf("%d received", c)
		}
		return nil
	})
	mu.Lock()
	for _, i := range []int{1, 2} {
		holding[i] = false
		for _, m := range held[i] {
			_ = consumers[i].Ack(m)
			holders[m.Key()][i]--
		}
		held[i] = nil
	}
	mu.Unlock()
	sendKeyed(t, prod, keys, 2, 1)
	harness.Eventually(t, 30*time.Second, "every key at seq 2", func() error {
		col.mu.Lock()
		defer col.mu.Unlock()
		seen := map[string]bool{}
		for _, m := range col.msgs {
			if m.seq == 2 {
				seen[m.key] = true
			}
		}
		if len(seen) < len(keys) {
			return fmt.Errorf("%d keys", len(seen))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
}
