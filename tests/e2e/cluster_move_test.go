package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// liveLoad is a producer and a consumer per topic, running while bundles move: every send must
// succeed, and every acknowledged message must arrive.
type liveLoad struct {
	t           *testing.T
	cancel      context.CancelFunc // ends the consumers
	stopSending context.CancelFunc // ends the producers
	wg          sync.WaitGroup
	senders     sync.WaitGroup

	mu    sync.Mutex
	acked map[string]bool
	got   map[string]int
	err   error
}

func startLiveLoad(t *testing.T, client pulsar.Client, topics []string) *liveLoad {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	sendCtx, stopSending := context.WithCancel(ctx)
	l := &liveLoad{t: t, cancel: cancel, stopSending: stopSending, acked: map[string]bool{}, got: map[string]int{}}
	t.Cleanup(cancel)
	for _, topic := range topics {
		cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "live"})
		if err != nil {
			t.Fatal(err)
		}
		prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { prod.Close(); cons.Close() })
		l.wg.Add(1)
		l.senders.Add(1)
		go func() {
			defer l.senders.Done()
			for i := 0; sendCtx.Err() == nil; i++ {
				payload := fmt.Sprintf("%s/%d", topic, i)
				if _, err := prod.Send(sendCtx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
					if sendCtx.Err() == nil {
						l.fail(fmt.Errorf("send %s: %w", payload, err))
					}
					return
				}
				l.mu.Lock()
				l.acked[payload] = true
				l.mu.Unlock()
				time.Sleep(5 * time.Millisecond) // paces the load: about 200 messages a second per topic
			}
		}()
		go func() {
			defer l.wg.Done()
			for {
				m, err := cons.Receive(ctx)
				if err != nil {
					return
				}
				l.mu.Lock()
				l.got[string(m.Payload())]++
				l.mu.Unlock()
				_ = cons.Ack(m)
			}
		}()
	}
	return l
}

func (l *liveLoad) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// sent is how many sends have been acknowledged so far.
func (l *liveLoad) sent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// finish stops the producers and waits until every acknowledged message has arrived.
func (l *liveLoad) finish() {
	t := l.t
	t.Helper()
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	// Stop sending; the consumers keep receiving until everything acknowledged has arrived.
	l.stopSending()
	l.senders.Wait()
	poll.UntilNil(t, 2*time.Minute, "every acknowledged message arrives", func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil
		}
		for p := range l.acked {
			if l.got[p] == 0 {
				return fmt.Errorf("%d of %d acknowledged messages arrived (e.g. %s missing)", len(l.got), len(l.acked), p)
			}
		}
		return nil
	})
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		t.Fatal(l.err)
	}
	dup := 0
	for _, n := range l.got {
		dup += n - 1
	}
	t.Logf("%d messages acknowledged, all received; %d redelivered", len(l.acked), dup)
}

// ownerOfTopic is the broker URL that serves a persistent topic (full name), asked of b.
func ownerOfTopic(t *testing.T, b harness.Broker, topic string) string {
	t.Helper()
	owner, err := lookupOwner(b, topic)
	if err != nil {
		t.Fatal(err)
	}
	return owner
}

// lookupOwner is ownerOfTopic's HTTP lookup, with its failure as an error (a bundle that moves
// holds lookups, which may end in 503).
func lookupOwner(b harness.Broker, topic string) (string, error) {
	resp, err := http.Get(b.WebURL() + "/lookup/v2/topic/persistent/" + topic[len("persistent://"):])
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("lookup %s: HTTP %d", topic, resp.StatusCode)
	}
	var d struct {
		BrokerURL string `json:"brokerUrl"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return "", fmt.Errorf("lookup %s: %w", topic, err)
	}
	return d.BrokerURL, nil
}

// TestClusterShedsLoadToANewBroker: one broker serves every bundle of a namespace with live
// producers and consumers; a second broker joins, and the first one's load shedder hands bundles
// over to it, with their messages and subscriptions, while the clients go on: no send fails and
// every acknowledged message arrives.
func TestClusterShedsLoadToANewBroker(t *testing.T) {
	cl := harness.StartBrokerCluster(t, 1, harness.Options{ExtraArgs: []string{"--load-shedding=true", "--load-shedding-interval=1"}})
	b1 := cl.Brokers[0]
	run := time.Now().UnixNano() % 1_000_000
	var topics []string
	for i := range 8 {
		topics = append(topics, fmt.Sprintf("persistent://public/default/shed-%d-%d", run, i))
	}
	client := harness.NewClient(t, b1, nil)
	load := startLiveLoad(t, client, topics)
	poll.Until(t, time.Minute, "messages flow", func() bool { return load.sent() >= 400 })

	b2 := cl.Add(t)
	poll.UntilNil(t, 2*time.Minute, "the new broker serves some topics", func() error {
		moved := 0
		for _, topic := range topics {
			if ownerOfTopic(t, b1, topic) == b2.ServiceURL() {
				moved++
			}
		}
		if moved == 0 {
			return fmt.Errorf("no topic moved to %s yet", b2.ServiceURL())
		}
		return nil
	})
	before := load.sent()
	poll.Until(t, time.Minute, "messages flow after the move", func() bool { return load.sent() >= before+400 })
	load.finish()
}

// TestClusterStopHandsBundlesOver: a broker that gets SIGTERM hands its bundles, with their
// messages and subscriptions, to the other broker before it exits; its clients go on there.
func TestClusterStopHandsBundlesOver(t *testing.T) {
	cl := harness.StartBrokerCluster(t, 2, harness.Options{ExtraArgs: []string{"--handover-timeout=60"}})
	b1, b2 := cl.Brokers[0], cl.Brokers[1]
	run := time.Now().UnixNano() % 1_000_000
	topics := []string{
		topicOwnedBy(t, b1, b2, fmt.Sprintf("stop-a-%d", run)),
		topicOwnedBy(t, b1, b2, fmt.Sprintf("stop-b-%d", run)),
	}
	client := harness.NewClient(t, b1, nil)
	load := startLiveLoad(t, client, topics)
	poll.Until(t, time.Minute, "messages flow", func() bool { return load.sent() >= 200 })
	if err := b2.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		if got := ownerOfTopic(t, b1, topic); got != b1.ServiceURL() {
			t.Fatalf("after b2 stopped, %s is served by %s", topic, got)
		}
	}
	before := load.sent()
	poll.Until(t, time.Minute, "messages flow after the hand-over", func() bool { return load.sent() >= before+200 })
	load.finish()
}

// unloadBundle unloads topic's bundle through broker via, with destinationBroker when given.
func unloadBundle(t *testing.T, via harness.Broker, topic, destination string) {
	t.Helper()
	path := topic[len("persistent://"):]
	resp, err := http.Get(via.WebURL() + "/lookup/v2/topic/persistent/" + path + "/bundle")
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ns := path[:strings.LastIndex(path, "/")]
	u := via.WebURL() + "/admin/v2/namespaces/" + ns + "/" + string(bundle) + "/unload"
	if destination != "" {
		u += "?destinationBroker=" + url.QueryEscape(destination)
	}
	req, _ := http.NewRequest(http.MethodPut, u, nil)
	uresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(uresp.Body)
	uresp.Body.Close()
	if uresp.StatusCode != http.StatusNoContent {
		t.Fatalf("unload of bundle %s: HTTP %d %s", bundle, uresp.StatusCode, body)
	}
}

// TestClusterReplicatorMovesWithItsTopic: cluster a is two brokers, cluster b one. A replicated
// topic's bundle moves from one broker of a to the other while its producer sends: the replicator
// goes on from the new owner where the old one stopped, and b receives every message once.
func TestClusterReplicatorMovesWithItsTopic(t *testing.T) {
	cl, ca, cb := twoBrokerClusterAndOne(t)
	// Deduplication on a: a send the producer repeats after the move is stored once, so every
	// message is one entry, and a second copy on b could only come from replication.
	req, _ := http.NewRequest(http.MethodPost, cl.Brokers[0].WebURL()+"/admin/v2/namespaces/acme/geo/deduplication", strings.NewReader("true"))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("enable deduplication: %v %v", resp, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := fmt.Sprintf("persistent://acme/geo/moving-%d", time.Now().UnixNano()%1_000_000)
	consB, err := cb.Client(t).Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer consB.Close()
	prodA, err := ca.Client(t).CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer prodA.Close()
	const total = 600
	sent := make(chan error, 1)
	moveAt := make(chan struct{})
	go func() {
		for i := range total {
			if i == total/3 {
				close(moveAt)
			}
			if _, err := prodA.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m-%d", i)}); err != nil {
				sent <- fmt.Errorf("send m-%d: %w", i, err)
				return
			}
			time.Sleep(2 * time.Millisecond) // paces the producer so the move happens mid-stream
		}
		sent <- nil
	}()
	<-moveAt
	owner := ownerOfTopic(t, cl.Brokers[0], topic)
	dest, destID := cl.Brokers[0], "b1"
	if owner == dest.ServiceURL() {
		dest, destID = cl.Brokers[1], "b2"
	}
	unloadBundle(t, cl.Brokers[0], topic, destID)
	if got := ownerOfTopic(t, cl.Brokers[0], topic); got != dest.ServiceURL() {
		t.Fatalf("after the unload the topic is on %s, want %s", got, dest.ServiceURL())
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for len(seen) < total {
		m, err := consB.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of %d on b: %v", len(seen), total, err)
		}
		seen[string(m.Payload())]++
		_ = consB.Ack(m)
	}
	// Nothing more arrives: a barrier message sent after everything else is the next one.
	if _, err := prodA.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("barrier")}); err != nil {
		t.Fatal(err)
	}
	m, err := consB.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Payload()) != "barrier" {
		t.Fatalf("after all %d messages b received %q again, not the barrier", total, m.Payload())
	}
	for p, n := range seen {
		if n != 1 {
			t.Fatalf("b received %s %d times", p, n)
		}
	}
}

// TestClusterTwoBrokersStopTogether: two of three brokers get SIGTERM at once. Each marks itself
// draining first, so neither hands a bundle to the other: every bundle ends on the broker that
// stays, and the clients go on there.
func TestClusterTwoBrokersStopTogether(t *testing.T) {
	cl := harness.StartBrokerCluster(t, 3, harness.Options{ExtraArgs: []string{"--handover-timeout=60"}})
	b1, b2, b3 := cl.Brokers[0], cl.Brokers[1], cl.Brokers[2]
	run := time.Now().UnixNano() % 1_000_000
	topics := []string{
		topicOwnedBy(t, b1, b2, fmt.Sprintf("stop2-a-%d", run)),
		topicOwnedBy(t, b1, b3, fmt.Sprintf("stop2-b-%d", run)),
	}
	client := harness.NewClient(t, b1, nil)
	load := startLiveLoad(t, client, topics)
	poll.Until(t, time.Minute, "messages flow", func() bool { return load.sent() >= 200 })
	errs := make(chan error, 2)
	for _, b := range []*harness.Process{b2, b3} {
		go func() { errs <- b.Stop() }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range topics {
		if got := ownerOfTopic(t, b1, topic); got != b1.ServiceURL() {
			t.Fatalf("after b2 and b3 stopped, %s is served by %s", topic, got)
		}
	}
	before := load.sent()
	poll.Until(t, time.Minute, "messages flow after the hand-over", func() bool { return load.sent() >= before+200 })
	load.finish()
}
