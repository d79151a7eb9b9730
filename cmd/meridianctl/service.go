package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/wire"
)

// Errors of the binary-protocol commands (produce, consume, perf) are explained in terms of
// --service-url, not --admin-url: the two point at different listeners.

// serviceError is a failure of a binary-protocol step against --service-url.
type serviceError struct {
	serviceURL string
	topic      string
	err        error
}

func (e *serviceError) Error() string { return e.err.Error() }
func (e *serviceError) Unwrap() error { return e.err }

// serviceErr marks err as a failure talking to --service-url about topic (nil stays nil).
func (a *app) serviceErr(topic string, err error) error {
	if err == nil {
		return nil
	}
	var u *usageError
	if errors.As(err, &u) {
		return err
	}
	return &serviceError{serviceURL: a.serviceURL, topic: topic, err: err}
}

// stepTimeoutError is a binary-protocol step that got no answer within --timeout.
type stepTimeoutError struct {
	limit time.Duration
	err   error
}

func (e *stepTimeoutError) Error() string {
	return fmt.Sprintf("no answer within %v (--timeout): %v", e.limit, e.err)
}
func (e *stepTimeoutError) Unwrap() error { return e.err }

// withStepTimeout runs one step (a lookup, a subscribe, a send, an ack) with its own deadline of d,
// so that a listener that accepts and never answers fails the command instead of hanging it. An
// interrupt (ctx ending) is not reported as a timeout.
func withStepTimeout[T any](ctx context.Context, d time.Duration, step func(context.Context) (T, error)) (T, error) {
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	v, err := step(sctx)
	if err != nil && ctx.Err() == nil && (sctx.Err() != nil || isNetTimeout(err)) {
		err = &stepTimeoutError{limit: d, err: err}
	}
	return v, err
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// checkTopicName refuses, before any connection, a topic name whose shape or characters are wrong
// (a usage error, exit status 2).
func checkTopicName(topic string) error {
	if _, err := adminapi.FullTopicName(topic); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

// explainService turns a binary-protocol failure into a message with the next step.
func explainService(e *serviceError) string {
	msg := e.err.Error()
	hint := ""
	var te *stepTimeoutError
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(e.err, wire.ErrTopicNotFound) && strings.Contains(msg, "namespace not found"):
		ns := "<tenant>/<namespace>"
		if full, err := adminapi.FullTopicName(e.topic); err == nil {
			parts := strings.SplitN(full[strings.Index(full, "://")+3:], "/", 3)
			ns = parts[0] + "/" + parts[1]
		}
		hint = "create the namespace: meridianctl namespaces create " + ns + " (and its tenant first if that is missing: meridianctl tenants create <tenant> --allowed-clusters <cluster>)"
	case errors.Is(e.err, wire.ErrTopicNotFound):
		hint = "create the topic (meridianctl topics create " + e.topic + ") or enable auto topic creation for its namespace"
	case errors.As(e.err, &te):
		hint = fmt.Sprintf("nothing answered the Pulsar protocol at %s; check that --service-url (or MERIDIAN_SERVICE_URL) points at a broker's binary protocol port, not its admin port, or raise --timeout", e.serviceURL)
	case errors.As(e.err, &oe) || errors.As(e.err, &ne):
		hint = fmt.Sprintf("cannot reach the broker's binary protocol at %s; is the broker running? Point meridianctl at it with --service-url or MERIDIAN_SERVICE_URL", e.serviceURL)
	}
	if hint != "" {
		msg += "\nhint: " + hint
	}
	return msg
}
