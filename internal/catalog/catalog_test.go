package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/localstore"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// Goroutines that the etcd and gRPC libraries start once per process and never stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"))
}

// stores runs fn against a memstore and a bbolt localstore.
func stores(t *testing.T, fn func(t *testing.T, s metadata.Store)) {
	t.Run("memstore", func(t *testing.T) {
		s := memstore.New()
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
	t.Run("localstore", func(t *testing.T) {
		s, err := localstore.Open(filepath.Join(t.TempDir(), "meta.db"), localstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
}

func open(t *testing.T, s metadata.Store) *catalog.Catalog {
	t.Helper()
	c, err := catalog.New(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func bootstrap(t *testing.T, c *catalog.Catalog, clusters ...string) {
	t.Helper()
	ctx := context.Background()
	for i, cl := range clusters {
		if err := c.EnsureCluster(ctx, cl, adminapi.ClusterData{
			ServiceURL: fmt.Sprintf("http://127.0.0.1:%d", 8080+i), BrokerServiceURL: fmt.Sprintf("pulsar://127.0.0.1:%d", 6650+i),
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.EnsureTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: clusters}); err != nil {
		t.Fatal(err)
	}
	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{clusters[0]}
	if err := c.EnsureNamespace(ctx, "public/default", p); err != nil {
		t.Fatal(err)
	}
}

func wantKind(t *testing.T, err error, kind error, msg string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("err = %v, want kind %v", err, kind)
	}
	if msg != "" && err.Error() != msg {
		t.Fatalf("reason = %q, want %q", err.Error(), msg)
	}
}

func TestBootstrapIsIdempotentAndSurvivesReopen(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		c := open(t, s)
		bootstrap(t, c, "east", "west")
		bootstrap(t, c, "east", "west") // again: no error, nothing changes
		if got := c.Clusters(); !slices.Equal(got, []string{"east", "west"}) {
			t.Fatalf("clusters = %v", got)
		}
		// A second catalog on the same store sees the same state from its listing.
		c2 := open(t, s)
		p, ok := c2.Namespace("public/default")
		if !ok || !slices.Equal(p.ReplicationClusters, []string{"east"}) {
			t.Fatalf("namespace = %+v %v", p.ReplicationClusters, ok)
		}
		// EnsureCluster updates the URLs but keeps other fields.
		ctx := context.Background()
		if err := c.UpdateClusterWith(ctx, "east", func(d *adminapi.ClusterData) error { d.PeerClusterNames = []string{"west"}; return nil }); err != nil {
			t.Fatal(err)
		}
		if err := c.EnsureCluster(ctx, "east", adminapi.ClusterData{ServiceURL: "http://10.0.0.1:8080", BrokerServiceURL: "pulsar://10.0.0.1:6650"}); err != nil {
			t.Fatal(err)
		}
		d, _ := c.Cluster("east")
		if d.ServiceURL != "http://10.0.0.1:8080" || !slices.Equal(d.PeerClusterNames, []string{"west"}) {
			t.Fatalf("cluster = %+v", d)
		}
	})
}

func TestRefusals(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := context.Background()
		c := open(t, s)
		bootstrap(t, c, "east", "west")
		wantKind(t, c.CreateCluster(ctx, "east", adminapi.ClusterData{}), catalog.ErrAlreadyExists, "Cluster already exists")
		wantKind(t, c.CreateCluster(ctx, "bad/name", adminapi.ClusterData{}), catalog.ErrPrecondition, "")
		wantKind(t, c.CreateCluster(ctx, "x", adminapi.ClusterData{BrokerServiceURL: "http://nope"}), catalog.ErrPrecondition, "")
		wantKind(t, c.UpdateCluster(ctx, "nope", adminapi.ClusterData{}), catalog.ErrNotFound, "Cluster does not exist")
		wantKind(t, c.DeleteCluster(ctx, "east"), catalog.ErrPrecondition, "")

		wantKind(t, c.CreateTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"east"}}), catalog.ErrAlreadyExists, "Tenant already exists")
		wantKind(t, c.CreateTenant(ctx, "t2", adminapi.TenantInfo{}), catalog.ErrPrecondition, "Clusters can not be empty")
		wantKind(t, c.CreateTenant(ctx, "t2", adminapi.TenantInfo{AllowedClusters: []string{"mars"}}), catalog.ErrPrecondition, "")
		wantKind(t, c.DeleteTenant(ctx, "public"), catalog.ErrConflict, "The tenant still has active namespaces")
		wantKind(t, c.DeleteTenant(ctx, "nope"), catalog.ErrNotFound, "Tenant does not exist")
		// A name with '/' must not reach another document (here the namespace public/default).
		wantKind(t, c.DeleteTenant(ctx, "public/default"), catalog.ErrPrecondition, "")
		wantKind(t, c.UpdateTenant(ctx, "public/default", adminapi.TenantInfo{AllowedClusters: []string{"east"}}), catalog.ErrPrecondition, "")
		wantKind(t, c.DeleteCluster(ctx, "east/x"), catalog.ErrPrecondition, "")
		wantKind(t, c.UpdateCluster(ctx, "east/x", adminapi.ClusterData{}), catalog.ErrPrecondition, "")
		if _, ok := c.Namespace("public/default"); !ok {
			t.Fatal("namespace reached through a tenant name")
		}

		p := adminapi.NewPolicies()
		p.ReplicationClusters = []string{"east"}
		wantKind(t, c.CreateNamespace(ctx, "public/default", p), catalog.ErrAlreadyExists, "Namespace already exists")
		wantKind(t, c.CreateNamespace(ctx, "nope/ns", p), catalog.ErrNotFound, "Tenant does not exist")
		wantKind(t, c.CreateNamespace(ctx, "public", p), catalog.ErrPrecondition, "")
		p.ReplicationClusters = []string{"mars"}
		wantKind(t, c.CreateNamespace(ctx, "public/ns2", p), catalog.ErrForbidden, "Invalid cluster id: mars")

		// A cluster registered but not allowed for the tenant.
		if err := c.CreateCluster(ctx, "south", adminapi.ClusterData{ServiceURL: "http://s:8080"}); err != nil {
			t.Fatal(err)
		}
		err := c.UpdateNamespace(ctx, "public/default", func(p *adminapi.Policies) error {
			p.ReplicationClusters = []string{"east", "south"}
			return nil
		})
		wantKind(t, err, catalog.ErrForbidden, "Cluster [south] is not in the list of allowed clusters list for tenant [public]")
		// Nothing half-written: the namespace is unchanged.
		got, _ := c.Namespace("public/default")
		if !slices.Equal(got.ReplicationClusters, []string{"east"}) {
			t.Fatalf("replication = %v", got.ReplicationClusters)
		}
		wantKind(t, c.UpdateNamespace(ctx, "public/nope", func(*adminapi.Policies) error { return nil }), catalog.ErrNotFound, "Namespace does not exist")
		err = c.UpdateNamespace(ctx, "public/default", func(p *adminapi.Policies) error {
			ttl := -5
			p.MessageTTLInSeconds = &ttl
			return nil
		})
		wantKind(t, err, catalog.ErrPrecondition, "Invalid value for message TTL")
		// Removing an allowed cluster still used for replication is refused.
		err = c.UpdateTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"west"}})
		wantKind(t, err, catalog.ErrPrecondition, "")

		// Partitioned topics.
		wantKind(t, c.CreatePartitionedTopic(ctx, "persistent://public/nope/t", 3, nil), catalog.ErrNotFound, "Namespace does not exist")
		if err := c.CreatePartitionedTopic(ctx, "persistent://public/default/t", 3, nil); err != nil {
			t.Fatal(err)
		}
		wantKind(t, c.CreatePartitionedTopic(ctx, "persistent://public/default/t", 3, nil), catalog.ErrAlreadyExists, "This topic already exists")
		wantKind(t, c.UpdatePartitionedTopic(ctx, "persistent://public/default/t", 2), catalog.ErrPrecondition, "")
		if err := c.UpdatePartitionedTopic(ctx, "persistent://public/default/t", 5); err != nil {
			t.Fatal(err)
		}
		if m, ok := c.PartitionedTopic("persistent://public/default/t-partition-1"); !ok || m.Partitions != 5 {
			t.Fatalf("partitioned = %+v %v", m, ok)
		}
		wantKind(t, c.DeleteNamespace(ctx, "public/default"), catalog.ErrConflict, "Cannot delete non empty namespace")
		if err := c.DeletePartitionedTopic(ctx, "persistent://public/default/t"); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteNamespace(ctx, "public/default"); err != nil {
			t.Fatal(err)
		}
		if _, ok := c.Namespace("public/default"); ok {
			t.Fatal("namespace still cached after delete")
		}
	})
}

func TestTopicPoliciesAndEffectiveReplication(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := context.Background()
		c := open(t, s)
		bootstrap(t, c, "east", "west")
		topic := "persistent://public/default/orders"
		got, _ := c.ReplicationClusters(topic)
		if !slices.Equal(got, []string{"east"}) {
			t.Fatalf("effective = %v", got)
		}
		if shared, ok := c.NamespaceShared("public/default"); !ok || !slices.Equal(shared.ReplicationClusters, []string{"east"}) {
			t.Fatalf("shared = %+v %v", shared, ok)
		}
		if err := c.UpdateTopicPolicies(ctx, topic, func(p *adminapi.TopicPolicies) error {
			p.ReplicationClusters = []string{"east", "west"}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		got, _ = c.ReplicationClusters(topic + "-partition-0")
		if !slices.Equal(got, []string{"east", "west"}) {
			t.Fatalf("effective = %v", got)
		}
		// A cluster a topic replicates to can be neither unregistered nor disallowed.
		wantKind(t, c.DeleteCluster(ctx, "west"), catalog.ErrPrecondition, "")
		wantKind(t, c.UpdateTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"east"}}), catalog.ErrPrecondition,
			"Failed to update the tenant: topic persistent://public/default/orders still replicates to cluster west")
		// Clearing the only policy deletes the document.
		if err := c.UpdateTopicPolicies(ctx, topic, func(p *adminapi.TopicPolicies) error { p.ReplicationClusters = nil; return nil }); err != nil {
			t.Fatal(err)
		}
		if _, ok := c.TopicPolicies(topic); ok {
			t.Fatal("empty topic policies should be deleted")
		}
	})
}

// TestWatchPropagation: a change made through one catalog reaches another catalog on the same store
// (as two brokers sharing a configuration store) as an event, quickly and in order.
func TestWatchPropagation(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := context.Background()
		writer := open(t, s)
		bootstrap(t, writer, "east", "west")
		reader := open(t, s)
		events, stop := reader.Subscribe()
		defer stop()

		start := time.Now()
		if err := writer.UpdateNamespace(ctx, "public/default", func(p *adminapi.Policies) error {
			p.ReplicationClusters = []string{"east", "west"}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(5 * time.Second)
		for {
			select {
			case ev := <-events:
				if ev.Kind == catalog.EventNamespace && ev.Name == "public/default" {
					p, _ := reader.Namespace("public/default")
					if !slices.Equal(p.ReplicationClusters, []string{"east", "west"}) {
						t.Fatalf("event before cache update: %v", p.ReplicationClusters)
					}
					if d := time.Since(start); d > time.Second {
						t.Fatalf("propagation took %s", d)
					}
					t.Logf("propagation %s", time.Since(start))
					return
				}
			case <-deadline:
				t.Fatal("no namespace event")
			}
		}
	})
}

// TestWaitForClusters: a cluster registered through one catalog is awaited through another of the
// same store (the --clusters mode registers each node's cluster through its own catalog).
func TestWaitForClusters(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := context.Background()
		writer := open(t, s)
		reader := open(t, s)
		done := make(chan error, 1)
		go func() { done <- reader.WaitForClusters(ctx, "east", "west") }()
		bootstrap(t, writer, "east", "west")
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, ok := reader.Cluster("west"); !ok {
			t.Fatal("west not in the reader's view after WaitForClusters")
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := reader.WaitForClusters(cctx, "north"); !errors.Is(err, context.Canceled) {
			t.Fatalf("waiting for an unregistered cluster with a cancelled context: %v", err)
		}
	})
}

func TestConcurrentWritersLoseNothing(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := context.Background()
		a := open(t, s)
		bootstrap(t, a, "east")
		b := open(t, s)
		var wg sync.WaitGroup
		const n = 20
		for i := 0; i < n; i++ {
			for _, c := range []*catalog.Catalog{a, b} {
				wg.Add(1)
				go func(c *catalog.Catalog, i int) {
					defer wg.Done()
					err := c.UpdateNamespace(ctx, "public/default", func(p *adminapi.Policies) error {
						p.Properties[fmt.Sprintf("k%d-%p", i, c)] = "v"
						return nil
					})
					if err != nil {
						t.Error(err)
					}
				}(c, i)
			}
		}
		wg.Wait()
		// Read the store itself: b's last writes may not have reached a's cache yet (read-your-writes
		// holds per catalog).
		kv, err := s.Get(ctx, "/admin/policies/public/default")
		if err != nil {
			t.Fatal(err)
		}
		var p adminapi.Policies
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Properties) != 2*n {
			t.Fatalf("properties = %d, want %d", len(p.Properties), 2*n)
		}
	})
}

func TestUnsubscribeAndCloseEndGoroutines(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	c, err := catalog.New(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, stop1 := c.Subscribe()
	events2, _ := c.Subscribe()
	stop1()
	c.Close()
	for range events2 { // closed by Close
	}
	c.Close() // idempotent
	if c.Health() == nil {
		t.Fatal("closed catalog reports healthy")
	}
}

// Values the catalog cannot read (another writer, a newer release) are logged and skipped, never a
// crash or a failed start.
func TestUnreadableValuesAreSkipped(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	for k, v := range map[string]string{
		"/admin/clusters/bad":         "{not json",
		"/admin/clusters/good":        `{"serviceUrl":"http://g:8080"}`,
		"/admin/policies/a/b/c":       `{}`,
		"/admin/something-else/x":     `1`,
		"/admin/partitioned-topics/x": `{"partitions":2}`,
	} {
		if _, err := s.Put(ctx, k, []byte(v), metadata.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	c := open(t, s)
	if got := c.Clusters(); !slices.Equal(got, []string{"good"}) {
		t.Fatalf("clusters = %v", got)
	}
	events, stop := c.Subscribe()
	defer stop()
	if _, err := s.Put(ctx, "/admin/clusters/bad2", []byte("]"), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateCluster(ctx, "after", adminapi.ClusterData{}); err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.Name == "bad2" {
			t.Fatal("an unreadable value produced an event")
		}
		if ev.Name == "after" {
			break
		}
	}
}

// TestAllowClustersKeepsEveryListedCluster: two catalogs on one store add different clusters to a
// tenant; neither addition is lost (compare-and-swap against the stored value, not a cached one),
// adding a listed cluster writes nothing, and unknown clusters or tenants are refused.
func TestAllowClustersKeepsEveryListedCluster(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		ctx := context.Background()
		c1, c2 := open(t, s), open(t, s)
		bootstrap(t, c1, "east", "west", "north")
		if err := c1.UpdateTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"east"}}); err != nil {
			t.Fatal(err)
		}
		if err := c2.WaitForClusters(ctx, "east", "west", "north"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, pair := range []struct {
			c  *catalog.Catalog
			cl string
		}{{c1, "west"}, {c2, "north"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = pair.c.AllowClusters(ctx, "public", pair.cl)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if err := c1.AllowClusters(ctx, "public", "east", "west"); err != nil { // already listed: no write
			t.Fatal(err)
		}
		got, _ := c1.Tenant("public")
		slices.Sort(got.AllowedClusters)
		if !slices.Equal(got.AllowedClusters, []string{"east", "north", "west"}) {
			t.Fatalf("allowed clusters = %v, want east, north and west", got.AllowedClusters)
		}
		wantKind(t, c1.AllowClusters(ctx, "public", "nowhere"), catalog.ErrPrecondition, "Clusters do not exist: nowhere")
		wantKind(t, c1.AllowClusters(ctx, "absent", "east"), catalog.ErrNotFound, "Tenant does not exist")
	})
}
