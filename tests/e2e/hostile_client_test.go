package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// Bounds the hostile test holds the broker to.
const (
	hostileRSSLimit    = 512 << 20       // peak resident memory of the broker process
	liveLatencyLimit   = 5 * time.Second // one well-behaved Send, while the hostile clients run
	liveP99Limit       = time.Second
	liveP50Limit       = 100 * time.Millisecond
	storedMessages     = 150 // per stored topic
	hostileWorkers     = 4
	lateSubscription   = "keep-late"
	defaultHostileTime = 4 * time.Second
)

// TestHostileClients runs raw-frame clients that send malformed, oversized, contradictory and
// out-of-order commands (the repertoire in hostile_attacks_test.go) against a live `meridian
// standalone` that holds known data: two stored topics (one batched) with durable subscriptions
// at known positions (none acked, a cumulative ack, individual acks with batch-index acks),
// written through pulsar-client-go and made durable by a graceful restart. Meanwhile a
// well-behaved pulsar-client-go producer and consumer work on another topic: none of their sends
// may fail, their latency stays bounded (median 100 ms, p99 1 s, max 5 s: a few milliseconds is
// usual), and the consumer gets everything once, in order. The broker's peak RSS (VmHWM) must
// stay under 512 MiB. Then the broker is killed with SIGKILL and restarted: it must start, every
// durable subscription of every topic must still exist (the hostile clients' own included), the
// kept subscriptions must be where they were (mark-delete position and individually deleted
// ranges as before, and exactly the expected messages redelivered), and every stored message and
// every acknowledged live message must be readable, intact.
//
// Each worker first takes its share of every attack (so even a short run tries them all), then
// draws attacks at random.
//
// The hostile inputs come from a seed printed in the log (MERIDIAN_HOSTILE_SEED=n replays it);
// MERIDIAN_HOSTILE_DURATION (a Go duration, default 4s) sets how long the hostile clients run;
// MERIDIAN_HOSTILE_ONLY=text runs only the attacks whose name contains text, MERIDIAN_HOSTILE_SKIP=
// text[,text...] leaves out those whose name contains one of them. The memory limit is for the
// broker built without the race detector; with MERIDIAN_RACE=1 it is eight times higher.
func TestHostileClients(t *testing.T) {
	seed, duration := hostileSettings(t)
	t.Logf("hostile seed %d, duration %v (MERIDIAN_HOSTILE_SEED=%d MERIDIAN_HOSTILE_DURATION=%v reproduces these inputs)", seed, duration, seed, duration)

	p := harness.StartStandalone(t, harness.Options{})
	admin := harness.NewAdmin(t, p)
	data := storeKnownData(t, p)
	// A graceful restart makes the subscriptions' positions durable: they are the baseline.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	p.Start()
	baseline := cursorPositions(t, admin, data)

	live := startLiveTraffic(t, p)
	memory := sampleMemory(t, p)

	env := &hostileEnv{addr: strings.TrimPrefix(p.ServiceURL(), "pulsar://")}
	for _, st := range data.topics {
		for _, id := range st.ids {
			env.stored = append(env.stored, storedPosition{topic: st.name, ledger: uint64(id.LedgerID()), entry: uint64(id.EntryID())})
		}
	}
	for i := range 4 {
		env.hostileTopics = append(env.hostileTopics, fmt.Sprintf("persistent://public/default/hostile-%d-%d", seed%1_000_000, i))
	}
	hostileStart := time.Now()
	counts := runHostile(env, seed, duration, p)
	t.Logf("hostile attacks run (%v): %s", time.Since(hostileStart).Round(time.Millisecond), counts)

	// A subscription created after the attacks: its creation is durable when confirmed, and it
	// lies behind whatever cursor state the attacks left, so it is lost if recovery drops that.
	for _, st := range data.topics {
		newConsumer(t, harness.NewClient(t, p, nil), pulsar.ConsumerOptions{Topic: st.name, SubscriptionName: lateSubscription}).Close()
	}

	liveReport := live.stop(t)
	t.Logf("well-behaved client during the attacks: %s", liveReport)
	rssMax, peak := memory.stop()
	t.Logf("broker memory: VmRSS sampled max %d MiB, VmHWM %d MiB (limit %d MiB)", rssMax>>20, peak>>20, hostileRSSLimit>>20)
	if err := p.CrashErr(); err != nil {
		t.Fatalf("the broker died during the attacks: %v", err)
	}
	limit := int64(hostileRSSLimit)
	if os.Getenv("MERIDIAN_RACE") == "1" {
		limit *= 8 // the race detector's own memory
	}
	if peak >= limit {
		t.Errorf("broker peak RSS %d MiB, limit %d MiB", peak>>20, limit>>20)
	}
	if err := readyNow(p.WebURL()); err != nil {
		t.Errorf("broker not ready after the attacks: %v", err)
	}

	// Every durable subscription of every topic (the hostile clients' ones included: a durable
	// subscription is persisted before it is confirmed) must survive the kill.
	subsBefore := durableSubscriptions(t, admin)

	restartStart := time.Now()
	if err := p.RestartE(); err != nil {
		t.Fatalf("restart after kill -9 following the attacks: %v", err)
	}
	t.Logf("killed with SIGKILL and ready again in %v", time.Since(restartStart).Round(time.Millisecond))
	subsAfter := durableSubscriptions(t, admin)
	for _, st := range data.topics {
		if !slices.Contains(subsBefore[st.name], lateSubscription) {
			t.Errorf("subscription %s of %s, created after the attacks, was not listed before the kill", lateSubscription, st.name)
		}
	}
	for topic, names := range subsBefore {
		for _, name := range names {
			if !slices.Contains(subsAfter[topic], name) {
				t.Errorf("durable subscription %.80q of %s is gone after the restart", name, topic)
			}
		}
	}
	after := cursorPositions(t, admin, data)
	for key, want := range baseline {
		if got, ok := after[key]; !ok {
			t.Errorf("subscription %s is gone after the restart", key)
		} else if got != want {
			t.Errorf("subscription %s moved: %+v before the attacks, %+v after the restart", key, want, got)
		}
	}
	verifyStoredReadable(t, p, data, live)
	verifyKeptSubscriptions(t, p, data) // last: it adds a barrier message to each topic
}

func hostileSettings(t *testing.T) (seed uint64, duration time.Duration) {
	t.Helper()
	seed = uint64(time.Now().UnixNano())
	if s := os.Getenv("MERIDIAN_HOSTILE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("MERIDIAN_HOSTILE_SEED=%q: %v", s, err)
		}
		seed = v
	}
	duration = defaultHostileTime
	if s := os.Getenv("MERIDIAN_HOSTILE_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("MERIDIAN_HOSTILE_DURATION=%q: %v", s, err)
		}
		duration = d
	}
	return seed, duration
}

// ---- known data ----

type storedTopic struct {
	name     string
	producer string
	ids      []pulsar.MessageID // by sequence number
}

// keptSub is a subscription the test keeps and no hostile client touches: after the restart it
// must redeliver exactly the messages for which unacked is true.
type keptSub struct {
	topic   *storedTopic
	name    string
	unacked func(seq int64) bool
}

type knownData struct {
	topics []*storedTopic
	subs   []keptSub
}

func storeKnownData(t *testing.T, p *harness.Process) *knownData {
	t.Helper()
	client := harness.NewClient(t, p, nil)
	d := &knownData{}
	for i, batched := range []bool{false, true} {
		st := &storedTopic{name: harness.Topic(t), producer: fmt.Sprintf("stored%d", i), ids: make([]pulsar.MessageID, storedMessages)}
		d.topics = append(d.topics, st)
		subs := []keptSub{
			{st, "keep-none", func(int64) bool { return true }},
			{st, "keep-cumulative", func(seq int64) bool { return seq >= 60 }},
			{st, "keep-individual", func(seq int64) bool { return seq%3 != 0 }},
		}
		d.subs = append(d.subs, subs...)
		consumers := make([]pulsar.Consumer, len(subs))
		for j, s := range subs {
			consumers[j] = newConsumer(t, client, pulsar.ConsumerOptions{Topic: st.name, SubscriptionName: s.name,
				SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, AckWithResponse: true, EnableBatchIndexAcknowledgment: true})
		}
		opts := pulsar.ProducerOptions{Topic: st.name, Name: st.producer, DisableBatching: !batched}
		if batched {
			opts.BatchingMaxMessages, opts.BatchingMaxPublishDelay = 10, time.Minute
		}
		prod := newProducer(t, client, opts)
		sendRecordingIDs(t, prod, st)
		prod.Close()

		chk := checker.New()
		// keep-cumulative: a cumulative ack of message 59 (the last of a batch when batched).
		msgs := receiveN(t, chk, "setup", consumers[1], 60, 30*time.Second, true)
		if err := consumers[1].AckCumulative(msgs[59]); err != nil {
			t.Fatalf("cumulative ack: %v", err)
		}
		// keep-individual: every third message, inside batches too.
		for _, m := range receiveN(t, chk, "setup", consumers[2], storedMessages, 30*time.Second, true) {
			if keyOf(t, m).Seq%3 == 0 {
				if err := consumers[2].Ack(m); err != nil {
					t.Fatalf("ack %v: %v", m.ID(), err)
				}
			}
		}
		for _, c := range consumers {
			c.Close()
		}
	}
	return d
}

// sendRecordingIDs sends storedMessages checker messages asynchronously (so a batching producer
// fills its batches) and keeps each one's message id.
func sendRecordingIDs(t *testing.T, prod pulsar.Producer, st *storedTopic) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	var mu sync.Mutex
	var failed error
	var wg sync.WaitGroup
	for seq := range int64(storedMessages) {
		wg.Add(1)
		prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: checker.Payload(st.producer, seq, 100)},
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil && failed == nil {
					failed = fmt.Errorf("send %s#%d: %w", st.producer, seq, err)
				}
				st.ids[seq] = id
			})
	}
	if err := prod.FlushWithCtx(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
}

// cursorPosition is what the admin API shows of a subscription's position.
type cursorPosition struct{ MarkDelete, IndividuallyDeleted string }

// cursorPositions returns the positions of the kept subscriptions, keyed "topic subscription".
func cursorPositions(t *testing.T, admin pulsaradmin.Client, d *knownData) map[string]cursorPosition {
	t.Helper()
	out := map[string]cursorPosition{}
	for _, st := range d.topics {
		tn, err := utils.GetTopicName(st.name)
		if err != nil {
			t.Fatal(err)
		}
		stats, err := admin.Topics().GetInternalStats(*tn)
		if err != nil {
			t.Fatalf("internal stats of %s: %v", st.name, err)
		}
		for _, s := range d.subs {
			if s.topic != st {
				continue
			}
			if c, ok := stats.Cursors[s.name]; ok {
				out[st.name+" "+s.name] = cursorPosition{c.MarkDeletePosition, c.IndividuallyDeletedMessages}
			}
		}
	}
	if len(out) != len(d.subs) {
		t.Fatalf("internal stats show %d of the %d kept subscriptions: %v", len(out), len(d.subs), out)
	}
	return out
}

// durableSubscriptions lists the durable subscriptions of every persistent topic in
// public/default, by topic (non-durable ones end with their consumer and are not expected back).
func durableSubscriptions(t *testing.T, admin pulsaradmin.Client) map[string][]string {
	t.Helper()
	ns, err := utils.GetNamespaceName("public/default")
	if err != nil {
		t.Fatal(err)
	}
	_, topics, err := admin.Topics().List(*ns)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	out := map[string][]string{}
	for _, topic := range topics {
		if !strings.HasPrefix(topic, "persistent://") {
			continue
		}
		tn, err := utils.GetTopicName(topic)
		if err != nil {
			continue // a name the admin client cannot parse is not one the test can check
		}
		stats, err := admin.Topics().GetStats(*tn)
		if err != nil {
			t.Errorf("stats of %.200s: %v", topic, err)
			continue
		}
		for name, sub := range stats.Subscriptions {
			if sub.IsDurable {
				out[topic] = append(out[topic], name)
			}
		}
	}
	return out
}

// verifyKeptSubscriptions attaches to every kept subscription and checks it delivers exactly its
// unacknowledged messages, intact, in order (nothing is acknowledged here).
func verifyKeptSubscriptions(t *testing.T, p *harness.Process, d *knownData) {
	t.Helper()
	client := harness.NewClient(t, p, nil)
	for _, s := range d.subs {
		var want []int64
		for seq := range int64(storedMessages) {
			if s.unacked(seq) {
				want = append(want, seq)
			}
		}
		cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: s.topic.name, SubscriptionName: s.name, EnableBatchIndexAcknowledgment: true})
		chk := checker.New()
		msgs := receiveN(t, chk, s.name, cons, len(want), 30*time.Second, true)
		expectNothingBefore(t, client, cons, s.topic.name)
		got := make([]int64, len(msgs))
		for i, m := range msgs {
			k := keyOf(t, m)
			if k.Producer != s.topic.producer {
				t.Fatalf("%s %s delivered a message of %s", s.topic.name, s.name, k)
			}
			got[i] = k.Seq
		}
		if !slices.Equal(got, want) {
			t.Errorf("subscription %s of %s delivered %v after the restart, want %v", s.name, s.topic.name, got, want)
		}
		cons.Close()
	}
}

// verifyStoredReadable reads every stored topic and the live topic from the start: every stored
// message and every message the live producer saw acknowledged is there, once, in order, intact.
func verifyStoredReadable(t *testing.T, p *harness.Process, d *knownData, live *liveTraffic) {
	t.Helper()
	client := harness.NewClient(t, p, nil)
	chk := checker.New()
	for _, st := range d.topics {
		for seq := range int64(storedMessages) {
			chk.Sent(st.producer, seq, 100)
			chk.Acked(st.producer, seq, st.ids[seq].String())
		}
		r := newReader(t, client, pulsar.ReaderOptions{Topic: st.name, StartMessageID: pulsar.EarliestMessageID()})
		readN(t, chk, st.name, r, storedMessages, 30*time.Second)
		verify(t, chk, st.name, checker.Expect{Producers: func(name string) bool { return name == st.producer }})
		r.Close()
	}
	acked, _, _ := live.chk.Counts()
	r := newReader(t, client, pulsar.ReaderOptions{Topic: live.topic, StartMessageID: pulsar.EarliestMessageID()})
	readN(t, live.chk, "live-after-restart", r, acked, 30*time.Second)
	verify(t, live.chk, "live-after-restart", checker.Expect{})
}

// ---- the well-behaved client ----

type liveTraffic struct {
	topic        string
	chk          *checker.Checker
	stopProducer context.CancelFunc
	stopConsumer context.CancelFunc
	producerDone chan struct{}
	consumerDone chan struct{}

	mu        sync.Mutex
	latencies []time.Duration
	failures  []error
	received  atomic.Int64
	consumer  pulsar.Consumer
}

// startLiveTraffic runs a producer (one synchronous Send every 5 ms) and a consumer (receive and
// ack) on a topic of their own until stop.
func startLiveTraffic(t *testing.T, p *harness.Process) *liveTraffic {
	t.Helper()
	client := harness.NewClient(t, p, nil)
	l := &liveTraffic{topic: harness.Topic(t), chk: checker.New()}
	l.consumer = newConsumer(t, client, pulsar.ConsumerOptions{Topic: l.topic, SubscriptionName: "live"})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: l.topic, Name: "live", DisableBatching: true})
	prodCtx, stopProducer := context.WithCancel(context.Background())
	consCtx, stopConsumer := context.WithCancel(context.Background())
	l.stopProducer, l.stopConsumer = stopProducer, stopConsumer
	l.producerDone, l.consumerDone = make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { // stop already did this unless the test failed before it
		stopProducer()
		stopConsumer()
		<-l.producerDone
		<-l.consumerDone
	})
	go func() { // producer; ends with prodCtx
		defer close(l.producerDone)
		tick := time.NewTicker(5 * time.Millisecond) // the send rate, not a wait for a condition
		defer tick.Stop()
		for seq := int64(0); ; seq++ {
			select {
			case <-prodCtx.Done():
				return
			case <-tick.C:
			}
			l.chk.Sent("live", seq, 200)
			sendCtx, sendCancel := context.WithTimeout(context.Background(), 2*liveLatencyLimit)
			start := time.Now()
			id, err := prod.Send(sendCtx, &pulsar.ProducerMessage{Payload: checker.Payload("live", seq, 200)})
			took := time.Since(start)
			sendCancel()
			l.mu.Lock()
			l.latencies = append(l.latencies, took)
			if err != nil {
				l.chk.Failed("live", seq, err)
				l.failures = append(l.failures, fmt.Errorf("send live#%d: %w", seq, err))
			} else {
				l.chk.Acked("live", seq, id.String())
			}
			l.mu.Unlock()
		}
	}()
	go func() { // consumer; ends with consCtx
		defer close(l.consumerDone)
		for {
			m, err := l.consumer.Receive(consCtx)
			if err != nil {
				if consCtx.Err() == nil {
					l.mu.Lock()
					l.failures = append(l.failures, fmt.Errorf("receive: %w", err))
					l.mu.Unlock()
				}
				return
			}
			l.chk.Received("live", m.Payload(), m.ID().String())
			if err := l.consumer.Ack(m); err != nil {
				l.mu.Lock()
				l.failures = append(l.failures, fmt.Errorf("ack: %w", err))
				l.mu.Unlock()
			}
			l.received.Add(1)
		}
	}()
	return l
}

// stop ends the producer, waits until the consumer has everything acknowledged, ends it, checks
// failures, latency and the checker's promises, and returns a summary.
func (l *liveTraffic) stop(t *testing.T) string {
	t.Helper()
	l.stopProducer()
	<-l.producerDone
	acked, _, _ := l.chk.Counts()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := harness.WaitFor(ctx, func(context.Context) error {
		if n := l.received.Load(); n < int64(acked) {
			return fmt.Errorf("consumer received %d of %d acknowledged messages", n, acked)
		}
		return nil
	})
	cancel()
	l.stopConsumer()
	<-l.consumerDone
	if err != nil {
		t.Error(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, f := range l.failures {
		if i == 5 {
			t.Errorf("... and %d more failures", len(l.failures)-5)
			break
		}
		t.Errorf("well-behaved client: %v", f)
	}
	lat := slices.Clone(l.latencies)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		t.Error("the well-behaved producer sent nothing")
		return "nothing sent"
	}
	p50, p99, maxLat := lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	if maxLat > liveLatencyLimit || p99 > liveP99Limit || p50 > liveP50Limit {
		t.Errorf("well-behaved Send latency p50 %v, p99 %v, max %v: over the limits %v, %v, %v", p50, p99, maxLat, liveP50Limit, liveP99Limit, liveLatencyLimit)
	}
	verify(t, l.chk, "live", checker.Expect{})
	return fmt.Sprintf("%d sends, latency p50 %v p99 %v max %v", len(lat), p50.Round(time.Microsecond), p99.Round(time.Microsecond), maxLat.Round(time.Microsecond))
}

// ---- hostile workers ----

// runHostile runs hostileWorkers workers until duration has passed (or the broker died), each
// drawing attacks from its own generator seeded by (seed, worker). It returns how often each
// attack ran.
func runHostile(env *hostileEnv, seed uint64, duration time.Duration, p *harness.Process) string {
	attacks := hostileAttacks
	if only := os.Getenv("MERIDIAN_HOSTILE_ONLY"); only != "" {
		attacks = slices.DeleteFunc(slices.Clone(attacks), func(a attack) bool { return !strings.Contains(a.name, only) })
	}
	if skip := os.Getenv("MERIDIAN_HOSTILE_SKIP"); skip != "" {
		attacks = slices.DeleteFunc(slices.Clone(attacks), func(a attack) bool {
			return slices.ContainsFunc(strings.Split(skip, ","), func(s string) bool { return s != "" && strings.Contains(a.name, s) })
		})
	}
	deadline := time.Now().Add(duration)
	counts := make([]atomic.Int64, len(attacks))
	var wg sync.WaitGroup
	for w := range hostileWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			// First a tour: the workers share every attack out between them, so even a short
			// run tries each one; then attacks drawn at random.
			for i := w; i < len(attacks) && time.Now().Before(deadline) && p.CrashErr() == nil; i += hostileWorkers {
				counts[i].Add(1)
				attacks[i].run(env, r)
			}
			for time.Now().Before(deadline) && p.CrashErr() == nil {
				i := r.IntN(len(attacks))
				counts[i].Add(1)
				attacks[i].run(env, r)
			}
		}()
	}
	wg.Wait()
	var parts []string
	for i, a := range attacks {
		parts = append(parts, fmt.Sprintf("%s: %d", a.name, counts[i].Load()))
	}
	return strings.Join(parts, "; ")
}

// ---- memory ----

type memorySampler struct {
	stopCh   chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	p        *harness.Process
	max      int64
	peak     int64
}

// sampleMemory reads the broker's VmRSS every 50 ms until stop (at the latest in t.Cleanup), which
// also reads VmHWM.
func sampleMemory(t *testing.T, p *harness.Process) *memorySampler {
	m := &memorySampler{stopCh: make(chan struct{}), done: make(chan struct{}), p: p}
	t.Cleanup(func() { m.stop() })
	go func() { // ends with stop
		defer close(m.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss, _, err := p.Memory(); err == nil && rss > m.max {
				m.max = rss
			}
			select {
			case <-m.stopCh:
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

func (m *memorySampler) stop() (maxRSS, peak int64) {
	m.stopOnce.Do(func() {
		close(m.stopCh)
		<-m.done
		if _, hwm, err := m.p.Memory(); err == nil {
			m.peak = hwm
		}
	})
	return m.max, m.peak
}

func readyNow(webURL string) error {
	resp, err := http.Get(webURL + "/admin/v2/brokers/ready")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}
