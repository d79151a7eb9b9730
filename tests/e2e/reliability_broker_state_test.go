package e2e

import (
	"maps"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestSubscriptionStateSurvivesRestartWithTheGoClient: with pulsar-client-go against a real
// `meridian standalone`, a subscription's properties survive kill -9, and a message's redelivery
// count (what DLQPolicy.MaxDeliveries decides on) continues after a restart instead of starting
// again from 0.
func TestSubscriptionStateSurvivesRestartWithTheGoClient(t *testing.T) {
	p := harness.StartStandalone(t, harness.Options{})
	client := harness.NewClient(t, p, nil)
	admin := harness.NewAdmin(t, p)
	topic := harness.Topic(t)
	ctx, cancel := p.CrashContext(testCtx(t, 2*time.Minute))
	defer cancel()
	want := map[string]string{"owner": "team-a"}
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
		SubscriptionProperties: want, NackRedeliveryDelay: 50 * time.Millisecond})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	for round := uint32(0); round < 3; round++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.RedeliveryCount() != round {
			t.Fatalf("delivery %d has redelivery count %d", round, m.RedeliveryCount())
		}
		if round < 2 {
			cons.Nack(m)
		}
	}
	// A clean stop while the consumer holds the message (its third delivery): the broker counts one
	// more redelivery when the consumer goes. Then kill -9 after a start.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	p.Start()
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.RedeliveryCount() < 3 {
		t.Fatalf("after a restart the message came with redelivery count %d, want 3 or more", m.RedeliveryCount())
	}
	t.Logf("redelivery count after the restart: %d", m.RedeliveryCount())
	p.Restart()
	topicName, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	st, err := admin.Topics().GetStats(*topicName)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Subscriptions["s"].SubscriptionProperties; !maps.Equal(got, want) {
		t.Fatalf("after kill -9 the subscription's properties are %v, want %v", got, want)
	}
}
