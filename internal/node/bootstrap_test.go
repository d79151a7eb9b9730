package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/etcdstore"
	"github.com/meridian-mq/meridian/internal/metadata/etcdstore/etcdtest"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/poll"
)

func clusterURLs(i int) adminapi.ClusterData {
	return adminapi.ClusterData{
		ServiceURL:       fmt.Sprintf("http://127.0.0.%d:8080", i+1),
		BrokerServiceURL: fmt.Sprintf("pulsar://127.0.0.%d:6650", i+1),
	}
}

// checkJoined fails unless cat shows tenant public allowing every cluster in names and namespace
// public/default.
func checkJoined(t *testing.T, cat *catalog.Catalog, names []string) {
	t.Helper()
	tenant, ok := cat.Tenant("public")
	if !ok {
		t.Fatal("tenant public missing")
	}
	for _, n := range names {
		if !slices.Contains(tenant.AllowedClusters, n) {
			t.Errorf("tenant public allows %v, not %s", tenant.AllowedClusters, n)
		}
	}
	if _, ok := cat.Namespace("public/default"); !ok {
		t.Error("namespace public/default missing")
	}
}

// TestBootstrapOnSharedStoreWithLaggingView is the bootstrap race made deterministic: cluster b's
// catalog loads an empty store and registers b; its watch then lags while cluster a bootstraps
// completely (tenant public, namespace public/default). b's bootstrap sees neither in its view,
// finds both already written when it tries, and must still start: it joins tenant public (a stays
// allowed) and leaves public/default as a made it.
func TestBootstrapOnSharedStoreWithLaggingView(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	mem := memstore.New()
	defer mem.Close()
	lag := newLaggingStore(mem)
	catB, err := catalog.New(ctx, lag, log)
	if err != nil {
		t.Fatal(err)
	}
	defer catB.Close()
	if err := catB.EnsureCluster(ctx, "b", clusterURLs(1)); err != nil {
		t.Fatal(err)
	}
	catA, err := catalog.New(ctx, mem, log)
	if err != nil {
		t.Fatal(err)
	}
	defer catA.Close()

	lag.pause()
	if err := bootstrapCatalog(ctx, catA, "a", clusterURLs(0), log); err != nil {
		t.Fatalf("bootstrap a: %v", err)
	}
	if _, ok := catB.Tenant("public"); ok {
		t.Fatal("b's view already shows tenant public: the watch did not lag")
	}
	if err := bootstrapCatalog(ctx, catB, "b", clusterURLs(1), log); err != nil {
		t.Fatalf("bootstrap b on a store a bootstrapped while b's view lagged: %v", err)
	}
	lag.resume()
	if err := catA.WaitForClusters(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	checkJoined(t, catB, []string{"a", "b"})
	ns, _ := catB.Namespace("public/default")
	if !slices.Equal(ns.ReplicationClusters, []string{"a"}) {
		t.Errorf("public/default replicates to %v, want [a] as a created it", ns.ReplicationClusters)
	}
}

// TestConcurrentBootstrapOnEtcd runs the bootstrap of n clusters at once against one etcd, many
// rounds (each on an empty key prefix): every bootstrap succeeds and every catalog ends up showing
// tenant public allowing all n clusters and namespace public/default.
func TestConcurrentBootstrapOnEtcd(t *testing.T) {
	const n = 3
	rounds := 40
	if testing.Short() {
		rounds = 15
	}
	etcd := etcdtest.Start(t)
	log := slog.New(slog.DiscardHandler)
	names := []string{"c0", "c1", "c2"}
	failed := 0
	for round := range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cats := make([]*catalog.Catalog, n)
		for i := range n {
			st, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: etcd.Endpoints(), Prefix: fmt.Sprintf("/bootstrap-%d", round), Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			cats[i], err = catalog.New(ctx, st, log)
			if err != nil {
				t.Fatal(err)
			}
			defer cats[i].Close()
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				errs[i] = bootstrapCatalog(ctx, cats[i], names[i], clusterURLs(i), log)
			}()
		}
		close(gate)
		wg.Wait()
		roundFailed := false
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: bootstrap %s: %v", round, names[i], err)
				roundFailed = true
			}
		}
		if !roundFailed {
			for _, cat := range cats {
				if err := cat.WaitForClusters(ctx, names...); err != nil {
					t.Fatal(err)
				}
				// Every write waits for its own catalog to show it; another catalog shows it
				// within the watch latency.
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_ = poll.Wait(wctx, func(context.Context) error {
					if !joined(cat, names) {
						return fmt.Errorf("not joined")
					}
					return nil
				})
				cancel()
				if !joined(cat, names) {
					tenant, _ := cat.Tenant("public")
					t.Errorf("round %d: tenant public allows %v, want all of %v, and public/default exists", round, tenant.AllowedClusters, names)
					roundFailed = true
					break
				}
			}
		}
		if roundFailed {
			failed++
		}
		cancel()
	}
	if failed > 0 {
		t.Errorf("%d of %d rounds failed", failed, rounds)
	}
}

func joined(cat *catalog.Catalog, names []string) bool {
	tenant, ok := cat.Tenant("public")
	if !ok {
		return false
	}
	for _, n := range names {
		if !slices.Contains(tenant.AllowedClusters, n) {
			return false
		}
	}
	_, ok = cat.Namespace("public/default")
	return ok
}

// laggingStore is a metadata.Store whose watches hold back events while paused: a catalog on it
// sees other writers' changes late, as one behind a slow watch does. Its own write resumes
// delivery (the held events first, in order), because a catalog waits for its own writes to show
// and the store's revision order puts every earlier change before them.
type laggingStore struct {
	metadata.Store
	mu     sync.Mutex
	paused bool
	wake   chan struct{} // signalled on resume
}

func newLaggingStore(s metadata.Store) *laggingStore {
	return &laggingStore{Store: s, wake: make(chan struct{}, 1)}
}

func (s *laggingStore) pause() {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
}

func (s *laggingStore) resume() {
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *laggingStore) isPaused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

func (s *laggingStore) Put(ctx context.Context, key string, value []byte, expectedVersion int64) (metadata.KV, error) {
	s.resume()
	return s.Store.Put(ctx, key, value, expectedVersion)
}

func (s *laggingStore) Delete(ctx context.Context, key string, expectedVersion int64) error {
	s.resume()
	return s.Store.Delete(ctx, key, expectedVersion)
}

// Watch relays the inner watch through a goroutine that holds events while paused; it ends with
// ctx or the inner watch.
func (s *laggingStore) Watch(ctx context.Context, prefix string, afterRevision int64) (<-chan metadata.Event, error) {
	in, err := s.Store.Watch(ctx, prefix, afterRevision)
	if err != nil {
		return nil, err
	}
	out := make(chan metadata.Event)
	go func() {
		defer close(out)
		var held []metadata.Event
		for {
			var send chan metadata.Event
			var next metadata.Event
			if len(held) > 0 && !s.isPaused() {
				send, next = out, held[0]
			}
			select {
			case ev, ok := <-in:
				if !ok {
					return
				}
				held = append(held, ev)
			case send <- next:
				held = held[1:]
			case <-s.wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// TestBootstrapRestartLeavesOperatorEditsAlone: a cluster joins tenant public only when it is new
// to the store. Once the operator removed it, its restarts leave the tenant as it is, and without
// the tenant allowing it a missing public/default is not an error (it is not created either).
func TestBootstrapRestartLeavesOperatorEditsAlone(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	mem := memstore.New()
	defer mem.Close()
	open := func() *catalog.Catalog {
		cat, err := catalog.New(ctx, mem, log)
		if err != nil {
			t.Fatal(err)
		}
		return cat
	}
	catA := open()
	defer catA.Close()
	if err := bootstrapCatalog(ctx, catA, "a", clusterURLs(0), log); err != nil {
		t.Fatal(err)
	}
	catB := open()
	if err := bootstrapCatalog(ctx, catB, "b", clusterURLs(1), log); err != nil {
		t.Fatal(err)
	}
	checkJoined(t, catB, []string{"a", "b"})
	catB.Close()

	// The operator takes b out of tenant public and deletes public/default.
	if err := catA.UpdateTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if err := catA.DeleteNamespace(ctx, "public/default"); err != nil {
		t.Fatal(err)
	}
	catB = open() // b restarts
	defer catB.Close()
	if err := bootstrapCatalog(ctx, catB, "b", clusterURLs(1), log); err != nil {
		t.Fatalf("restart of b: %v", err)
	}
	if tenant, _ := catB.Tenant("public"); !slices.Equal(tenant.AllowedClusters, []string{"a"}) {
		t.Errorf("after b's restart tenant public allows %v, want [a] as the operator left it", tenant.AllowedClusters)
	}
	if _, ok := catB.Namespace("public/default"); ok {
		t.Error("b created public/default although tenant public does not allow it")
	}
	// a, allowed, recreates it on its next start.
	if err := bootstrapCatalog(ctx, catA, "a", clusterURLs(0), log); err != nil {
		t.Fatal(err)
	}
	if ns, ok := catA.Namespace("public/default"); !ok || !slices.Equal(ns.ReplicationClusters, []string{"a"}) {
		t.Errorf("a's restart: public/default %v (exists %v), want replicating to [a]", ns.ReplicationClusters, ok)
	}
}
