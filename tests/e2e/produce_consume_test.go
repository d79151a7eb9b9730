package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestProduceConsume sends with Send and SendAsync, batching on and off, every compression codec,
// and proves with the checker that one Exclusive consumer gets every message once, in order, intact.
func TestProduceConsume(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	codecs := []struct {
		name string
		ct   pulsar.CompressionType
	}{
		{"none", pulsar.NoCompression},
		{"lz4", pulsar.LZ4},
		{"zlib", pulsar.ZLib},
		{"zstd", pulsar.ZSTD},
		{"snappy", pulsar.SNAPPY},
	}
	for _, codec := range codecs {
		for _, batching := range []bool{false, true} {
			for _, async := range []bool{false, true} {
				if !batching && async && codec.ct != pulsar.NoCompression {
					continue // covered enough by the other combinations; keeps the matrix short
				}
				name := fmt.Sprintf("%s/batching=%v/async=%v", codec.name, batching, async)
				t.Run(name, func(t *testing.T) {
					topic := harness.Topic(t)
					chk := checker.New()
					cons := newConsumer(t, client, pulsar.ConsumerOptions{
						Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive,
					})
					prod := newProducer(t, client, pulsar.ProducerOptions{
						Topic:                   topic,
						DisableBatching:         !batching,
						BatchingMaxPublishDelay: 5 * time.Millisecond,
						CompressionType:         codec.ct,
					})
					const n = 200
					// Compressible payloads of several sizes: 100 B to 10 KiB.
					if async {
						sendAsync(t, chk, prod, "p", 0, n/2, 100)
						sendAsync(t, chk, prod, "p", n/2, n, 10*1024)
					} else {
						sendSync(t, chk, prod, "p", 0, n/2, 100)
						sendSync(t, chk, prod, "p", n/2, n, 10*1024)
					}
					receiveN(t, chk, "sub", cons, n, 30*time.Second, false)
					verify(t, chk, "sub", checker.Expect{})
					expectNothingBefore(t, client, cons, topic)
				})
			}
		}
	}
}

// TestMessageMetadataRoundTrip checks that keys, properties, event time and sequence ids reach the
// consumer unchanged (the broker stores and forwards the client's bytes).
func TestMessageMetadataRoundTrip(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, Name: "meta-producer", DisableBatching: true})
	ctx := testCtx(t, 30*time.Second)
	event := time.UnixMilli(1_700_000_000_123)
	seq := int64(77)
	_, err := prod.Send(ctx, &pulsar.ProducerMessage{
		Payload: []byte("hello"), Key: "k1", Properties: map[string]string{"a": "1", "b": "two"},
		EventTime: event, SequenceID: &seq,
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Payload()) != "hello" || m.Key() != "k1" || m.Properties()["a"] != "1" || m.Properties()["b"] != "two" {
		t.Fatalf("got payload %q key %q properties %v", m.Payload(), m.Key(), m.Properties())
	}
	if !m.EventTime().Equal(event) {
		t.Fatalf("event time %v, want %v", m.EventTime(), event)
	}
	if m.ProducerName() != "meta-producer" {
		t.Fatalf("producer name %q", m.ProducerName())
	}
	if m.PublishTime().IsZero() || time.Since(m.PublishTime()) > time.Minute {
		t.Fatalf("publish time %v", m.PublishTime())
	}
	if prod.LastSequenceID() != seq {
		t.Fatalf("LastSequenceID = %d, want %d", prod.LastSequenceID(), seq)
	}
	if err := cons.Ack(m); err != nil {
		t.Fatal(err)
	}
}

// TestGeneratedProducerNames checks that producers without a name get distinct names from the
// broker, and that two producers may publish to one topic (Shared access mode).
func TestGeneratedProducerNames(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	p1 := newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
	p2 := newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
	if p1.Name() == "" || p2.Name() == "" || p1.Name() == p2.Name() {
		t.Fatalf("producer names %q and %q", p1.Name(), p2.Name())
	}
}

// TestExclusiveProducerAccessMode checks that a second producer is refused while an Exclusive one
// is connected.
func TestExclusiveProducerAccessMode(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	newProducer(t, client, pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Second})
	if err == nil {
		p.Close()
		t.Fatal("second producer accepted while an Exclusive producer is connected")
	}
}

// TestMaxMessageSize checks that the broker's advertised limit is enforced by the client (it reads it
// from CONNECTED) and that a message just under the limit is accepted.
func TestMaxMessageSize(t *testing.T) {
	const limit = 64 * 1024
	b := startBroker(t, brokerConfig{maxMessageSize: limit})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ctx := testCtx(t, 30*time.Second)
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: make([]byte, limit-1024)}); err != nil {
		t.Fatalf("message under the limit: %v", err)
	}
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: make([]byte, limit+1)}); err == nil {
		t.Fatal("message over the advertised limit accepted")
	}
}
