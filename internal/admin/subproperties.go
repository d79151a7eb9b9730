package admin

import (
	"context"
	"errors"
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
	h.handle("GET "+sub+"/properties", h.subscriptionPropertiesGet)
	h.handle("PUT "+sub+"/properties", h.subscriptionPropertiesSet)
}

// subscriptionPropertiesService resolves the path's targets and the optional interface.
func (h *Handler) subscriptionPropertiesService(r *http.Request) (SubscriptionProperties, []string, error) {
	return optionalTopicService[SubscriptionProperties](h, r, "subscription properties")
}

// optionalTopicService resolves the path's topic to the topics the operation applies to (the
// partitions of a partitioned topic, or the topic) and the topic service as the optional interface
// S, which it may not implement (501, naming what).
func optionalTopicService[S any](h *Handler, r *http.Request, what string) (S, []string, error) {
	var none S
	_, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return none, nil, err
	}
	s, supported := svc.(S)
	if !supported {
		return none, nil, fail(http.StatusNotImplemented, "Operation not supported: %s", what)
	}
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.String()
	}
	return s, names, nil
}

// subscriptionPropertiesGet answers the subscription's properties; on a partitioned topic, those
// of its partitions merged (they are set on all of them together).
func (h *Handler) subscriptionPropertiesGet(w http.ResponseWriter, r *http.Request) error {
	sp, topics, err := h.subscriptionPropertiesService(r)
	if err != nil {
		return err
	}
	name := r.PathValue("subscription")
	out := map[string]string{}
	found := false
	for _, topic := range topics {
		props, err := sp.SubscriptionProperties(r.Context(), topic, name)
		if len(topics) > 1 && (errors.Is(err, ErrTopicNotFound) || errors.Is(err, ErrSubscriptionNotFound)) {
			continue
		}
		if err != nil {
			return err
		}
		found = true
		maps.Copy(out, props)
	}
	if !found {
		return fail(http.StatusNotFound, "Subscription not found")
	}
	return ok(w, out)
}

// subscriptionPropertiesSet replaces the subscription's properties (every partition's).
func (h *Handler) subscriptionPropertiesSet(w http.ResponseWriter, r *http.Request) error {
	sp, topics, err := h.subscriptionPropertiesService(r)
	if err != nil {
		return err
	}
	var props map[string]string
	if err := decodeBody(r, &props); err != nil {
		return err
	}
	name := r.PathValue("subscription")
	if err := checkSubscription(name, props); err != nil {
		return err
	}
	set := 0
	for _, topic := range topics {
		err := sp.SetSubscriptionProperties(r.Context(), topic, name, props)
		if len(topics) > 1 && (errors.Is(err, ErrTopicNotFound) || errors.Is(err, ErrSubscriptionNotFound)) {
			continue
		}
		if err != nil {
			return err
		}
		set++
	}
	if set == 0 {
		return fail(http.StatusNotFound, "Subscription not found")
	}
	return noContent(w)
}
