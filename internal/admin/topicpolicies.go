package admin

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
)

// tpPolicy is a row of the topic policy table.
type tpPolicy = policy[adminapi.TopicPolicies]

// tpPtr is a nullable topic field written with POST; ns, if set, is the namespace's field that
// ?applied=true falls back to.
func tpPtr[T any](path string, field func(tp *adminapi.TopicPolicies) **T, ns func(p *adminapi.Policies) **T, check func(T) error) tpPolicy {
	pol := ptrPolicy(path, post, field, check)
	if ns != nil {
		pol.applied = nullable(ns)
	}
	return pol
}

func tpRate[T any](path, cluster string, field func(tp *adminapi.TopicPolicies) **T, ns func(p *adminapi.Policies) map[string]T, check func(T) error) tpPolicy {
	pol := tpPtr[T](path, field, nil, check)
	pol.applied = func(p *adminapi.Policies) (any, bool) {
		v, found := ns(p)[cluster]
		return v, found
	}
	return pol
}

// topicPolicies is the topic policy table (policies.go).
func topicPolicies(cluster string) []tpPolicy {
	return []tpPolicy{
		withApplied(replicateSubscriptionStatePolicy(tpReplicateSubscriptionState), nsReplicateSubscriptionState),
		{
			path: "replication", setMethods: post, replication: true,
			get: func(tp *adminapi.TopicPolicies) (any, bool) {
				return tp.ReplicationClusters, len(tp.ReplicationClusters) > 0
			},
			applied: always(func(p *adminapi.Policies) *[]string { return &p.ReplicationClusters }),
			set:     replicationChange(func(tp *adminapi.TopicPolicies, _, valid []string) { tp.ReplicationClusters = valid }),
			// nil: the namespace's clusters apply again.
			remove: clearTo(func(tp *adminapi.TopicPolicies) *[]string { return &tp.ReplicationClusters }, nil),
		},
		backlogQuotaPolicy(func(tp *adminapi.TopicPolicies) *map[string]adminapi.BacklogQuota { return &tp.BacklogQuotaMap }, nil),
		{
			// Pulsar takes the TTL as a query parameter on POST, or else as the body.
			path: "messageTTL", setMethods: post,
			get:     nullable(func(tp *adminapi.TopicPolicies) **int { return &tp.MessageTTLInSeconds }),
			applied: nullable(func(p *adminapi.Policies) **int { return &p.MessageTTLInSeconds }),
			set: func(in *policyRequest) (func(*adminapi.TopicPolicies) error, error) {
				v, err := topicMessageTTL(in)
				return assign(func(tp *adminapi.TopicPolicies) **int { return &tp.MessageTTLInSeconds }, &v), err
			},
			remove: clearTo(func(tp *adminapi.TopicPolicies) **int { return &tp.MessageTTLInSeconds }, nil),
		},
		tpPtr("maxProducers", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxProducerPerTopic }, func(p *adminapi.Policies) **int { return &p.MaxProducersPerTopic }, nonNegative("maxProducers must be 0 or more")),
		tpPtr("maxConsumers", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxConsumerPerTopic }, func(p *adminapi.Policies) **int { return &p.MaxConsumersPerTopic }, nonNegative("maxConsumers must be 0 or more")),
		tpPtr("maxUnackedMessagesOnConsumer", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxUnackedMessagesOnConsumer }, func(p *adminapi.Policies) **int { return &p.MaxUnackedMessagesPerConsumer }, nonNegative("maxUnackedNum must be 0 or more")),
		tpPtr("maxUnackedMessagesOnSubscription", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxUnackedMessagesOnSubscription }, func(p *adminapi.Policies) **int { return &p.MaxUnackedMessagesPerSubscription }, nonNegative("maxUnackedNum must be 0 or more")),
		tpPtr("maxConsumersPerSubscription", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxConsumersPerSubscription }, func(p *adminapi.Policies) **int { return &p.MaxConsumersPerSubscription }, nonNegative("maxConsumersPerSubscription must be 0 or more")),
		tpPtr("maxSubscriptionsPerTopic", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxSubscriptionsPerTopic }, func(p *adminapi.Policies) **int { return &p.MaxSubscriptionsPerTopic }, nonNegative("maxSubscriptionsPerTopic must be 0 or more")),
		tpPtr("maxMessageSize", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxMessageSize }, nil, nonNegative("maxMessageSize must be 0 or more")),
		tpPtr("deduplicationSnapshotInterval", func(tp *adminapi.TopicPolicies) **int { return &tp.DeduplicationSnapshotIntervalSeconds }, func(p *adminapi.Policies) **int { return &p.DeduplicationSnapshotIntervalSeconds }, nonNegative("deduplicationSnapshotInterval must be 0 or more")),
		tpPtr("persistence", func(tp *adminapi.TopicPolicies) **adminapi.PersistencePolicies { return &tp.Persistence }, func(p *adminapi.Policies) **adminapi.PersistencePolicies { return &p.Persistence }, nil),
		tpPtr("delayedDelivery", func(tp *adminapi.TopicPolicies) **adminapi.DelayedDeliveryPolicies { return &tp.DelayedDelivery }, func(p *adminapi.Policies) **adminapi.DelayedDeliveryPolicies { return &p.DelayedDeliveryPolicies }, nil),
		tpPtr("deduplicationEnabled", func(tp *adminapi.TopicPolicies) **bool { return &tp.DeduplicationEnabled }, func(p *adminapi.Policies) **bool { return &p.DeduplicationEnabled }, nil),
		tpPtr("retention", func(tp *adminapi.TopicPolicies) **adminapi.RetentionPolicies { return &tp.RetentionPolicies }, func(p *adminapi.Policies) **adminapi.RetentionPolicies { return &p.RetentionPolicies }, catalog.ValidateRetention),
		tpPtr("compactionThreshold", func(tp *adminapi.TopicPolicies) **int64 { return &tp.CompactionThreshold }, func(p *adminapi.Policies) **int64 { return &p.CompactionThreshold }, nonNegative64("compactionThreshold must be 0 or more")),
		tpPtr("inactiveTopicPolicies", func(tp *adminapi.TopicPolicies) **adminapi.InactiveTopicPolicies { return &tp.InactiveTopicPolicies }, func(p *adminapi.Policies) **adminapi.InactiveTopicPolicies { return &p.InactiveTopicPolicies }, nil),
		tpPtr("schemaValidationEnforced", func(tp *adminapi.TopicPolicies) **bool { return &tp.SchemaValidationEnforced }, nil, nil),
		tpPtr("autoSubscriptionCreation", func(tp *adminapi.TopicPolicies) **adminapi.AutoSubscriptionCreationOverride {
			return &tp.AutoSubscriptionCreationOverride
		}, func(p *adminapi.Policies) **adminapi.AutoSubscriptionCreationOverride {
			return &p.AutoSubscriptionCreationOverride
		}, nil),
		tpPtr("entryFilters", func(tp *adminapi.TopicPolicies) **adminapi.EntryFilters { return &tp.EntryFilters }, func(p *adminapi.Policies) **adminapi.EntryFilters { return &p.EntryFilters }, nil),
		tpRate("dispatchRate", cluster, func(tp *adminapi.TopicPolicies) **adminapi.DispatchRate { return &tp.DispatchRate }, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.TopicDispatchRate }, catalog.ValidateDispatchRate),
		tpRate("subscriptionDispatchRate", cluster, func(tp *adminapi.TopicPolicies) **adminapi.DispatchRate { return &tp.SubscriptionDispatchRate }, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.SubscriptionDispatchRate }, catalog.ValidateDispatchRate),
		tpRate("replicatorDispatchRate", cluster, func(tp *adminapi.TopicPolicies) **adminapi.DispatchRate { return &tp.ReplicatorDispatchRate }, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.ReplicatorDispatchRate }, catalog.ValidateDispatchRate),
		tpRate[adminapi.PublishRate]("publishRate", cluster, func(tp *adminapi.TopicPolicies) **adminapi.PublishRate { return &tp.PublishRate }, func(p *adminapi.Policies) map[string]adminapi.PublishRate { return p.PublishMaxMessageRate }, nil),
		tpRate[adminapi.SubscribeRate]("subscribeRate", cluster, func(tp *adminapi.TopicPolicies) **adminapi.SubscribeRate { return &tp.SubscribeRate }, func(p *adminapi.Policies) map[string]adminapi.SubscribeRate { return p.ClusterSubscribeRate }, nil),
		{
			path: "schemaCompatibilityStrategy", setMethods: put,
			get:     nullable(tpSchemaCompatibility),
			applied: always(func(p *adminapi.Policies) *string { return &p.SchemaCompatibilityStrategy }),
			set: func(in *policyRequest) (func(*adminapi.TopicPolicies) error, error) {
				v, err := decodeChecked(in, decodeLenientString, func(v string) error {
					return validAsNamespacePolicy(func(p *adminapi.Policies) { p.SchemaCompatibilityStrategy = v })
				})
				return assign(tpSchemaCompatibility, &v), err
			},
			remove: clearTo(tpSchemaCompatibility, nil),
		},
		{
			path: "subscriptionTypesEnabled", setMethods: post,
			get: func(tp *adminapi.TopicPolicies) (any, bool) {
				return tp.SubscriptionTypesEnabled, tp.SubscriptionTypesEnabled != nil
			},
			set: setWith(tpSubscriptionTypes, decodeValue[[]string], func(v []string) error {
				return validAsNamespacePolicy(func(p *adminapi.Policies) { p.SubscriptionTypesEnabled = v })
			}),
			remove: clearTo(tpSubscriptionTypes, nil),
		},
		{
			path: "offloadPolicies", setMethods: post,
			get:     func(tp *adminapi.TopicPolicies) (any, bool) { return rawObjectSet(tp.OffloadPolicies) },
			applied: func(p *adminapi.Policies) (any, bool) { return rawObjectSet(p.OffloadPolicies) },
			set:     setWith(tpOffloadPolicies, decodeJSONObject, nil),
			remove:  clearTo(tpOffloadPolicies, nil),
		},
		{
			path:    "backlogQuotaMap",
			get:     func(tp *adminapi.TopicPolicies) (any, bool) { return tp.BacklogQuotaMap, len(tp.BacklogQuotaMap) > 0 },
			applied: always(func(p *adminapi.Policies) *map[string]adminapi.BacklogQuota { return &p.BacklogQuotaMap }),
		},
	}
}

func tpReplicateSubscriptionState(tp *adminapi.TopicPolicies) **bool {
	return &tp.ReplicateSubscriptionState
}

func tpSchemaCompatibility(tp *adminapi.TopicPolicies) **string {
	return &tp.SchemaCompatibilityStrategy
}

func tpSubscriptionTypes(tp *adminapi.TopicPolicies) *[]string { return &tp.SubscriptionTypesEnabled }

func tpOffloadPolicies(tp *adminapi.TopicPolicies) *json.RawMessage { return &tp.OffloadPolicies }

// withApplied adds the namespace's nullable field as the value ?applied=true falls back to.
func withApplied[T any](pol tpPolicy, ns func(p *adminapi.Policies) **T) tpPolicy {
	pol.applied = nullable(ns)
	return pol
}

// topicMessageTTL reads a topic's TTL from ?messageTTL=, else from the body (read either way).
func topicMessageTTL(in *policyRequest) (int, error) {
	body, err := in.body()
	if err != nil {
		return 0, err
	}
	var v int
	if s := in.r.URL.Query().Get("messageTTL"); s != "" {
		if v, err = strconv.Atoi(s); err != nil {
			return 0, fail(http.StatusBadRequest, "Invalid messageTTL %q", s)
		}
	} else if v, err = decodeValue[int](body); err != nil {
		return 0, err
	}
	return v, nonNegativeJavaInt("Invalid value for message TTL")(v)
}
