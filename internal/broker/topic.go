package broker

import (
	"context"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/wire"
)

// Topic is one loaded topic, or one partition of a partitioned topic.
type Topic struct {
	t *topicState
}

// Name is the topic's full name.
func (t *Topic) Name() naming.TopicName { return t.t.name }

// AddProducer attaches a producer (see ProducerOptions for access modes and naming). Errors wrap
// ErrProducerBusy (name in use; a Shared producer while an exclusive one holds the topic),
// ErrProducerFenced (an Exclusive producer while others exist, as Pulsar; an old topic epoch),
// ErrTopicTerminated or ErrTopicFenced.
func (t *Topic) AddProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	if err := checkProducerOptions(opts); err != nil {
		return nil, err
	}
	return t.t.addProducer(ctx, opts)
}

// Subscribe attaches a consumer to a subscription, creating the subscription if needed. For a
// Failover subscription the broker calls sink.ActiveConsumerChanged right away (possibly before
// Subscribe returns: queue it behind the SUBSCRIBE answer). Dispatching starts once the consumer
// sends permits (Consumer.Flow). Errors wrap ErrConsumerBusy, ErrTopicFenced or storage errors.
func (t *Topic) Subscribe(ctx context.Context, opts SubscribeOptions, sink ConsumerSink) (*Consumer, error) {
	if err := checkSubscribeOptions(opts); err != nil {
		return nil, err
	}
	return t.t.subscribe(ctx, opts, sink)
}

// LastPosition is the position of the last stored entry (EntryID -1 if the topic is empty).
func (t *Topic) LastPosition() mtypes.Position {
	if t.t.nonPersistent() {
		return mtypes.Position{LedgerID: -1, EntryID: -1}
	}
	return t.t.ledger.LastConfirmed()
}

// Subscriptions lists the topic's subscriptions (durable ones from storage, non-durable loaded
// ones), sorted. Replicator and dedup cursors are not subscriptions.
func (t *Topic) Subscriptions() []string { return t.t.subscriptionNames() }

// CreateSubscription creates a durable subscription starting at start (EarliestPosition,
// LatestPosition or an entry position), as the admin API does. It fails (ErrNotAllowed) if it exists.
func (t *Topic) CreateSubscription(ctx context.Context, name string, start mtypes.Position, replicated bool) error {
	return t.t.createSubscription(ctx, name, start, replicated, nil)
}

// CreateSubscriptionWithProperties is CreateSubscription of a subscription with properties
// (persisted with it; at most 64 and 16 KiB: ErrInvalidRequest).
func (t *Topic) CreateSubscriptionWithProperties(ctx context.Context, name string, start mtypes.Position, replicated bool, props map[string]string) error {
	if err := wire.CheckProperties("subscription", props); err != nil {
		return limitErr(err)
	}
	return t.t.createSubscription(ctx, name, start, replicated, props)
}

// SubscriptionProperties returns a subscription's properties (ErrSubscriptionNotFound if missing).
func (t *Topic) SubscriptionProperties(name string) (map[string]string, error) {
	s, err := t.t.subscription(name)
	if err != nil {
		return nil, err
	}
	return s.properties(), nil
}

// SetSubscriptionProperties replaces a subscription's properties (admin); they are persisted with
// the subscription before it returns. At most 64 properties and 16 KiB (ErrInvalidRequest).
func (t *Topic) SetSubscriptionProperties(ctx context.Context, name string, props map[string]string) error {
	s, err := t.t.subscription(name)
	if err != nil {
		return err
	}
	return s.setProperties(ctx, props)
}

// DeleteSubscription deletes a subscription. Without force it fails (ErrNotAllowed) while consumers
// are attached; with force they are disconnected. Missing: ErrSubscriptionNotFound.
func (t *Topic) DeleteSubscription(ctx context.Context, name string, force bool) error {
	return t.t.deleteSubscription(ctx, name, force)
}

// ResetSubscription moves a subscription so that the next entry delivered is p (admin reset-cursor);
// its consumers are disconnected.
func (t *Topic) ResetSubscription(ctx context.Context, name string, p mtypes.Position) error {
	return t.t.resetSubscription(ctx, name, p, false, 0)
}

// ResetSubscriptionByTime moves a subscription to the first entry published at or after the time.
func (t *Topic) ResetSubscriptionByTime(ctx context.Context, name string, publishTimeMs int64) error {
	return t.t.resetSubscription(ctx, name, mtypes.Position{}, true, publishTimeMs)
}

// SkipAll acknowledges everything in a subscription's backlog (admin clear-backlog).
func (t *Topic) SkipAll(ctx context.Context, name string) error { return t.t.skipAll(ctx, name) }

// Skip acknowledges the next n unacknowledged entries of a subscription (admin skip).
func (t *Topic) Skip(ctx context.Context, name string, n int) error { return t.t.skip(ctx, name, n) }

// PeekEntry returns the n-th (1-based) unacknowledged entry of a subscription's backlog (admin
// peek-messages), without changing the subscription; found is false when the backlog holds fewer.
// It walks the backlog in bounded reads and keeps only the entry it returns.
func (t *Topic) PeekEntry(ctx context.Context, name string, n int) (e mtypes.Entry, found bool, err error) {
	return t.t.peekEntry(ctx, name, n)
}

// ReadEntry reads the entry at p (admin get-message-by-id).
func (t *Topic) ReadEntry(ctx context.Context, p mtypes.Position) (mtypes.Entry, error) {
	if err := t.t.needStorage(); err != nil {
		return mtypes.Entry{}, err
	}
	return t.t.ledger.ReadEntry(ctx, p)
}

// Terminate seals the topic: producers are closed and refused (ErrTopicTerminated); consumers
// drain. It returns the last position.
func (t *Topic) Terminate(ctx context.Context) (mtypes.Position, error) { return t.t.terminate(ctx) }

// DedupEnabled reports whether producer deduplication is on for the topic.
func (t *Topic) DedupEnabled() bool { return t.t.dedupEnabled() }

// Stats returns the topic's stats (admin "topics stats").
func (t *Topic) Stats() TopicStats { return t.t.stats() }

// InternalStats returns storage-level stats (admin "topics stats-internal").
func (t *Topic) InternalStats() InternalStats { return t.t.internalStats() }

// MessageIDByTimestamp returns the position of the first entry published at or after publishTimeMs
// (or the next position to be written).
func (t *Topic) MessageIDByTimestamp(ctx context.Context, publishTimeMs int64) (mtypes.Position, error) {
	if err := t.t.needStorage(); err != nil {
		return mtypes.Position{}, err
	}
	return t.t.ledger.FindByTime(ctx, publishTimeMs)
}

// ExpireMessages acknowledges, on one subscription, every entry published more than age ago
// (admin expire-messages; the message TTL policy does the same periodically on all subscriptions).
func (t *Topic) ExpireMessages(ctx context.Context, subscription string, age time.Duration) error {
	return t.t.expireMessages(ctx, subscription, age)
}

// Producers returns the number of attached producers.
func (t *Topic) Producers() int { return t.t.producerCount() }

// WaitForEntries returns a channel closed once an entry at or after from is stored (at once if
// LastPosition() >= from already), or when the topic unloads. Replicators use it to wait for data.
func (t *Topic) WaitForEntries(from mtypes.Position) <-chan struct{} {
	return t.t.waitForEntries(from)
}

// Ledger is the topic's storage ledger (replicators open their cursors and read entries on it);
// nil for a non-persistent topic.
func (t *Topic) Ledger() *storage.Ledger { return t.t.ledger }

// Closed reports whether the topic was unloaded (a new GetTopic loads it again).
func (t *Topic) Closed() bool { return t.t.isClosed() }
