package admin

import (
	"context"
	"maps"
	"net/http"
)

// SubscriptionProperties is optionally implemented by a TopicService: a subscription's properties,
// persisted with it (Pulsar's GET/PUT .../subscription/{sub}/properties). Without it those
// endpoints answer 501.
type SubscriptionProperties interface {
	// SubscriptionProperties returns the subscription's properties; ErrSubscriptionNotFound if
	// it does not exist.
	SubscriptionProperties(ctx context.Context, topic, sub string) (map[string]string, error)
	// SetSubscriptionProperties replaces them, durably, before it returns.
	SetSubscriptionProperties(ctx context.Context, topic, sub string, props map[string]string) error
}

func (h *Handler) subscriptionPropertiesRoutes(sub string) {
	resolve := optionalTopicService[SubscriptionProperties](h, "subscription properties")
	h.handle("GET "+sub+"/properties", readEndpoint(resolve, subscriptionPropertiesGet))
	h.handle("PUT "+sub+"/properties", writeEndpoint(resolve, subscriptionPropertiesSet))
}

// subscriptionPropertiesGet answers the subscription's properties; on a partitioned topic, those
// of its partitions merged (they are set on all of them together).
func subscriptionPropertiesGet(r *http.Request, op optionalOp[SubscriptionProperties]) (map[string]string, error) {
	out := map[string]string{}
	err := eachWithSubscription(op.topics, func(topic string) error {
		props, err := op.svc.SubscriptionProperties(r.Context(), topic, op.sub)
		if err == nil {
			maps.Copy(out, props)
		}
		return err
	})
	return out, err
}

// subscriptionPropertiesSet replaces the subscription's properties (every partition's).
func subscriptionPropertiesSet(r *http.Request, op optionalOp[SubscriptionProperties]) error {
	var props map[string]string
	if err := decodeBody(r, &props); err != nil {
		return err
	}
	if err := checkSubscription(op.sub, props); err != nil {
		return err
	}
	return eachWithSubscription(op.topics, func(topic string) error {
		return op.svc.SetSubscriptionProperties(r.Context(), topic, op.sub, props)
	})
}
