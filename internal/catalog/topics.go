package catalog

import (
	"context"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
)

// MaxPartitions bounds a partitioned topic's partition count (Pulsar's default maxNumPartitionsPerPartitionedTopic is
// unlimited; a bound keeps hostile input from creating millions of topics).
const MaxPartitions = 10000

// PartitionedTopic returns the partitioned metadata of topic (or of the topic a partition belongs to).
func (c *Catalog) PartitionedTopic(topic string) (adminapi.PartitionedTopicMetadata, bool) {
	t, err := parseTopic(topic)
	if err != nil {
		return adminapi.PartitionedTopicMetadata{}, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.partitioned[t.Base().String()]
	return e.val, ok
}

// PartitionedTopics returns the full names of the partitioned topics of a namespace ("tenant/ns"),
// both domains, sorted.
func (c *Catalog) PartitionedTopics(ns string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for _, t := range sortedKeys(c.partitioned) {
		if topicInNamespace(t, ns) {
			out = append(out, t)
		}
	}
	return out
}

func topicInNamespace(topic, ns string) bool {
	i := strings.Index(topic, "://")
	if i < 0 {
		return false
	}
	return strings.HasPrefix(topic[i+3:], ns+"/")
}

// CreatePartitionedTopic records a partitioned topic with n partitions (1..MaxPartitions). The
// namespace must exist; ErrAlreadyExists if the topic is already partitioned.
func (c *Catalog) CreatePartitionedTopic(ctx context.Context, topic string, n int, properties map[string]string) error {
	t, err := parseTopic(topic)
	if err != nil {
		return err
	}
	if t.IsPartition() {
		return refuse(ErrPrecondition, "Partitioned Topic Name should not contain '-partition-'")
	}
	if n < 1 || n > MaxPartitions {
		return refuse(ErrPrecondition, "Number of partitions should be more than 0 and at most %d", MaxPartitions)
	}
	if err := c.requireNamespace(t.NamespaceName().String()); err != nil {
		return err
	}
	return update(ctx, c, partitionedKey(t), func() adminapi.PartitionedTopicMetadata { return adminapi.PartitionedTopicMetadata{} },
		func(v *adminapi.PartitionedTopicMetadata, exists bool) (bool, error) {
			if exists {
				return false, refuse(ErrAlreadyExists, "This topic already exists")
			}
			*v = adminapi.PartitionedTopicMetadata{Partitions: n, Properties: properties, CreationTimestamp: time.Now().UnixMilli()}
			return false, nil
		})
}

// UpdatePartitionedTopic raises the partition count; shrinking is refused, as in Pulsar.
func (c *Catalog) UpdatePartitionedTopic(ctx context.Context, topic string, n int) error {
	t, err := parseTopic(topic)
	if err != nil {
		return err
	}
	if n < 1 || n > MaxPartitions {
		return refuse(ErrPrecondition, "Number of partitions should be more than 0 and at most %d", MaxPartitions)
	}
	return update(ctx, c, partitionedKey(t), func() adminapi.PartitionedTopicMetadata { return adminapi.PartitionedTopicMetadata{} },
		func(v *adminapi.PartitionedTopicMetadata, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Partitioned topic does not exist")
			}
			if n < v.Partitions {
				return false, refuse(ErrPrecondition, "The number of partitions can only be increased (currently %d)", v.Partitions)
			}
			if n == v.Partitions {
				return false, errSkipWrite
			}
			v.Partitions = n
			return false, nil
		})
}

// UpdatePartitionedTopicWith applies fn to a partitioned topic's metadata (used for properties).
func (c *Catalog) UpdatePartitionedTopicWith(ctx context.Context, topic string, fn func(*adminapi.PartitionedTopicMetadata) error) error {
	t, err := parseTopic(topic)
	if err != nil {
		return err
	}
	return update(ctx, c, partitionedKey(t), func() adminapi.PartitionedTopicMetadata { return adminapi.PartitionedTopicMetadata{} },
		func(v *adminapi.PartitionedTopicMetadata, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Partitioned topic does not exist")
			}
			return false, fn(v)
		})
}

// DeletePartitionedTopic removes the partitioned metadata and the topic-level policies.
func (c *Catalog) DeletePartitionedTopic(ctx context.Context, topic string) error {
	t, err := parseTopic(topic)
	if err != nil {
		return err
	}
	err = update(ctx, c, partitionedKey(t), func() adminapi.PartitionedTopicMetadata { return adminapi.PartitionedTopicMetadata{} },
		func(v *adminapi.PartitionedTopicMetadata, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Partitioned topic does not exist")
			}
			return true, nil
		})
	if err != nil {
		return err
	}
	if err := c.DeleteTopicPolicies(ctx, topic); err != nil && !IsKind(err, ErrNotFound) {
		return err
	}
	return nil
}

func (c *Catalog) requireNamespace(ns string) error {
	name, err := parseNamespace(ns)
	if err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, ok := c.tenants[name.Tenant]; !ok {
		return refuse(ErrNotFound, "Tenant does not exist")
	}
	if _, ok := c.namespaces[ns]; !ok {
		return refuse(ErrNotFound, "Namespace does not exist")
	}
	return nil
}

// ---- topic-level policies ----

// TopicPolicies returns the topic-level policies of topic (a partition shares its parent's).
func (c *Catalog) TopicPolicies(topic string) (adminapi.TopicPolicies, bool) {
	t, err := parseTopic(topic)
	if err != nil {
		return adminapi.TopicPolicies{}, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.topicPolicies[t.Base().String()]
	return e.val, ok
}

func (c *Catalog) topicPoliciesIn(ns string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for _, t := range sortedKeys(c.topicPolicies) {
		if topicInNamespace(t, ns) {
			out = append(out, t)
		}
	}
	return out
}

// UpdateTopicPolicies applies fn to a topic's policies (created empty if absent); a document left
// empty is deleted. The namespace must exist.
func (c *Catalog) UpdateTopicPolicies(ctx context.Context, topic string, fn func(*adminapi.TopicPolicies) error) error {
	t, err := parseTopic(topic)
	if err != nil {
		return err
	}
	if err := c.requireNamespace(t.NamespaceName().String()); err != nil {
		return err
	}
	return update(ctx, c, topicPoliciesKey(t), func() adminapi.TopicPolicies { return adminapi.TopicPolicies{} },
		func(v *adminapi.TopicPolicies, exists bool) (bool, error) {
			if err := fn(v); err != nil {
				return false, err
			}
			v.Normalize()
			if v.IsEmpty() {
				if !exists {
					return false, errSkipWrite
				}
				return true, nil
			}
			return false, nil
		})
}

// DeleteTopicPolicies removes all topic-level policies (and properties) of topic.
func (c *Catalog) DeleteTopicPolicies(ctx context.Context, topic string) error {
	t, err := parseTopic(topic)
	if err != nil {
		return err
	}
	return update(ctx, c, topicPoliciesKey(t), func() adminapi.TopicPolicies { return adminapi.TopicPolicies{} },
		func(v *adminapi.TopicPolicies, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Topic policies do not exist")
			}
			return true, nil
		})
}

// ---- effective policies (what the broker applies) ----

// ReplicationClusters returns the clusters a topic replicates between: the topic-level list if set,
// else the namespace's. ok is false when the namespace does not exist.
func (c *Catalog) ReplicationClusters(topic string) (clusters []string, ok bool) {
	t, err := parseTopic(topic)
	if err != nil {
		return nil, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	ns, ok := c.namespaces[t.NamespaceName().String()]
	if !ok {
		return nil, false
	}
	if tp, ok := c.topicPolicies[t.Base().String()]; ok && len(tp.val.ReplicationClusters) > 0 {
		return append([]string(nil), tp.val.ReplicationClusters...), true
	}
	return append([]string(nil), ns.val.ReplicationClusters...), true
}

// AllowedClusters returns the tenant's allowed clusters (the sources a cluster accepts replicated
// traffic from, docs/design.md, "Replication invariants"). ok is false when the tenant does not exist.
func (c *Catalog) AllowedClusters(tenant string) ([]string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ti, ok := c.tenants[tenant]
	if !ok {
		return nil, false
	}
	return append([]string(nil), ti.val.AllowedClusters...), true
}
