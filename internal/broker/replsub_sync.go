package broker

import (
	"context"
	"fmt"
	"maps"
	"math/bits"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
)

// SubscriptionSync is the replication layer's side of replicated subscriptions (Deps): the broker
// tells it when a replicated subscription's state should be written, and hands it the markers that
// replicators store. Methods must not block (queue and return).
type SubscriptionSync interface {
	// StateChanged: a consumer acknowledged on a replicated subscription; with final set, its last
	// consumer left or it just became replicated, and the state should be written at once.
	StateChanged(topic naming.TopicName, subscription string, final bool)
	// MarkerStored: an entry with marker_type that a replicator producer sent is stored at pos. data
	// is valid only during the call.
	MarkerStored(topic naming.TopicName, pos mtypes.Position, data []byte)
	// Settle blocks (at most a bound the sync chooses, or until ctx ends) while a state of the
	// subscription from another cluster is probably on its way: a consumer that just left there
	// and whose final state has not been applied here yet. The dispatcher of a replicated
	// subscription calls it before its first dispatch, so a consumer that moved here is not sent
	// what it acknowledged there just before it left.
	Settle(ctx context.Context, topic naming.TopicName, subscription string)
}

// syncChanged tells the sync that s's state changed (s must be replicated for it to matter).
func (b *brokerState) syncChanged(s *subscriptionState, final bool) {
	if b.subSync == nil || !s.isReplicated() {
		return
	}
	b.subSync.StateChanged(s.topic.name, s.name, final)
}

// settle waits, before the first dispatch of a replicated subscription, for a state on its way
// (SubscriptionSync.Settle).
func (b *brokerState) settle(ctx context.Context, s *subscriptionState) {
	if b.subSync == nil || !s.isReplicated() {
		return
	}
	b.subSync.Settle(ctx, s.topic.name, s.name)
}

// markerStored hands a stored replicated marker to the sync.
func (b *brokerState) markerStored(t *topicState, pos mtypes.Position, data []byte) {
	if b.subSync != nil {
		b.subSync.MarkerStored(t.name, pos, data)
	}
}

// ReplicatedSubscriptions lists the topic's replicated subscriptions, sorted.
func (t *Topic) ReplicatedSubscriptions() []string {
	var out []string
	for _, name := range t.t.subscriptionNames() {
		if s, err := t.t.subscription(name); err == nil && s.isReplicated() {
			out = append(out, name)
		}
	}
	return out
}

// SubscriptionAckState returns a subscription's acknowledgement state with at most maxRanges
// acknowledged ranges and maxBatches partial batches.
func (t *Topic) SubscriptionAckState(name string, maxRanges, maxBatches int) (mtypes.SubscriptionAckState, error) {
	if err := t.t.needStorage(); err != nil {
		return mtypes.SubscriptionAckState{}, err
	}
	s, err := t.t.subscription(name)
	if err != nil {
		return mtypes.SubscriptionAckState{}, err
	}
	if s.cursor == nil {
		return mtypes.SubscriptionAckState{}, fmt.Errorf("subscription %q has no cursor: %w", name, ErrNotAllowed)
	}
	st := mtypes.SubscriptionAckState{AckState: s.cursor.AckState(maxRanges, maxBatches), Replicated: s.isReplicated()}
	s.mu.Lock()
	st.Type, st.Properties, st.Consumers = s.d.subType, maps.Clone(s.props), len(s.consumers)
	s.mu.Unlock()
	return st, nil
}

// AppendMarker appends a marker entry the broker writes itself (a replicated subscription's state)
// and returns its position once it is stored. Subscriptions skip it; replicators forward it.
func (t *Topic) AppendMarker(ctx context.Context, data []byte) (mtypes.Position, error) {
	return t.t.appendMarker(ctx, data)
}

func (t *topicState) appendMarker(ctx context.Context, data []byte) (mtypes.Position, error) {
	if err := t.needStorage(); err != nil {
		return mtypes.Position{}, err
	}
	type result struct {
		pos mtypes.Position
		err error
	}
	ch := make(chan result, 1)
	t.pubMu.Lock()
	if err := t.publishableLocked(); err != nil {
		t.pubMu.Unlock()
		return mtypes.Position{}, err
	}
	pt := t.b.nowMs()
	if pt < t.lastAppendTime {
		pt = t.lastAppendTime
	}
	t.lastAppendTime = pt
	t.inflight.Add(1)
	t.ledger.AppendAsync(data, pt, func(pos mtypes.Position, err error) {
		defer t.inflight.Done()
		if err == nil {
			t.notifySubscriptions()
			t.releaseWaiters(pos, false)
		}
		ch <- result{pos, err}
	})
	t.pubMu.Unlock()
	select {
	case r := <-ch:
		if r.err != nil {
			return mtypes.Position{}, fmt.Errorf("appending a marker to %s: %w: %w", t.name, ErrPersistence, r.err)
		}
		return r.pos, nil
	case <-ctx.Done():
		return mtypes.Position{}, ctx.Err()
	}
}

// ApplyReplicatedState applies a replicated subscription's state from another cluster: it creates
// the subscription if it does not exist (durable, replicated, at the first entry, with the state's
// type and properties), acknowledges the state's ranges and batch indexes, replaces the properties
// when they differ and records the sync record. Acknowledgements only accumulate. The cursor is
// persisted with its next flush (FlushSubscription waits for it).
func (t *Topic) ApplyReplicatedState(ctx context.Context, name string, st mtypes.ReplicatedState) (mtypes.ReplicatedApplyResult, error) {
	var res mtypes.ReplicatedApplyResult
	if err := t.t.needStorage(); err != nil {
		return res, err
	}
	if err := t.t.validSubscriptionName(name); err != nil {
		return res, err
	}
	if st.Properties != nil {
		if err := checkSyncedProperties(st.Properties); err != nil {
			return res, err
		}
	}
	if !st.Type.Valid() {
		return res, fmt.Errorf("replicated state of %q with subscription type %d: %w", name, st.Type, ErrInvalidRequest)
	}
	s, err := t.t.subscription(name)
	if err == nil && !s.isReplicated() {
		// A subscription of the same name that is not replicated here belongs to an application of
		// this cluster: another cluster's state never changes it.
		return res, fmt.Errorf("subscription %q is not replicated here: %w", name, mtypes.ErrSubscriptionNotReplicated)
	}
	if err != nil {
		s, err = t.t.getOrCreateSubscription(ctx, SubscribeOptions{Subscription: name, Durable: true, InitialPosition: mtypes.InitialEarliest})
		if err != nil {
			return res, err
		}
		res.Created = true
		s.replicated.Store(true)
	}
	if s.cursor == nil || !s.durable {
		return res, fmt.Errorf("subscription %q is not durable: %w", name, ErrNotAllowed)
	}
	limit := st.MaxEntries
	if limit <= 0 {
		limit = 100_000
	}
	before := s.cursor.MarkDeletePosition()
	for _, r := range st.Ranges {
		n, trunc, err := s.cursor.DeleteRange(ctx, r.From, r.To, limit-int(min(res.Acked, int64(limit))))
		res.Acked += n
		if err != nil {
			return res, fmt.Errorf("applying the replicated state of %q: %w", name, err)
		}
		if trunc {
			res.Truncated = true
		}
	}
	for _, b := range st.Batches {
		idx := make([]int, 0, b.Size)
		for w, word := range b.Acked {
			for word != 0 {
				i := bits.TrailingZeros64(word)
				word &^= 1 << i
				idx = append(idx, w*64+i)
			}
		}
		if err := s.cursor.AckBatchIndexes(ctx, b.Position, b.Size, idx); err != nil {
			return res, fmt.Errorf("applying the replicated batch acknowledgements of %q: %w", name, err)
		}
	}
	md := s.cursor.MarkDeletePosition()
	if md != before {
		s.lastMarkDeleteMove.Store(t.t.b.nowMs())
	}
	s.mu.Lock()
	s.d.ackedUpTo(md)
	if len(s.consumers) == 0 && s.d.subType != st.Type {
		s.d.subType = st.Type
		s.stateChanged = true
	}
	if st.Properties != nil && !maps.Equal(s.props, st.Properties) {
		s.props = maps.Clone(st.Properties)
		s.stateChanged = true
	}
	if st.SyncRecord != "" && s.syncRecord != st.SyncRecord {
		s.syncRecord = st.SyncRecord
		s.stateChanged = true
	}
	changed := s.stateChanged || res.Created
	s.mu.Unlock()
	if changed {
		if err := s.persistState(ctx, false); err != nil {
			return res, err
		}
	}
	s.notify()
	return res, nil
}

// checkSyncedProperties applies the subscription-property limits to properties from a state marker.
func checkSyncedProperties(props map[string]string) error {
	if err := wire.CheckProperties("subscription", props); err != nil {
		return limitErr(err)
	}
	return nil
}

// SubscriptionSyncRecord returns the sync record persisted with a subscription ("" if none).
func (t *Topic) SubscriptionSyncRecord(name string) (string, error) {
	s, err := t.t.subscription(name)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncRecord, nil
}

// FlushSubscription persists a subscription's cursor now and returns once it is durable.
func (t *Topic) FlushSubscription(ctx context.Context, name string) error {
	s, err := t.t.subscription(name)
	if err != nil {
		return err
	}
	if s.cursor == nil {
		return nil
	}
	return s.cursor.Flush(ctx)
}
