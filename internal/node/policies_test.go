package node

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/naming"
)

// The broker sees the namespace's backlog-quota policy and subscription expiration, not only the
// quota's size, so producer_exception and consumer_backlog_eviction act as configured.
func TestPolicySourcePassesQuotaPolicyAndExpiration(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	defer s.Close()
	cat, err := catalog.New(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if err := cat.EnsureCluster(ctx, "c", adminapi.ClusterData{ServiceURL: "http://127.0.0.1:1", BrokerServiceURL: "pulsar://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if err := cat.EnsureTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"c"}}); err != nil {
		t.Fatal(err)
	}
	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{"c"}
	minutes := 30
	p.SubscriptionExpirationTimeMinutes = &minutes
	p.BacklogQuotaMap = map[string]adminapi.BacklogQuota{
		adminapi.BacklogQuotaDestinationStorage: {LimitSize: 1 << 20, Policy: "producer_exception"},
	}
	if err := cat.EnsureNamespace(ctx, "public/default", p); err != nil {
		t.Fatal(err)
	}
	topic, err := naming.ParseTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	got, err := policySource{cat: cat}.TopicPolicies(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if got.BacklogQuotaLimitBytes != 1<<20 || got.BacklogQuotaPolicy != "producer_exception" || got.SubscriptionExpiration != 30*time.Minute {
		t.Fatalf("policies = quota %d %q, expiration %v", got.BacklogQuotaLimitBytes, got.BacklogQuotaPolicy, got.SubscriptionExpiration)
	}
}

// TestPolicySourceSaturatesValuesThatOverflow: policy documents written by an older build, or
// straight into the metadata store, may hold counts whose nanoseconds or bytes do not fit an int64.
// The broker sees the longest duration and the largest size for them, never a wrapped one: a
// messageTTL of 18446744074 s was a 290 ms TTL, 307445734562 minutes of subscription expiration or
// retention were 10.4 s, and 17592186044416 MB of retention were 0 bytes.
func TestPolicySourceSaturatesValuesThatOverflow(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	defer s.Close()
	const doc = `{"replication_clusters":["c"],"message_ttl_in_seconds":18446744074,` +
		`"subscription_expiration_time_minutes":307445734562,` +
		`"retention_policies":{"retentionTimeInMinutes":307445734562,"retentionSizeInMB":17592186044416}}`
	for key, v := range map[string]string{
		"/admin/clusters/c":              `{"serviceUrl":"http://127.0.0.1:1","brokerServiceUrl":"pulsar://127.0.0.1:1"}`,
		"/admin/policies/public":         `{"allowedClusters":["c"]}`,
		"/admin/policies/public/default": doc,
	} {
		if _, err := s.Put(ctx, key, []byte(v), metadata.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	cat, err := catalog.New(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	topic, err := naming.ParseTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	got, err := policySource{cat: cat}.TopicPolicies(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	const longest = time.Duration(math.MaxInt64)
	if got.MessageTTL != longest || got.SubscriptionExpiration != longest || got.RetentionTime != longest || got.RetentionSizeBytes != math.MaxInt64 {
		t.Errorf("namespace policies: TTL %v, subscription expiration %v, retention %v and %d bytes; want %v and %d bytes",
			got.MessageTTL, got.SubscriptionExpiration, got.RetentionTime, got.RetentionSizeBytes, longest, int64(math.MaxInt64))
	}

	// Topic-level values override the namespace's and convert the same way. The admin API accepts
	// retentionTimeInMinutes up to math.MaxInt32, and from 153722868 on their nanoseconds do not fit:
	// 307445735 minutes wrapped to 26 s.
	ttl := 9223372037 // wrapped to a negative TTL, which turned expiry off
	err = cat.UpdateTopicPolicies(ctx, topic.String(), func(tp *adminapi.TopicPolicies) error {
		tp.MessageTTLInSeconds = &ttl
		tp.RetentionPolicies = &adminapi.RetentionPolicies{RetentionTimeInMinutes: 307445735, RetentionSizeInMB: 1 << 43}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err = policySource{cat: cat}.TopicPolicies(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if got.MessageTTL != longest || got.RetentionTime != longest || got.RetentionSizeBytes != math.MaxInt64 {
		t.Errorf("topic policies: TTL %v, retention %v and %d bytes; want %v and %d bytes",
			got.MessageTTL, got.RetentionTime, got.RetentionSizeBytes, longest, int64(math.MaxInt64))
	}
}
