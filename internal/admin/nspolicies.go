package admin

import (
	"encoding/json"
	"maps"
	"net/http"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
)

// nsPolicy is a row of the namespace policy table.
type nsPolicy = policy[adminapi.Policies]

// clusterMapPolicy is a per-cluster rate map entry for the serving cluster.
func clusterMapPolicy[T any](path, cluster string, field func(p *adminapi.Policies) map[string]T, check func(T) error) nsPolicy {
	return nsPolicy{
		path:       path,
		setMethods: post,
		get: func(p *adminapi.Policies) (any, bool) {
			v, found := field(p)[cluster]
			return v, found
		},
		set: func(in *policyRequest) (func(*adminapi.Policies) error, error) {
			v, err := decodeChecked(in, decodeValue[T], check)
			if err != nil {
				return nil, err
			}
			return func(p *adminapi.Policies) error {
				field(p)[cluster] = v
				return nil
			}, nil
		},
		remove: func(*policyRequest) (func(*adminapi.Policies) error, error) {
			return func(p *adminapi.Policies) error {
				delete(field(p), cluster)
				return nil
			}, nil
		},
	}
}

// namespacePolicies is the namespace policy table (policies.go). Grants (permissions) and single
// properties, whose paths carry a role or key, are registered in namespaces.go.
func namespacePolicies(cluster string) []nsPolicy {
	return []nsPolicy{
		replicateSubscriptionStatePolicy(nsReplicateSubscriptionState),
		namespaceMigrationPolicy(),
		{
			path: "replication", get: always(func(p *adminapi.Policies) *[]string { return &p.ReplicationClusters }),
			setMethods: post, replication: true,
			set: replicationChange(func(p *adminapi.Policies, sent, _ []string) { p.ReplicationClusters = sent }),
		},
		{path: "backlogQuotaMap", get: always(func(p *adminapi.Policies) *map[string]adminapi.BacklogQuota { return &p.BacklogQuotaMap })},
		backlogQuotaPolicy(func(p *adminapi.Policies) *map[string]adminapi.BacklogQuota { return &p.BacklogQuotaMap },
			func(p *adminapi.Policies, typ string, q adminapi.BacklogQuota) error {
				if p.RetentionPolicies != nil && typ == adminapi.BacklogQuotaDestinationStorage && !retentionCovers(*p.RetentionPolicies, q) {
					return fail(http.StatusPreconditionFailed, "Backlog Quota exceeds configured retention quota for namespace. Please increase retention quota and retry")
				}
				return nil
			}),
		{
			// PUT merges, DELETE clears.
			path: "properties", get: always(func(p *adminapi.Policies) *map[string]string { return &p.Properties }),
			setMethods: put,
			set: func(in *policyRequest) (func(*adminapi.Policies) error, error) {
				props, err := decodeInput[map[string]string](in)
				return func(p *adminapi.Policies) error {
					maps.Copy(p.Properties, props)
					return nil
				}, err
			},
			remove: clearTo(func(p *adminapi.Policies) *map[string]string { return &p.Properties }, map[string]string{}),
		},
		{path: "bundles", get: always(func(p *adminapi.Policies) **adminapi.BundlesData { return &p.Bundles })},
		ptrPolicy("messageTTL", post, func(p *adminapi.Policies) **int { return &p.MessageTTLInSeconds }, nonNegativeJavaInt("Invalid value for message TTL")),
		ptrPolicy("retention", post, func(p *adminapi.Policies) **adminapi.RetentionPolicies { return &p.RetentionPolicies }, func(v adminapi.RetentionPolicies) error {
			return catalog.ValidateRetention(v)
		}),
		ptrPolicy("autoTopicCreation", post, func(p *adminapi.Policies) **adminapi.AutoTopicCreationOverride { return &p.AutoTopicCreationOverride },
			func(v adminapi.AutoTopicCreationOverride) error {
				if err := v.Validate(); err != nil {
					return fail(http.StatusPreconditionFailed, "Invalid configuration for autoTopicCreationOverride. the detail is %v", err)
				}
				return nil
			}),
		ptrPolicy("autoSubscriptionCreation", post, func(p *adminapi.Policies) **adminapi.AutoSubscriptionCreationOverride {
			return &p.AutoSubscriptionCreationOverride
		}, nil),
		ptrPolicy("deduplication", post, func(p *adminapi.Policies) **bool { return &p.DeduplicationEnabled }, nil),
		ptrPolicy("offloadDeletionLagMs", put, func(p *adminapi.Policies) **int64 { return &p.OffloadDeletionLagMs }, nonNegative64("offloadDeletionLagMs must be 0 or more")),
		ptrPolicy("offloadThresholdInSeconds", put, func(p *adminapi.Policies) **int64 { return &p.OffloadThresholdInSeconds }, nonNegative64("Invalid value for offloadThresholdInSecond")),
		ptrPolicy("compactionThreshold", put, func(p *adminapi.Policies) **int64 { return &p.CompactionThreshold }, nonNegative64("compactionThreshold must be 0 or more")),
		ptrPolicy("maxConsumersPerSubscription", post, func(p *adminapi.Policies) **int { return &p.MaxConsumersPerSubscription }, nonNegative("maxConsumersPerSubscription must be 0 or more")),
		ptrPolicy("maxConsumersPerTopic", post, func(p *adminapi.Policies) **int { return &p.MaxConsumersPerTopic }, nonNegative("maxConsumersPerTopic must be 0 or more")),
		ptrPolicy("maxProducersPerTopic", post, func(p *adminapi.Policies) **int { return &p.MaxProducersPerTopic }, nonNegative("maxProducersPerTopic must be 0 or more")),
		ptrPolicy("maxUnackedMessagesPerConsumer", post, func(p *adminapi.Policies) **int { return &p.MaxUnackedMessagesPerConsumer }, nonNegative("maxUnackedMessagesPerConsumer must be 0 or more")),
		ptrPolicy("maxUnackedMessagesPerSubscription", post, func(p *adminapi.Policies) **int { return &p.MaxUnackedMessagesPerSubscription }, nonNegative("maxUnackedMessagesPerSubscription must be 0 or more")),
		ptrPolicy("maxSubscriptionsPerTopic", post, func(p *adminapi.Policies) **int { return &p.MaxSubscriptionsPerTopic }, nonNegative("maxSubscriptionsPerTopic must be 0 or more")),
		ptrPolicy("maxTopicsPerNamespace", post, func(p *adminapi.Policies) **int { return &p.MaxTopicsPerNamespace }, nonNegative("maxTopicsPerNamespace must be 0 or more")),
		ptrPolicy("subscriptionExpirationTime", post, func(p *adminapi.Policies) **int { return &p.SubscriptionExpirationTimeMinutes }, nonNegativeJavaInt("Invalid value for subscription expiration time")),
		ptrPolicy("deduplicationSnapshotInterval", post, func(p *adminapi.Policies) **int { return &p.DeduplicationSnapshotIntervalSeconds }, nonNegative("deduplicationSnapshotInterval must be 0 or more")),
		ptrPolicy("persistence", post, func(p *adminapi.Policies) **adminapi.PersistencePolicies { return &p.Persistence }, func(v adminapi.PersistencePolicies) error {
			if v.BookkeeperEnsemble < v.BookkeeperWriteQuorum || v.BookkeeperWriteQuorum < v.BookkeeperAckQuorum {
				return fail(http.StatusPreconditionFailed, "Bookkeeper Ensemble (%d) >= WriteQuorum (%d) >= AckQuoru (%d)", v.BookkeeperEnsemble, v.BookkeeperWriteQuorum, v.BookkeeperAckQuorum)
			}
			return nil
		}),
		ptrPolicy("persistence/bookieAffinity", post, func(p *adminapi.Policies) **adminapi.BookieAffinityGroupData { return &p.BookieAffinityGroup }, nil),
		ptrPolicy("inactiveTopicPolicies", post, func(p *adminapi.Policies) **adminapi.InactiveTopicPolicies { return &p.InactiveTopicPolicies }, nil),
		ptrPolicy("delayedDelivery", post, func(p *adminapi.Policies) **adminapi.DelayedDeliveryPolicies { return &p.DelayedDeliveryPolicies }, nil),
		ptrPolicy("isAllowAutoUpdateSchema", post, func(p *adminapi.Policies) **bool { return &p.IsAllowAutoUpdateSchema }, nil),
		ptrPolicy("entryFilters", post, func(p *adminapi.Policies) **adminapi.EntryFilters { return &p.EntryFilters }, nil),
		ptrPolicy("dispatcherPauseOnAckStatePersistent", post, func(p *adminapi.Policies) **bool { return &p.DispatcherPauseOnAckStatePersistent }, nil),

		clusterMapPolicy("dispatchRate", cluster, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.TopicDispatchRate }, catalog.ValidateDispatchRate),
		clusterMapPolicy("subscriptionDispatchRate", cluster, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.SubscriptionDispatchRate }, catalog.ValidateDispatchRate),
		clusterMapPolicy("replicatorDispatchRate", cluster, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.ReplicatorDispatchRate }, catalog.ValidateDispatchRate),
		clusterMapPolicy("subscribeRate", cluster, func(p *adminapi.Policies) map[string]adminapi.SubscribeRate { return p.ClusterSubscribeRate }, nil),
		clusterMapPolicy[adminapi.PublishRate]("publishRate", cluster, func(p *adminapi.Policies) map[string]adminapi.PublishRate { return p.PublishMaxMessageRate }, nil),

		fieldPolicy("offloadThreshold", put, func(p *adminapi.Policies) *int64 { return &p.OffloadThreshold }, decodeValue[int64], nil),
		fieldPolicy("schemaValidationEnforced", post, func(p *adminapi.Policies) *bool { return &p.SchemaValidationEnforced }, decodeLenientBool, new(bool)),
		fieldPolicy("encryptionRequired", post, func(p *adminapi.Policies) *bool { return &p.EncryptionRequired }, decodeLenientBool, nil),
		enumPolicy("schemaCompatibilityStrategy", put, func(p *adminapi.Policies) *string { return &p.SchemaCompatibilityStrategy }),
		enumPolicy("schemaAutoUpdateCompatibilityStrategy", put, func(p *adminapi.Policies) *string { return &p.SchemaAutoUpdateCompatibilityStrategy }),
		enumPolicy("subscriptionAuthMode", post, func(p *adminapi.Policies) *string { return &p.SubscriptionAuthMode }),
		{
			path: "antiAffinity", setMethods: post, plainText: true,
			get:    func(p *adminapi.Policies) (any, bool) { return p.AntiAffinityGroup, p.AntiAffinityGroup != "" },
			set:    setWith(antiAffinity, decodeLenientString, nil),
			remove: clearTo(antiAffinity, ""),
		},
		fieldPolicy("subscriptionTypesEnabled", post, func(p *adminapi.Policies) *[]string { return &p.SubscriptionTypesEnabled }, decodeValue[[]string], &[]string{}),
		{
			path: "offloadPolicies", setMethods: post,
			get:    func(p *adminapi.Policies) (any, bool) { return rawObjectSet(p.OffloadPolicies) },
			set:    setWith(nsOffloadPolicies, decodeJSONObject, nil),
			remove: clearTo(nsOffloadPolicies, nil),
		},
		{
			path: "resourcegroup", setMethods: noWrites,
			get:    nullable(func(p *adminapi.Policies) **string { return &p.ResourceGroupName }),
			remove: clearTo(func(p *adminapi.Policies) **string { return &p.ResourceGroupName }, nil),
		},
	}
}

func antiAffinity(p *adminapi.Policies) *string { return &p.AntiAffinityGroup }

func nsOffloadPolicies(p *adminapi.Policies) *json.RawMessage { return &p.OffloadPolicies }

// fieldPolicy is a field that always has a value, written from the body with decode; DELETE sets
// it to *cleared (nil: no DELETE).
func fieldPolicy[T any](path string, methods []string, field func(*adminapi.Policies) *T, decode func([]byte) (T, error), cleared *T) nsPolicy {
	pol := nsPolicy{path: path, setMethods: methods, get: always(field), set: setWith(field, decode, nil)}
	if cleared != nil {
		pol.remove = clearTo(field, *cleared)
	}
	return pol
}

// enumPolicy is a string field written as a JSON string (PUT/POST) and read back as a JSON string;
// the value is checked against Pulsar's enum before the namespace is looked up, and the document
// with it before it is stored.
func enumPolicy(path string, methods []string, field func(p *adminapi.Policies) *string) nsPolicy {
	return nsPolicy{
		path: path, setMethods: methods, get: always(field),
		set: func(in *policyRequest) (func(*adminapi.Policies) error, error) {
			v, err := decodeChecked(in, decodeLenientString, func(v string) error {
				return validAsNamespacePolicy(func(p *adminapi.Policies) { *field(p) = v })
			})
			return func(p *adminapi.Policies) error {
				*field(p) = v
				return catalog.ValidatePolicies(p)
			}, err
		},
	}
}
