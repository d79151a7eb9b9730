package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestClusterDeadOwnersBundleIsTakenOverAndComesBack: two broker processes; broker 2 owns a topic
// with a producer and a consumer (connected through broker 1). Broker 2 is killed (kill -9) and stays
// down: broker 1 takes the bundle over and the producer goes on there without a send failing. When
// broker 2 starts again, broker 1 hands the bundle back and broker 2 merges what it held with what
// was written meanwhile: the consumer receives every acknowledged message, and a reader from the
// start finds every message exactly once, in the order the producer sent them.
func TestClusterDeadOwnersBundleIsTakenOverAndComesBack(t *testing.T) {
	cl := harness.StartBrokerCluster(t, 2, harness.Options{})
	b1, b2 := cl.Brokers[0], cl.Brokers[1]
	local := topicOwnedBy(t, b1, b2, fmt.Sprintf("cl-takeover-%d", time.Now().UnixNano()%1_000_000))
	topic := local
	local = local[len("persistent://public/default/"):]
	client := harness.NewClient(t, b1, nil)
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var sent []string
	send := func(n int, tag string) {
		t.Helper()
		for i := range n {
			payload := fmt.Sprintf("%s-%03d", tag, i)
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
				t.Fatalf("send %s: %v", payload, err)
			}
			sent = append(sent, payload)
		}
	}
	got := map[string]bool{}
	receive := func(n int) {
		t.Helper()
		for range n {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatalf("receive after %d: %v; missing %v", len(got), err, missing(sent, got))
			}
			got[string(m.Payload())] = true
			_ = cons.Ack(m)
		}
	}

	send(100, "before")
	receive(40)
	b2.Kill()
	send(100, "during") // broker 1 takes the bundle over
	if owner := httpLookup(t, b1, local); owner != b1.ServiceURL() {
		t.Fatalf("with broker 2 down the topic is owned by %s, want broker 1", owner)
	}
	receive(20)

	b2.Start()
	poll.Until(t, time.Minute, "the bundle to come back to broker 2", func() bool {
		owner, _ := lookupOwner(b1, topic) // a failure while the bundle moves: poll again
		return owner == b2.ServiceURL()
	})
	send(100, "after")

	for ctx.Err() == nil && len(missing(sent, got)) > 0 {
		receive(1)
	}
	if m := missing(sent, got); len(m) > 0 {
		t.Fatalf("%d acknowledged messages never arrived, the first %s", len(m), m[0])
	}

	// The merged log: every message once, in send order.
	reader, err := client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	for i, want := range sent {
		m, err := reader.Next(ctx)
		if err != nil {
			t.Fatalf("read %d of %d: %v", i, len(sent), err)
		}
		if string(m.Payload()) != want {
			t.Fatalf("message %d of the merged log is %s, want %s", i, m.Payload(), want)
		}
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if m, err := reader.Next(short); err == nil {
		t.Fatalf("the merged log holds a message after the last sent: %s", m.Payload())
	}
}

// missing lists the sent payloads not in got.
func missing(sent []string, got map[string]bool) []string {
	var out []string
	for _, p := range sent {
		if !got[p] {
			out = append(out, p)
		}
	}
	return out
}
