package broker

import (
	"errors"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// TestBrokerRefusesOversizedNamesAndProperties: whoever calls the broker core (the protocol
// server, the admin API through the node), names and properties above the limits are refused with
// ErrInvalidRequest before anything is created.
func TestBrokerRefusesOversizedNamesAndProperties(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("limits")
	long := strings.Repeat("x", 257)
	many := map[string]string{}
	for i := range 65 {
		many[string(rune('A'+i%26))+strings.Repeat("k", i)] = "v"
	}
	big := map[string]string{"k": strings.Repeat("v", 16<<10)}
	if _, err := top.AddProducer(t.Context(), ProducerOptions{Name: long}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("producer name of 257 bytes: %v", err)
	}
	if _, err := top.AddProducer(t.Context(), ProducerOptions{Properties: many}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("65 producer properties: %v", err)
	}
	for what, opts := range map[string]SubscribeOptions{
		"subscription name":       {Subscription: long},
		"consumer name":           {Subscription: "s", ConsumerName: long},
		"consumer properties":     {Subscription: "s", Metadata: many},
		"subscription properties": {Subscription: "s", SubscriptionProperties: big},
	} {
		opts.Durable = true
		if _, err := top.Subscribe(t.Context(), opts, newSink()); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s over the limit: %v", what, err)
		}
	}
	if err := top.CreateSubscription(t.Context(), long, mtypes.Latest, false); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("admin subscription name of 257 bytes: %v", err)
	}
	if subs := top.Subscriptions(); len(subs) != 0 {
		t.Errorf("refused requests created subscriptions %v", subs)
	}
}
