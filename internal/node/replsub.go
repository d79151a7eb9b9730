package node

import (
	"context"
	"fmt"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
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
	for name, v := range repl.SubscriptionSyncStats(topic) {
		if sub, ok := out.Subscriptions[name]; ok {
			sub.ReplicatedSubscriptionSync = v
			out.Subscriptions[name] = sub
		}
	}
}

// subscriptionSync is broker.Deps.SubscriptionSync over the replication Manager.
type subscriptionSync struct{ m *replication.Manager }

func (s subscriptionSync) StateChanged(topic naming.TopicName, sub string, final bool) {
	s.m.SubscriptionStateChanged(topic.String(), sub, final)
}

func (s subscriptionSync) MarkerStored(topic naming.TopicName, pos mtypes.Position, data []byte) {
	s.m.MarkerStored(topic.String(), pos, data)
}

func (s subscriptionSync) Settle(ctx context.Context, topic naming.TopicName, sub string) {
	s.m.SettleSubscription(ctx, topic.String(), sub)
}

// syncTopics is replication.SyncTopicSource over the broker's loaded topics.
type syncTopics struct {
	broker *broker.Broker
}

func (s syncTopics) SyncTopic(ctx context.Context, topic string) (replication.SyncTopic, error) {
	name, err := naming.ParseTopic(topic)
	if err != nil {
		return nil, err
	}
	t, err := s.broker.GetTopic(ctx, name, false)
	if err != nil {
		return nil, err
	}
	if t.Ledger() == nil {
		return nil, fmt.Errorf("%s has no storage", topic)
	}
	return syncTopic{Topic: t}, nil
}

// syncTopic is a broker topic as a replication.SyncTopic (the topic's methods match), plus the
// storage incarnations of its ledgers.
type syncTopic struct {
	*broker.Topic
}

// IncarnationOf asks the ledger, which knows the incarnations of segments moved here from another
// broker (docs/cluster.md, "Moving a bundle").
func (s syncTopic) IncarnationOf(ledger int64) uint64 { return s.Ledger().IncarnationOf(ledger) }

func (s syncTopic) IncarnationsThrough(ledger int64) []uint64 {
	first := s.Ledger().FirstPosition().LedgerID
	if first < 0 || first > ledger {
		first = ledger
	}
	return s.Ledger().IncarnationsBetween(first, ledger)
}
