package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestNameAndPropertyLimitsWithTheGoClient: what pulsar-client-go v0.19.0 sees of the limits on
// names and properties: creating a producer or consumer over a limit fails at once with an error
// naming the limit (MetadataError: returned to the caller, not retried), and at the limits works.
func TestNameAndPropertyLimitsWithTheGoClient(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	props := func(n, bytes int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = strings.Repeat("v", bytes/n)
		}
		return m
	}
	refused := func(what string, err error, limit string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), limit) {
			t.Errorf("%s: %v, want an error naming %s", what, err, limit)
		}
	}
	start := time.Now()
	_, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: strings.Repeat("p", 257)})
	refused("producer name of 257 bytes", err, "256")
	_, err = client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Properties: props(65, 650)})
	refused("65 producer properties", err, "64")
	_, err = client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: strings.Repeat("s", 257)})
	refused("subscription name of 257 bytes", err, "256")
	_, err = client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Name: strings.Repeat("c", 257)})
	refused("consumer name of 257 bytes", err, "256")
	_, err = client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionProperties: props(2, 17<<10)})
	refused("17 KiB of subscription properties", err, "16384")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refusals took %v: the client retried them", d)
	}
	newProducer(t, client, pulsar.ProducerOptions{Topic: topic, Name: strings.Repeat("p", 256), Properties: props(64, 15<<10)})
	newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: strings.Repeat("s", 256),
		Name: strings.Repeat("c", 256), Properties: props(64, 15<<10), SubscriptionProperties: props(64, 15<<10)})
}
