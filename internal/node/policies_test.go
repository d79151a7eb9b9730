package node

import (
	"context"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
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
