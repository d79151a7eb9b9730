package catalog

import (
	"math"
	"slices"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/wire"
)

var (
	schemaCompatStrategies = []string{"UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD",
		"FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"}
	schemaAutoUpdateStrategies = []string{"AutoUpdateDisabled", "Backward", "Forward", "Full", "AlwaysCompatible",
		"BackwardTransitive", "ForwardTransitive", "FullTransitive"}
	subscriptionAuthModes = []string{"None", "Prefix"}
	backlogQuotaTypes     = []string{adminapi.BacklogQuotaDestinationStorage, adminapi.BacklogQuotaMessageAge}
	backlogPolicies       = []string{adminapi.BacklogPolicyProducerRequestHold, adminapi.BacklogPolicyProducerException,
		adminapi.BacklogPolicyConsumerBacklogEviction}
	subscriptionTypes = []string{"Exclusive", "Shared", "Failover", "Key_Shared"}
	inactiveModes     = []string{adminapi.InactiveTopicDeleteWhenNoSubscriptions, adminapi.InactiveTopicDeleteWhenSubscriptionsCaughtUp}
)

// ValidatePolicies checks a whole namespace policy document with Pulsar's rules and refusal texts
// (ErrPrecondition). It does not check the replication list against clusters and tenants; see
// ValidateReplicationClusters.
func ValidatePolicies(p *adminapi.Policies) error {
	nonNeg := func(v *int, msg string) error {
		if v != nil && *v < 0 {
			return refuse(ErrPrecondition, "%s", msg)
		}
		return nil
	}
	// A TTL or expiration is a Java int in Pulsar; the broker multiplies it into nanoseconds, where
	// a larger value could wrap into a tiny age.
	nonNegJavaInt := func(v *int, msg string) error {
		if v != nil && (*v < 0 || *v > math.MaxInt32) {
			return refuse(ErrPrecondition, "%s", msg)
		}
		return nil
	}
	checks := []error{
		nonNegJavaInt(p.MessageTTLInSeconds, "Invalid value for message TTL"),
		nonNegJavaInt(p.SubscriptionExpirationTimeMinutes, "Invalid value for subscription expiration time"),
		nonNeg(p.MaxTopicsPerNamespace, "maxTopicsPerNamespace must be 0 or more"),
		nonNeg(p.MaxProducersPerTopic, "maxProducersPerTopic must be 0 or more"),
		nonNeg(p.MaxConsumersPerTopic, "maxConsumersPerTopic must be 0 or more"),
		nonNeg(p.MaxConsumersPerSubscription, "maxConsumersPerSubscription must be 0 or more"),
		nonNeg(p.MaxUnackedMessagesPerConsumer, "maxUnackedMessagesPerConsumer must be 0 or more"),
		nonNeg(p.MaxUnackedMessagesPerSubscription, "maxUnackedMessagesPerSubscription must be 0 or more"),
		nonNeg(p.MaxSubscriptionsPerTopic, "maxSubscriptionsPerTopic must be 0 or more"),
		nonNeg(p.DeduplicationSnapshotIntervalSeconds, "deduplicationSnapshotInterval must be 0 or more"),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	// The whole document is one metadata value: unbounded properties would grow it until every
	// later write to the namespace failed.
	if err := wire.CheckProperties("namespace", p.Properties); err != nil {
		return refuse(ErrPrecondition, "Invalid namespace properties: %v", err)
	}
	if p.OffloadThresholdInSeconds != nil && *p.OffloadThresholdInSeconds < 0 {
		return refuse(ErrPrecondition, "Invalid value for offloadThresholdInSecond")
	}
	if p.CompactionThreshold != nil && *p.CompactionThreshold < 0 {
		return refuse(ErrPrecondition, "compactionThreshold must be 0 or more")
	}
	if p.OffloadDeletionLagMs != nil && *p.OffloadDeletionLagMs < 0 {
		return refuse(ErrPrecondition, "offloadDeletionLagMs must be 0 or more")
	}
	if r := p.RetentionPolicies; r != nil {
		if err := ValidateRetention(*r); err != nil {
			return err
		}
	}
	for typ, q := range p.BacklogQuotaMap {
		if !slices.Contains(backlogQuotaTypes, typ) {
			return refuse(ErrPrecondition, "Invalid backlog quota type %q", typ)
		}
		if err := ValidateBacklogQuota(q); err != nil {
			return err
		}
	}
	if o := p.AutoTopicCreationOverride; o != nil {
		if err := o.Validate(); err != nil {
			return refuse(ErrPrecondition, "Invalid configuration for autoTopicCreationOverride. the detail is %v", err)
		}
	}
	if !slices.Contains(schemaCompatStrategies, p.SchemaCompatibilityStrategy) {
		return refuse(ErrPrecondition, "Invalid schema compatibility strategy %q", p.SchemaCompatibilityStrategy)
	}
	if !slices.Contains(schemaAutoUpdateStrategies, p.SchemaAutoUpdateCompatibilityStrategy) {
		return refuse(ErrPrecondition, "Invalid schema auto update compatibility strategy %q", p.SchemaAutoUpdateCompatibilityStrategy)
	}
	if !slices.Contains(subscriptionAuthModes, p.SubscriptionAuthMode) {
		return refuse(ErrPrecondition, "Invalid subscription auth mode %q", p.SubscriptionAuthMode)
	}
	for _, t := range p.SubscriptionTypesEnabled {
		if !slices.Contains(subscriptionTypes, t) {
			return refuse(ErrPrecondition, "Invalid subscription type %q", t)
		}
	}
	if i := p.InactiveTopicPolicies; i != nil && i.InactiveTopicDeleteMode != nil && !slices.Contains(inactiveModes, *i.InactiveTopicDeleteMode) {
		return refuse(ErrPrecondition, "Invalid inactiveTopicDeleteMode %q", *i.InactiveTopicDeleteMode)
	}
	for _, rates := range []map[string]adminapi.DispatchRate{p.TopicDispatchRate, p.SubscriptionDispatchRate, p.ReplicatorDispatchRate, p.ClusterDispatchRate} {
		for _, r := range rates {
			if err := ValidateDispatchRate(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxRetentionSizeInMB is the largest retention size whose bytes fit an int64.
const maxRetentionSizeInMB = math.MaxInt64 >> 20

// validatePolicyUpdate is ValidatePolicies for a write that changes before into after: a bound
// that a value stored by an older build (or another cluster's) exceeds does not refuse a write that
// leaves that value as it is, or that only removes properties, so such a namespace stays editable;
// the node reads an out-of-range time or size as the longest or largest (internal/node).
func validatePolicyUpdate(before, after *adminapi.Policies) error {
	check := *after
	sameInt := func(a, b *int) bool { return a != nil && b != nil && *a == *b }
	if sameInt(before.MessageTTLInSeconds, after.MessageTTLInSeconds) {
		check.MessageTTLInSeconds = nil
	}
	if sameInt(before.SubscriptionExpirationTimeMinutes, after.SubscriptionExpirationTimeMinutes) {
		check.SubscriptionExpirationTimeMinutes = nil
	}
	if before.RetentionPolicies != nil && after.RetentionPolicies != nil && *before.RetentionPolicies == *after.RetentionPolicies {
		check.RetentionPolicies = nil
	}
	if addsNoProperty(before.Properties, after.Properties) {
		check.Properties = nil
	}
	return ValidatePolicies(&check)
}

// addsNoProperty reports whether every property of after is one of before's, unchanged.
func addsNoProperty(before, after map[string]string) bool {
	for k, v := range after {
		if w, ok := before[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// ValidateRetention: each limit is -1 (unlimited), 0 (none) or positive, the time at most
// math.MaxInt32 minutes (Pulsar's int) and the size at most maxRetentionSizeInMB: the broker
// converts them to nanoseconds and bytes, where a larger value could wrap into a tiny limit.
func ValidateRetention(r adminapi.RetentionPolicies) error {
	if r.RetentionTimeInMinutes < -1 || r.RetentionSizeInMB < -1 {
		return refuse(ErrPrecondition, "Invalid retention policy: retentionTimeInMinutes and retentionSizeInMB must be -1 (infinite), 0 or positive")
	}
	if r.RetentionTimeInMinutes > math.MaxInt32 || r.RetentionSizeInMB > maxRetentionSizeInMB {
		return refuse(ErrPrecondition, "Invalid retention policy: retentionTimeInMinutes must be at most %d and retentionSizeInMB at most %d",
			math.MaxInt32, maxRetentionSizeInMB)
	}
	return nil
}

// ValidateBacklogQuota checks the retention policy name and limits.
func ValidateBacklogQuota(q adminapi.BacklogQuota) error {
	if !slices.Contains(backlogPolicies, q.Policy) {
		return refuse(ErrPrecondition, "Invalid backlog quota policy %q: want one of %v", q.Policy, backlogPolicies)
	}
	if q.LimitSize < -1 || q.LimitTime < -1 {
		return refuse(ErrPrecondition, "Invalid backlog quota: limitSize and limitTime must be -1 (unlimited), 0 or positive")
	}
	return nil
}

// ValidateDispatchRate: rates -1 (unlimited) or more, period at least 1 s.
func ValidateDispatchRate(r adminapi.DispatchRate) error {
	if r.DispatchThrottlingRateInMsg < -1 || r.DispatchThrottlingRateInByte < -1 {
		return refuse(ErrPrecondition, "Invalid dispatch rate: rates must be -1 (unlimited) or more")
	}
	if r.RatePeriodInSecond < 0 {
		return refuse(ErrPrecondition, "Invalid dispatch rate: ratePeriodInSecond must be positive")
	}
	return nil
}
