package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// Issue 21, item 4: a planned switchover that moves live clients by itself, on Pulsar's blue-green
// API (docs/geo-replication.md, "Planned switchover"). The scenario of pulsar-client-go's
// blue_green_migration_test.go against two Meridian clusters, a (blue) replicating to b (green):
// one producer and one replicated-subscription consumer, both created on a, each go through 300
// messages; after both passed message 100 a is marked migrated to b; the next 100 flow while the
// clients move; once both are attached to b the last 100 flow there. The application changes
// nothing and never reconnects by itself. Checked: no send error, every message whose send was
// acknowledged is received, at most 100 acknowledged messages arrive again, and no message waits
// more than 5 s (send latency, and send-acknowledged to received). Non-partitioned and partitioned.

const (
	switchoverMessages = 300
	switchoverBefore   = 100
	// switchoverBehindHold: with consumerBehind, the consumer receives this many messages, then
	// waits until both clients are on b (the middle 100 are all sent before the switch).
	switchoverBehindHold  = 2*switchoverBefore - 60
	switchoverStallBudget = 5 * time.Second
)

func TestSwitchoverMovesLiveClients(t *testing.T) {
	t.Run("non-partitioned", func(t *testing.T) { runSwitchover(t, switchoverCase{}) })
	t.Run("partitioned", func(t *testing.T) { runSwitchover(t, switchoverCase{partitions: 3}) })
	// b replicates back to a: after the producer moved, its messages reach a too while the
	// consumer may still be there.
	t.Run("two-way", func(t *testing.T) { runSwitchover(t, switchoverCase{twoWay: true}) })
	// The consumer is about 100 messages behind when the switch starts and slower than the
	// producer: its replicated subscription moves without the backlog on a being drained.
	t.Run("consumer-behind", func(t *testing.T) { runSwitchover(t, switchoverCase{consumerBehind: true}) })
	// Only the namespace moves (Pulsar's namespace switch, with the cluster's target URL): a
	// producer in another namespace of a stays there and keeps publishing.
	t.Run("namespace-switch", func(t *testing.T) { runSwitchover(t, switchoverCase{byNamespace: true}) })
}

// switchoverCase is one variant of the scenario.
type switchoverCase struct {
	partitions     int  // > 0: a partitioned topic
	twoWay         bool // b's namespace replicates to a too
	consumerBehind bool // the middle 100 are sent at once and the consumer takes 30 ms per message
	byNamespace    bool // the namespace is marked migrated, not the cluster
}

// postMigrate calls a's `POST /admin/v2/clusters/{cluster}/migrate`.
func postMigrate(t *testing.T, c *harness.Cluster, migrated bool, body string) {
	t.Helper()
	url := fmt.Sprintf("%s/admin/v2/clusters/%s/migrate?migrated=%v", c.WebURL(), c.Name, migrated)
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: migrate?migrated=%v: HTTP %d %s", c.Name, migrated, resp.StatusCode, b)
	}
}

// switchoverLog records what the producer and the consumer saw.
type switchoverLog struct {
	mu         sync.Mutex
	sentAt     map[int]time.Time // acknowledged sends
	sendStart  map[int]time.Time
	lastRecv   time.Time
	sendErrors []error
	maxSend    time.Duration
	received   map[int]int
	acked      map[int]bool
	redelivery int // acknowledged messages received again
	maxWait    time.Duration
}

func runSwitchover(t *testing.T, sc switchoverCase) {
	partitions := sc.partitions
	cs := harness.StartIndependentClusters(t, "a", "b")
	a, b := cs[0], cs[1]
	for _, c := range cs {
		c.SetTenant(t, geoTenant, "a", "b")
	}
	a.CreateNamespace(t, geoNamespace, "a", "b")
	if sc.twoWay {
		b.CreateNamespace(t, geoNamespace, "a", "b")
	} else {
		b.CreateNamespace(t, geoNamespace, "b")
	}
	topic := harness.TopicIn(t, geoNamespace)
	dataTopics := []string{topic}
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	if partitions > 0 {
		createPartitioned(t, a, *tn, partitions)
		dataTopics = nil
		for i := 0; i < partitions; i++ {
			dataTopics = append(dataTopics, fmt.Sprintf("%s-partition-%d", topic, i))
		}
	} else if err := a.Admin.Topics().Create(*tn, 0); err != nil {
		t.Fatalf("create %s on a: %v", topic, err)
	}
	green := fmt.Sprintf(`{"serviceUrl":%q,"brokerServiceUrl":%q}`, b.WebURL(), b.ServiceURL())
	postMigrate(t, a, false, green) // the target is known; nothing moves yet

	client := a.Client(t)
	// The producer runs in a process of its own (cmd/e2e-producer, built without -race):
	// pulsar-client-go v0.19.0 races with itself when a producer with a send in flight reconnects,
	// which every redirect is. It sends one message per request, like a synchronous Send.
	prod := startProducerProcess(t, checker.New(), a.ServiceURL(), topic, "switch", 64, 60*time.Second)
	cons := newConsumer(t, client, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "app", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		ReplicateSubscriptionState: true, Type: pulsar.Exclusive,
	})

	ctx := testCtx(t, 180*time.Second)
	lg := &switchoverLog{sentAt: map[int]time.Time{}, sendStart: map[int]time.Time{}, received: map[int]int{}, acked: map[int]bool{}}
	var phase sync.WaitGroup // both passed message 100
	phase.Add(2)
	moved := make(chan struct{}) // both clients are attached to b
	var done sync.WaitGroup
	done.Add(2)

	go func() { // producer
		defer done.Done()
		for i := 0; i < switchoverMessages; i++ {
			if i == switchoverBefore {
				phase.Done()
			}
			if i == 2*switchoverBefore {
				<-moved
			}
			if i >= switchoverBefore && i < 2*switchoverBefore && !sc.consumerBehind {
				time.Sleep(20 * time.Millisecond) // spread the middle 100 over the switch
			}
			start := time.Now()
			lg.mu.Lock()
			lg.sendStart[i] = start
			lg.mu.Unlock()
			_, err := prod.Send(1) // message i: the process numbers its messages from 0
			took := time.Since(start)
			lg.mu.Lock()
			if err != nil {
				lg.sendErrors = append(lg.sendErrors, fmt.Errorf("message %d: %w", i, err))
			} else {
				lg.sentAt[i] = time.Now()
			}
			lg.maxSend = max(lg.maxSend, took)
			lg.mu.Unlock()
		}
	}()
	go func() { // consumer: receive and acknowledge until every message arrived
		defer done.Done()
		passed, held := false, false
		for {
			lg.mu.Lock()
			distinct := len(lg.received)
			lg.mu.Unlock()
			if !passed && distinct >= switchoverBefore {
				passed = true
				phase.Done()
			}
			if distinct >= switchoverMessages {
				return
			}
			if sc.consumerBehind && !held && distinct >= switchoverBehindHold {
				// Behind by design: the consumer stops here until both clients are on b, so it
				// moves with a backlog however long the switch takes.
				held = true
				select {
				case <-moved:
				case <-ctx.Done():
					return
				}
				lg.mu.Lock()
				lg.lastRecv = time.Now() // the hold is the application's pace, not a stall
				lg.mu.Unlock()
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			m, err := cons.Receive(rctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			now := time.Now()
			key, corrupt, err := checker.Parse(m.Payload())
			if err != nil || corrupt != "" {
				t.Errorf("payload of %v: %v %s", m.ID(), err, corrupt)
				return
			}
			seq := int(key.Seq)
			lg.mu.Lock()
			if lg.acked[seq] {
				lg.redelivery++
			}
			lg.received[seq]++
			// How long the consumer waited for a message that was already being sent: a stall of
			// the switchover, not the application's own pace.
			if at, ok := lg.sendStart[seq]; ok {
				lg.maxWait = max(lg.maxWait, now.Sub(later(at, lg.lastRecv)))
			}
			lg.lastRecv = now
			lg.mu.Unlock()
			if sc.consumerBehind {
				time.Sleep(30 * time.Millisecond)
			}
			if err := cons.Ack(m); err == nil {
				lg.mu.Lock()
				lg.acked[seq] = true
				lg.mu.Unlock()
			}
		}
	}()

	phase.Wait()
	if sc.consumerBehind {
		// The middle 100 are on a before the switch, and the consumer is behind by about as many.
		harness.Eventually(t, 30*time.Second, "the middle 100 sent", func() error {
			lg.mu.Lock()
			defer lg.mu.Unlock()
			if len(lg.sentAt) < 2*switchoverBefore {
				return fmt.Errorf("%d sent", len(lg.sentAt))
			}
			return nil
		})
	}
	lg.mu.Lock()
	behind := len(lg.sentAt) - len(lg.received) // messages on a the consumer had not received yet
	lg.mu.Unlock()
	var staying pulsar.Producer // byNamespace: a producer in a namespace that does not move
	if sc.byNamespace {
		a.CreateNamespace(t, geoTenant+"/staying", "a")
		staying = newProducer(t, client, pulsar.ProducerOptions{Topic: harness.TopicIn(t, geoTenant+"/staying"), DisableBatching: true})
		req, err := http.NewRequest(http.MethodPost, a.WebURL()+"/admin/v2/namespaces/"+geoNamespace+"/migration", strings.NewReader("true"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("a: namespace migration: HTTP %d", resp.StatusCode)
		}
	} else {
		postMigrate(t, a, true, green)
	}
	// As pulsar-client-go's test waits for green's lookup to show the topic: both clients are
	// attached to b (and none to a) before the last 100 messages.
	harness.Eventually(t, 60*time.Second, "producer and consumer attached to b, none to a", func() error {
		for _, dt := range dataTopics {
			sb, err := b.MeridianStats(ctx, dt)
			if err != nil {
				return err
			}
			sa, err := a.MeridianStats(ctx, dt)
			if err != nil {
				return err
			}
			onB := len(sb.Subscriptions["app"].Consumers)
			var pubA, pubB int
			for _, p := range sa.Publishers {
				if !strings.HasPrefix(p.ProducerName, "pulsar.repl.") {
					pubA++
				}
			}
			for _, p := range sb.Publishers {
				if !strings.HasPrefix(p.ProducerName, "pulsar.repl.") {
					pubB++
				}
			}
			onA := len(sa.Subscriptions["app"].Consumers)
			if pubB != 1 || onB != 1 || pubA != 0 || onA != 0 {
				return fmt.Errorf("%s: producers a=%d b=%d, consumers a=%d b=%d", dt, pubA, pubB, onA, onB)
			}
		}
		return nil
	})
	if staying != nil {
		// The other namespace stays on a: its producer still publishes there.
		for i := 0; i < 10; i++ {
			if _, err := staying.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("stay")}); err != nil {
				t.Fatalf("producer in a namespace that does not move: %v", err)
			}
		}
		st, err := a.MeridianStats(ctx, staying.Topic())
		if err != nil || len(st.Publishers) != 1 || st.MsgInCounter < 10 {
			t.Fatalf("the staying namespace's topic on a: publishers %d, messages in %d, %v", len(st.Publishers), st.MsgInCounter, err)
		}
	}
	lg.mu.Lock()
	receivedWhenMoved := len(lg.received)
	lg.mu.Unlock()
	close(moved)
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		t.Fatalf("the clients did not finish 300 messages: %d received", len(lg.received))
	}

	lg.mu.Lock()
	defer lg.mu.Unlock()
	var lost []int
	for seq := range lg.sentAt {
		if lg.received[seq] == 0 {
			lost = append(lost, seq)
		}
	}
	t.Logf("switchover a->b (%+v; consumer behind by %d messages when the switch began, %d received when both were on b): %d sent and acknowledged, %d send errors, %d lost, %d acknowledged messages redelivered (budget 100), "+
		"longest send %v, longest wait for a message being sent %v (budget %v)",
		sc, behind, receivedWhenMoved, len(lg.sentAt), len(lg.sendErrors), len(lost), lg.redelivery, lg.maxSend.Round(time.Millisecond), lg.maxWait.Round(time.Millisecond), switchoverStallBudget)
	if len(lg.sendErrors) > 0 {
		t.Errorf("%d send errors, first: %v", len(lg.sendErrors), lg.sendErrors[0])
	}
	if len(lg.sentAt) != switchoverMessages {
		t.Errorf("%d of %d sends acknowledged", len(lg.sentAt), switchoverMessages)
	}
	if len(lost) > 0 {
		t.Errorf("%d acknowledged messages never received: %v", len(lost), lost[:min(10, len(lost))])
	}
	if lg.redelivery > 100 {
		t.Errorf("%d acknowledged messages received again, budget 100", lg.redelivery)
	}
	if lg.maxSend > switchoverStallBudget || lg.maxWait > switchoverStallBudget {
		t.Errorf("stall: longest send %v, longest wait for a message %v, budget %v", lg.maxSend, lg.maxWait, switchoverStallBudget)
	}
	if sc.consumerBehind && behind < 50 {
		t.Errorf("the consumer was only %d messages behind when the switch began; the case needs a backlog", behind)
	}
	if sc.consumerBehind && receivedWhenMoved >= 2*switchoverBefore {
		t.Errorf("the consumer had received all %d messages sent before it moved: its backlog drained, the case needs it not to", receivedWhenMoved)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
