package replication

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
)

// memTopics is a TopicSource over memTopics.
type memTopics struct {
	mu     sync.Mutex
	topics map[string]*memTopic
}

func (s *memTopics) ListTopics(ctx context.Context, ns string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name := range s.topics {
		if strings.HasPrefix(name, "persistent://"+ns+"/") {
			out = append(out, name)
		}
	}
	return out, nil
}

func (s *memTopics) OpenTopic(ctx context.Context, topic string) (LocalTopic, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topics[topic], nil
}

// memRemotes routes producers to one memRemote per cluster.
type memRemotes struct {
	mu sync.Mutex
	m  map[string]*memRemote
}

func (r *memRemotes) get(name string) *memRemote {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[name] == nil {
		r.m[name] = &memRemote{topic: newMemTopic(name, 1), index: NewIndex(IndexOptions{Logger: quietLogger()})}
	}
	return r.m[name]
}

func (r *memRemotes) NewProducer(ctx context.Context, remote, topic, name string) (RemoteProducer, error) {
	return r.get(remote).NewProducer(ctx, remote, topic, name)
}

// newTestCatalog is a catalog on a memory store, closed when t ends, with the given clusters, tenant t
// allowing all of them, and namespace t/ns replicated to replicate.
func newTestCatalog(t *testing.T, ctx context.Context, clusters, replicate []string) *catalog.Catalog {
	t.Helper()
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	cat, err := catalog.New(ctx, store, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	for _, c := range clusters {
		if err := cat.CreateCluster(ctx, c, adminapi.ClusterData{ServiceURL: "http://" + c + ":8080", BrokerServiceURL: "pulsar://" + c + ":6650"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cat.CreateTenant(ctx, "t", adminapi.TenantInfo{AllowedClusters: clusters}); err != nil {
		t.Fatal(err)
	}
	if err := cat.CreateNamespace(ctx, "t/ns", adminapi.Policies{ReplicationClusters: replicate}); err != nil {
		t.Fatal(err)
	}
	return cat
}

func TestManagerFollowsPolicyChanges(t *testing.T) {
	ctx := context.Background()
	cat := newTestCatalog(t, ctx, []string{"a", "b", "c"}, []string{"a"})
	const topic = "persistent://t/ns/orders"
	lt := newMemTopic(topic, 3)
	for i := range 5 {
		lt.append(mkEntry(t, mtypes.Position{}, "old"+string(rune('0'+i)), nil).Data, 1)
	}
	topics := &memTopics{topics: map[string]*memTopic{topic: lt}}
	remotes := &memRemotes{m: map[string]*memRemote{}}
	m, err := NewManager(ManagerOptions{Local: "a", Policies: cat, Producers: remotes,
		StartAt: StartLatest, Logger: quietLogger(), Machine: MachineConfig{MaxBackoff: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	mustStart(t, m, ctx, LocalTopics{Topics: topics})
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := m.Close(cctx); err != nil {
			t.Error(err)
		}
	}()
	if len(m.Running()) != 0 {
		t.Fatalf("running %v with a local-only namespace", m.Running())
	}

	// Adding b: a replicator starts within a second (typically a few ms; the wait allows for a loaded
	// CI machine), at latest (the old data stays local).
	changed := time.Now()
	if err := cat.UpdateNamespace(ctx, "t/ns", func(p *adminapi.Policies) error {
		p.ReplicationClusters = []string{"a", "b"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "replicator to b", func() bool { return len(m.Running()) == 1 })
	t.Logf("replicator started %v after the policy change", time.Since(changed))
	lt.append(mkEntry(t, mtypes.Position{}, "new", nil).Data, 1)
	poll.Until(t, 5*time.Second, "new entry at b", func() bool { return remotes.get("b").topic.LastConfirmed().EntryID == 0 })
	checkAllStats(t, m, topic)
	st := m.Stats(topic)["b"]
	if st.StartMode != StartLatest || st.StartPosition != (mtypes.Position{LedgerID: 3, EntryID: 4}) {
		t.Fatalf("b started %v at %v", st.StartMode, st.StartPosition)
	}

	// Adding c with the namespace asking for earliest: c gets everything still stored.
	if err := cat.UpdateNamespace(ctx, "t/ns", func(p *adminapi.Policies) error {
		p.ReplicationClusters = []string{"a", "b", "c"}
		p.Properties = map[string]string{NamespaceStartAtProperty: "earliest"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "all 6 entries at c", func() bool { return remotes.get("c").topic.LastConfirmed().EntryID == 5 })

	// A rate policy reaches the running replicator.
	if err := cat.UpdateNamespace(ctx, "t/ns", func(p *adminapi.Policies) error {
		p.ReplicatorDispatchRate = map[string]adminapi.DispatchRate{"c": {DispatchThrottlingRateInMsg: 50}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "rate applied", func() bool { return m.Stats(topic)["c"].Rate.MessagesPerSecond == 50 })

	// Removing b while it is down: stopped within a second, cursor deleted, backlog counted.
	rb := remotes.get("b")
	rb.mu.Lock()
	rb.down = true
	rb.mu.Unlock()
	for range 3 {
		lt.append(mkEntry(t, mtypes.Position{}, "lost-for-b", nil).Data, 1)
	}
	poll.Until(t, 5*time.Second, "b backlog and error", func() bool {
		s := m.Stats(topic)["b"]
		return s.ReplicationBacklog == 3 && s.LastError != "" && !s.Connected
	})
	if err := cat.UpdateNamespace(ctx, "t/ns", func(p *adminapi.Policies) error {
		p.ReplicationClusters = []string{"a", "c"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "b removed", func() bool {
		_, hasB := m.Stats(topic)["b"]
		return !hasB && m.Abandoned()["b"] == 3
	})
	if names := lt.CursorNames(); strings.Contains(strings.Join(names, ","), "pulsar.repl.b") {
		t.Fatalf("cursor of b still there: %v", names)
	}
	poll.Until(t, 5*time.Second, "c caught up", func() bool { return m.Stats(topic)["c"].ReplicationBacklog == 0 })
}

func TestManagerCollector(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	cat, err := catalog.New(context.Background(), store, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	m, err := NewManager(ManagerOptions{Local: "a", Policies: cat, Producers: &memRemotes{m: map[string]*memRemote{}}})
	if err != nil {
		t.Fatal(err)
	}
	m.abandoned["b"] = 7
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector(true))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "meridian_replication_abandoned_entries_total" && mf.GetMetric()[0].GetCounter().GetValue() == 7 {
			found = true
		}
	}
	if !found {
		t.Fatalf("abandoned counter missing: %v", mfs)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestManagerStartFailureIsShownAndRetried: a replicator whose cursor cannot be opened is not silently
// missing: the topic's stats show why, and it starts once the cause is gone.
// It runs in a synctest bubble: the retry's backoff passes in fake time.
func TestManagerStartFailureIsShownAndRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cat := newTestCatalog(t, ctx, []string{"a", "b"}, []string{"a", "b"})
		const topic = "persistent://t/ns/broken"
		lt := newMemTopic(topic, 1)
		lt.openErr = errors.New("disk full")
		m, err := NewManager(ManagerOptions{Local: "a", Policies: cat, Producers: &memRemotes{m: map[string]*memRemote{}}, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		mustStart(t, m, ctx, LocalTopics{Topics: &memTopics{topics: map[string]*memTopic{topic: lt}}})
		defer m.Close(ctx)
		poll.Until(t, 5*time.Second, "start failure in stats", func() bool {
			s, ok := m.Stats(topic)["b"]
			return ok && strings.Contains(s.LastError, "disk full") && !s.Connected
		})
		checkAllStats(t, m, topic)
		lt.mu.Lock()
		lt.openErr = nil
		lt.mu.Unlock()
		poll.Until(t, 5*time.Second, "started after the cause is gone", func() bool {
			s := m.Stats(topic)["b"]
			return len(m.Running()) == 1 && s.LastError == ""
		})
		checkAllStats(t, m, topic)
	})
}

// checkAllStats: AllStats lists what Stats says of each of topics (the topics with anything to
// say), topics and remote clusters in name order.
func checkAllStats(t *testing.T, m *Manager, topics ...string) {
	t.Helper()
	var want []string
	for _, topic := range slices.Sorted(slices.Values(topics)) {
		st := m.Stats(topic)
		for _, r := range slices.Sorted(maps.Keys(st)) {
			want = append(want, st[r].Topic+" "+r+" "+st[r].Phase+" "+st[r].LastError)
		}
	}
	var got []string
	for _, s := range m.AllStats() {
		got = append(got, s.Topic+" "+s.RemoteCluster+" "+s.Phase+" "+s.LastError)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("AllStats lists %q, Stats of each topic %q", got, want)
	}
}

// TestManagerSyncStartsReplicatorsBeforeReturning: after a remote is added to the namespace of an
// existing topic, Sync returns only once the replicator runs, so an entry published right after it
// (before the watch-driven pass would have created the cursor at "latest") is replicated.
func TestManagerSyncStartsReplicatorsBeforeReturning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cat := newTestCatalog(t, ctx, []string{"a", "b"}, []string{"a"})
	const topic = "persistent://t/ns/orders"
	lt := newMemTopic(topic, 3)
	lt.append(mkEntry(t, mtypes.Position{}, "before", nil).Data, 1)
	topics := &memTopics{topics: map[string]*memTopic{topic: lt}}
	remotes := &memRemotes{m: map[string]*memRemote{}}
	m, err := NewManager(ManagerOptions{Local: "a", Policies: cat, Producers: remotes,
		StartAt: StartLatest, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(ctx, "t/ns"); err == nil {
		t.Fatal("Sync of a manager not started succeeded")
	}
	mustStart(t, m, ctx, LocalTopics{Topics: topics})
	defer func() {
		if err := m.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	for round := range 20 {
		clusters := []string{"a", "b"}
		if round%2 == 1 {
			clusters = []string{"a"}
		}
		if err := cat.UpdateNamespace(ctx, "t/ns", func(p *adminapi.Policies) error {
			p.ReplicationClusters = clusters
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := m.Sync(ctx, "t/ns"); err != nil {
			t.Fatal(err)
		}
		if got, want := len(m.Running()), len(clusters)-1; got != want {
			t.Fatalf("round %d: %d replicators running right after Sync, want %d", round, got, want)
		}
	}
	// The last round removed b; add it again and publish at once.
	if err := cat.UpdateNamespace(ctx, "t/ns", func(p *adminapi.Policies) error {
		p.ReplicationClusters = []string{"a", "b"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(ctx, "t/ns"); err != nil {
		t.Fatal(err)
	}
	pos := lt.append(mkEntry(t, mtypes.Position{}, "right-after", nil).Data, 1)
	poll.Until(t, 10*time.Second, "entry published right after Sync at b", func() bool {
		return remotes.get("b").topic.LastConfirmed().EntryID >= 0
	})
	if st := m.Stats(topic)["b"]; st.StartPosition.Compare(pos) >= 0 {
		t.Fatalf("b's cursor started at %v, after the entry %v", st.StartPosition, pos)
	}
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if err := m.Sync(cctx, "t/ns"); err != nil {
		t.Fatal(err)
	}
}

// closableTopic is a topic instance that can be unloaded (Closed), as the broker's are.
type closableTopic struct {
	*memTopic
	mu     sync.Mutex
	closed bool
}

func (c *closableTopic) Closed() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.closed }

// After an unload the old replicator's stats do not claim "caught up", and the pass of the
// topic-load hook replaces it at once.
func TestManagerReplacesReplicatorOfUnloadedTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cat := newTestCatalog(t, ctx, []string{"a", "b"}, []string{"a", "b"})
	const topic = "persistent://t/ns/orders"
	mt := newMemTopic(topic, 3)
	first := &closableTopic{memTopic: mt}
	src := &switchTopics{cur: first}
	remotes := &memRemotes{m: map[string]*memRemote{}}
	m, err := NewManager(ManagerOptions{Local: "a", Policies: cat, Producers: remotes,
		StartAt: StartEarliest, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mustStart(t, m, ctx, LocalTopics{Topics: src})
	defer func() {
		if err := m.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	if err := m.Sync(ctx, "t/ns"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "connected", func() bool { return m.Stats(topic)["b"].Connected })
	// Unload: the instance closes; a new one (same log) is what OpenTopic returns from now on.
	first.mu.Lock()
	first.closed = true
	first.mu.Unlock()
	second := &closableTopic{memTopic: mt}
	src.set(second)
	if s := m.Stats(topic)["b"]; s.Connected || s.LastError == "" || s.Phase != "restarting" {
		t.Fatalf("stats of the replicator of an unloaded topic: connected %v, lastError %q, phase %q", s.Connected, s.LastError, s.Phase)
	}
	// The load hook's pass replaces it at once (other passes wait a second: the topic may be
	// being deleted).
	m.TopicLoaded(topic)
	poll.Until(t, 5*time.Second, "the replicator replaced by the load pass", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		mg := m.running[Key{topic, "b"}]
		return mg != nil && mg.topic == LocalTopic(second)
	})
	mt.append(mkEntry(t, mtypes.Position{}, "after-reload", nil).Data, 1)
	poll.Until(t, 10*time.Second, "entry after the reload replicated", func() bool {
		return remotes.get("b").topic.LastConfirmed().EntryID >= 0
	})
}

// switchTopics serves one topic whose instance can be replaced (a reload).
type switchTopics struct {
	mu  sync.Mutex
	cur *closableTopic
}

func (s *switchTopics) set(t *closableTopic) { s.mu.Lock(); s.cur = t; s.mu.Unlock() }

func (s *switchTopics) ListTopics(ctx context.Context, ns string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []string{s.cur.Name()}, nil
}

func (s *switchTopics) OpenTopic(ctx context.Context, topic string) (LocalTopic, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, nil
}

// mustStart starts m over topics, failing the test if it cannot start.
func mustStart(t testing.TB, m *Manager, ctx context.Context, topics LocalTopics) {
	t.Helper()
	if err := m.Start(ctx, topics); err != nil {
		t.Fatal(err)
	}
}

// countingPolicies counts reads of namespace policies (each a copy of them in the catalog).
type countingPolicies struct {
	*catalog.Catalog
	reads atomic.Int64
}

func (p *countingPolicies) Namespace(ns string) (adminapi.Policies, bool) {
	p.reads.Add(1)
	return p.Catalog.Namespace(ns)
}

// TestManagerPassReadsEachNamespaceOnce: a pass over a namespace's topics reads its policies once,
// not once per topic: on an idle broker with 10,000 topics the copies were a quarter of its CPU
// (the full pass runs every 30 s).
func TestManagerPassReadsEachNamespaceOnce(t *testing.T) {
	ctx := context.Background()
	pol := &countingPolicies{Catalog: newTestCatalog(t, ctx, []string{"a", "b"}, []string{"a"})}
	topics := &memTopics{topics: map[string]*memTopic{}}
	for i := range 50 {
		name := fmt.Sprintf("persistent://t/ns/idle-%d", i)
		topics.topics[name] = newMemTopic(name, int64(i+1))
	}
	m, err := NewManager(ManagerOptions{Local: "a", Policies: pol, Producers: &memRemotes{m: map[string]*memRemote{}}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mustStart(t, m, ctx, LocalTopics{Topics: topics})
	defer func() {
		if err := m.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	before := pol.reads.Load()
	if err := m.Sync(ctx, "t/ns"); err != nil {
		t.Fatal(err)
	}
	if reads := pol.reads.Load() - before; reads > 2 { // a pass that was running may read it too
		t.Fatalf("a pass over 50 topics of one namespace read its policies %d times", reads)
	}
}
