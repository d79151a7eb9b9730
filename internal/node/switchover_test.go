package node

import (
	"context"
	"testing"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/naming"
)

// Which topics migrate, and to where: the cluster's flag moves everything, a namespace's flag moves
// that namespace to the cluster's target URL, no URL (or this broker's own) moves nothing; the
// target URL names the registered cluster whose replication backlog counts.
func TestSwitchoverTargetRules(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	defer s.Close()
	cat, err := catalog.New(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	for name, d := range map[string]adminapi.ClusterData{
		"blue":  {ServiceURL: "http://blue:8080", BrokerServiceURL: "pulsar://blue:6650"},
		"green": {ServiceURL: "http://green:8080", BrokerServiceURL: "pulsar://green:6650"},
	} {
		if err := cat.EnsureCluster(ctx, name, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := cat.EnsureTenant(ctx, "t", adminapi.TenantInfo{AllowedClusters: []string{"blue", "green"}}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"t/moving", "t/staying"} {
		p := adminapi.NewPolicies()
		p.ReplicationClusters = []string{"blue", "green"}
		if err := cat.EnsureNamespace(ctx, ns, p); err != nil {
			t.Fatal(err)
		}
	}
	sw := switchover{cluster: "blue", serviceURL: "pulsar://blue:6650", cat: cat}
	moving, err := naming.ParseTopic("persistent://t/moving/x")
	if err != nil {
		t.Fatal(err)
	}
	staying, err := naming.ParseTopic("persistent://t/staying/x")
	if err != nil {
		t.Fatal(err)
	}
	setCluster := func(migrated bool, u *adminapi.ClusterURL) {
		t.Helper()
		if err := cat.UpdateClusterWith(ctx, "blue", func(d *adminapi.ClusterData) error {
			d.Migrated, d.MigratedClusterURL = migrated, u
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(label string, topic naming.TopicName, want string) {
		t.Helper()
		got, ok := sw.Target(topic)
		if (want != "") != ok || got.BrokerServiceURL != want {
			t.Fatalf("%s: Target(%s) = %+v, %v; want %q", label, topic, got, ok, want)
		}
	}
	green := &adminapi.ClusterURL{ServiceURL: "http://green:8080", BrokerServiceURL: "pulsar://green:6650"}
	check("nothing set", moving, "")
	if sw.Active() {
		t.Fatal("active with no target URL")
	}
	setCluster(true, nil)
	check("migrated without a URL", moving, "")
	setCluster(false, green)
	check("URL only", moving, "")
	if !sw.Active() {
		t.Fatal("not active with a target URL")
	}
	if err := cat.UpdateNamespace(ctx, "t/moving", func(p *adminapi.Policies) error { p.Migrated = true; return nil }); err != nil {
		t.Fatal(err)
	}
	check("namespace switch", moving, "pulsar://green:6650")
	check("other namespace", staying, "")
	setCluster(true, green)
	check("cluster switch", staying, "pulsar://green:6650")
	if got := sw.targetCluster(green); got != "green" {
		t.Fatalf("targetCluster = %q, want green", got)
	}
	if got := sw.targetCluster(&adminapi.ClusterURL{BrokerServiceURL: "pulsar://elsewhere:6650"}); got != "" {
		t.Fatalf("targetCluster of an unregistered URL = %q", got)
	}
	setCluster(true, &adminapi.ClusterURL{BrokerServiceURL: "pulsar://blue:6650/"})
	check("own URL", staying, "")
}
