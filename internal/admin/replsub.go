package admin

import (
	"bytes"
	"context"
	"net/http"

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

// replicateSubscriptionStatePolicy is `.../replicateSubscriptionState` of a namespace or topic: POST
// true, false or null (null removes it, as DELETE does).
func replicateSubscriptionStatePolicy[D any](field func(*D) **bool) policy[D] {
	return policy[D]{
		path: "replicateSubscriptionState", setMethods: post, get: nullable(field),
		set: func(in *policyRequest) (func(*D) error, error) {
			body, err := in.body()
			if err != nil {
				return nil, err
			}
			if isJSONNull(body) {
				return assign(field, nil), nil
			}
			v, err := decodeLenientBool(body)
			return assign(field, &v), err
		},
		remove: clearTo(field, nil),
	}
}

func nsReplicateSubscriptionState(p *adminapi.Policies) **bool { return &p.ReplicateSubscriptionState }
