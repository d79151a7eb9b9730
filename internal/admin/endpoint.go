package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/meridian-mq/meridian/internal/naming"
)

// An admin endpoint has one shape: resolve the request's target from its path and check it (the
// name parses; the tenant, namespace or topic exists; the service it needs is configured), call
// the service, and encode the answer (200 with JSON for reads, 204 for writes; an error becomes
// Pulsar's {"reason"} answer in wrap). endpoint and its two common forms build a handler from those
// steps, so that a handler states only its target and its call. The order of the checks is part
// of the API (a request with two faults gets the first one's answer), so a handler whose checks
// interleave with reading the request resolves only the name and checks the rest in its call.

// endpoint builds a handler from its three steps.
func endpoint[X, T any](resolve func(*http.Request) (X, error), call func(*http.Request, X) (T, error), encode func(http.ResponseWriter, T) error) apiFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		target, err := resolve(r)
		if err != nil {
			return err
		}
		v, err := call(r, target)
		if err != nil {
			return err
		}
		return encode(w, v)
	}
}

// readEndpoint answers call's value as JSON (200).
func readEndpoint[X, T any](resolve func(*http.Request) (X, error), call func(*http.Request, X) (T, error)) apiFunc {
	return endpoint(resolve, call, func(w http.ResponseWriter, v T) error { return ok(w, v) })
}

// writeEndpoint answers 204 once call succeeds.
func writeEndpoint[X any](resolve func(*http.Request) (X, error), call func(*http.Request, X) error) apiFunc {
	return endpoint(resolve, func(r *http.Request, x X) (struct{}, error) { return struct{}{}, call(r, x) },
		func(w http.ResponseWriter, _ struct{}) error { return noContent(w) })
}

// okOrNoContent answers a value as JSON, or 204 when it is nil (Pulsar's answer to an unset value).
func okOrNoContent[T any](w http.ResponseWriter, v []T) error {
	if v == nil {
		return noContent(w)
	}
	return ok(w, v)
}

// pathValue resolves the path value name (for targets the call checks itself).
func pathValue(name string) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) { return r.PathValue(name), nil }
}

// topicCall is a request's topic, in an existing namespace, with the topic service.
type topicCall struct {
	topic naming.TopicName
	svc   TopicService
}

// topicCallOf resolves the path's topic in an existing namespace and the topic service.
func (h *Handler) topicCallOf(r *http.Request) (topicCall, error) {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return topicCall{}, err
	}
	svc, err := h.topics()
	return topicCall{topic: t, svc: svc}, err
}

// topicOp is a request's topic resolved for an operation on the topics it stands for: the
// partitions of a partitioned topic, or the topic itself.
type topicOp struct {
	topic       naming.TopicName
	targets     []naming.TopicName
	partitioned bool // the topic is partitioned (targets are its partitions)
	svc         TopicService
}

// topicOpOf resolves the path's topic (namespace checked), the topic service and the targets.
func (h *Handler) topicOpOf(r *http.Request) (topicOp, error) {
	c, err := h.topicCallOf(r)
	if err != nil {
		return topicOp{}, err
	}
	op := topicOp{topic: c.topic, svc: c.svc, targets: h.partitionsOf(c.topic)}
	op.partitioned = op.targets != nil
	if !op.partitioned {
		op.targets = []naming.TopicName{c.topic}
	}
	return op, nil
}

// names returns the targets' names.
func (op topicOp) names() []string {
	out := make([]string, len(op.targets))
	for i, t := range op.targets {
		out[i] = t.String()
	}
	return out
}

// each runs fn on every target; on a partitioned topic, partitions not created yet are skipped.
func (op topicOp) each(ctx context.Context, fn func(ctx context.Context, topic string) error) error {
	for _, p := range op.targets {
		if err := fn(ctx, p.String()); err != nil {
			if len(op.targets) > 1 && errors.Is(err, ErrTopicNotFound) {
				continue
			}
			return err
		}
	}
	return nil
}

// eachWithSubscription runs fn on every topic that has the subscription: on a partitioned topic,
// partitions without it (or not created yet) are skipped. None with it answers 404.
func eachWithSubscription(topics []string, fn func(topic string) error) error {
	done := 0
	for _, topic := range topics {
		err := fn(topic)
		if len(topics) > 1 && (errors.Is(err, ErrTopicNotFound) || errors.Is(err, ErrSubscriptionNotFound)) {
			continue
		}
		if err != nil {
			return err
		}
		done++
	}
	if done == 0 {
		return fail(http.StatusNotFound, "Subscription not found")
	}
	return nil
}

// optionalTopicService resolves the path's topic to the topics the operation applies to (the
// partitions of a partitioned topic, or the topic) and the topic service as the optional interface
// S, which it may not implement (501, naming what).
func optionalTopicService[S any](h *Handler, what string) func(*http.Request) (optionalOp[S], error) {
	return func(r *http.Request) (optionalOp[S], error) {
		op, err := h.topicOpOf(r)
		if err != nil {
			return optionalOp[S]{}, err
		}
		s, supported := op.svc.(S)
		if !supported {
			return optionalOp[S]{}, fail(http.StatusNotImplemented, "Operation not supported: %s", what)
		}
		return optionalOp[S]{svc: s, topics: op.names(), sub: r.PathValue("subscription")}, nil
	}
}

// optionalOp is a subscription operation through an optional interface S of the topic service.
type optionalOp[S any] struct {
	svc    S
	topics []string
	sub    string
}

// pathInt parses the path value name as an integer from least to most; otherwise the answer is
// status with reason (format takes the value as given).
func pathInt(r *http.Request, name string, least, most int64, status int, format string) (int64, error) {
	s := r.PathValue(name)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < least || n > most {
		return 0, fail(status, format, s)
	}
	return n, nil
}
