package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Ownership makes this broker one of several serving a cluster (docs/cluster.md): each topic
// belongs to one broker, the owner of its namespace bundle. internal/node adapts the cluster
// coordinator to it. Without it (nil) this broker serves every topic itself.
type Ownership interface {
	// Lookup says who serves topic, assigning its bundle first when nobody owns it. It may hold
	// while the bundle has no live owner; an error wrapping wire.ErrServiceNotReady says the hold
	// ran out.
	Lookup(ctx context.Context, topic naming.TopicName) (Owner, error)
	// Serves reports whether this broker owns topic's bundle.
	Serves(topic naming.TopicName) bool
	// Incoming reports whether topic's bundle is being handed over to this broker: its clients,
	// sent here by the old owner (assignedBrokerServiceUrl), wait for the move to end.
	Incoming(topic naming.TopicName) bool
	// AwaitServing waits, up to the lookup hold, while topic's bundle is being handed over to this
	// broker, and reports whether it serves the topic then.
	AwaitServing(ctx context.Context, topic naming.TopicName) bool
	// Topics lists the persistent topics of a namespace on every broker of the cluster (full
	// names; partitions individually).
	Topics(ctx context.Context, ns naming.NamespaceName) ([]string, error)
}

// Owner is a lookup's answer: this broker (Self) or the owner's advertised URLs.
type Owner struct {
	Self          bool
	ServiceURL    string
	ServiceURLTLS string
}

// errNotServedHere is Pulsar's refusal of PRODUCER or SUBSCRIBE on a broker that does not own the
// topic's bundle: ServiceNotReady, which clients answer with a new lookup.
func errNotServedHere(topic naming.TopicName) error {
	return fmt.Errorf("%w: Namespace bundle for topic (%s) not served by this instance. Please redo the lookup.", wire.ErrServiceNotReady, topic)
}

// checkServedHere refuses a topic another broker owns; non-persistent topics live in the memory of
// whichever broker the lookup named, so they follow the same rule.
func (c *conn) checkServedHere(topic naming.TopicName) error {
	// Incoming before Serves: a move to this broker that completes between the two reads is then
	// seen as one or the other, never as neither.
	if o := c.s.opts.Ownership; o != nil && !o.Incoming(topic) && !o.Serves(topic) {
		return errNotServedHere(topic)
	}
	return nil
}

// lookupOwner answers LOOKUP for a broker of a multi-broker cluster: Connect when this broker owns
// the topic, else Redirect (authoritative) to the owner. The decision may hold, so it runs off the
// connection's read loop.
func (c *conn) lookupOwner(cmd *pulsarpb.CommandLookupTopic, topic naming.TopicName) {
	reqID := cmd.GetRequestId()
	c.goRequest(func(ctx context.Context) {
		resp := &pulsarpb.CommandLookupTopicResponse{RequestId: proto.Uint64(reqID), Authoritative: proto.Bool(true),
			ProxyThroughServiceUrl: proto.Bool(false)}
		owner, err := c.s.opts.Ownership.Lookup(ctx, topic)
		switch {
		case err != nil:
			if !errors.Is(err, wire.ErrServiceNotReady) && ctx.Err() == nil {
				c.log.Warn("lookup failed", "topic", topic.String(), "err", err)
				err = fmt.Errorf("%w: %v", wire.ErrServiceNotReady, err)
			}
			code, msg := toServerError(err)
			resp.Response = pulsarpb.CommandLookupTopicResponse_Failed.Enum()
			resp.Error = code.Enum()
			resp.Message = proto.String(msg)
			resp.Authoritative = nil
			resp.ProxyThroughServiceUrl = nil
		case owner.Self:
			resp.Response = pulsarpb.CommandLookupTopicResponse_Connect.Enum()
			c.setOwnURLs(resp)
		default:
			resp.Response = pulsarpb.CommandLookupTopicResponse_Redirect.Enum()
			if owner.ServiceURL != "" {
				resp.BrokerServiceUrl = proto.String(owner.ServiceURL)
			}
			if owner.ServiceURLTLS != "" {
				resp.BrokerServiceUrlTls = proto.String(owner.ServiceURLTLS)
			}
		}
		c.sendCommand(resp)
	})
}

// setOwnURLs puts this broker's advertised URLs into a Connect answer.
func (c *conn) setOwnURLs(resp *pulsarpb.CommandLookupTopicResponse) {
	if u := c.s.opts.ServiceURL; u != "" {
		resp.BrokerServiceUrl = proto.String(u)
	}
	if u := c.s.opts.ServiceURLTLS; u != "" {
		resp.BrokerServiceUrlTls = proto.String(u)
	}
}

// awaitServed is checkServedHere in a request goroutine: a topic whose bundle is being handed over
// to this broker is waited for (its clients were sent here by the old owner), then refused if the
// move did not make it this broker's.
func (c *conn) awaitServed(ctx context.Context, topic naming.TopicName) error {
	o := c.s.opts.Ownership
	if o == nil || o.Serves(topic) || o.AwaitServing(ctx, topic) {
		return nil
	}
	return errNotServedHere(topic)
}
