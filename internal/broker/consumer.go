package broker

import (
	"context"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// HashRange is an inclusive range of the 0..65535 key hash space.
type HashRange struct{ Start, End int32 }

// KeySharedOptions are CommandSubscribe.keySharedMeta.
type KeySharedOptions struct {
	Mode                    mtypes.KeySharedMode
	Ranges                  []HashRange // Sticky mode
	AllowOutOfOrderDelivery bool
}

// SubscribeOptions describe a SUBSCRIBE request.
type SubscribeOptions struct {
	// Subscription is the subscription name.
	Subscription string
	// Type is the subscription type. A subscription with connected consumers refuses another type
	// (ErrConsumerBusy).
	Type mtypes.SubType
	// Durable subscriptions are persisted; non-durable ones (readers) vanish with their last consumer.
	Durable bool
	// InitialPosition applies when a durable subscription is created.
	InitialPosition mtypes.InitialPosition
	// StartPosition, for non-durable subscriptions: the first entry to deliver (the client's
	// start_message_id; delivery starts AT it, and the client filters inclusive/exclusive itself).
	// nil = by InitialPosition. EarliestPosition/LatestPosition are the wire sentinels.
	StartPosition *mtypes.Position
	// ConsumerID is the connection-scoped id (stats only); ConsumerName the client's name.
	ConsumerID   uint64
	ConsumerName string
	// PriorityLevel: lower is higher priority (Shared dispatch and Failover active choice).
	PriorityLevel int32
	// ReplicateSubscriptionState marks the subscription as replicated (PIP-33).
	ReplicateSubscriptionState bool
	// KeyShared is set for Key_Shared subscriptions.
	KeyShared *KeySharedOptions
	// Metadata (consumer properties) and SubscriptionProperties, for stats.
	Metadata               map[string]string
	SubscriptionProperties map[string]string
	// Address and ClientVersion are shown in stats.
	Address       string
	ClientVersion string
}

// Consumer is one consumer attached to a subscription.
type Consumer struct {
	c *consumerState
}

// Name is the consumer's name.
func (c *Consumer) Name() string { return c.c.name }

// Subscription is the subscription's name.
func (c *Consumer) Subscription() string { return c.c.sub.name }

// Topic is the consumer's topic.
func (c *Consumer) Topic() *Topic { return &c.c.sub.topic.public }

// ConnectedSince is when the consumer subscribed.
func (c *Consumer) ConnectedSince() time.Time { return c.c.connectedSince }

// Flow adds permits (counted in messages: a batch entry uses num_messages permits).
func (c *Consumer) Flow(permits uint32) { c.c.sub.flow(c.c, permits) }

// Ack acknowledges entries individually, or cumulatively up to and including acks[0].Position
// (cumulative acks carry one position; Pulsar refuses them on Shared and Key_Shared subscriptions:
// ErrNotAllowed). It returns once the acknowledgement is applied to the cursor (whose persistence is
// batched by storage), so the server can answer ACK_RESPONSE.
func (c *Consumer) Ack(ctx context.Context, acks []Ack, cumulative bool) error {
	return c.c.sub.ack(ctx, c.c, acks, cumulative)
}

// RedeliverUnacknowledged redelivers this consumer's unacknowledged entries: the given ones on
// Shared and Key_Shared subscriptions, all of them (a rewind) on Exclusive and Failover ones or when
// positions is empty. Redelivered entries carry an incremented redelivery count.
func (c *Consumer) RedeliverUnacknowledged(positions []mtypes.Position) {
	c.c.sub.redeliver(c.c, positions)
}

// Resubscribed tells that the client subscribed again under this consumer's id on the same
// connection (pulsar-client-go does when two events ask it to reconnect at once). The client
// cleared its receiver queue first and grants its permits again: the consumer's permits go to 0
// and what it holds unacknowledged is delivered again (with an incremented redelivery count), so
// nothing stays assigned to a consumer that dropped it.
func (c *Consumer) Resubscribed() { c.c.sub.resubscribed(c.c) }

// Seek resets the subscription so that the next entry delivered is the one at p (the client filters
// within a batch). Afterwards every consumer of the subscription is disconnected (ConsumerSink.Closed,
// including this one), as the client expects; the caller answers SUCCESS first.
func (c *Consumer) Seek(ctx context.Context, p mtypes.Position) error {
	return c.c.sub.seek(ctx, c.c, p, false, 0)
}

// SeekByTime resets the subscription to the first entry published at or after publishTimeMs, then
// disconnects consumers as Seek does.
func (c *Consumer) SeekByTime(ctx context.Context, publishTimeMs int64) error {
	return c.c.sub.seek(ctx, c.c, mtypes.Position{}, true, publishTimeMs)
}

// LastMessageID answers GET_LAST_MESSAGE_ID for this consumer's subscription.
func (c *Consumer) LastMessageID(ctx context.Context) (LastMessageID, error) {
	return c.c.sub.lastMessageID(ctx)
}

// Unsubscribe deletes the subscription. Without force it fails (ErrNotAllowed) while other consumers
// are attached; with force they are disconnected (their sinks' Closed). This consumer is closed
// without a Closed call.
func (c *Consumer) Unsubscribe(ctx context.Context, force bool) error {
	return c.c.sub.unsubscribe(ctx, c.c, force)
}

// Close detaches the consumer; its unacknowledged entries are redelivered to the others. Closing
// twice is a no-op.
func (c *Consumer) Close() { c.c.sub.removeConsumer(c.c, false) }
