package server

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Catalog is what the server needs from namespace and topic metadata; internal/node adapts
// internal/catalog to it. A nil Catalog means "no partitioned topics, every namespace exists".
type Catalog interface {
	// PartitionCount returns the partition count of a partitioned topic, or 0 when the topic is
	// not partitioned (or does not exist yet and would be created non-partitioned). It may create
	// partitioned metadata when the namespace's auto-creation policy says so. An error wrapping
	// broker.ErrNamespaceNotFound reports a missing namespace.
	PartitionCount(ctx context.Context, topic naming.TopicName) (int, error)
	// PartitionedTopics lists the partitioned topics of a namespace with their partition counts
	// (empty, no error, for a missing namespace).
	PartitionedTopics(ctx context.Context, ns naming.NamespaceName) ([]PartitionedTopic, error)
}

// PartitionedTopic is one partitioned topic and its partition count.
type PartitionedTopic struct {
	Name       naming.TopicName
	Partitions int
}

// parseTopic normalises a topic name as the client does (short names, tenant/ns/topic,
// partitions). Both domains are served: non-persistent topics live in the broker's memory.
func parseTopic(s string) (naming.TopicName, error) {
	return naming.ParseTopic(s)
}

// handleLookup answers LOOKUP. A topic that has moved to another cluster gets Redirect there
// (switchover.go). In a cluster of several brokers the topic's owner answers (ownership.go).
// Otherwise this broker serves every topic: Connect to our own advertised URLs, authoritative:
// brokerServiceUrl (pulsar://) and brokerServiceUrlTls (pulsar+ssl://), each when that listener is
// on; the client takes the one of its own scheme, as it does with Pulsar. Invalid names get Failed
// with the reason.
func (c *conn) handleLookup(cmd *pulsarpb.CommandLookupTopic) {
	reqID := cmd.GetRequestId()
	resp := &pulsarpb.CommandLookupTopicResponse{RequestId: proto.Uint64(reqID)}
	topic, err := parseTopic(cmd.GetTopic())
	if err != nil {
		code, msg := toServerError(err)
		resp.Response = pulsarpb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error = code.Enum()
		resp.Message = proto.String(msg)
	} else if target, ok := c.migrationTarget(cmd.GetTopic()); ok {
		// The topic has moved (switchover.go): the client asks the target again.
		resp.Response = pulsarpb.CommandLookupTopicResponse_Redirect.Enum()
		if target.BrokerServiceURL != "" {
			resp.BrokerServiceUrl = proto.String(target.BrokerServiceURL)
		}
		if target.BrokerServiceURLTLS != "" {
			resp.BrokerServiceUrlTls = proto.String(target.BrokerServiceURLTLS)
		}
		resp.Authoritative = proto.Bool(false)
		resp.ProxyThroughServiceUrl = proto.Bool(false)
	} else if c.s.opts.Ownership != nil {
		c.lookupOwner(cmd, topic)
		return
	} else {
		resp.Response = pulsarpb.CommandLookupTopicResponse_Connect.Enum()
		c.setOwnURLs(resp)
		resp.Authoritative = proto.Bool(true)
		resp.ProxyThroughServiceUrl = proto.Bool(false)
	}
	c.sendCommand(resp)
}

// handlePartitionedMetadata answers PARTITIONED_METADATA with the partition count (0 for
// non-partitioned topics, partitions themselves and topics that do not exist yet).
func (c *conn) handlePartitionedMetadata(cmd *pulsarpb.CommandPartitionedTopicMetadata) {
	reqID := cmd.GetRequestId()
	fail := func(err error) {
		code, msg := toServerError(err)
		c.sendCommand(&pulsarpb.CommandPartitionedTopicMetadataResponse{
			RequestId: proto.Uint64(reqID),
			Response:  pulsarpb.CommandPartitionedTopicMetadataResponse_Failed.Enum(),
			Error:     code.Enum(),
			Message:   proto.String(msg),
		})
	}
	topic, err := parseTopic(cmd.GetTopic())
	if err != nil {
		fail(err)
		return
	}
	ok := func(n int) {
		c.sendCommand(&pulsarpb.CommandPartitionedTopicMetadataResponse{
			RequestId:  proto.Uint64(reqID),
			Partitions: proto.Uint32(uint32(n)),
			Response:   pulsarpb.CommandPartitionedTopicMetadataResponse_Success.Enum(),
		})
	}
	if topic.IsPartition() || c.s.opts.Catalog == nil {
		ok(0)
		return
	}
	c.goRequest(func(ctx context.Context) {
		n, err := c.s.opts.Catalog.PartitionCount(ctx, topic)
		if err != nil {
			fail(err)
			return
		}
		if n == 0 {
			// A topic created on the target after a switchover began is known only there.
			n = c.targetPartitions(ctx, topic, n)
		}
		ok(n)
	})
}

// handleGetTopicsOfNamespace lists a namespace's persistent topics, partitions individually, as
// regex consumers expect. A missing namespace yields an empty list, not an error; a list whose
// frame the client would not read (above the max frame size announced in CONNECTED) yields ERROR
// NotAllowedError for the request, and the connection stays up.
func (c *conn) handleGetTopicsOfNamespace(cmd *pulsarpb.CommandGetTopicsOfNamespace) {
	reqID := cmd.GetRequestId()
	ns, err := naming.ParseNamespace(cmd.GetNamespace())
	if err != nil {
		c.sendError(reqID, err)
		return
	}
	mode := cmd.GetMode()
	c.goRequest(func(ctx context.Context) {
		var names []string
		if mode != pulsarpb.CommandGetTopicsOfNamespace_NON_PERSISTENT {
			var err error
			names, err = c.listPersistentTopics(ctx, ns)
			if err != nil {
				c.sendError(reqID, err)
				return
			}
		}
		if mode != pulsarpb.CommandGetTopicsOfNamespace_PERSISTENT {
			names = append(names, c.nonPersistentTopics(ns)...)
		}
		resp, err := topicsOfNamespaceResponse(cmd, names)
		if err != nil {
			c.sendError(reqID, fmt.Errorf("%w: %v", wire.ErrNotAllowed, err))
			return
		}
		if size, ok := c.frameFits(resp); !ok {
			// The list grows with the namespace (10,000 partitions of long names take about 9 MB)
			// and has no paging in the protocol; a frame above the client's limit would make it
			// drop the connection and every producer and consumer on it. Pulsar writes the frame
			// anyway (apache/pulsar#15688); refusing the one request keeps the connection.
			c.log.Warn("GET_TOPICS_OF_NAMESPACE answer exceeds the client's max frame size; answering ERROR",
				"namespace", ns.String(), "topics", len(resp.Topics), "filtered", resp.GetFiltered(),
				"frameSize", size, "maxFrameSize", c.maxFrameSize())
			c.sendError(reqID, fmt.Errorf("%w: the list of %d topics of namespace %s takes %d bytes, more than the max frame size %d the client accepts (max message size + %d); a topics pattern matching fewer topics makes it shorter",
				wire.ErrNotAllowed, len(resp.Topics), ns, size, c.maxFrameSize(), wire.FramePadding))
			return
		}
		c.sendCommand(resp)
	})
}

func (c *conn) listPersistentTopics(ctx context.Context, ns naming.NamespaceName) ([]string, error) {
	seen := map[string]struct{}{}
	if o := c.s.opts.Ownership; o != nil {
		// Every broker's topics: regex consumers see the whole cluster from any broker.
		names, err := o.Topics(ctx, ns)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			seen[n] = struct{}{}
		}
	}
	topics, err := c.s.opts.Broker.ListTopics(ctx, ns)
	if err != nil && !errors.Is(err, broker.ErrNamespaceNotFound) {
		return nil, err
	}
	for _, t := range topics {
		seen[t.String()] = struct{}{}
	}
	if c.s.opts.Catalog != nil {
		parts, err := c.s.opts.Catalog.PartitionedTopics(ctx, ns)
		if err != nil && !errors.Is(err, broker.ErrNamespaceNotFound) {
			return nil, err
		}
		for _, p := range parts {
			for i := 0; i < p.Partitions; i++ {
				seen[p.Name.Partition(i).String()] = struct{}{}
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}
