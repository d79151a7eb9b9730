package admin

import (
	"bytes"
	"context"
	"net/http"
	"net/url"

	"github.com/meridian-mq/meridian/adminapi"
)

// ReplicatedSubscriptions is optionally implemented by a TopicService: whether a subscription is
// replicated (its acknowledgement state synced to the topic's remote clusters;
// docs/replication-design.md, "Replicated subscriptions"). Without it
// `.../subscription/{sub}/replicatedSubscriptionStatus` answers 501.
type ReplicatedSubscriptions interface {
	// SubscriptionReplicated reports whether the subscription is replicated (its own flag, or a
	// namespace or topic policy in force); ErrSubscriptionNotFound if it does not exist.
	SubscriptionReplicated(ctx context.Context, topic, sub string) (bool, error)
	// SetSubscriptionReplicated sets the subscription's own flag, durably, before it returns.
	SetSubscriptionReplicated(ctx context.Context, topic, sub string, enabled bool) error
}

// replicatedSubscriptionRoutes registers Pulsar's replicatedSubscriptionStatus endpoints under
// sub (".../{topic}/subscription/{subscription}").
func (h *Handler) replicatedSubscriptionRoutes(sub string) {
	resolve := optionalTopicService[ReplicatedSubscriptions](h, "replicated subscriptions")
	h.handle("GET "+sub+"/replicatedSubscriptionStatus", readEndpoint(resolve, replicatedStatusGet))
	h.handle("POST "+sub+"/replicatedSubscriptionStatus", writeEndpoint(resolve, replicatedStatusSet))
}

// replicatedStatusGet answers Pulsar's map of topic (or partition) name to replicated flag.
func replicatedStatusGet(r *http.Request, op optionalOp[ReplicatedSubscriptions]) (map[string]bool, error) {
	out := map[string]bool{}
	err := eachWithSubscription(op.topics, func(topic string) error {
		on, err := op.svc.SubscriptionReplicated(r.Context(), topic, op.sub)
		if err == nil {
			out[topic] = on
		}
		return err
	})
	return out, err
}

// replicatedStatusSet sets the flag from a body of true or false, on every partition that has the
// subscription.
func replicatedStatusSet(r *http.Request, op optionalOp[ReplicatedSubscriptions]) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	enabled, err := decodeLenientBool(body)
	if err != nil {
		return err
	}
	return eachWithSubscription(op.topics, func(topic string) error {
		return op.svc.SetSubscriptionReplicated(r.Context(), topic, op.sub, enabled)
	})
}

// isJSONNull reports a body of null: PIP-398's way to remove the policy with a POST.
func isJSONNull(body []byte) bool { return bytes.Equal(bytes.TrimSpace(body), []byte("null")) }

// replicateSubscriptionStateNamespacePolicy is `.../namespaces/{t}/{ns}/replicateSubscriptionState`:
// POST true, false or null (null removes it, as DELETE does).
func replicateSubscriptionStateNamespacePolicy() nsPolicy {
	return nsPolicy{
		path:       "replicateSubscriptionState",
		setMethods: post,
		get: func(p *adminapi.Policies) (any, bool) {
			if p.ReplicateSubscriptionState == nil {
				return nil, false
			}
			return *p.ReplicateSubscriptionState, true
		},
		set: func(p *adminapi.Policies, body []byte) error {
			if isJSONNull(body) {
				p.ReplicateSubscriptionState = nil
				return nil
			}
			v, err := decodeLenientBool(body)
			if err != nil {
				return err
			}
			p.ReplicateSubscriptionState = &v
			return nil
		},
		remove: func(p *adminapi.Policies) { p.ReplicateSubscriptionState = nil },
	}
}

// replicateSubscriptionStateTopicPolicy is `.../{topic}/replicateSubscriptionState` (GET with
// ?applied=true falls back to the namespace's).
func replicateSubscriptionStateTopicPolicy() tpPolicy {
	return tpPolicy{
		path:       "replicateSubscriptionState",
		setMethods: post,
		get: func(tp *adminapi.TopicPolicies) (any, bool) {
			if tp.ReplicateSubscriptionState == nil {
				return nil, false
			}
			return *tp.ReplicateSubscriptionState, true
		},
		applied: func(p *adminapi.Policies) (any, bool) {
			if p.ReplicateSubscriptionState == nil {
				return nil, false
			}
			return *p.ReplicateSubscriptionState, true
		},
		set: func(tp *adminapi.TopicPolicies, body []byte, _ url.Values) error {
			if isJSONNull(body) {
				tp.ReplicateSubscriptionState = nil
				return nil
			}
			v, err := decodeLenientBool(body)
			if err != nil {
				return err
			}
			tp.ReplicateSubscriptionState = &v
			return nil
		},
		remove: func(tp *adminapi.TopicPolicies) { tp.ReplicateSubscriptionState = nil },
	}
}
