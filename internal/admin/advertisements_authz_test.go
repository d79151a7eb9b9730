package admin_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/meridian-mq/meridian/adminapi"
)

// advertisingTopics is the fake topic service that also keeps advertisements.
type advertisingTopics struct {
	*fakeTopics
	mu       sync.Mutex
	received []adminapi.ReplicationAdvertisement
}

func (a *advertisingTopics) ReceiveAdvertisement(_ context.Context, adv adminapi.ReplicationAdvertisement) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.received = append(a.received, adv)
	return nil
}

func (a *advertisingTopics) SourceStates(context.Context, string) ([]adminapi.SourceTopicState, error) {
	return nil, nil
}

func (a *advertisingTopics) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.received)
}

// TestAdvertisementsFromReplicatorRole: a role registered as cluster west's replicator role may
// post advertisements whose source is west, for topics of namespaces that replicate from west; not
// for another source cluster, nor for a namespace that does not take west's data. Superusers may
// post any; other roles none.
func TestAdvertisementsFromReplicatorRole(t *testing.T) {
	topics := &advertisingTopics{fakeTopics: newFakeTopics()}
	e := newAuthzEnv(t, topics)
	ctx := context.Background()
	for _, c := range []string{"west", "east"} {
		if err := e.cat.EnsureCluster(ctx, c, adminapi.ClusterData{ServiceURL: "http://" + c + ":8080", BrokerServiceURL: "pulsar://" + c + ":6650"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.cat.EnsureTenant(ctx, "geo", adminapi.TenantInfo{AllowedClusters: []string{"standalone", "west", "east"}}); err != nil {
		t.Fatal(err)
	}
	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{"standalone", "west"}
	if err := e.cat.EnsureNamespace(ctx, "geo/orders", p); err != nil {
		t.Fatal(err)
	}
	e.expect("root", http.MethodPost, "/admin/v2/clusters/west/replicatorRoles", `["west-link"]`, http.StatusNoContent)
	e.expect("root", http.MethodPost, "/admin/v2/clusters/east/replicatorRoles", `["east-link"]`, http.StatusNoContent)

	const path = "/admin/v2/replication/advertisements"
	adv := func(source, topic string) string {
		return `{"source":"` + source + `","timestamp":1,"topics":{"` + topic + `":{"lastPosition":"1:2"}}}`
	}
	const westTopic = "persistent://geo/orders/t"
	e.expect("west-link", http.MethodPost, path, adv("west", westTopic), http.StatusNoContent)
	if topics.count() != 1 {
		t.Fatalf("%d advertisements kept, want 1", topics.count())
	}
	// Another cluster's advertisements: refused, whoever's replicator role asks.
	e.expect("west-link", http.MethodPost, path, adv("east", westTopic), http.StatusForbidden)
	// A namespace that does not replicate from west: refused.
	e.expect("west-link", http.MethodPost, path, adv("west", "persistent://acme/app/t"), http.StatusForbidden)
	e.expect("east-link", http.MethodPost, path, adv("east", westTopic), http.StatusForbidden)
	// Roles that replicate nothing, and no credentials.
	e.expect("acme-admin", http.MethodPost, path, adv("west", westTopic), http.StatusForbidden)
	e.expect("", http.MethodPost, path, adv("west", westTopic), http.StatusUnauthorized)
	// Superusers: any source, any namespace (as Pulsar's peers link with superuser roles).
	e.expect("root", http.MethodPost, path, adv("east", "persistent://acme/app/t"), http.StatusNoContent)
	if topics.count() != 2 {
		t.Fatalf("%d advertisements kept, want 2 (the refused ones are not kept)", topics.count())
	}
}
