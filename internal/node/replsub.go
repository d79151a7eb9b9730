package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/storage"
)

// Replicated subscriptions: the admin API (admin.ReplicatedSubscriptions), and the adapters
// between the broker and the replication layer's sync (docs/replication-design.md, "Replicated
// subscriptions").

var _ admin.ReplicatedSubscriptions = topicService{}

func (s topicService) SubscriptionReplicated(ctx context.Context, topic, sub string) (bool, error) {
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return false, err
	}
	on, err := t.SubscriptionReplicated(sub)
	return on, adminErr(err, nil)
}

func (s topicService) SetSubscriptionReplicated(ctx context.Context, topic, sub string, enabled bool) error {
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return err
	}
	return adminErr(t.SetSubscriptionReplicated(ctx, sub, enabled), nil)
}

// addSubscriptionSyncStats fills each subscription's replicatedSubscriptionSync.
func addSubscriptionSyncStats(repl *replication.Manager, topic string, out *adminapi.TopicStats) {
	if repl == nil {
		return
	}
	st, err := repl.SubscriptionSyncStats(topic)
	if err != nil {
		return
	}
	for name, v := range st {
		if sub, ok := out.Subscriptions[name]; ok {
			sub.ReplicatedSubscriptionSync = v
			out.Subscriptions[name] = sub
		}
	}
}

// subscriptionSync is broker.Deps.SubscriptionSync over the replication Manager, which is built
// before the broker (it reads it through a pointer).
type subscriptionSync struct{ m **replication.Manager }

func (s subscriptionSync) StateChanged(topic naming.TopicName, sub string, final bool) {
	if m := *s.m; m != nil {
		m.SubscriptionStateChanged(topic.String(), sub, final)
	}
}

func (s subscriptionSync) MarkerStored(topic naming.TopicName, pos storage.Position, data []byte) {
	if m := *s.m; m != nil {
		m.MarkerStored(topic.String(), fromStoragePos(pos), data)
	}
}

func (s subscriptionSync) Settle(ctx context.Context, topic naming.TopicName, sub string) {
	if m := *s.m; m != nil {
		m.SettleSubscription(ctx, topic.String(), sub)
	}
}

// syncTopics is replication.SyncTopicSource over the broker's loaded topics.
type syncTopics struct {
	broker **broker.Broker
	engine *storage.Engine
}

func (s syncTopics) SyncTopic(ctx context.Context, topic string) (replication.SyncTopic, error) {
	name, err := naming.ParseTopic(topic)
	if err != nil {
		return nil, err
	}
	b := *s.broker
	if b == nil {
		return nil, errors.New("broker not started")
	}
	t, err := b.GetTopic(ctx, name, false)
	if err != nil {
		return nil, err
	}
	if t.Ledger() == nil {
		return nil, fmt.Errorf("%s has no storage", topic)
	}
	return syncTopic{t: t, engine: s.engine}, nil
}

type syncTopic struct {
	t      *broker.Topic
	engine *storage.Engine
}

func (s syncTopic) AckState(sub string, maxRanges, maxBatches int) (replication.LocalAckState, error) {
	st, err := s.t.SubscriptionAckState(sub, maxRanges, maxBatches)
	if err != nil {
		return replication.LocalAckState{}, err
	}
	out := replication.LocalAckState{MarkDelete: fromStoragePos(st.MarkDelete), Version: st.Version, Type: int32(st.Type),
		Properties: st.Properties, Replicated: st.Replicated, Consumers: st.Consumers}
	out.Ranges = make([]replication.LocalRange, len(st.Ranges))
	for i, r := range st.Ranges {
		out.Ranges[i] = replication.LocalRange{LedgerID: r.LedgerID, From: r.From, To: r.To}
	}
	for _, b := range st.Batches {
		out.Batches = append(out.Batches, replication.BatchAck{Pos: fromStoragePos(b.Position), Size: b.Size, Acked: b.Acked})
	}
	return out, nil
}

func (s syncTopic) AppendMarker(ctx context.Context, entry []byte) (replication.Position, error) {
	p, err := s.t.AppendMarker(ctx, entry)
	return fromStoragePos(p), err
}

func (s syncTopic) ApplyState(ctx context.Context, sub string, st replication.AppliedState) (created, truncated bool, err error) {
	rs := broker.ReplicatedState{Type: broker.SubType(st.Type), Properties: st.Properties, SyncRecord: st.SyncRecord}
	for _, r := range st.Ranges {
		rs.Ranges = append(rs.Ranges, broker.PositionRange{From: toStoragePos(r.From), To: toStoragePos(r.To)})
	}
	for _, b := range st.Batches {
		rs.Batches = append(rs.Batches, storage.BatchAcks{Position: toStoragePos(b.Pos), Size: b.Size, Acked: b.Acked})
	}
	res, err := s.t.ApplyReplicatedState(ctx, sub, rs)
	if errors.Is(err, broker.ErrSubscriptionNotReplicated) {
		err = fmt.Errorf("%w: %w", replication.ErrSubscriptionNotReplicated, err)
	}
	return res.Created, res.Truncated, err
}

func (s syncTopic) IncarnationOf(ledger int64) uint64 { return s.engine.IncarnationOf(ledger) }

func (s syncTopic) IncarnationsThrough(ledger int64) []uint64 {
	first := s.t.Ledger().FirstPosition().LedgerID
	if first < 0 || first > ledger {
		first = ledger
	}
	return s.engine.IncarnationsBetween(first, ledger)
}

func (s syncTopic) FlushSubscription(ctx context.Context, sub string) error {
	return s.t.FlushSubscription(ctx, sub)
}
