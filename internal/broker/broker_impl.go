package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/storage"
)

// brokerState is the broker's implementation.
type brokerState struct {
	cfg             Config
	storage         *storage.Engine
	policies        PolicySource
	log             *slog.Logger
	clock           Clock
	publishLimiter  *MemoryLimiter
	publishLatency  storage.LatencyRecorder // every publish, from taken to answered
	replicatedIndex func(ctx context.Context, topic naming.TopicName, ledger *storage.Ledger) (ReplicatedEntryIndex, error)
	owns            func(naming.TopicName) bool  // nil: every topic is served here
	ledgerIDFloor   func(naming.TopicName) int64 // nil: no floor (Deps.LedgerIDFloor)
	strandedSubs    func(naming.TopicName) bool  // nil: never (Deps.HoldsStrandedSubscriptions)
	// movedTo names, while a topic whose bundle moves unloads, the broker its clients reconnect
	// to (UnloadTopicTo), guarded by movedMu.
	movedMu     sync.Mutex
	movedTo     map[*topicState]Reassigned
	subSync     SubscriptionSync
	ignoredAcks ignoredAcks // acknowledgements naming no stored entry (ackcheck.go)

	producerSeq atomic.Uint64
	consumerSeq atomic.Uint64
	// lastSampleNs is the clock of the stats ticker's last run (0: none yet), for rates
	// allocated later (topicState.counters).
	lastSampleNs atomic.Int64
	// nowMsFunc is nowMs as a func value made once (a method value allocates at each use).
	nowMsFunc func() int64

	mu      sync.Mutex
	closed  bool
	topics  map[string]*topicState // by full name
	loading map[string]*topicLoad
	// closing holds topics being unloaded: a new load waits, so that it never gets the old,
	// still-open ledger from storage.
	closing map[string]chan struct{}

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// topicLoad is one in-progress topic load shared by concurrent callers.
type topicLoad struct {
	done chan struct{}
	t    *topicState
	err  error
}

func newBroker(cfg Config, deps Deps) (*Broker, error) {
	if deps.Storage == nil {
		return nil, errors.New("broker: Deps.Storage is required")
	}
	if cfg.BrokerID == "" {
		cfg.BrokerID = "0"
	}
	if cfg.Cluster == "" {
		cfg.Cluster = "standalone"
	}
	if cfg.DedupSnapshotInterval <= 0 {
		cfg.DedupSnapshotInterval = 1000
	}
	if cfg.DispatchMaxEntries <= 0 {
		cfg.DispatchMaxEntries = 100
	}
	if cfg.DispatchMaxBytes <= 0 {
		cfg.DispatchMaxBytes = 5 << 20
	}
	if cfg.MaxPublishBytesInFlight == 0 {
		cfg.MaxPublishBytesInFlight = 256 << 20
	}
	if cfg.MaxUnackedMessagesPerConsumer == 0 {
		cfg.MaxUnackedMessagesPerConsumer = 50000
	}
	if cfg.MaxUnackedMessagesPerSubscription == 0 {
		cfg.MaxUnackedMessagesPerSubscription = 200000
	}
	if cfg.StatsInterval <= 0 {
		cfg.StatsInterval = 5 * time.Second
	}
	if cfg.BacklogQuotaCheckInterval <= 0 {
		cfg.BacklogQuotaCheckInterval = 5 * time.Second
	}
	if cfg.ReplicatorPrefix == "" {
		cfg.ReplicatorPrefix = "pulsar.repl"
	}
	b := &brokerState{
		cfg:             cfg,
		storage:         deps.Storage,
		policies:        deps.Policies,
		log:             deps.Logger,
		clock:           deps.Clock,
		publishLimiter:  NewMemoryLimiter(max(cfg.MaxPublishBytesInFlight, 0), 0, nil),
		replicatedIndex: deps.ReplicatedIndex,
		owns:            deps.Owns,
		ledgerIDFloor:   deps.LedgerIDFloor,
		strandedSubs:    deps.HoldsStrandedSubscriptions,
		subSync:         deps.SubscriptionSync,
		topics:          make(map[string]*topicState),
		loading:         make(map[string]*topicLoad),
		closing:         make(map[string]chan struct{}),
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	b.log = b.log.With(slog.String("component", "broker"))
	if b.clock == nil {
		b.clock = systemClock{}
	}
	b.nowMsFunc = b.nowMs
	ctx, cancel := context.WithCancel(context.Background())
	b.stop = cancel
	b.wg.Add(1)
	go b.statsLoop(ctx)
	return &Broker{b: b}, nil
}

func (b *brokerState) nowMs() int64 { return b.clock.Now().UnixMilli() }

// nextProducerName generates "<cluster>-<brokerID>-<n>", unique for the broker's lifetime; the
// start-up time keeps names unique across restarts too.
func (b *brokerState) nextProducerName() string {
	return b.cfg.Cluster + "-" + b.cfg.BrokerID + "-" + strconv.FormatInt(b.startStamp(), 36) + "-" + strconv.FormatUint(b.producerSeq.Add(1)-1, 10)
}

var processStart = time.Now().UnixMilli() % (1 << 40)

func (b *brokerState) startStamp() int64 { return processStart }

func (b *brokerState) nextConsumerName() string {
	return "consumer-" + strconv.FormatUint(b.consumerSeq.Add(1), 10)
}

// topicPolicies asks the policy source (or returns defaults).
func (b *brokerState) topicPolicies(ctx context.Context, name naming.TopicName) (TopicPolicies, error) {
	if b.policies == nil {
		return TopicPolicies{}, nil
	}
	pol, err := b.policies.TopicPolicies(ctx, name)
	if err != nil {
		return TopicPolicies{}, fmt.Errorf("policies of %s: %w", name, err)
	}
	return pol, nil
}

func (b *brokerState) getTopic(ctx context.Context, name naming.TopicName, create bool) (*Topic, error) {
	key := name.String()
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, ErrBrokerClosed
		}
		if t := b.topics[key]; t != nil {
			b.mu.Unlock()
			return &t.public, nil
		}
		if ch := b.closing[key]; ch != nil {
			b.mu.Unlock()
			if err := waitClosed(ctx, ch); err != nil {
				return nil, err
			}
			continue
		}
		if l := b.loading[key]; l != nil {
			b.mu.Unlock()
			if err := waitClosed(ctx, l.done); err != nil {
				return nil, err
			}
			if l.err != nil {
				if errors.Is(l.err, ErrTopicNotFound) && create {
					continue // that load did not want to create it; this caller may
				}
				return nil, l.err
			}
			continue
		}
		l := &topicLoad{done: make(chan struct{})}
		b.loading[key] = l
		b.mu.Unlock()

		// The load outlives a caller that gives up: others may be waiting for it.
		t, err := b.loadTopic(context.WithoutCancel(ctx), name, create)
		b.mu.Lock()
		delete(b.loading, key)
		if err == nil {
			// Ownership is checked again here, under b.mu: a bundle whose hand-over began during
			// the load has had its loaded topics closed already, and this one must not be served
			// beside the broker taking the bundle over (docs/cluster.md, "Moving a bundle").
			if b.closed {
				err = ErrBrokerClosed
			} else if err = b.checkServedHere(name); err == nil {
				b.topics[key] = t
			}
		}
		l.t, l.err = t, err
		close(l.done)
		b.mu.Unlock()
		if err != nil {
			if t != nil {
				_ = t.close(context.Background())
			}
			return nil, err
		}
		return &t.public, nil
	}
}

// loadTopic opens (or creates) a topic's ledger and recovers its state.
func (b *brokerState) loadTopic(ctx context.Context, name naming.TopicName, create bool) (*topicState, error) {
	if err := b.checkServedHere(name); err != nil {
		return nil, err
	}
	pol, err := b.topicPolicies(ctx, name)
	if err != nil {
		return nil, err
	}
	if !name.IsPersistent() {
		// Non-persistent topics live in memory only: "missing" means "not loaded".
		if err := b.mayCreate(name, pol, create); err != nil {
			return nil, err
		}
		b.log.Info("non-persistent topic loaded", slog.String("topic", name.String()))
		return newTopicState(b, name, nil, pol), nil
	}
	exists, err := b.storage.LedgerExists(ctx, name.StorageName())
	if err != nil {
		return nil, fmt.Errorf("topic %s: %w", name, err)
	}
	if !exists {
		if err := b.mayCreate(name, pol, create); err != nil {
			return nil, err
		}
	}
	ledger, err := b.openLedger(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("opening ledger of %s: %w", name, storageNotReady(err))
	}
	t := newTopicState(b, name, ledger, pol)
	ledger.SetRetention(pol.RetentionTime, pol.RetentionSizeBytes)
	if err := t.load(ctx, !exists); err != nil {
		return t, fmt.Errorf("loading %s: %w", name, err)
	}
	b.log.Info("topic loaded", slog.String("topic", name.String()), slog.Bool("created", !exists),
		slog.Bool("dedup", t.dedupEnabled()), slog.String("lastPosition", ledger.LastConfirmed().String()))
	return t, nil
}

// mayCreate decides whether a missing topic may be created.
func (b *brokerState) mayCreate(name naming.TopicName, pol TopicPolicies, create bool) error {
	if !create {
		return fmt.Errorf("topic %s: %w", name, ErrTopicNotFound)
	}
	if name.IsPartition() && pol.Partitions > 0 {
		if name.PartitionIndex >= pol.Partitions {
			return fmt.Errorf("topic %s: partition %d of %d: %w", name, name.PartitionIndex, pol.Partitions, ErrTopicNotFound)
		}
		return nil
	}
	if !name.IsPartition() && pol.Partitions > 0 {
		return fmt.Errorf("topic %s is partitioned; use its partitions: %w", name, ErrNotAllowed)
	}
	auto := b.cfg.AutoTopicCreation
	if pol.AutoTopicCreation != nil {
		auto = *pol.AutoTopicCreation
	}
	if !auto {
		return fmt.Errorf("topic %s (auto topic creation is off): %w", name, ErrTopicNotFound)
	}
	return nil
}

func (b *brokerState) loadedTopic(name naming.TopicName) *Topic {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[name.String()]; t != nil {
		return &t.public
	}
	return nil
}

func (b *brokerState) loadedTopics() []*Topic {
	// Sorted by the map's keys (the topics' full names), built once: sorting by name.String()
	// would build two strings per comparison, O(n log n) garbage on every replication pass.
	type keyed struct {
		key string
		t   *Topic
	}
	b.mu.Lock()
	ks := make([]keyed, 0, len(b.topics))
	for k, t := range b.topics {
		ks = append(ks, keyed{k, &t.public})
	}
	b.mu.Unlock()
	slices.SortFunc(ks, func(x, y keyed) int { return strings.Compare(x.key, y.key) })
	out := make([]*Topic, len(ks))
	for i, k := range ks {
		out[i] = k.t
	}
	return out
}

func (b *brokerState) topicExists(ctx context.Context, name naming.TopicName) (bool, error) {
	if b.loadedTopic(name) != nil {
		return true, nil
	}
	if !name.IsPersistent() {
		return false, nil
	}
	return b.storage.LedgerExists(ctx, name.StorageName())
}

func (b *brokerState) listTopics(ctx context.Context, ns naming.NamespaceName) ([]naming.TopicName, error) {
	prefix := ns.Tenant + "/" + ns.Namespace + "/" + string(naming.Persistent) + "/"
	names, err := b.storage.ListLedgers(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("listing topics of %s: %w", ns, err)
	}
	type keyed struct {
		key string // the full name, built once for the dedup and the sort
		t   naming.TopicName
	}
	seen := make(map[string]bool, len(names))
	ks := make([]keyed, 0, len(names))
	for _, n := range names {
		local := strings.TrimPrefix(n, prefix)
		t, err := naming.NewTopic(naming.Persistent, ns, local)
		if err != nil {
			continue
		}
		key := t.String()
		seen[key] = true
		ks = append(ks, keyed{key, t})
	}
	b.mu.Lock()
	for key, t := range b.topics {
		if t.name.IsPersistent() && t.name.NamespaceName() == ns && !seen[key] {
			ks = append(ks, keyed{key, t.name})
		}
	}
	b.mu.Unlock()
	slices.SortFunc(ks, func(x, y keyed) int { return strings.Compare(x.key, y.key) })
	out := make([]naming.TopicName, len(ks))
	for i, k := range ks {
		out[i] = k.t
	}
	return out, nil
}

// checkServedHere refuses a topic another broker of the cluster owns.
func (b *brokerState) checkServedHere(name naming.TopicName) error {
	if b.owns != nil && !b.owns(name) {
		return fmt.Errorf("topic %s: %w", name, ErrNotServedHere)
	}
	return nil
}

func (b *brokerState) createTopic(ctx context.Context, name naming.TopicName) error {
	if err := b.checkServedHere(name); err != nil {
		return err
	}
	exists, err := b.topicExists(ctx, name)
	if err != nil {
		return err
	}
	if exists {
		return fmt.Errorf("topic %s already exists: %w", name, ErrNotAllowed)
	}
	if _, err := b.topicPolicies(ctx, name); err != nil {
		return err
	}
	// Explicit creation ignores the auto-creation policy.
	key := name.String()
	b.mu.Lock()
	if b.topics[key] != nil || b.loading[key] != nil || b.closing[key] != nil {
		b.mu.Unlock()
		return fmt.Errorf("topic %s already exists: %w", name, ErrNotAllowed)
	}
	l := &topicLoad{done: make(chan struct{})}
	b.loading[key] = l
	b.mu.Unlock()
	t, err := b.loadTopicForce(context.WithoutCancel(ctx), name)
	b.mu.Lock()
	delete(b.loading, key)
	if err == nil && !b.closed {
		b.topics[key] = t
	} else if err == nil {
		err = ErrBrokerClosed
	}
	l.t, l.err = t, err
	close(l.done)
	b.mu.Unlock()
	if err != nil && t != nil {
		_ = t.close(context.Background())
	}
	return err
}

// openLedger opens (or creates) a persistent topic's ledger, whose new segment gets a ledger id at
// or above the topic's floor (Deps.LedgerIDFloor). Every ledger the broker opens goes through it.
func (b *brokerState) openLedger(ctx context.Context, name naming.TopicName) (*storage.Ledger, error) {
	if b.ledgerIDFloor != nil {
		if err := b.storage.EnsureLedgerIDsFrom(b.ledgerIDFloor(name)); err != nil {
			return nil, err
		}
	}
	return b.storage.OpenLedger(ctx, name.StorageName())
}

func (b *brokerState) loadTopicForce(ctx context.Context, name naming.TopicName) (*topicState, error) {
	pol, err := b.topicPolicies(ctx, name)
	if err != nil {
		return nil, err
	}
	if !name.IsPersistent() {
		return newTopicState(b, name, nil, pol), nil
	}
	ledger, err := b.openLedger(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("creating ledger of %s: %w", name, storageNotReady(err))
	}
	t := newTopicState(b, name, ledger, pol)
	ledger.SetRetention(pol.RetentionTime, pol.RetentionSizeBytes)
	if err := t.load(ctx, true); err != nil {
		return t, err
	}
	return t, nil
}

// detach removes a loaded topic from the map (so the next GetTopic loads it again, once this
// close is complete) and closes it.
func (b *brokerState) detach(ctx context.Context, t *topicState) error {
	key := t.name.String()
	b.mu.Lock()
	var ch chan struct{}
	if b.topics[key] == t {
		delete(b.topics, key)
		ch = make(chan struct{})
		b.closing[key] = ch
	}
	b.mu.Unlock()
	err := t.close(ctx)
	if ch != nil {
		b.mu.Lock()
		delete(b.closing, key)
		b.mu.Unlock()
		close(ch)
	}
	return err
}

func (b *brokerState) deleteTopic(ctx context.Context, name naming.TopicName, force bool) error {
	if err := b.checkServedHere(name); err != nil {
		return err
	}
	// The whole deletion (unload, then deleting the ledger) holds the topic's closing slot, so a
	// concurrent GetTopic waits for it and then finds no ledger: a load that slipped in between the
	// unload and the ledger deletion would serve a topic whose storage is being deleted under it.
	key := name.String()
	var t *topicState
	var done chan struct{}
	for done == nil {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return ErrBrokerClosed
		}
		if ch := b.closing[key]; ch != nil {
			b.mu.Unlock()
			if err := waitClosed(ctx, ch); err != nil {
				return err
			}
			continue
		}
		if l := b.loading[key]; l != nil {
			b.mu.Unlock()
			if err := waitClosed(ctx, l.done); err != nil {
				return err
			}
			continue
		}
		t = b.topics[key]
		b.mu.Unlock()
		// busy takes the topic's locks, never under b.mu; the slot is taken only if the map still
		// holds the topic that was checked.
		if t != nil && !force && t.busy() {
			return fmt.Errorf("topic %s has producers or consumers: %w", name, ErrNotAllowed)
		}
		b.mu.Lock()
		if b.topics[key] == t && b.closing[key] == nil && b.loading[key] == nil {
			if t != nil {
				delete(b.topics, key)
			}
			done = make(chan struct{})
			b.closing[key] = done
		}
		b.mu.Unlock()
	}
	defer func() {
		b.mu.Lock()
		delete(b.closing, key)
		b.mu.Unlock()
		close(done)
	}()
	if t != nil {
		if err := t.close(ctx); err != nil {
			b.log.Warn("closing topic for deletion", slog.String("topic", key), slog.Any("err", err))
		}
	} else if !name.IsPersistent() {
		return fmt.Errorf("topic %s: %w", name, ErrTopicNotFound)
	} else {
		exists, err := b.storage.LedgerExists(ctx, name.StorageName())
		if err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("topic %s: %w", name, ErrTopicNotFound)
		}
	}
	if !name.IsPersistent() {
		return nil
	}
	if err := b.storage.DeleteLedger(ctx, name.StorageName()); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("deleting topic %s: %w", name, err)
	}
	b.log.Info("topic deleted", slog.String("topic", key))
	return nil
}

// waitClosed waits for ch to be closed or ctx to end.
func waitClosed(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *brokerState) unloadTopic(ctx context.Context, name naming.TopicName, to Reassigned) error {
	b.mu.Lock()
	t := b.topics[name.String()]
	b.mu.Unlock()
	if t == nil {
		return nil
	}
	if to != (Reassigned{}) {
		b.movedMu.Lock()
		if b.movedTo == nil {
			b.movedTo = map[*topicState]Reassigned{}
		}
		b.movedTo[t] = to
		b.movedMu.Unlock()
		defer func() {
			b.movedMu.Lock()
			delete(b.movedTo, t)
			b.movedMu.Unlock()
		}()
	}
	return b.detach(ctx, t)
}

// fenceTopicAsync unloads a topic whose ledger failed, so that clients reconnect and the next load
// reopens storage (which reports or repairs the damage).
func (b *brokerState) fenceTopicAsync(t *topicState, cause error) {
	t.mu.Lock()
	first := t.state == topicOpen
	t.mu.Unlock()
	if !first {
		return
	}
	b.log.Error("topic storage failed; unloading it", slog.String("topic", t.name.String()), slog.Any("err", cause))
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return // Close unloads every topic anyway
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = b.detach(ctx, t)
	}()
}

func (b *brokerState) policiesChanged(ns naming.NamespaceName) {
	var ts []*topicState
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	for _, t := range b.topics {
		if t.name.NamespaceName() == ns {
			ts = append(ts, t)
		}
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		for _, t := range ts {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			pol, err := b.topicPolicies(ctx, t.name)
			if err == nil {
				err = t.setPolicies(ctx, pol)
			}
			cancel()
			if err != nil {
				b.log.Warn("applying policies failed", slog.String("topic", t.name.String()), slog.Any("err", err))
			}
		}
	}()
}

func (b *brokerState) close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	ts := make([]*topicState, 0, len(b.topics))
	for _, t := range b.topics {
		ts = append(ts, t)
	}
	b.mu.Unlock()
	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.detach(ctx, t); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.stop()
	b.wg.Wait()
	return errors.Join(errs...)
}

// ttlCheckInterval is how often the message TTL policy is applied.
const ttlCheckInterval = time.Minute

// statsLoop recomputes rates every StatsInterval.
func (b *brokerState) statsLoop(ctx context.Context) {
	defer b.wg.Done()
	tick := time.NewTicker(b.cfg.StatsInterval)
	defer tick.Stop()
	lastTTL, lastQuota := b.clock.Now(), b.clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			b.sampleRates()
			if now := b.clock.Now(); periodDue(now, lastQuota, b.cfg.BacklogQuotaCheckInterval, b.cfg.StatsInterval) {
				lastQuota = now
				for _, t := range b.loadedTopics() {
					t.t.enforceBacklogQuota(ctx)
				}
			}
			if now := b.clock.Now(); periodDue(now, lastTTL, ttlCheckInterval, b.cfg.StatsInterval) {
				lastTTL = now
				for _, t := range b.loadedTopics() {
					t.t.expireAll(ctx)
					t.t.advanceEpochCursor(ctx)
				}
			}
		}
	}
}

// periodDue reports whether a task run every period on the stats ticker (one tick every tick) is
// due at now, when it last ran at last. Half a tick of slack: the ticker keeps its schedule but
// last is read when the previous tick was handled, possibly late, so "now-last >= period" would
// skip a whole tick after any delay (with the 5 s defaults a backlog quota check 10 s after the
// previous one, where Pulsar's clients expect one within 5 s).
func periodDue(now, last time.Time, period, tick time.Duration) bool {
	return now.Sub(last) >= period-tick/2
}

func (b *brokerState) sampleRates() {
	now := b.clock.Now()
	defer b.lastSampleNs.Store(now.UnixNano()) // after the topics were sampled (topicState.counters)
	b.mu.Lock()
	ts := make([]*topicState, 0, len(b.topics))
	for _, t := range b.topics {
		ts = append(ts, t)
	}
	b.mu.Unlock()
	for _, t := range ts {
		t.sampleRates(now)
	}
}
