package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/wire"
)

type topicLifecycle uint8

const (
	topicOpen topicLifecycle = iota
	topicClosing
	topicClosed
)

// topicState is one loaded topic. An idle topic should cost little memory (README budget: 2 KiB per
// idle topic, storage and replication index included): its maps, subscriber list and traffic
// counters are allocated on first use, and the dedup cursor is opened only when a producer may
// need it (see applyDedupPolicy).
type topicState struct {
	b         *brokerState
	name      naming.TopicName
	public    Topic
	ledger    *storage.Ledger
	createdNs int64 // b.clock at creation, Unix nanoseconds

	mu         sync.Mutex // guards the fields below up to pubMu (but snapshotRunning)
	state      topicLifecycle
	terminated bool
	exclusive  bool // the current producers hold exclusive access
	// snapshotRunning is guarded by dedupMu; it shares a word with the flags above.
	snapshotRunning bool
	replicateAll    atomic.Bool // policies.ReplicateSubscriptions is true (read without mu; same word)
	policies        TopicPolicies
	producers       map[string]*producerState // nil until the first producer
	waiting         []*producerWaiter         // WaitForExclusive producers, in arrival order
	topicEpoch      uint64
	epochs          *epochStore                          // the persisted topic epoch (topicepoch.go); nil until needed
	subs            map[string]*subscriptionState        // nil until the first subscription
	subList         atomic.Pointer[[]*subscriptionState] // lock-free copy for publish notifications; nil: none

	// pubMu orders dedup decisions with appends, so the log order equals the decision order.
	pubMu          sync.Mutex
	lastAppendTime int64 // guarded by pubMu
	inflight       sync.WaitGroup

	dedupMu     sync.Mutex
	dedup       *dedupState // nil when deduplication is off
	dedupCursor *storage.Cursor
	bg          sync.WaitGroup // background work (dedup snapshots)

	replIndex ReplicatedEntryIndex // nil without one

	entryWaiters atomic.Pointer[entryWaiters] // nil until the first WaitForEntries
	traffic      atomic.Pointer[topicTraffic] // nil until the first message in or out
}

// topicTraffic is a topic's message counters and rates, allocated with its first message.
type topicTraffic struct {
	msgIn, bytesIn, msgOut, bytesOut atomic.Int64
	lastPublish                      atomic.Int64
	rateIn, rateBytesIn              rate
	rateOut, rateBytesOut            rate
	writes                           writeStats // entries by write latency and size (Pulsar's buckets)
}

// counters returns the topic's traffic counters, allocating them on first use. Their rates start
// as the stats ticker would have left them had they existed from the creation of the topic: at
// zero, sampled at the ticker's last run if the topic existed then.
func (t *topicState) counters() *topicTraffic {
	if tr := t.traffic.Load(); tr != nil {
		return tr
	}
	tr := &topicTraffic{}
	if last := t.b.lastSampleNs.Load(); last != 0 && t.createdNs <= last {
		at := time.Unix(0, last)
		for _, r := range []*rate{&tr.rateIn, &tr.rateBytesIn, &tr.rateOut, &tr.rateBytesOut} {
			r.lastTime = at
		}
		tr.writes.startAt(at)
	} else {
		// No tick since the topic was created: its first write rates cover the time from its
		// creation, so the entries stored before the first tick are not lost from them.
		tr.writes.startAt(time.Unix(0, t.createdNs))
	}
	if !t.traffic.CompareAndSwap(nil, tr) {
		return t.traffic.Load()
	}
	return tr
}

// subscribers is the lock-free list of subscriptions notified on publish.
func (t *topicState) subscribers() []*subscriptionState {
	if l := t.subList.Load(); l != nil {
		return *l
	}
	return nil
}

// nonPersistent reports a non-persistent topic: no ledger, no cursors; messages go straight to the
// consumers that have permits and are dropped for the others (Pulsar's semantics).
func (t *topicState) nonPersistent() bool { return t.ledger == nil }

// needStorage refuses storage-backed operations on non-persistent topics.
func (t *topicState) needStorage() error {
	if t.nonPersistent() {
		return fmt.Errorf("topic %s is non-persistent: %w", t.name, ErrNotAllowed)
	}
	return nil
}

func (t *topicState) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state != topicOpen
}

func newTopicState(b *brokerState, name naming.TopicName, ledger *storage.Ledger, pol TopicPolicies) *topicState {
	t := &topicState{
		b:         b,
		name:      name,
		ledger:    ledger,
		createdNs: b.clock.Now().UnixNano(),
		policies:  pol,
	}
	t.replicateAll.Store(pol.ReplicateSubscriptions != nil && *pol.ReplicateSubscriptions)
	t.public.t = t
	return t
}

// isInternalCursor reports cursors that are not subscriptions: dedup, replicators ("pulsar.repl.")
// and Meridian's own ("meridian.", e.g. the replication index).
func (b *brokerState) isInternalCursor(name string) bool {
	return name == dedupCursorName || strings.HasPrefix(name, b.cfg.ReplicatorPrefix+".") ||
		strings.HasPrefix(name, internalCursorPrefix)
}

// internalCursorPrefix marks cursors Meridian keeps for itself.
const internalCursorPrefix = "meridian."

// load builds the topic's subscriptions from its stored cursors, prepares replication cursors of a
// new topic and recovers deduplication. Called once, before the topic is published.
func (t *topicState) load(ctx context.Context, isNew bool) error {
	if t.nonPersistent() {
		return nil
	}
	for _, c := range t.ledger.Cursors() {
		if t.b.isInternalCursor(c.Name()) || !c.Durable() {
			continue
		}
		t.addSubLocked(c.Name(), newSubscription(t, c.Name(), c, true))
	}
	t.publishSubList()
	if err := t.loadEpoch(); err != nil {
		return err
	}
	if isNew {
		// A topic created while its namespace lists remote clusters gets its replication cursors
		// before its first entry, so nothing produced to it is skipped (docs/design.md, "Replication invariants").
		for _, cl := range t.policies.ReplicationClusters {
			if cl == t.b.cfg.Cluster || cl == "" {
				continue
			}
			name := t.b.cfg.ReplicatorPrefix + "." + cl
			if _, err := t.ledger.OpenCursor(ctx, name, storage.CursorOptions{Initial: mtypes.Earliest, Durable: true}); err != nil {
				return fmt.Errorf("creating replication cursor %q: %w", name, err)
			}
		}
	}
	if t.b.replicatedIndex != nil {
		idx, err := t.b.replicatedIndex(ctx, t.name, t.ledger)
		if err != nil {
			return fmt.Errorf("opening the replication index: %w", err)
		}
		t.replIndex = idx
	}
	return t.applyDedupPolicy(ctx)
}

func (t *topicState) hasProducers() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.producers) > 0 || len(t.waiting) > 0
}

// publishableLocked reports whether the topic accepts publishes; the caller holds pubMu.
func (t *topicState) publishableLocked() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.state != topicOpen:
		return fmt.Errorf("topic %s is closing: %w", t.name, ErrTopicFenced)
	case t.terminated:
		return fmt.Errorf("topic %s: %w", t.name, ErrTopicTerminated)
	}
	return nil
}

func (t *topicState) publishSubList() {
	if len(t.subs) == 0 {
		t.subList.Store(nil)
		return
	}
	list := make([]*subscriptionState, 0, len(t.subs))
	for _, s := range t.subs {
		list = append(list, s)
	}
	t.subList.Store(&list)
}

// addSubLocked records a subscription (t.mu held, or the topic not yet published).
func (t *topicState) addSubLocked(name string, s *subscriptionState) {
	if t.subs == nil {
		t.subs = make(map[string]*subscriptionState)
	}
	t.subs[name] = s
}

// notifySubscriptions wakes every dispatcher after an append.
func (t *topicState) notifySubscriptions() {
	for _, s := range t.subscribers() {
		s.notify()
	}
}

func (t *topicState) openLocked() error {
	if t.state != topicOpen {
		return fmt.Errorf("topic %s is closing: %w", t.name, ErrTopicFenced)
	}
	return nil
}

// subscribe implements Topic.Subscribe.
func (t *topicState) subscribe(ctx context.Context, opts SubscribeOptions, sink ConsumerSink) (*Consumer, error) {
	if err := t.validSubscriptionName(opts.Subscription); err != nil {
		return nil, err
	}
	if opts.ConsumerName == "" {
		opts.ConsumerName = t.b.nextConsumerName()
	}
	for attempt := 0; ; attempt++ {
		sub, err := t.getOrCreateSubscription(ctx, opts)
		if err != nil {
			return nil, err
		}
		sub.opMu.Lock()
		c, err := sub.addConsumer(opts, sink)
		sub.opMu.Unlock()
		if err != nil {
			if errors.Is(err, ErrServiceNotReady) && attempt < 3 {
				continue // deleted concurrently: create it again
			}
			return nil, err
		}
		return sub.attached(ctx, c)
	}
}

// getOrCreateSubscription returns the subscription, creating its cursor if needed.
func (t *topicState) getOrCreateSubscription(ctx context.Context, opts SubscribeOptions) (*subscriptionState, error) {
	t.mu.Lock()
	if err := t.openLocked(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	if sub := t.subs[opts.Subscription]; sub != nil {
		t.mu.Unlock()
		return sub, nil
	}
	if max := t.policies.MaxConsumers; max > 0 && t.consumerCountLocked() >= max {
		t.mu.Unlock()
		return nil, fmt.Errorf("topic %s reached its limit of %d consumers: %w", t.name, max, ErrConsumerBusy)
	}
	t.mu.Unlock()
	if t.nonPersistent() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if err := t.openLocked(); err != nil {
			return nil, err
		}
		if sub := t.subs[opts.Subscription]; sub != nil {
			return sub, nil
		}
		sub := newSubscription(t, opts.Subscription, nil, false)
		sub.created(opts.SubscriptionProperties)
		t.addSubLocked(opts.Subscription, sub)
		t.publishSubList()
		return sub, nil
	}
	initial := mtypes.Latest
	if opts.InitialPosition == mtypes.InitialEarliest || opts.Durable && t.b.strandedSubs != nil && t.b.strandedSubs(t.name) {
		initial = mtypes.Earliest
	}
	if !opts.Durable && opts.StartPosition != nil {
		initial = *opts.StartPosition
		if initial != mtypes.Earliest && initial.Compare(next(t.ledger.LastConfirmed())) > 0 {
			initial = mtypes.Latest // an id not written yet: start after the last entry
		}
	}
	cur, err := t.ledger.OpenCursor(ctx, opts.Subscription, storage.CursorOptions{Initial: initial, Durable: opts.Durable})
	if err != nil {
		return nil, fmt.Errorf("opening cursor %q on %s: %w", opts.Subscription, t.name, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.openLocked(); err != nil {
		return nil, err
	}
	if sub := t.subs[opts.Subscription]; sub != nil {
		return sub, nil // created concurrently
	}
	sub := newSubscription(t, opts.Subscription, cur, cur.Durable())
	sub.created(opts.SubscriptionProperties)
	t.addSubLocked(opts.Subscription, sub)
	t.publishSubList()
	return sub, nil
}

func (t *topicState) consumerCountLocked() int {
	n := 0
	for _, s := range t.subs {
		s.mu.Lock()
		n += len(s.consumers)
		s.mu.Unlock()
	}
	return n
}

// dropSubscription forgets a deleted (or emptied non-durable) subscription.
func (t *topicState) dropSubscription(s *subscriptionState) {
	t.mu.Lock()
	if t.subs[s.name] == s {
		delete(t.subs, s.name)
		t.publishSubList()
	}
	t.mu.Unlock()
	if !s.durable {
		s.mu.Lock()
		s.deleted = true
		s.mu.Unlock()
		if s.cursor == nil {
			return
		}
		if err := t.ledger.DeleteCursor(context.Background(), s.name); err != nil && !errors.Is(err, storage.ErrNotFound) && !errors.Is(err, storage.ErrClosed) {
			t.b.log.Warn("dropping non-durable cursor failed", slog.String("topic", t.name.String()), slog.String("cursor", s.name), slog.Any("err", err))
		}
	}
}

// subscription returns a subscription by name.
func (t *topicState) subscription(name string) (*subscriptionState, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.subs[name]; s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("subscription %q on %s: %w", name, t.name, ErrSubscriptionNotFound)
}

func (t *topicState) subscriptionNames() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.subs))
	for n := range t.subs {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (t *topicState) createSubscription(ctx context.Context, name string, start mtypes.Position, replicated bool, props map[string]string) error {
	if err := t.needStorage(); err != nil {
		return err
	}
	if err := t.validSubscriptionName(name); err != nil {
		return err
	}
	t.mu.Lock()
	_, exists := t.subs[name]
	t.mu.Unlock()
	if exists {
		return fmt.Errorf("subscription %q on %s already exists: %w", name, t.name, ErrNotAllowed)
	}
	sub, err := t.getOrCreateSubscription(ctx, SubscribeOptions{Subscription: name, Durable: true, InitialPosition: mtypes.InitialLatest})
	if err != nil {
		return err
	}
	if err := sub.adminCreated(ctx, props, replicated); err != nil {
		return err
	}
	if start != mtypes.Latest {
		return sub.reset(ctx, start, false, 0)
	}
	return nil
}

func (t *topicState) deleteSubscription(ctx context.Context, name string, force bool) error {
	s, err := t.subscription(name)
	if err != nil {
		return err
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	busy := len(s.consumers) > 0
	s.mu.Unlock()
	if busy && !force {
		return fmt.Errorf("subscription %q has consumers: %w", name, ErrNotAllowed)
	}
	return s.deleteLocked(ctx, nil)
}

func (t *topicState) resetSubscription(ctx context.Context, name string, p mtypes.Position, byTime bool, ts int64) error {
	if err := t.needStorage(); err != nil {
		return err
	}
	s, err := t.subscription(name)
	if err != nil {
		return err
	}
	return s.reset(ctx, p, byTime, ts)
}

func (t *topicState) skipAll(ctx context.Context, name string) error {
	if err := t.needStorage(); err != nil {
		return err
	}
	s, err := t.subscription(name)
	if err != nil {
		return err
	}
	last := t.ledger.LastConfirmed()
	if err := s.cursor.MarkDelete(ctx, last); err != nil {
		return fmt.Errorf("clear backlog of %q: %w", name, err)
	}
	s.mu.Lock()
	s.d.ackedUpTo(last)
	s.mu.Unlock()
	s.lastMarkDeleteMove.Store(t.b.nowMs())
	return nil
}

// terminate implements Topic.Terminate.
func (t *topicState) terminate(ctx context.Context) (mtypes.Position, error) {
	if err := t.needStorage(); err != nil {
		return mtypes.Position{}, err
	}
	t.pubMu.Lock()
	t.mu.Lock()
	if err := t.openLocked(); err != nil {
		t.mu.Unlock()
		t.pubMu.Unlock()
		return mtypes.Position{}, err
	}
	t.terminated = true
	ps := make([]*producerState, 0, len(t.producers))
	for _, p := range t.producers {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	t.pubMu.Unlock()
	t.closeProducers(ps)
	t.inflight.Wait()
	return t.ledger.LastConfirmed(), nil
}

// maxMarkerWalkBack bounds how many trailing marker entries GET_LAST_MESSAGE_ID skips.
const maxMarkerWalkBack = 64

// lastEntryInfo describes the last stored entry.
type lastEntryInfo struct {
	pos         mtypes.Position
	batched     bool
	numMessages int
}

// lastEntry returns the last stored entry's position and batch size (ok false if the log is empty).
func (t *topicState) lastEntry(ctx context.Context) (lastEntryInfo, bool, error) {
	if t.nonPersistent() {
		return lastEntryInfo{}, false, nil
	}
	lc := t.ledger.LastConfirmed()
	if lc.EntryID < 0 || t.ledger.Entries() == 0 {
		return lastEntryInfo{}, false, nil
	}
	// Marker entries are never dispatched, so they are not "the last message" either: a reader told
	// that a marker is there would wait for it forever (HasNext true, Next blocking). Walk back over
	// trailing markers within the last ledger id (markers come one per second at most).
	p := lc
	for steps := 0; p.EntryID >= 0 && steps < maxMarkerWalkBack; steps++ {
		e, err := t.ledger.ReadEntry(ctx, p)
		if err != nil {
			return lastEntryInfo{}, false, fmt.Errorf("reading last entry of %s: %w", t.name, err)
		}
		md, err := wire.DecodeMetadata(e.Data)
		if err == nil && wire.IsMarker(md) {
			p.EntryID--
			continue
		}
		info := lastEntryInfo{pos: p, numMessages: 1}
		if err == nil && md.NumMessagesInBatch != nil {
			info.batched = true
			info.numMessages = int(md.GetNumMessagesInBatch())
		}
		return info, true, nil
	}
	if p.EntryID < 0 {
		// Only markers in the last ledger id: report the position before them.
		return lastEntryInfo{pos: p, numMessages: 1}, true, nil
	}
	return lastEntryInfo{pos: lc, numMessages: 1}, true, nil
}

// close unloads the topic: producers and consumers are disconnected (told), pending appends
// complete, the dedup state is snapshotted and the ledger closed.
func (t *topicState) close(ctx context.Context) error {
	t.mu.Lock()
	if t.state != topicOpen {
		t.mu.Unlock()
		return nil
	}
	t.state = topicClosing
	ps := make([]*producerState, 0, len(t.producers))
	for _, p := range t.producers {
		ps = append(ps, p)
	}
	subs := make([]*subscriptionState, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	waiting := t.waiting
	t.waiting = nil
	t.mu.Unlock()
	for _, w := range waiting {
		w.ready <- nil
	}
	t.closeProducers(ps)
	for _, s := range subs {
		s.opMu.Lock()
		s.closeAllLocked(nil)
		s.opMu.Unlock()
	}
	// Barrier: a publish that saw the topic open has registered its append (inflight.Add under
	// pubMu) before we wait for appends.
	t.pubMu.Lock()
	//lint:ignore SA2001 an empty critical section on purpose: the barrier is the lock itself
	t.pubMu.Unlock()
	t.inflight.Wait()
	t.bg.Wait()
	t.releaseWaiters(mtypes.Position{}, true)
	if t.replIndex != nil {
		if err := t.replIndex.Close(ctx); err != nil {
			t.b.log.Warn("closing the replication index failed", slog.String("topic", t.name.String()), slog.Any("err", err))
		}
	}
	t.dedupMu.Lock()
	dd, cur := t.dedup, t.dedupCursor
	var props map[string]string
	if dd != nil && dd.sinceSnapshot > 0 {
		props = dd.snapshot()
	}
	t.dedupMu.Unlock()
	if t.nonPersistent() {
		t.mu.Lock()
		t.state = topicClosed
		t.mu.Unlock()
		return nil
	}
	if props != nil && cur != nil && t.ledger.Err() == nil {
		if err := cur.SetProperties(ctx, props); err == nil {
			if err := cur.MarkDelete(ctx, t.ledger.LastConfirmed()); err != nil {
				t.b.log.Warn("final dedup snapshot failed", slog.String("topic", t.name.String()), slog.Any("err", err))
			}
		}
	}
	err := t.ledger.Close()
	t.mu.Lock()
	t.state = topicClosed
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("closing ledger of %s: %w", t.name, err)
	}
	return nil
}

// busy reports whether producers or consumers are attached.
func (t *topicState) busy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.producers) > 0 {
		return true
	}
	for _, s := range t.subs {
		s.mu.Lock()
		n := len(s.consumers)
		s.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

func (t *topicState) producerCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.producers)
}

// readBytesHint bounds a read of n entries: Config.DispatchMaxBytes, but no more than about twice
// what n average entries take, because storage sizes its read buffer by the byte bound (a 5 MiB
// buffer to fetch 100 small entries made cold reads five times slower).
func (t *topicState) readBytesHint(n int) int64 {
	limit := t.b.cfg.DispatchMaxBytes
	if entries := t.ledger.Entries(); entries > 0 {
		avg := t.ledger.Bytes() / entries
		limit = min(limit, 2*int64(n)*avg+64<<10)
	}
	return limit
}

// dispatchNonPersistent hands one published entry to one consumer with permits of every
// subscription, right away; subscriptions without such a consumer drop it (counted). The caller
// holds pubMu, so entries reach each consumer in publish order.
func (t *topicState) dispatchNonPersistent(data []byte, marker bool) {
	if marker {
		return
	}
	info := entryInfoOf(mtypes.Entry{Data: data}, t.b.log)
	if info.marker {
		return
	}
	for _, s := range t.subscribers() {
		s.mu.Lock()
		c := s.d.selectConsumer(&info)
		if c != nil {
			c.permits -= int64(info.numMessages)
		}
		s.mu.Unlock()
		if c == nil {
			s.msgDropped.Add(int64(info.numMessages))
			continue
		}
		if c.owner != nil {
			c.owner.send([]Delivery{{Position: mtypes.Position{}, Partition: int32(t.name.PartitionIndex), NumMessages: info.numMessages, Data: data}})
		}
	}
}

// reassigned is where the topic's clients reconnect once it closes: the broker its bundle moves
// to, or nothing (a lookup).
func (t *topicState) reassigned() Reassigned {
	t.b.movedMu.Lock()
	defer t.b.movedMu.Unlock()
	return t.b.movedTo[t]
}
