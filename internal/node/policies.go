package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/server"
)

// policySource adapts the catalog to broker.PolicySource: the effective policies of a topic are its
// namespace's, overridden by topic-level policies where those are set.
type policySource struct {
	cat *catalog.Catalog
}

var _ broker.PolicySource = policySource{}

func (p policySource) TopicPolicies(_ context.Context, topic naming.TopicName) (broker.TopicPolicies, error) {
	ns := topic.NamespaceName().String()
	nsp, ok := p.cat.Namespace(ns)
	if !ok {
		return broker.TopicPolicies{}, fmt.Errorf("namespace %s: %w", ns, broker.ErrNamespaceNotFound)
	}
	base := topic.Base().String()
	tp, _ := p.cat.TopicPolicies(base)
	out := broker.TopicPolicies{
		Deduplication:       firstBool(tp.DeduplicationEnabled, nsp.DeduplicationEnabled),
		ReplicationClusters: nsp.ReplicationClusters,
		RetentionTime:       0,
	}
	if len(tp.ReplicationClusters) > 0 {
		out.ReplicationClusters = tp.ReplicationClusters
	}
	if o := nsp.AutoTopicCreationOverride; o != nil {
		// A namespace that auto-creates partitioned topics creates them on PARTITIONED_METADATA
		// (serverCatalog); the broker then only ever sees partitions, which it may always create.
		allow := o.AllowAutoTopicCreation && o.TopicType != "partitioned"
		out.AutoTopicCreation = &allow
	}
	if meta, ok := p.cat.PartitionedTopic(base); ok {
		out.Partitions = meta.Partitions
	}
	if ttl := firstInt(tp.MessageTTLInSeconds, nsp.MessageTTLInSeconds); ttl != nil && *ttl > 0 {
		out.MessageTTL = durationOf(int64(*ttl), time.Second)
	}
	retention := nsp.RetentionPolicies
	if tp.RetentionPolicies != nil {
		retention = tp.RetentionPolicies
	}
	if retention != nil {
		out.RetentionTime = retentionTime(retention.RetentionTimeInMinutes)
		out.RetentionSizeBytes = retentionSize(retention.RetentionSizeInMB)
	}
	quotas := nsp.BacklogQuotaMap
	if len(tp.BacklogQuotaMap) > 0 {
		quotas = tp.BacklogQuotaMap
	}
	if q, ok := quotas[adminapi.BacklogQuotaDestinationStorage]; ok && q.LimitSize > 0 {
		out.BacklogQuotaLimitBytes = q.LimitSize
		out.BacklogQuotaPolicy = q.Policy
	}
	if m := nsp.SubscriptionExpirationTimeMinutes; m != nil && *m > 0 {
		out.SubscriptionExpiration = durationOf(int64(*m), time.Minute)
	}
	out.ReplicateSubscriptions = firstBool(tp.ReplicateSubscriptionState, nsp.ReplicateSubscriptionState)
	if v := firstInt(tp.MaxProducerPerTopic, nsp.MaxProducersPerTopic); v != nil {
		out.MaxProducers = *v
	}
	if v := firstInt(tp.MaxConsumerPerTopic, nsp.MaxConsumersPerTopic); v != nil {
		out.MaxConsumers = *v
	}
	return out, nil
}

func firstBool(vals ...*bool) *bool {
	for _, v := range vals {
		if v != nil {
			b := *v
			return &b
		}
	}
	return nil
}

func firstInt(vals ...*int) *int {
	for _, v := range vals {
		if v != nil {
			return v
		}
	}
	return nil
}

// retentionTime converts Pulsar's minutes (-1 = infinite) to the broker's convention.
func retentionTime(minutes int) time.Duration {
	if minutes < 0 {
		return -1
	}
	return durationOf(int64(minutes), time.Minute)
}

// retentionSize converts Pulsar's MB (-1 = infinite) to bytes.
func retentionSize(mb int64) int64 {
	if mb < 0 {
		return -1
	}
	return bytesOfMB(mb)
}

// serverCatalog adapts the catalog to server.Catalog (PARTITIONED_METADATA and topic listing).
type serverCatalog struct {
	cat    *catalog.Catalog
	broker *broker.Broker
}

var _ server.Catalog = serverCatalog{}

// PartitionCount returns the partitioned metadata's count, creating partitioned metadata on first
// use when the namespace auto-creates partitioned topics (Pulsar's allowAutoTopicCreationType).
func (s serverCatalog) PartitionCount(ctx context.Context, topic naming.TopicName) (int, error) {
	base := topic.Base()
	ns := base.NamespaceName().String()
	nsp, ok := s.cat.Namespace(ns)
	if !ok {
		return 0, fmt.Errorf("namespace %s does not exist: %w", ns, broker.ErrNamespaceNotFound)
	}
	if meta, ok := s.cat.PartitionedTopic(base.String()); ok {
		return meta.Partitions, nil
	}
	o := nsp.AutoTopicCreationOverride
	if o == nil || !o.AllowAutoTopicCreation || o.TopicType != "partitioned" {
		return 0, nil
	}
	exists, err := s.broker.TopicExists(ctx, base)
	if err != nil || exists {
		return 0, err // an existing non-partitioned topic stays what it is
	}
	n := 1
	if o.DefaultNumPartitions != nil && *o.DefaultNumPartitions > 0 {
		n = *o.DefaultNumPartitions
	}
	err = s.cat.CreatePartitionedTopic(ctx, base.String(), n, nil)
	if err != nil && !errors.Is(err, catalog.ErrAlreadyExists) {
		return 0, err
	}
	if meta, ok := s.cat.PartitionedTopic(base.String()); ok {
		return meta.Partitions, nil
	}
	return n, nil
}

func (s serverCatalog) PartitionedTopics(_ context.Context, ns naming.NamespaceName) ([]server.PartitionedTopic, error) {
	var out []server.PartitionedTopic
	for _, name := range s.cat.PartitionedTopics(ns.String()) {
		t, err := naming.ParseTopic(name)
		if err != nil || !t.IsPersistent() {
			continue
		}
		if meta, ok := s.cat.PartitionedTopic(name); ok {
			out = append(out, server.PartitionedTopic{Name: t, Partitions: meta.Partitions})
		}
	}
	return out, nil
}
