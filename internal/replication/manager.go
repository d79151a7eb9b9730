package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
)

// PolicySource is what the Manager needs from the configuration store; *catalog.Catalog
// implements it.
type PolicySource interface {
	ClusterDirectory
	// ReplicationClusters: the topic-level list if set, else the namespace's; ok false if the
	// namespace does not exist.
	ReplicationClusters(topic string) ([]string, bool)
	Namespace(ns string) (adminapi.Policies, bool)
	TopicPolicies(topic string) (adminapi.TopicPolicies, bool)
	AllNamespaces() []string
	// Subscribe delivers change events (by watch, within milliseconds of the change).
	Subscribe() (<-chan catalog.Event, func())
}

// LocalTopics is how the Manager reaches this broker's topics; internal/node builds it over the
// broker. The broker is built after the Manager, because its topic loads call the Manager
// (OpenIndex, TopicLoaded, the replicated-subscription hooks), so the topics are handed to Start
// rather than to NewManager.
type LocalTopics struct {
	// Topics is required.
	Topics TopicSource
	// Sync gives the replicated-subscription sync its topics (subsync.go); nil = the sync does
	// not run (subscription changes are still recorded, never written).
	Sync SyncTopicSource
}

// TopicSource is what the Manager needs from the broker; internal/node implements it.
type TopicSource interface {
	// ListTopics lists the persistent topics (partitions individually) of a namespace that exist
	// locally, loaded or not.
	ListTopics(ctx context.Context, namespace string) ([]string, error)
	// OpenTopic loads an existing topic (never creates it) and returns it. The returned LocalTopic
	// may implement `Closed() bool`; the Manager then notices unloads by itself.
	OpenTopic(ctx context.Context, topic string) (LocalTopic, error)
}

// ManagerOptions configure a Manager.
type ManagerOptions struct {
	// Local is this cluster's name.
	Local string
	// LocalSchemas reads this cluster's schemas for the default ClientFactory; nil reads them
	// through this cluster's admin API (serviceUrl).
	LocalSchemas LocalSchemaReader
	Policies     PolicySource
	// Producers creates producers on remote clusters; nil = a ClientFactory over Policies.
	Producers RemoteProducerFactory
	// StartAt is --replication-start-at (the namespace property replicationStartAt overrides it).
	StartAt StartAt
	// Machine is the template for every replicator (in-flight bounds, backoff); Local, Remote and
	// Rate are set per replicator.
	Machine MachineConfig
	// ResyncInterval is how often everything is re-checked even without events (a missed event, a
	// topic created behind the Manager's back). Default 30 s.
	ResyncInterval time.Duration
	// Index options for OpenIndex.
	Index IndexOptions
	// MemoryBytes bounds the entries all replicators hold at once, read and not yet acknowledged
	// by their remote (budget.go): 0 = DefaultReplicationMemoryBytes, negative = no bound.
	MemoryBytes int64
	// StallTimeout: a replicator with a backlog and no progress for this long is reported stalled
	// (stall.go); 0 = DefaultStallTimeout.
	StallTimeout time.Duration
	// SubscriptionSyncInterval is the least time between two states of one replicated
	// subscription. Default DefaultSubscriptionSyncInterval.
	SubscriptionSyncInterval time.Duration
	// AdvertiseInterval is how often positions are advertised to the targets (advertise.go);
	// 0 = DefaultAdvertiseInterval.
	AdvertiseInterval time.Duration
	// LinkDefaults are the broker's brokerClient* settings, used by links to clusters whose data
	// has no TLS or credentials of its own (linkdefaults.go).
	LinkDefaults LinkDefaults
	Logger       *slog.Logger
}

// DefaultReplicationMemoryBytes is ManagerOptions.MemoryBytes' default: room for about six
// replicators catching up at full speed (a window of 32 MiB plus two reads of up to 5 MiB each).
const DefaultReplicationMemoryBytes = 256 << 20

// Manager runs the replicators of one broker: it follows policy changes (by the catalog's watch)
// and topic loads, and starts, stops and reconfigures replicators as Plan decides. It also keeps
// the inbound indexes the broker opens through OpenIndex, for stats.
type Manager struct {
	opts      ManagerOptions
	log       *slog.Logger
	producers RemoteProducerFactory
	ownsProd  *ClientFactory
	budget    *MemoryBudget // shared by every replicator of this broker
	subsync   *subSync
	// topics is Start's TopicSource: set before Start starts the goroutines that read it.
	topics TopicSource
	// advertised: what sources advertised to this cluster (advertise.go), under its own lock.
	advertised sourceAdvertisements
	// advertiseDone is closed when the advertising goroutine (started by Start) ends.
	advertiseDone chan struct{}

	mu        sync.Mutex
	running   map[Key]*managed
	failed    map[Key]failedStart // replicators that could not start; retried, shown in stats
	indexes   map[string]*Index
	abandoned map[string]int64 // never-replicated entries dropped with removed remotes, by remote
	topicReq  map[string]bool
	nsReq     map[string]bool
	fullReq   bool
	// thoroughReq makes the next full pass open every topic (to find cursors of remotes removed
	// while this broker was down); set at start and on a catalog resync, not by the periodic pass.
	thoroughReq bool
	kick        chan struct{}
	// passStarted / passDone count control passes; passCh is closed (and replaced) at the end of
	// every pass. Sync waits on them.
	passStarted, passDone int64
	passCh                chan struct{}
	cancel                context.CancelFunc
	done                  chan struct{}
	started               bool
}

// failedStart records why a wanted replicator is not running, for stats; the Manager retries it.
type failedStart struct {
	err     string
	at      time.Time
	startAt StartAt
}

// startRetryDelay is how soon a replicator that failed to start (or whose topic failed to open) is
// tried again.
const startRetryDelay = time.Second

type managed struct {
	runner *Runner
	topic  LocalTopic
	rate   Rate
}

// NewManager returns a Manager; Start runs it.
func NewManager(opts ManagerOptions) (*Manager, error) {
	if opts.Local == "" || opts.Policies == nil {
		return nil, errors.New("replication: manager needs the local cluster and a policy source")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ResyncInterval <= 0 {
		opts.ResyncInterval = 30 * time.Second
	}
	if opts.StartAt == "" {
		opts.StartAt = StartLatest
	}
	m := &Manager{
		opts: opts, log: opts.Logger, // the caller names the component (node: component=replication)
		running: map[Key]*managed{}, failed: map[Key]failedStart{}, indexes: map[string]*Index{}, abandoned: map[string]int64{},
		topicReq: map[string]bool{}, nsReq: map[string]bool{}, kick: make(chan struct{}, 1),
	}
	if opts.MemoryBytes == 0 {
		opts.MemoryBytes = DefaultReplicationMemoryBytes
	}
	m.opts.MemoryBytes = opts.MemoryBytes
	m.budget = NewMemoryBudget(opts.MemoryBytes)
	m.subsync = newSubSync(opts.Local, m, opts.SubscriptionSyncInterval, opts.Logger)
	m.producers = opts.Producers
	if m.producers == nil {
		f := NewClientFactory(ClientFactoryOptions{Local: opts.Local, Clusters: opts.Policies, LocalSchemas: opts.LocalSchemas, LinkDefaults: opts.LinkDefaults, Logger: opts.Logger})
		m.producers, m.ownsProd = f, f
	}
	return m, nil
}

// Start subscribes to policy changes and starts the control loop over topics; the first pass looks
// at every local topic of every namespace. It returns at once. A second Start does nothing.
func (m *Manager) Start(ctx context.Context, topics LocalTopics) error {
	if topics.Topics == nil {
		return errors.New("replication: manager started without a topic source")
	}
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return nil
	}
	m.started = true
	m.topics = topics.Topics
	m.fullReq, m.thoroughReq = true, true
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel, m.done = cancel, make(chan struct{})
	m.mu.Unlock()
	events, unsubscribe := m.opts.Policies.Subscribe()
	if topics.Sync != nil {
		m.subsync.start(loopCtx, topics.Sync)
	}
	m.advertiseDone = make(chan struct{})
	go m.runAdvertiser(loopCtx)
	go m.loop(loopCtx, events, unsubscribe)
	m.poke()
	return nil
}

// TopicLoaded tells the Manager that a topic was loaded or created; its replicators start at once
// (the broker has already created the cursors of a new topic before its first entry).
func (m *Manager) TopicLoaded(topic string) {
	m.mu.Lock()
	m.topicReq[topic] = true
	m.mu.Unlock()
	m.poke()
	m.subsync.topicLoaded(topic)
}

// NamespaceChanged asks for a pass over a namespace's topics without waiting for it: a broker of
// the cluster took over one of its bundles, whose topics may need replicators here now.
func (m *Manager) NamespaceChanged(ns string) {
	m.mu.Lock()
	m.nsReq[ns] = true
	m.mu.Unlock()
	m.poke()
}

// TopicUnloaded stops the replicators of a topic that is being unloaded or deleted (their cursors
// stay). It waits for them, at most until ctx ends.
func (m *Manager) TopicUnloaded(ctx context.Context, topic string) {
	m.subsync.forgetMarks(topic)
	m.mu.Lock()
	var stop []*managed
	for k, mg := range m.running {
		if k.Topic == topic {
			stop = append(stop, mg)
			delete(m.running, k)
		}
	}
	m.mu.Unlock()
	for _, mg := range stop {
		if err := mg.runner.Stop(ctx); err != nil {
			m.log.Warn("stop replicator", "topic", topic, "err", err)
		}
	}
}

// Sync runs a control pass over namespace ns (whose policies must already be in the catalog) and
// returns once it is done: every local topic of ns that replicates then has its replicators running
// and their cursors created. Replication of a topic that existed before a remote was added starts at
// "latest" when its cursor is created, which the watch-driven pass does a few milliseconds after the
// policy change; an admin operation that changes replication clusters calls Sync before answering,
// so that whatever is published after it returns is replicated. Topics that cannot be opened now are
// retried in the background as usual and are not waited for.
func (m *Manager) Sync(ctx context.Context, ns string) error {
	m.mu.Lock()
	if !m.started {
		m.mu.Unlock()
		return errors.New("replication: manager not started")
	}
	m.nsReq[ns] = true
	// The next pass to start takes the request (passes take requests as they start, under m.mu).
	target := m.passStarted + 1
	if m.passCh == nil {
		m.passCh = make(chan struct{})
	}
	ch, closed := m.passCh, m.done
	m.mu.Unlock()
	m.poke()
	for {
		select {
		case <-ch:
		case <-closed:
			return errors.New("replication: manager closed")
		case <-ctx.Done():
			return fmt.Errorf("replication: sync %s: %w", ns, ctx.Err())
		}
		m.mu.Lock()
		done := m.passDone >= target
		ch = m.passCh
		m.mu.Unlock()
		if done {
			return nil
		}
	}
}

func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Close stops every replicator and the control loop, and closes the producer factory it created.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	started := m.started
	m.mu.Unlock()
	if started {
		m.cancel()
		select {
		case <-m.done:
		case <-ctx.Done():
			return fmt.Errorf("replication: close manager: %w", ctx.Err())
		}
		m.subsync.stop()
		select {
		case <-m.advertiseDone:
		case <-ctx.Done():
			return fmt.Errorf("replication: close manager: %w", ctx.Err())
		}
	}
	m.mu.Lock()
	all := m.running
	m.running = map[Key]*managed{}
	m.mu.Unlock()
	var errs []error
	for k, mg := range all {
		if err := mg.runner.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop replicator %s -> %s: %w", k.Topic, k.Remote, err))
		}
	}
	if m.ownsProd != nil {
		if err := m.ownsProd.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) loop(ctx context.Context, events <-chan catalog.Event, unsubscribe func()) {
	defer close(m.done)
	defer unsubscribe()
	resync := time.NewTicker(m.opts.ResyncInterval)
	defer resync.Stop()
	health := time.NewTicker(time.Second)
	defer health.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			m.onEvent(ev)
			// Take whatever else arrived with it before acting (a burst of changes is one pass).
			for more := true; more; {
				select {
				case ev, ok := <-events:
					if !ok {
						events, more = nil, false
						continue
					}
					m.onEvent(ev)
				default:
					more = false
				}
			}
			m.reconcile(ctx)
		case <-m.kick:
			m.reconcile(ctx)
		case <-resync.C:
			m.mu.Lock()
			m.fullReq = true
			m.mu.Unlock()
			m.reconcile(ctx)
		case <-health.C:
			m.restartClosedTopics(ctx)
			m.maintainIndexes(ctx)
		}
	}
}

func (m *Manager) onEvent(ev catalog.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Kind {
	case catalog.EventNamespace:
		m.nsReq[ev.Name] = true
	case catalog.EventTopicPolicies, catalog.EventPartitionedTopic:
		if t, err := naming.ParseTopic(ev.Name); err == nil {
			m.nsReq[t.NamespaceName().String()] = true
		}
	case catalog.EventCluster:
		// A moved cluster: drop its client so producers reconnect to the new URL.
		if m.ownsProd != nil {
			m.ownsProd.forget(ev.Name)
		}
		m.fullReq = true
	case catalog.EventResync:
		m.fullReq, m.thoroughReq = true, true
	case catalog.EventTenant:
		m.fullReq = true
	}
}

// maintainIndexes lets every inbound index sample its rates and save its snapshot when due.
func (m *Manager) maintainIndexes(ctx context.Context) {
	m.mu.Lock()
	xs := make([]*Index, 0, len(m.indexes))
	for _, x := range m.indexes {
		xs = append(xs, x)
	}
	m.mu.Unlock()
	now := time.Now()
	// Rates are sampled here; only the indexes with a save due go to the savers (handing each of
	// 10,000 idle indexes to a goroutine every second cost more than sampling them).
	due := xs[:0]
	for _, x := range xs {
		if x.tickSaveDue(now) {
			due = append(due, x)
		}
	}
	// A save waits for its records to be durable (one group commit): saves of several topics run
	// together, so they share group commits instead of queueing behind each other.
	var wg sync.WaitGroup
	work := make(chan *Index)
	for range min(len(due), maintainParallelism) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range work {
				x.saveDue(ctx)
			}
		}()
	}
	for _, x := range due {
		work <- x
	}
	close(work)
	wg.Wait()
}

// maintainParallelism bounds the indexes maintained (saved) at once.
const maintainParallelism = 8

// topicClosed reports whether a topic instance says it was closed (unloaded).
func topicClosed(t LocalTopic) bool {
	c, ok := t.(interface{ Closed() bool })
	return ok && c.Closed()
}

// restartClosedTopics notices topics that were unloaded under running replicators and reopens them.
func (m *Manager) restartClosedTopics(ctx context.Context) {
	m.mu.Lock()
	var closed []string
	for k, mg := range m.running {
		if topicClosed(mg.topic) && !slices.Contains(closed, k.Topic) {
			closed = append(closed, k.Topic)
		}
	}
	m.mu.Unlock()
	for _, t := range closed {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m.TopicUnloaded(stopCtx, t)
		cancel()
		m.TopicLoaded(t)
	}
}

// reconcile runs one control pass over what was requested.
func (m *Manager) reconcile(ctx context.Context) {
	m.mu.Lock()
	full, thorough, nsReq, topicReq := m.fullReq, m.thoroughReq, m.nsReq, m.topicReq
	m.fullReq, m.thoroughReq, m.nsReq, m.topicReq = false, false, map[string]bool{}, map[string]bool{}
	m.passStarted++
	pass := m.passStarted
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.passDone = pass
		if m.passCh != nil {
			close(m.passCh)
		}
		m.passCh = make(chan struct{})
		m.mu.Unlock()
	}()

	namespaces := map[string]bool{}
	if full {
		for _, ns := range m.opts.Policies.AllNamespaces() {
			namespaces[ns] = true
		}
	}
	for ns := range nsReq {
		namespaces[ns] = true
	}
	topics := map[string]bool{}
	for _, ns := range sortedKeys(namespaces) {
		list, err := m.topics.ListTopics(ctx, ns)
		if err != nil {
			m.log.Warn("list topics for replication", "namespace", ns, "err", err)
			continue
		}
		for _, t := range list {
			topics[t] = true
		}
	}
	for t := range topicReq {
		topics[t] = true
	}
	// A replicator whose topic instance was closed (unloaded, then perhaps loaded again) is stopped
	// here. A pass asked for by the topic's load hook (topicReq) starts a new one on the freshly
	// loaded instance at once; any other pass leaves the topic alone for now and looks again in a
	// second: the topic may be being deleted, and opening it now could race with the deletion.
	m.mu.Lock()
	var stale []Key
	staleTopics := map[string]bool{}
	for k, mg := range m.running {
		tn, err := naming.ParseTopic(k.Topic)
		inScope := topics[k.Topic] || (err == nil && namespaces[tn.NamespaceName().String()])
		if inScope && topicClosed(mg.topic) {
			stale = append(stale, k)
			staleTopics[k.Topic] = true
		}
	}
	m.mu.Unlock()
	for _, k := range stale {
		m.stop(ctx, StopOrder{Key: k, Running: true}, nil)
	}

	// Topics of running replicators in the namespaces looked at are part of the pass, so that a
	// deleted topic's replicators stop.
	m.mu.Lock()
	running := map[Key]Rate{}
	opened := map[string]LocalTopic{}
	for k, mg := range m.running {
		tn, err := naming.ParseTopic(k.Topic)
		inScope := topics[k.Topic] || (err == nil && namespaces[tn.NamespaceName().String()])
		if inScope {
			running[k] = mg.rate
			opened[k.Topic] = mg.topic
		}
	}
	m.mu.Unlock()

	var inputs []TopicInput
	for t := range staleTopics {
		if !topicReq[t] {
			delete(topics, t)
			m.retrySoon(t)
		}
	}
	// Each namespace's policies are read once per pass: a read copies them (the catalog hands out
	// clones), and a pass over 10,000 idle topics of one namespace made it a quarter of an idle
	// broker's CPU.
	nsPolicies := map[string]adminapi.Policies{}
	for _, t := range sortedKeys(topics) {
		in, lt, ok := m.input(ctx, t, opened[t], (full && thorough) || nsReq[namespaceOf(t)] || topicReq[t], nsPolicies)
		if !ok {
			continue // could not open it now; keep what runs, retry on the next pass
		}
		if lt != nil {
			opened[t] = lt
		}
		inputs = append(inputs, in)
	}
	// Failures of earlier starts are re-decided by this pass for the topics it covers.
	m.mu.Lock()
	for _, in := range inputs {
		for k := range m.failed {
			if k.Topic == in.Topic {
				delete(m.failed, k)
			}
		}
	}
	m.mu.Unlock()
	plan := Plan(m.opts.Local, inputs, running)
	for _, s := range plan.Stop {
		m.stop(ctx, s, opened[s.Topic])
	}
	for _, w := range plan.UpdateRate {
		m.mu.Lock()
		if mg := m.running[w.Key]; mg != nil {
			mg.rate = w.Rate
			mg.runner.SetRate(w.Rate)
		}
		m.mu.Unlock()
		m.log.Info("replicator dispatch rate changed", "topic", w.Topic, "remote_cluster", w.Remote,
			"msgPerSec", w.Rate.MessagesPerSecond, "bytesPerSec", w.Rate.BytesPerSecond)
	}
	for _, w := range plan.Start {
		lt := opened[w.Topic]
		if lt == nil {
			continue
		}
		m.start(ctx, w, lt)
	}
}

func namespaceOf(topic string) string {
	t, err := naming.ParseTopic(topic)
	if err != nil {
		return ""
	}
	return t.NamespaceName().String()
}

// input builds the Plan input of a topic. The topic is opened only when it has (or had) remotes,
// or when thorough is set (a pass after a policy change or at start, looking for stale cursors).
// nsPolicies holds the namespace policies this pass has read (input adds to it).
func (m *Manager) input(ctx context.Context, topic string, lt LocalTopic, thorough bool, nsPolicies map[string]adminapi.Policies) (TopicInput, LocalTopic, bool) {
	in := TopicInput{Topic: topic}
	clusters, ok := m.opts.Policies.ReplicationClusters(topic)
	if !ok {
		return in, lt, true // namespace unknown: Known=false, nothing changes
	}
	tn, err := naming.ParseTopic(topic)
	if err != nil || !tn.IsPersistent() {
		return in, lt, false
	}
	hasRemote := slices.ContainsFunc(clusters, func(c string) bool { return c != "" && c != m.opts.Local })
	if lt == nil && (hasRemote || thorough) {
		lt, err = m.topics.OpenTopic(ctx, topic)
		if err != nil {
			m.log.Warn("open topic for replication", "topic", topic, "err", err)
			if hasRemote {
				// Shown in the topic's replication stats until a pass opens it.
				m.mu.Lock()
				for _, c := range clusters {
					if k := (Key{topic, c}); c != "" && c != m.opts.Local && m.running[k] == nil {
						m.failed[k] = failedStart{err: "open topic for replication: " + err.Error(), at: time.Now()}
					}
				}
				m.mu.Unlock()
				m.retrySoon(topic)
			}
			return in, nil, false
		}
	}
	ns := tn.NamespaceName().String()
	nsp, read := nsPolicies[ns]
	if !read {
		nsp, _ = m.opts.Policies.Namespace(ns)
		nsPolicies[ns] = nsp
	}
	var tp *adminapi.TopicPolicies
	if p, ok := m.opts.Policies.TopicPolicies(tn.Base().String()); ok {
		tp = &p
	}
	in.Known = true
	in.Clusters = clusters
	in.StartAt = StartAtFrom(nsp, m.opts.StartAt)
	in.Rates = RatesFrom(m.opts.Local, clusters, nsp, tp)
	if lt != nil {
		in.CursorRemotes = RemotesOfCursors(lt.CursorNames())
	}
	return in, lt, true
}

func (m *Manager) start(ctx context.Context, w Want, lt LocalTopic) {
	mc := m.opts.Machine
	mc.Local, mc.Remote, mc.Rate = m.opts.Local, w.Remote, w.Rate
	r, err := StartRunner(ctx, RunnerConfig{
		Machine: mc, Topic: lt, Producers: m.producers, StartAt: w.StartAt, Logger: m.log, Budget: m.budget,
		StallTimeout: m.opts.StallTimeout,
	})
	if err != nil {
		// Never silent: shown in the topic's stats as lastError, logged, and retried shortly.
		m.log.Warn("start replicator; retrying", "topic", w.Topic, "remote_cluster", w.Remote, "err", err)
		m.mu.Lock()
		m.failed[w.Key] = failedStart{err: "start replicator: " + err.Error(), at: time.Now(), startAt: w.StartAt}
		m.mu.Unlock()
		m.retrySoon(w.Topic)
		return
	}
	m.mu.Lock()
	delete(m.failed, w.Key)
	m.running[w.Key] = &managed{runner: r, topic: lt, rate: w.Rate}
	m.mu.Unlock()
	// The new remote gets the topic's replicated subscriptions at once.
	m.subsync.remoteAdded(w.Topic)
}

func (m *Manager) stop(ctx context.Context, s StopOrder, lt LocalTopic) {
	m.mu.Lock()
	mg := m.running[s.Key]
	delete(m.running, s.Key)
	delete(m.failed, s.Key)
	m.mu.Unlock()
	if mg != nil {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := mg.runner.Stop(stopCtx); err != nil {
			m.log.Warn("stop replicator", "topic", s.Topic, "remote_cluster", s.Remote, "err", err)
		}
		cancel()
		if lt == nil {
			lt = mg.topic
		}
	}
	if !s.DeleteCursor || lt == nil {
		if mg != nil {
			m.log.Info("replicator stopped", "topic", s.Topic, "remote_cluster", s.Remote)
		}
		return
	}
	name := CursorName(s.Remote)
	var backlog int64
	if cur, created, err := lt.OpenCursor(ctx, name, mtypes.Latest); err == nil && !created {
		backlog = cur.Backlog()
	}
	if err := lt.DeleteCursor(ctx, name); err != nil {
		// A cursor left behind would hold back trimming: retried by another pass over the topic.
		m.log.Warn("delete replication cursor; retrying", "topic", s.Topic, "cursor", name, "err", err)
		m.retrySoon(s.Topic)
		return
	}
	m.mu.Lock()
	m.abandoned[s.Remote] += backlog
	m.mu.Unlock()
	if backlog > 0 {
		m.log.Warn("replication removed with entries never sent", "topic", s.Topic, "remote_cluster", s.Remote, "neverReplicated", backlog)
	} else {
		m.log.Info("replication removed", "topic", s.Topic, "remote_cluster", s.Remote)
	}
}

// retrySoon asks for another pass over topic after startRetryDelay.
func (m *Manager) retrySoon(topic string) {
	time.AfterFunc(startRetryDelay, func() { m.TopicLoaded(topic) })
}

// OpenIndex loads the inbound index of a topic (see LoadIndex) and keeps it for stats until it is
// closed. internal/node calls it from the broker's ReplicatedIndex hook.
func (m *Manager) OpenIndex(ctx context.Context, topic LocalTopic) (*Index, error) {
	opts := m.opts.Index
	if opts.Logger == nil {
		opts.Logger = m.log
	}
	x, err := LoadIndex(ctx, topic, opts)
	if err != nil {
		return nil, err
	}
	name := topic.Name()
	x.onClose = func() {
		m.mu.Lock()
		if m.indexes[name] == x {
			delete(m.indexes, name)
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	m.indexes[name] = x
	m.mu.Unlock()
	return x, nil
}

// Stats returns the replication section of a topic's stats, keyed by remote cluster: every running
// replicator merged with the inbound side from every origin that replicated into the topic.
func (m *Manager) Stats(topic string) map[string]Stats {
	var p topicStatsParts
	m.mu.Lock()
	for k, mg := range m.running {
		if k.Topic == topic {
			p.addRunner(mg)
		}
	}
	for k, f := range m.failed {
		if k.Topic == topic {
			p.failed = append(p.failed, m.failedStats(k, f))
		}
	}
	p.x = m.indexes[topic]
	m.mu.Unlock()
	return m.assembleStats(topic, p)
}

// topicStatsParts is what Stats assembles for one topic, taken under m.mu.
type topicStatsParts struct {
	runners, stale []*Runner
	failed         []Stats
	x              *Index
}

func (p *topicStatsParts) addRunner(mg *managed) {
	if topicClosed(mg.topic) {
		p.stale = append(p.stale, mg.runner)
	} else {
		p.runners = append(p.runners, mg.runner)
	}
}

// failedStats is the Stats of a replicator that failed to start (m.mu held).
func (m *Manager) failedStats(k Key, f failedStart) Stats {
	return Stats{Topic: k.Topic, LocalCluster: m.opts.Local, RemoteCluster: k.Remote,
		Phase: "not started", LastError: f.err, LastErrorTime: f.at, StartMode: f.startAt}
}

// assembleStats builds a topic's Stats from its parts (m.mu not held: runners and the index take
// their own locks).
func (m *Manager) assembleStats(topic string, p topicStatsParts) map[string]Stats {
	out := map[string]Stats{}
	for _, s := range p.failed {
		out[s.RemoteCluster] = s
	}
	for _, r := range p.runners {
		out[r.Remote()] = r.Stats()
	}
	for _, r := range p.stale {
		// Its topic instance was unloaded: what it says about backlog and connection is about the
		// old instance; say so until the replicator on the reloaded topic runs.
		s := r.Stats()
		s.Connected, s.OutboundConnection, s.OutboundConnectedSince = false, "", time.Time{}
		s.Phase = "restarting"
		if s.LastError == "" {
			s.LastError, s.LastErrorTime = "topic unloaded; replicator restarting", time.Now()
		}
		out[r.Remote()] = s
	}
	if p.x != nil {
		for _, in := range p.x.Inbound() {
			s, ok := out[in.Origin]
			if !ok {
				s = Stats{Topic: topic, LocalCluster: m.opts.Local, RemoteCluster: in.Origin, Phase: PhaseInboundOnly}
			}
			s.MsgRateIn, s.MsgThroughputIn = in.MsgRateIn, in.MsgThroughputIn
			s.MsgInCount, s.BytesInCount, s.DuplicatesDropped = in.MsgInCount, in.BytesInCount, in.DuplicatesDropped
			out[in.Origin] = s
		}
	}
	return out
}

// PhaseInboundOnly marks the Stats of a remote this cluster receives from without replicating to it.
const PhaseInboundOnly = "inbound-only"

// AdminStats is Stats converted to the admin REST shape: this cluster's own replicators
// (TopicStats.replication) apart from the clusters it receives from (TopicStats.inboundReplication,
// whose connections SplitInbound adds from the topic's publishers).
func (m *Manager) AdminStats(topic string) (outbound map[string]adminapi.ReplicatorStats, inbound map[string]adminapi.InboundReplicationStats) {
	outbound = map[string]adminapi.ReplicatorStats{}
	for k, s := range m.Stats(topic) {
		if s.MsgInCount > 0 || s.Phase == PhaseInboundOnly {
			if inbound == nil {
				inbound = map[string]adminapi.InboundReplicationStats{}
			}
			inbound[k] = adminapi.InboundReplicationStats{
				MsgRateIn: s.MsgRateIn, MsgThroughputIn: s.MsgThroughputIn,
				MsgInCounter: s.MsgInCount, BytesInCounter: s.BytesInCount, DuplicatesDropped: s.DuplicatesDropped,
			}
		}
		if s.Phase != PhaseInboundOnly {
			outbound[k] = s.Admin()
		}
	}
	return outbound, inbound
}

// AllStats returns the stats of every replicator and inbound origin, for /metrics.
func (m *Manager) AllStats() []Stats {
	// One pass over the replicators and indexes (Stats per topic would scan every replicator for
	// each topic, and every idle topic has an index).
	parts := map[string]*topicStatsParts{}
	of := func(topic string) *topicStatsParts {
		p := parts[topic]
		if p == nil {
			p = &topicStatsParts{}
			parts[topic] = p
		}
		return p
	}
	m.mu.Lock()
	for k, mg := range m.running {
		of(k.Topic).addRunner(mg)
	}
	for k, f := range m.failed {
		p := of(k.Topic)
		p.failed = append(p.failed, m.failedStats(k, f))
	}
	indexes := make([]*Index, 0, len(m.indexes))
	names := make([]string, 0, len(m.indexes))
	for t, x := range m.indexes {
		indexes, names = append(indexes, x), append(names, t)
	}
	m.mu.Unlock()
	for i, x := range indexes {
		if p := parts[names[i]]; p != nil {
			p.x = x
		} else if x.hasInbound() {
			of(names[i]).x = x
		}
	}
	var out []Stats
	for _, t := range sortedKeys(parts) {
		st := m.assembleStats(t, *parts[t])
		for _, r := range sortedKeys(st) {
			out = append(out, st[r])
		}
	}
	return out
}

// Abandoned returns, per remote cluster, the entries that were never replicated because the remote
// was removed from a topic's replication clusters (since this process started).
func (m *Manager) Abandoned() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, len(m.abandoned))
	for k, v := range m.abandoned {
		out[k] = v
	}
	return out
}

// Running lists the running replicators, sorted.
func (m *Manager) Running() []Key {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Key, 0, len(m.running))
	for k := range m.running {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Key) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		if a.Remote < b.Remote {
			return -1
		}
		if a.Remote > b.Remote {
			return 1
		}
		return 0
	})
	return out
}
