package replication

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/mtypes"
)

// The replicated-subscription sync of one broker (docs/replication-design.md, "Replicated
// subscriptions"): one goroutine, owned by the Manager. As source it writes a state marker into a
// topic's log when a replicated subscription's acknowledgements changed (at most once per
// interval) or its last consumer left; as receiver it applies the states that replicators store
// here, translated through the topic's inbound index. Decisions are in ExportState and
// TranslateState; this file is the edge.

// SyncTopic is what the sync needs of a loaded local topic; internal/node implements it over the
// broker.
type SyncTopic interface {
	// SubscriptionAckState returns a subscription's acknowledgement state with at most maxRanges
	// ranges and maxBatches partial batches (an error when it does not exist).
	SubscriptionAckState(sub string, maxRanges, maxBatches int) (mtypes.SubscriptionAckState, error)
	// AppendMarker appends a marker entry the broker writes itself and returns its position.
	AppendMarker(ctx context.Context, entry []byte) (mtypes.Position, error)
	// ApplyReplicatedState applies a translated state to a subscription, creating it if needed;
	// the result says whether it did, and whether a bound on the entries acknowledged one by one
	// left some of it unapplied. A subscription that exists and is not replicated answers
	// mtypes.ErrSubscriptionNotReplicated.
	ApplyReplicatedState(ctx context.Context, sub string, st mtypes.ReplicatedState) (mtypes.ReplicatedApplyResult, error)
	// IncarnationOf names the storage incarnation of a ledger of this topic;
	// IncarnationsThrough the incarnations of its stored ledgers up to and including ledger.
	IncarnationOf(ledger int64) uint64
	IncarnationsThrough(ledger int64) []uint64
	// FlushSubscription makes a subscription's state durable now.
	FlushSubscription(ctx context.Context, sub string) error
}

// SyncTopicSource opens loaded topics for the sync.
type SyncTopicSource interface {
	SyncTopic(ctx context.Context, topic string) (SyncTopic, error)
}

const (
	DefaultSubscriptionSyncInterval = 20 * time.Millisecond
	pendingRetryInterval            = 50 * time.Millisecond
	maxQueuedMarkers                = 4096
	maxTrackedMarkers               = 256 // written markers per subscription kept for the delivery stats
	// maxStateBytesPerSecond bounds what one subscription's states add to its topic's log: a large
	// state (many open holes) is written less often than the interval.
	maxStateBytesPerSecond = 256 << 10
	// appliedFlushInterval is how often the subscriptions that states changed are made durable (a
	// crash loses at most that much of the receiver's synced state: those messages are delivered
	// again after a move, never skipped).
	appliedFlushInterval = time.Second
)

type subKey struct{ topic, sub string }

// outState is the source side of one replicated subscription.
type outState struct {
	dirty, final bool
	lastWrite    time.Time
	gap          time.Duration // least time until the next state: the interval, longer for large states
	seq          uint64
	through      map[OriginKey]mtypes.Position
	written      []writtenMarker // oldest first, at most maxTrackedMarkers
	remotes      map[string]*outRemote
	lastTakenMs  int64
}

type writtenMarker struct {
	pos     mtypes.Position
	seq     uint64
	takenMs int64
}

type outRemote struct {
	deliveredSeq    uint64
	lastDeliveredMs int64
	lastLagMs       int64
}

// inState is the receiver side of one subscription.
type inState struct {
	sources map[string]*inSource
	applied map[OriginKey]mtypes.Position // from-the-first-entry coverage applied completely
	// refusedLogged: the subscription exists here and is not replicated, and that was logged.
	refusedLogged bool
}

type inSource struct {
	seq                uint64
	takenMs, appliedMs int64
	waiting            []string
	untranslated       int
	pending            *SubscriptionState // a state waiting for other origins' entries
	lastPendingTry     time.Time
	final              bool // the last state applied was final (no consumer on the source)
}

type storedMarker struct {
	topic string
	pos   mtypes.Position
	data  []byte
}

// subSync is the sync loop; its methods are safe for concurrent use.
type subSync struct {
	local    string
	topics   SyncTopicSource
	m        *Manager
	interval time.Duration
	log      *slog.Logger
	now      func() time.Time

	mu    sync.Mutex
	out   map[subKey]*outState
	in    map[subKey]*inState
	queue []storedMarker
	// applying are the markers the loop took from the queue and is applying now.
	applying []storedMarker
	dropped  int64
	// unflushed are the subscriptions states changed since the last flush; lastFlush is its time.
	unflushed map[subKey]bool
	lastFlush time.Time
	// stepped is closed (and replaced) at the end of every step: Settle waits on it.
	stepped chan struct{}
	// marks: per receiving topic, how far its state markers are applied durably
	// (subsync_durable.go); rescans: topics loaded whose markers after that are to be read again.
	marks   map[string]*topicMarks
	rescans []string
	kick    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

func newSubSync(local string, m *Manager, interval time.Duration, log *slog.Logger) *subSync {
	if interval <= 0 {
		interval = DefaultSubscriptionSyncInterval
	}
	return &subSync{local: local, m: m, interval: interval, log: log, now: time.Now,
		out: map[subKey]*outState{}, in: map[subKey]*inState{}, unflushed: map[subKey]bool{}, marks: map[string]*topicMarks{}, kick: make(chan struct{}, 1),
		stepped: make(chan struct{})}
}

// start runs the sync's loop over topics; it is called once, before the loop's first read of
// s.topics.
func (s *subSync) start(ctx context.Context, topics SyncTopicSource) {
	s.topics = topics
	ctx, cancel := context.WithCancel(ctx)
	s.cancel, s.done = cancel, make(chan struct{})
	go s.loop(ctx)
}

func (s *subSync) stop() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
}

func (s *subSync) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// stateChanged: a consumer acknowledged on a replicated subscription (final: its last consumer
// left, or it just became replicated).
func (s *subSync) stateChanged(topic, sub string, final bool) {
	s.mu.Lock()
	k := subKey{topic, sub}
	o := s.out[k]
	if o == nil {
		o = &outState{remotes: map[string]*outRemote{}}
		s.out[k] = o
	}
	o.dirty = true
	o.final = o.final || final
	s.mu.Unlock()
	s.poke()
}

// remoteAdded: a replicator of topic started; the states of its replicated subscriptions are
// written again at once, so the new remote gets them without waiting for an acknowledgement (a
// state taken while the topic had no remote was not written).
func (s *subSync) remoteAdded(topic string) {
	s.mu.Lock()
	for k, o := range s.out {
		if k.topic == topic {
			o.dirty, o.final = true, true
		}
	}
	s.mu.Unlock()
	s.poke()
}

// markerStored queues a marker a replicator stored here (data is copied).
func (s *subSync) markerStored(topic string, pos mtypes.Position, data []byte) {
	s.mu.Lock()
	if len(s.queue) >= maxQueuedMarkers {
		s.dropped++
		s.mu.Unlock()
		s.log.Warn("replicated subscription state dropped: queue full (the source's next state carries it)", "topic", topic, "position", pos.String())
		return
	}
	s.queue = append(s.queue, storedMarker{topic, pos, slices.Clone(data)})
	s.mu.Unlock()
	s.poke()
}

func (s *subSync) loop(ctx context.Context) {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := s.step(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-timer.C:
		}
	}
}

// step does what is due and returns how long to wait before the next step at most.
func (s *subSync) step(ctx context.Context) time.Duration {
	wait := time.Second
	s.mu.Lock()
	rescans := s.rescans
	s.rescans = nil
	s.mu.Unlock()
	for _, topic := range rescans {
		s.rescan(ctx, topic)
	}
	s.mu.Lock()
	queue := s.queue
	s.queue, s.applying = nil, queue
	s.mu.Unlock()
	for _, mk := range queue {
		s.receive(ctx, mk)
	}
	s.mu.Lock()
	s.applying = nil
	s.mu.Unlock()
	now := s.now()
	// Source: write the states that are due.
	s.mu.Lock()
	var due []subKey
	for k, o := range s.out {
		if !o.dirty {
			continue
		}
		if next := o.lastWrite.Add(max(s.interval, o.gap)); o.final || !now.Before(next) {
			due = append(due, k)
		} else {
			wait = min(wait, next.Sub(now))
		}
	}
	s.mu.Unlock()
	for _, k := range due {
		s.write(ctx, k)
	}
	// Receiver: states waiting for other origins.
	if s.retryPending(ctx, now) {
		wait = min(wait, pendingRetryInterval)
	}
	// Delivery of written states to each remote: checked often while a state is young, less often
	// once a remote has been behind for a while (it is down or far behind).
	if oldest, ok := s.trackDelivery(now); ok {
		if now.Sub(oldest) < time.Second {
			wait = min(wait, 10*time.Millisecond)
		} else {
			wait = min(wait, 250*time.Millisecond)
		}
	}
	if s.flushApplied(ctx, now) {
		wait = min(wait, appliedFlushInterval)
	}
	s.mu.Lock()
	close(s.stepped)
	s.stepped = make(chan struct{})
	s.mu.Unlock()
	return wait
}

// Settling: a consumer that moves from a source to here closes there first, and the source writes
// its final state at once; a dispatcher here that starts before that state is applied would send
// what the consumer acknowledged there just before it left. So a replicated subscription's first
// dispatch waits, at most settleTimeout, while a source's last state applied here is not final
// and is recent (settleWindow: a source whose state is older is not waited for), or a marker of
// the topic is queued and not applied yet.
const (
	settleTimeout = time.Second
	settleWindow  = 5 * time.Second
)

// unsettled reports whether sub of topic waits for a state (see above); the caller holds s.mu.
func (s *subSync) unsettledLocked(k subKey, nowMs int64) bool {
	for _, q := range [][]storedMarker{s.queue, s.applying} {
		for _, mk := range q {
			if mk.topic == k.topic {
				return true
			}
		}
	}
	is := s.in[k]
	if is == nil {
		return false
	}
	for _, src := range is.sources {
		if src.seq != 0 && !src.final && nowMs-src.appliedMs < settleWindow.Milliseconds() {
			return true
		}
	}
	return false
}

// settle blocks while sub of topic is unsettled, at most settleTimeout or until ctx ends.
func (s *subSync) settle(ctx context.Context, topic, sub string) {
	k := subKey{topic, sub}
	deadline := time.NewTimer(settleTimeout)
	defer deadline.Stop()
	start := s.now()
	for {
		s.mu.Lock()
		unsettled := s.unsettledLocked(k, s.now().UnixMilli())
		ch := s.stepped
		s.mu.Unlock()
		if !unsettled {
			return
		}
		s.poke()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-deadline.C:
			s.log.Info("replicated subscription dispatches without a final state from its source", "topic", topic,
				"subscription", sub, "waited", s.now().Sub(start).String())
			return
		}
	}
}

// flushApplied makes the subscriptions that states changed durable, about once per
// appliedFlushInterval; it reports whether some are left to flush.
func (s *subSync) flushApplied(ctx context.Context, now time.Time) bool {
	s.mu.Lock()
	if len(s.unflushed) == 0 && len(s.marks) == 0 {
		s.mu.Unlock()
		return false
	}
	if now.Sub(s.lastFlush) < appliedFlushInterval {
		s.mu.Unlock()
		return true
	}
	s.lastFlush = now
	subs := s.unflushed
	s.unflushed = map[subKey]bool{}
	s.mu.Unlock()
	for k := range subs {
		t, err := s.topics.SyncTopic(ctx, k.topic)
		if err == nil {
			err = t.FlushSubscription(ctx, k.sub)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("replicated subscription state not flushed", "topic", k.topic, "subscription", k.sub, "err", err)
		}
	}
	s.advanceMarks(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.unflushed) > 0 || len(s.marks) > 0
}

// write takes the subscription's state and appends its marker, if the topic has remotes.
func (s *subSync) write(ctx context.Context, k subKey) {
	s.mu.Lock()
	o := s.out[k]
	o.dirty, o.final = false, false
	o.lastWrite = s.now()
	through := o.through
	seq := o.seq + 1
	s.mu.Unlock()
	if len(s.m.remotesOf(k.topic)) == 0 {
		return // a replicated subscription on a topic without remotes writes nothing
	}
	t, err := s.topics.SyncTopic(ctx, k.topic)
	if err != nil {
		s.log.Debug("replicated subscription: topic not available", "topic", k.topic, "err", err)
		return
	}
	// A state beyond the marker's size bound (huge batches, long ranges) is written with fewer
	// ranges and batches: the lowest are kept, the others are delivered again after a move.
	var entry []byte
	var newThrough map[OriginKey]mtypes.Position
	var taken int64
	for shift := 0; entry == nil; shift++ {
		st, err := t.SubscriptionAckState(k.sub, maxStateRanges>>shift, maxStateBatches>>shift)
		if err != nil || !st.Replicated {
			// Deleted, or no longer replicated: forget it (a later change starts afresh).
			s.mu.Lock()
			if !o.dirty {
				delete(s.out, k)
			}
			s.mu.Unlock()
			return
		}
		var origins []OriginAcks
		origins, newThrough = ExportState(st, ExportInput{Local: s.local, IncarnationOf: t.IncarnationOf,
			IncarnationsThrough: t.IncarnationsThrough, Index: s.m.index(k.topic), Through: through})
		taken = s.now().UnixMilli()
		body, err := EncodeSubscriptionState(SubscriptionState{Subscription: k.sub, Type: st.Type, Properties: st.Properties,
			Source: s.local, TakenMs: taken, Seq: seq, Origins: origins, Final: st.Consumers == 0})
		if err == nil {
			entry, err = EncodeStateMarkerEntry(body, taken)
		}
		if err != nil && (shift == 10 || (len(st.Ranges) == 0 && len(st.Batches) == 0)) {
			s.log.Warn("replicated subscription state not written", "topic", k.topic, "subscription", k.sub, "err", err)
			return
		}
	}
	pos, err := t.AppendMarker(ctx, entry)
	if err != nil {
		s.log.Warn("replicated subscription state not written", "topic", k.topic, "subscription", k.sub, "err", err)
		s.mu.Lock()
		o.dirty, o.gap = true, time.Second // try again in a second (a fenced or terminated topic)
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	o.seq = seq
	o.gap = time.Duration(len(entry)) * time.Second / maxStateBytesPerSecond
	o.through = newThrough
	o.lastTakenMs = taken
	o.written = append(o.written, writtenMarker{pos, seq, taken})
	if len(o.written) > maxTrackedMarkers {
		o.written = slices.Delete(o.written, 0, len(o.written)-maxTrackedMarkers)
	}
	s.mu.Unlock()
}

// trackDelivery notes which written states each remote's replicator has had acknowledged; it
// reports whether some are still outstanding and when the youngest subscription's oldest
// outstanding state was written.
func (s *subSync) trackDelivery(now time.Time) (youngest time.Time, outstanding bool) {
	s.mu.Lock()
	type item struct {
		k subKey
		o *outState
	}
	var items []item
	for k, o := range s.out {
		if len(o.written) > 0 {
			items = append(items, item{k, o})
		}
	}
	s.mu.Unlock()
	acked := map[string]map[string]mtypes.Position{}
	for _, it := range items {
		rem, ok := acked[it.k.topic]
		if !ok {
			rem = s.m.remotesOf(it.k.topic)
			acked[it.k.topic] = rem
		}
		s.mu.Lock()
		last := it.o.written[len(it.o.written)-1]
		for remote, through := range rem {
			r := it.o.remotes[remote]
			if r == nil {
				r = &outRemote{}
				it.o.remotes[remote] = r
			}
			if r.deliveredSeq >= last.seq {
				continue
			}
			for i := len(it.o.written) - 1; i >= 0; i-- {
				w := it.o.written[i]
				if w.seq <= r.deliveredSeq {
					break
				}
				if w.pos.Compare(through) <= 0 {
					r.deliveredSeq, r.lastDeliveredMs = w.seq, now.UnixMilli()
					r.lastLagMs = max(0, r.lastDeliveredMs-w.takenMs)
					break
				}
			}
			if r.deliveredSeq < last.seq {
				outstanding = true
				for _, w := range it.o.written {
					if w.seq > r.deliveredSeq {
						if at := time.UnixMilli(w.takenMs); at.After(youngest) {
							youngest = at
						}
						break
					}
				}
			}
		}
		s.mu.Unlock()
	}
	return youngest, outstanding
}

// receive applies a state marker a replicator stored here.
func (s *subSync) receive(ctx context.Context, mk storedMarker) {
	st, from, ok, err := DecodeStateMarkerEntry(mk.data)
	if !ok && err == nil {
		return // another marker type
	}
	if err != nil {
		s.log.Warn("replicated subscription state refused", "topic", mk.topic, "position", mk.pos.String(), "err", err)
		return
	}
	if from == "" || st.Source != from || st.Subscription == "" {
		s.log.Warn("replicated subscription state refused: its source does not match the cluster it was replicated from",
			"topic", mk.topic, "position", mk.pos.String(), "source", st.Source, "replicatedFrom", from)
		return
	}
	k := subKey{mk.topic, st.Subscription}
	s.mu.Lock()
	is := s.in[k]
	if is == nil {
		is = &inState{sources: map[string]*inSource{}, applied: map[OriginKey]mtypes.Position{}}
		s.in[k] = is
	}
	src := is.sources[st.Source]
	if src == nil {
		src = &inSource{}
		is.sources[st.Source] = src
	}
	older := src.seq != 0 && (st.TakenMs < src.takenMs || (st.TakenMs == src.takenMs && st.Seq <= src.seq))
	s.mu.Unlock()
	if older {
		return // states accumulate: an older one holds nothing the newer did not
	}
	s.apply(ctx, k, &st, mk.pos)
}

// apply translates and applies st; a state waiting for other origins stays pending.
func (s *subSync) apply(ctx context.Context, k subKey, st *SubscriptionState, pos mtypes.Position) {
	t, err := s.topics.SyncTopic(ctx, k.topic)
	if err != nil {
		s.log.Warn("replicated subscription state not applied: topic not available", "topic", k.topic, "err", err)
		return
	}
	x := s.m.index(k.topic)
	s.mu.Lock()
	is := s.in[k]
	applied := maps.Clone(is.applied)
	s.mu.Unlock()
	tr := TranslateState(*st, TranslateInput{Local: s.local, Index: x, Applied: applied})
	now := s.now()
	s.mu.Lock()
	src := is.sources[st.Source]
	record := ""
	if st.Final {
		// Written with final states only: a record per state would rewrite the subscription's
		// properties fifty times a second.
		record = s.recordLocked(is, st.Source, st.Seq, st.TakenMs)
	}
	s.mu.Unlock()
	res, err := t.ApplyReplicatedState(ctx, k.sub, mtypes.ReplicatedState{Type: st.Type, Properties: st.Properties, Ranges: tr.Ranges, Batches: tr.Batches, SyncRecord: record})
	created, truncated := res.Created, res.Truncated
	if err == nil && created && len(applied) > 0 {
		// The subscription was deleted here and is created anew: what earlier states covered is
		// not acknowledged on it. Translate the whole state again.
		tr = TranslateState(*st, TranslateInput{Local: s.local, Index: x})
		res, err = t.ApplyReplicatedState(ctx, k.sub, mtypes.ReplicatedState{Type: st.Type, Properties: st.Properties, Ranges: tr.Ranges, Batches: tr.Batches, SyncRecord: record})
		truncated = res.Truncated
	}
	if created || truncated {
		s.mu.Lock()
		clear(is.applied) // walk every run again next time
		s.mu.Unlock()
		if truncated {
			tr.Through = nil // not complete: the next state walks these runs again
		}
	}
	if s.applied(k, is, src, st, tr, x, now, pos, err) {
		// The source's consumer left: this state is the one a moving consumer relies on, and no
		// other follows it. Durable now rather than with the next periodic flush.
		if err := t.FlushSubscription(ctx, k.sub); err != nil && ctx.Err() == nil {
			s.log.Warn("replicated subscription state not flushed", "topic", k.topic, "subscription", k.sub, "err", err)
		}
	}
}

// applied records the outcome of applying st; it reports whether the subscription is to be made
// durable at once.
func (s *subSync) applied(k subKey, is *inState, src *inSource, st *SubscriptionState, tr Translation, x *Index, now time.Time, pos mtypes.Position, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(err, mtypes.ErrSubscriptionNotReplicated) {
		if !is.refusedLogged {
			is.refusedLogged = true
			s.log.Warn("replicated subscription state not applied: a subscription of that name exists here and is not replicated "+
				"(make it replicated here, or delete it, to receive the state)", "topic", k.topic, "subscription", k.sub, "source", st.Source)
		}
		src.pending = nil
		s.noteAppliedLocked(k, pos, false)
		return false
	}
	if err != nil {
		s.log.Warn("replicated subscription state not applied", "topic", k.topic, "subscription", k.sub, "source", st.Source, "err", err)
		src.pending, src.lastPendingTry = st, now
		s.noteAppliedLocked(k, pos, true)
		return false
	}
	is.refusedLogged = false
	if st.Final {
		delete(s.unflushed, k)
	} else {
		s.unflushed[k] = true
	}
	src.seq, src.takenMs, src.appliedMs, src.final = st.Seq, st.TakenMs, now.UnixMilli(), st.Final
	src.waiting, src.untranslated = tr.Waiting, tr.Untranslated
	src.pending = nil
	if len(tr.Waiting) > 0 {
		src.pending, src.lastPendingTry = st, now
	}
	s.noteAppliedLocked(k, pos, len(tr.Waiting) > 0)
	waiting := map[string]bool{}
	for _, c := range tr.Waiting {
		waiting[c] = true
	}
	for key, through := range tr.Through {
		if waiting[key.Cluster] || key.Cluster == s.local {
			continue
		}
		is.applied[key] = through
		if x != nil {
			x.Pin("subscription:"+k.sub, key, through)
		}
	}
	return st.Final
}

// recordLocked is the sync record persisted with a subscription: per source "<cluster>=<seq>:<taken ms>".
func (s *subSync) recordLocked(is *inState, source string, seq uint64, taken int64) string {
	names := slices.Sorted(maps.Keys(is.sources))
	var b strings.Builder
	for _, n := range names {
		sq, tk := is.sources[n].seq, is.sources[n].takenMs
		if n == source {
			sq, tk = seq, taken
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n + "=" + strconv.FormatUint(sq, 10) + ":" + strconv.FormatInt(tk, 10))
	}
	return b.String()
}

// retryPending applies again the states that wait for other origins; it reports whether any is
// still pending.
func (s *subSync) retryPending(ctx context.Context, now time.Time) bool {
	type item struct {
		k  subKey
		st *SubscriptionState
	}
	var items []item
	pending := false
	s.mu.Lock()
	for k, is := range s.in {
		for _, src := range is.sources {
			if src.pending == nil {
				continue
			}
			pending = true
			if now.Sub(src.lastPendingTry) >= pendingRetryInterval {
				items = append(items, item{k, src.pending})
			}
		}
	}
	s.mu.Unlock()
	for _, it := range items {
		s.apply(ctx, it.k, it.st, mtypes.Position{})
	}
	return pending
}

// syncedTopics lists the topics with replicated-subscription sync state, sorted.
func (s *subSync) syncedTopics() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := map[string]bool{}
	for k := range s.out {
		set[k.topic] = true
	}
	for k := range s.in {
		set[k.topic] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// stats returns the sync stats of a topic's subscriptions.
func (s *subSync) stats(topic string) map[string]*adminapi.ReplicatedSubscriptionSync {
	now := s.now().UnixMilli()
	rem := s.m.remotesOf(topic)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]*adminapi.ReplicatedSubscriptionSync{}
	get := func(sub string) *adminapi.ReplicatedSubscriptionSync {
		v := out[sub]
		if v == nil {
			v = &adminapi.ReplicatedSubscriptionSync{}
			out[sub] = v
		}
		return v
	}
	for k, o := range s.out {
		if k.topic != topic || len(o.written) == 0 {
			continue
		}
		v := get(k.sub)
		v.Outbound = map[string]adminapi.ReplicatedSubscriptionOutbound{}
		for remote := range rem {
			r := o.remotes[remote]
			if r == nil {
				r = &outRemote{}
			}
			ob := adminapi.ReplicatedSubscriptionOutbound{LastStateTimestamp: o.lastTakenMs, LastDeliveredTimestamp: r.lastDeliveredMs, SyncLagMs: r.lastLagMs}
			for _, w := range o.written {
				if w.seq > r.deliveredSeq {
					if ob.PendingStates == 0 {
						ob.SyncLagMs = max(0, now-w.takenMs)
					}
					ob.PendingStates++
				}
			}
			v.Outbound[remote] = ob
		}
	}
	for k, is := range s.in {
		if k.topic != topic {
			continue
		}
		v := get(k.sub)
		v.Inbound = map[string]adminapi.ReplicatedSubscriptionInbound{}
		for name, src := range is.sources {
			if src.seq == 0 {
				continue
			}
			v.Inbound[name] = adminapi.ReplicatedSubscriptionInbound{LastStateTimestamp: src.takenMs, LastAppliedTimestamp: src.appliedMs,
				ApplyLagMs: src.appliedMs - src.takenMs, WaitingFor: slices.Clone(src.waiting), Untranslated: int64(src.untranslated)}
		}
	}
	return out
}

// SubscriptionStateChanged tells the sync that a replicated subscription's acknowledgements
// changed (final: its last consumer left or it just became replicated: write the state at once).
// It does not block.
func (m *Manager) SubscriptionStateChanged(topic, sub string, final bool) {
	m.subsync.stateChanged(topic, sub, final)
}

// MarkerStored hands the sync a marker entry a replicator producer stored at pos (data is copied).
// It does not block.
func (m *Manager) MarkerStored(topic string, pos mtypes.Position, data []byte) {
	m.subsync.markerStored(topic, pos, data)
}

// SettleSubscription blocks, at most about a second, while a state of a replicated subscription
// from another cluster is probably on its way (a consumer that just left there); the broker calls
// it before the subscription's first dispatch.
func (m *Manager) SettleSubscription(ctx context.Context, topic, sub string) {
	m.subsync.settle(ctx, topic, sub)
}

// SyncedTopics lists the topics with replicated-subscription sync state, sorted.
func (m *Manager) SyncedTopics() []string {
	return m.subsync.syncedTopics()
}

// SubscriptionSyncStats returns the replicated-subscription sync stats of a topic's subscriptions.
func (m *Manager) SubscriptionSyncStats(topic string) map[string]*adminapi.ReplicatedSubscriptionSync {
	return m.subsync.stats(topic)
}

// remotesOf returns, per remote the topic replicates to, the position through which the remote
// has acknowledged the topic's entries.
func (m *Manager) remotesOf(topic string) map[string]mtypes.Position {
	m.mu.Lock()
	var runners []*Runner
	for k, mg := range m.running {
		if k.Topic == topic {
			runners = append(runners, mg.runner)
		}
	}
	m.mu.Unlock()
	out := make(map[string]mtypes.Position, len(runners))
	for _, r := range runners {
		out[r.Remote()] = r.cursor.MarkDeletePosition()
	}
	return out
}

// index returns the inbound index of a loaded topic (nil if none).
func (m *Manager) index(topic string) *Index {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.indexes[topic]
}
