package adminapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Policies is a namespace's policy document (`GET /admin/v2/namespaces/{tenant}/{ns}`), with every field
// Pulsar defines, under Pulsar's JSON names. docs/admin.md lists which ones Meridian enforces; the
// others are stored and returned faithfully.
//
// Rate maps (topicDispatchRate, replicatorDispatchRate, ...) are keyed by cluster name, as in Pulsar:
// the per-namespace endpoints (`.../dispatchRate`, `.../replicatorDispatchRate`) read and write the
// entry of the cluster that serves the request, so clusters sharing a configuration store each keep
// their own limits.
type Policies struct {
	AuthPolicies                          AuthPolicies                      `json:"auth_policies"`
	ReplicationClusters                   []string                          `json:"replication_clusters"`
	AllowedClusters                       []string                          `json:"allowed_clusters,omitempty"`
	Bundles                               *BundlesData                      `json:"bundles"`
	BacklogQuotaMap                       map[string]BacklogQuota           `json:"backlog_quota_map"`
	ClusterDispatchRate                   map[string]DispatchRate           `json:"clusterDispatchRate"`
	TopicDispatchRate                     map[string]DispatchRate           `json:"topicDispatchRate"`
	SubscriptionDispatchRate              map[string]DispatchRate           `json:"subscriptionDispatchRate"`
	ReplicatorDispatchRate                map[string]DispatchRate           `json:"replicatorDispatchRate"`
	ClusterSubscribeRate                  map[string]SubscribeRate          `json:"clusterSubscribeRate"`
	Persistence                           *PersistencePolicies              `json:"persistence"`
	DeduplicationEnabled                  *bool                             `json:"deduplicationEnabled"`
	AutoTopicCreationOverride             *AutoTopicCreationOverride        `json:"autoTopicCreationOverride"`
	AutoSubscriptionCreationOverride      *AutoSubscriptionCreationOverride `json:"autoSubscriptionCreationOverride"`
	PublishMaxMessageRate                 map[string]PublishRate            `json:"publishMaxMessageRate"`
	LatencyStatsSampleRate                map[string]int                    `json:"latency_stats_sample_rate"`
	MessageTTLInSeconds                   *int                              `json:"message_ttl_in_seconds"`
	SubscriptionExpirationTimeMinutes     *int                              `json:"subscription_expiration_time_minutes"`
	RetentionPolicies                     *RetentionPolicies                `json:"retention_policies"`
	Deleted                               bool                              `json:"deleted"`
	EncryptionRequired                    bool                              `json:"encryption_required"`
	DelayedDeliveryPolicies               *DelayedDeliveryPolicies          `json:"delayed_delivery_policies"`
	InactiveTopicPolicies                 *InactiveTopicPolicies            `json:"inactive_topic_policies"`
	SubscriptionAuthMode                  string                            `json:"subscription_auth_mode"`
	MaxProducersPerTopic                  *int                              `json:"max_producers_per_topic"`
	MaxConsumersPerTopic                  *int                              `json:"max_consumers_per_topic"`
	MaxConsumersPerSubscription           *int                              `json:"max_consumers_per_subscription"`
	MaxUnackedMessagesPerConsumer         *int                              `json:"max_unacked_messages_per_consumer"`
	MaxUnackedMessagesPerSubscription     *int                              `json:"max_unacked_messages_per_subscription"`
	MaxSubscriptionsPerTopic              *int                              `json:"max_subscriptions_per_topic"`
	CompactionThreshold                   *int64                            `json:"compaction_threshold"`
	OffloadThreshold                      int64                             `json:"offload_threshold"`
	OffloadThresholdInSeconds             *int64                            `json:"offload_threshold_in_seconds"`
	OffloadDeletionLagMs                  *int64                            `json:"offload_deletion_lag_ms"`
	MaxTopicsPerNamespace                 *int                              `json:"max_topics_per_namespace"`
	SchemaAutoUpdateCompatibilityStrategy string                            `json:"schema_auto_update_compatibility_strategy"`
	SchemaCompatibilityStrategy           string                            `json:"schema_compatibility_strategy"`
	IsAllowAutoUpdateSchema               *bool                             `json:"is_allow_auto_update_schema"`
	SchemaValidationEnforced              bool                              `json:"schema_validation_enforced"`
	OffloadPolicies                       OffloadPolicies                   `json:"offload_policies"`
	DeduplicationSnapshotIntervalSeconds  *int                              `json:"deduplicationSnapshotIntervalSeconds"`
	SubscriptionTypesEnabled              []string                          `json:"subscription_types_enabled"`
	Properties                            map[string]string                 `json:"properties"`
	ResourceGroupName                     *string                           `json:"resource_group_name"`
	EntryFilters                          *EntryFilters                     `json:"entryFilters"`
	Migrated                              bool                              `json:"migrated"`
	DispatcherPauseOnAckStatePersistent   *bool                             `json:"dispatcherPauseOnAckStatePersistentEnabled"`
	// ReplicateSubscriptionState makes every durable subscription of the namespace's topics
	// replicated while it is true (the shape of Pulsar's PIP-398; nil = not set).
	ReplicateSubscriptionState *bool `json:"replicate_subscription_state,omitempty"`
	// AntiAffinityGroup is kept in Pulsar's local policies; the pulsaradmin Go package sends it inside
	// Policies, so it is accepted and stored here.
	AntiAffinityGroup string `json:"antiAffinityGroup,omitempty"`
	// BookieAffinityGroup is kept in Pulsar's local policies (`.../persistence/bookieAffinity`).
	BookieAffinityGroup *BookieAffinityGroupData `json:"bookieAffinityGroup,omitempty"`
}

// NewPolicies returns Pulsar's defaults for a new namespace (empty maps, offload threshold -1,
// schema auto-update strategy Full, compatibility UNDEFINED, subscription auth mode None).
func NewPolicies() Policies {
	return Policies{
		AuthPolicies:                          NewAuthPolicies(),
		ReplicationClusters:                   []string{},
		BacklogQuotaMap:                       map[string]BacklogQuota{},
		ClusterDispatchRate:                   map[string]DispatchRate{},
		TopicDispatchRate:                     map[string]DispatchRate{},
		SubscriptionDispatchRate:              map[string]DispatchRate{},
		ReplicatorDispatchRate:                map[string]DispatchRate{},
		ClusterSubscribeRate:                  map[string]SubscribeRate{},
		PublishMaxMessageRate:                 map[string]PublishRate{},
		LatencyStatsSampleRate:                map[string]int{},
		SubscriptionAuthMode:                  "None",
		OffloadThreshold:                      -1,
		SchemaAutoUpdateCompatibilityStrategy: "Full",
		SchemaCompatibilityStrategy:           "UNDEFINED",
		SubscriptionTypesEnabled:              []string{},
		Properties:                            map[string]string{},
	}
}

// Normalize fills nil maps and slices with empty ones and applies the aliases Pulsar accepts (the
// deprecated backlog quota "limit", the Go client's "maxDelayInMillis"), so that a stored document
// always has one canonical form.
func (p *Policies) Normalize() {
	if p.ReplicationClusters == nil {
		p.ReplicationClusters = []string{}
	}
	if p.BacklogQuotaMap == nil {
		p.BacklogQuotaMap = map[string]BacklogQuota{}
	}
	for k, q := range p.BacklogQuotaMap {
		q.Normalize()
		p.BacklogQuotaMap[k] = q
	}
	if p.ClusterDispatchRate == nil {
		p.ClusterDispatchRate = map[string]DispatchRate{}
	}
	if p.TopicDispatchRate == nil {
		p.TopicDispatchRate = map[string]DispatchRate{}
	}
	if p.SubscriptionDispatchRate == nil {
		p.SubscriptionDispatchRate = map[string]DispatchRate{}
	}
	if p.ReplicatorDispatchRate == nil {
		p.ReplicatorDispatchRate = map[string]DispatchRate{}
	}
	if p.ClusterSubscribeRate == nil {
		p.ClusterSubscribeRate = map[string]SubscribeRate{}
	}
	if p.PublishMaxMessageRate == nil {
		p.PublishMaxMessageRate = map[string]PublishRate{}
	}
	if p.LatencyStatsSampleRate == nil {
		p.LatencyStatsSampleRate = map[string]int{}
	}
	if p.SubscriptionTypesEnabled == nil {
		p.SubscriptionTypesEnabled = []string{}
	}
	if p.Properties == nil {
		p.Properties = map[string]string{}
	}
	if p.SubscriptionAuthMode == "" {
		p.SubscriptionAuthMode = "None"
	}
	if p.SchemaAutoUpdateCompatibilityStrategy == "" {
		p.SchemaAutoUpdateCompatibilityStrategy = "Full"
	}
	if p.SchemaCompatibilityStrategy == "" {
		p.SchemaCompatibilityStrategy = "UNDEFINED"
	}
	p.AuthPolicies.normalize()
	if p.DelayedDeliveryPolicies != nil {
		p.DelayedDeliveryPolicies.Normalize()
	}
}

// AuthPolicies holds namespace permissions: role -> actions, topic -> role -> actions, and
// subscription -> roles. Stored, not enforced (Meridian has no authorization yet).
type AuthPolicies struct {
	NamespaceAuth         map[string][]string            `json:"namespace_auth"`
	DestinationAuth       map[string]map[string][]string `json:"destination_auth"`
	SubscriptionAuthRoles map[string][]string            `json:"subscription_auth_roles"`
}

// NewAuthPolicies returns empty permission maps.
func NewAuthPolicies() AuthPolicies {
	return AuthPolicies{
		NamespaceAuth:         map[string][]string{},
		DestinationAuth:       map[string]map[string][]string{},
		SubscriptionAuthRoles: map[string][]string{},
	}
}

func (a *AuthPolicies) normalize() {
	if a.NamespaceAuth == nil {
		a.NamespaceAuth = map[string][]string{}
	}
	if a.DestinationAuth == nil {
		a.DestinationAuth = map[string]map[string][]string{}
	}
	if a.SubscriptionAuthRoles == nil {
		a.SubscriptionAuthRoles = map[string][]string{}
	}
}

// BundlesData is a namespace's bundle split: the boundaries of its hash ranges, 0x00000000 first
// and 0xffffffff last (docs/cluster.md).
type BundlesData struct {
	Boundaries []string `json:"boundaries"`
	NumBundles int      `json:"numBundles"`
}

// DefaultBundleCount is Pulsar's defaultNumberOfNamespaceBundles.
const DefaultBundleCount = 4

// DefaultBundles is the split of a namespace created without one: DefaultBundleCount equal ranges.
func DefaultBundles() *BundlesData { return EvenBundles(DefaultBundleCount) }

// EvenBundles splits the hash range into n equal bundles, as Pulsar does for numBundles: boundary
// i is i * (2^32 / n), the last is 0xffffffff.
func EvenBundles(n int) *BundlesData {
	n = max(n, 1)
	seg := (uint64(1) << 32) / uint64(n)
	bounds := make([]string, n+1)
	for i := range n {
		bounds[i] = fmt.Sprintf("0x%08x", uint64(i)*seg)
	}
	bounds[n] = "0xffffffff"
	return &BundlesData{Boundaries: bounds, NumBundles: n}
}

// RetentionPolicies: keep acknowledged data for this long / up to this size (-1 = unlimited, 0 = none).
type RetentionPolicies struct {
	RetentionTimeInMinutes int   `json:"retentionTimeInMinutes"`
	RetentionSizeInMB      int64 `json:"retentionSizeInMB"`
}

// Backlog quota types (query parameter backlogQuotaType and backlog_quota_map keys).
const (
	BacklogQuotaDestinationStorage = "destination_storage"
	BacklogQuotaMessageAge         = "message_age"
)

// Backlog quota retention policies (what happens when the quota is exceeded).
const (
	BacklogPolicyProducerRequestHold     = "producer_request_hold"
	BacklogPolicyProducerException       = "producer_exception"
	BacklogPolicyConsumerBacklogEviction = "consumer_backlog_eviction"
)

// BacklogQuota bounds a topic's backlog by size (bytes) or age (seconds).
type BacklogQuota struct {
	// Limit is Pulsar's deprecated size field; it is accepted (also as a numeric string, as Pulsar's
	// own test suite sends it) and folded into LimitSize.
	Limit     *FlexInt64 `json:"limit,omitempty"`
	LimitSize int64      `json:"limitSize"`
	LimitTime int64      `json:"limitTime"`
	Policy    string     `json:"policy"`
}

// Normalize folds the deprecated Limit into LimitSize.
func (q *BacklogQuota) Normalize() {
	if q.Limit != nil {
		if q.LimitSize == 0 {
			q.LimitSize = int64(*q.Limit)
		}
		q.Limit = nil
	}
}

// FlexInt64 is an integer that also decodes from a JSON string holding a decimal integer (Jackson's
// coercion, which Pulsar's clients rely on in places).
type FlexInt64 int64

// UnmarshalJSON accepts 42 and "42".
func (f *FlexInt64) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer: %q", s)
		}
		*f = FlexInt64(n)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*f = FlexInt64(n)
	return nil
}

// DispatchRate limits messages and bytes per ratePeriodInSecond (-1 or 0 = unlimited, as in Pulsar).
type DispatchRate struct {
	DispatchThrottlingRateInMsg  int   `json:"dispatchThrottlingRateInMsg"`
	DispatchThrottlingRateInByte int64 `json:"dispatchThrottlingRateInByte"`
	RelativeToPublishRate        bool  `json:"relativeToPublishRate"`
	RatePeriodInSecond           int   `json:"ratePeriodInSecond"`
}

// SubscribeRate limits subscribe operations per consumer.
type SubscribeRate struct {
	SubscribeThrottlingRatePerConsumer int `json:"subscribeThrottlingRatePerConsumer"`
	RatePeriodInSecond                 int `json:"ratePeriodInSecond"`
}

// PublishRate limits producers' publishing.
type PublishRate struct {
	PublishThrottlingRateInMsg  int   `json:"publishThrottlingRateInMsg"`
	PublishThrottlingRateInByte int64 `json:"publishThrottlingRateInByte"`
}

// PersistencePolicies are BookKeeper's replication settings; stored and returned, not used (Meridian
// stores each topic on its broker's disk).
type PersistencePolicies struct {
	BookkeeperEnsemble             int     `json:"bookkeeperEnsemble"`
	BookkeeperWriteQuorum          int     `json:"bookkeeperWriteQuorum"`
	BookkeeperAckQuorum            int     `json:"bookkeeperAckQuorum"`
	ManagedLedgerMaxMarkDeleteRate float64 `json:"managedLedgerMaxMarkDeleteRate"`
	// ManagedLedgerStorageClassName is Pulsar 4's storage class choice.
	ManagedLedgerStorageClassName string `json:"managedLedgerStorageClassName,omitempty"`
}

// BookieAffinityGroupData is stored and returned; Meridian has no bookies.
type BookieAffinityGroupData struct {
	BookkeeperAffinityGroupPrimary   string `json:"bookkeeperAffinityGroupPrimary"`
	BookkeeperAffinityGroupSecondary string `json:"bookkeeperAffinityGroupSecondary,omitempty"`
}

// Topic types for AutoTopicCreationOverride.TopicType.
const (
	TopicTypePartitioned    = "partitioned"
	TopicTypeNonPartitioned = "non-partitioned"
)

// AutoTopicCreationOverride overrides the broker's --auto-topic-creation for a namespace.
type AutoTopicCreationOverride struct {
	AllowAutoTopicCreation bool   `json:"allowAutoTopicCreation"`
	TopicType              string `json:"topicType,omitempty"`
	DefaultNumPartitions   *int   `json:"defaultNumPartitions,omitempty"`
}

// Validate applies Pulsar's rules and returns Pulsar's detail text on failure.
func (o AutoTopicCreationOverride) Validate() error {
	if !o.AllowAutoTopicCreation {
		return nil
	}
	switch o.TopicType {
	case TopicTypePartitioned:
		if o.DefaultNumPartitions == nil {
			return fmt.Errorf("[defaultNumPartitions] cannot be null when the type is partitioned.")
		}
		if *o.DefaultNumPartitions < 1 {
			return fmt.Errorf("[defaultNumPartitions] cannot be less than 1 for partition type.")
		}
	case TopicTypeNonPartitioned:
		if o.DefaultNumPartitions != nil {
			return fmt.Errorf("[defaultNumPartitions] is not allowed to be set when the type is non-partition.")
		}
	default:
		return fmt.Errorf("[topicType] must be %q or %q", TopicTypePartitioned, TopicTypeNonPartitioned)
	}
	return nil
}

// AutoSubscriptionCreationOverride overrides auto subscription creation.
type AutoSubscriptionCreationOverride struct {
	AllowAutoSubscriptionCreation bool `json:"allowAutoSubscriptionCreation"`
}

// DelayedDeliveryPolicies configures delayed delivery. Pulsar's broker names the maximum delay
// maxDeliveryDelayInMillis; the pulsaradmin Go package sends maxDelayInMillis. Both are accepted and
// both are returned.
type DelayedDeliveryPolicies struct {
	TickTime                 float64 `json:"tickTime"`
	Active                   bool    `json:"active"`
	MaxDeliveryDelayInMillis int64   `json:"maxDeliveryDelayInMillis"`
	MaxDelayInMillis         int64   `json:"maxDelayInMillis,omitempty"`
}

// Normalize makes both maximum-delay names carry the same value.
func (d *DelayedDeliveryPolicies) Normalize() {
	if d.MaxDeliveryDelayInMillis == 0 {
		d.MaxDeliveryDelayInMillis = d.MaxDelayInMillis
	}
	d.MaxDelayInMillis = d.MaxDeliveryDelayInMillis
}

// Inactive topic delete modes.
const (
	InactiveTopicDeleteWhenNoSubscriptions       = "delete_when_no_subscriptions"
	InactiveTopicDeleteWhenSubscriptionsCaughtUp = "delete_when_subscriptions_caught_up"
)

// InactiveTopicPolicies: stored and returned.
type InactiveTopicPolicies struct {
	InactiveTopicDeleteMode    *string `json:"inactiveTopicDeleteMode"`
	MaxInactiveDurationSeconds int     `json:"maxInactiveDurationSeconds"`
	DeleteWhileInactive        bool    `json:"deleteWhileInactive"`
}

// EntryFilters names broker entry filters (stored only).
type EntryFilters struct {
	EntryFilterNames string `json:"entryFilterNames"`
}

// OffloadPolicies (tiered storage) are stored verbatim as a JSON object: Pulsar has grown dozens of
// driver-specific fields and Meridian has no tiered storage, so it keeps whatever object it is given
// (or null) and returns it unchanged.
type OffloadPolicies = json.RawMessage

// PartitionedTopicMetadata is `GET .../partitions`: 0 partitions means non-partitioned.
type PartitionedTopicMetadata struct {
	Partitions int               `json:"partitions"`
	Properties map[string]string `json:"properties,omitempty"`
	// Deleted marks a partitioned topic being deleted (Pulsar's field; Meridian deletes atomically).
	Deleted bool `json:"deleted,omitempty"`
	// CreationTimestamp (ms) is a Meridian addition, used for topicCreationTimeStamp in stats.
	CreationTimestamp int64 `json:"creationTimestamp,omitempty"`
}

// TopicPolicies are the topic-level overrides (`/admin/v2/persistent/{t}/{ns}/{topic}/<policy>`), with
// the field names of Pulsar's TopicPolicies. nil / absent = not set at topic level (the namespace value
// applies). Topic-level rates are single values, not per-cluster maps.
type TopicPolicies struct {
	BacklogQuotaMap                      map[string]BacklogQuota           `json:"backLogQuotaMap,omitempty"`
	SubscriptionTypesEnabled             []string                          `json:"subscriptionTypesEnabled,omitempty"`
	ReplicationClusters                  []string                          `json:"replicationClusters,omitempty"`
	ShadowTopics                         []string                          `json:"shadowTopics,omitempty"`
	IsGlobal                             bool                              `json:"isGlobal,omitempty"`
	Persistence                          *PersistencePolicies              `json:"persistence,omitempty"`
	RetentionPolicies                    *RetentionPolicies                `json:"retentionPolicies,omitempty"`
	DeduplicationEnabled                 *bool                             `json:"deduplicationEnabled,omitempty"`
	MessageTTLInSeconds                  *int                              `json:"messageTTLInSeconds,omitempty"`
	MaxProducerPerTopic                  *int                              `json:"maxProducerPerTopic,omitempty"`
	MaxConsumerPerTopic                  *int                              `json:"maxConsumerPerTopic,omitempty"`
	MaxConsumersPerSubscription          *int                              `json:"maxConsumersPerSubscription,omitempty"`
	MaxUnackedMessagesOnConsumer         *int                              `json:"maxUnackedMessagesOnConsumer,omitempty"`
	MaxUnackedMessagesOnSubscription     *int                              `json:"maxUnackedMessagesOnSubscription,omitempty"`
	DelayedDelivery                      *DelayedDeliveryPolicies          `json:"delayedDelivery,omitempty"`
	OffloadPolicies                      OffloadPolicies                   `json:"offloadPolicies,omitempty"`
	InactiveTopicPolicies                *InactiveTopicPolicies            `json:"inactiveTopicPolicies,omitempty"`
	DispatchRate                         *DispatchRate                     `json:"dispatchRate,omitempty"`
	SubscriptionDispatchRate             *DispatchRate                     `json:"subscriptionDispatchRate,omitempty"`
	CompactionThreshold                  *int64                            `json:"compactionThreshold,omitempty"`
	PublishRate                          *PublishRate                      `json:"publishRate,omitempty"`
	SubscribeRate                        *SubscribeRate                    `json:"subscribeRate,omitempty"`
	DeduplicationSnapshotIntervalSeconds *int                              `json:"deduplicationSnapshotIntervalSeconds,omitempty"`
	MaxMessageSize                       *int                              `json:"maxMessageSize,omitempty"`
	MaxSubscriptionsPerTopic             *int                              `json:"maxSubscriptionsPerTopic,omitempty"`
	ReplicatorDispatchRate               *DispatchRate                     `json:"replicatorDispatchRate,omitempty"`
	SchemaCompatibilityStrategy          *string                           `json:"schemaCompatibilityStrategy,omitempty"`
	EntryFilters                         *EntryFilters                     `json:"entryFilters,omitempty"`
	SchemaValidationEnforced             *bool                             `json:"schemaValidationEnforced,omitempty"`
	AutoSubscriptionCreationOverride     *AutoSubscriptionCreationOverride `json:"autoSubscriptionCreationOverride,omitempty"`
	DispatcherPauseOnAckStatePersistent  *bool                             `json:"dispatcherPauseOnAckStatePersistentEnabled,omitempty"`
	// ReplicateSubscriptionState overrides the namespace's replicate_subscription_state.
	ReplicateSubscriptionState *bool `json:"replicateSubscriptionState,omitempty"`
	// Properties are the topic's user properties (`.../properties`) of a non-partitioned topic.
	// (A partitioned topic keeps them in its PartitionedTopicMetadata, as Pulsar does.)
	Properties map[string]string `json:"properties,omitempty"`
}

// Normalize applies the same aliases as Policies.Normalize.
func (t *TopicPolicies) Normalize() {
	for k, q := range t.BacklogQuotaMap {
		q.Normalize()
		t.BacklogQuotaMap[k] = q
	}
	if t.DelayedDelivery != nil {
		t.DelayedDelivery.Normalize()
	}
}

// IsEmpty reports whether no topic-level policy is set.
func (t TopicPolicies) IsEmpty() bool {
	b, _ := json.Marshal(t)
	return string(b) == "{}"
}
