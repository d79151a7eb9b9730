package catalog_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata/etcdstore/etcdtest"
	metastores "github.com/meridian-mq/meridian/internal/metadata/stores"
	"github.com/meridian-mq/meridian/internal/poll"
)

// TestSharedConfigurationStoreOverEtcd: two clusters with their own connections to one etcd (full
// mesh, docs/design.md, "Metadata and configuration") see each other's configuration changes by watch, well within a second.
func TestSharedConfigurationStoreOverEtcd(t *testing.T) {
	t.Run("built", func(t *testing.T) { sharedStore(t, etcdtest.Start(t)) })
	// Debian's etcd-server 3.4 when installed (CI installs it); skipped otherwise.
	t.Run("installed", func(t *testing.T) { sharedStore(t, etcdtest.StartInstalled(t)) })
}

func sharedStore(t *testing.T, srv *etcdtest.Server) {
	ctx := context.Background()
	open := func() *catalog.Catalog {
		s, err := metastores.Open(ctx, srv.URL("/meridian"), "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		c, err := catalog.New(ctx, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	east, west := open(), open()
	bootstrap(t, east, "east", "west")
	events, stop := west.Subscribe()
	defer stop()

	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{"east", "west"}
	start := time.Now()
	if err := east.CreateNamespace(ctx, "public/orders", p); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Kind != catalog.EventNamespace || ev.Name != "public/orders" {
				continue
			}
			took := time.Since(start)
			got, ok := west.Namespace("public/orders")
			if !ok || !slices.Equal(got.ReplicationClusters, []string{"east", "west"}) {
				t.Fatalf("west sees %+v %v", got.ReplicationClusters, ok)
			}
			if took > time.Second {
				t.Fatalf("propagation took %s, want < 1s", took)
			}
			t.Logf("namespace created on east visible on west after %s (%s)", took, srv.Version())
			return
		case <-deadline:
			t.Fatal("west never saw the namespace")
		}
	}
}

// TestStoreOutageIsReported: while etcd is unreachable CheckStore fails (readiness and /health can
// say so) and the cache keeps serving; after it returns, changes flow again.
func TestStoreOutageIsReported(t *testing.T) {
	srv := etcdtest.Start(t)
	proxy, err := etcdtest.NewProxy(srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	ctx := context.Background()
	s, err := metastores.Open(ctx, "etcd://"+proxy.Addr()+"/meridian", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := catalog.New(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	bootstrap(t, c, "east")
	check := func() error {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return c.CheckStore(cctx)
	}
	if err := check(); err != nil {
		t.Fatalf("healthy store reported %v", err)
	}
	proxy.Cut()
	if err := check(); err == nil {
		t.Fatal("outage not reported")
	}
	if _, ok := c.Namespace("public/default"); !ok {
		t.Fatal("cache lost during the outage")
	}
	if err := proxy.Resume(); err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, 15*time.Second, "the store healthy again", check)
	if err := c.CreateCluster(ctx, "west", adminapi.ClusterData{}); err != nil {
		t.Fatal(err)
	}
}
