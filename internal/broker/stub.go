package broker

import (
	"context"
	"errors"
	"time"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/storage"
)

// Temporary: replaced by the implementation within the hour.

var errNotImplemented = errors.New("broker: not implemented yet")

type brokerState struct {
	cfg            Config
	publishLimiter *MemoryLimiter
}

func newBroker(cfg Config, deps Deps) (*Broker, error) {
	return &Broker{b: &brokerState{cfg: cfg, publishLimiter: NewMemoryLimiter(256<<20, 0, nil)}}, nil
}
func (b *brokerState) getTopic(ctx context.Context, name naming.TopicName, create bool) (*Topic, error) {
	return nil, errNotImplemented
}
func (b *brokerState) loadedTopic(name naming.TopicName) *Topic { return nil }
func (b *brokerState) loadedTopics() []*Topic                   { return nil }
func (b *brokerState) topicExists(ctx context.Context, name naming.TopicName) (bool, error) {
	return false, errNotImplemented
}
func (b *brokerState) listTopics(ctx context.Context, ns naming.NamespaceName) ([]naming.TopicName, error) {
	return nil, errNotImplemented
}
func (b *brokerState) createTopic(ctx context.Context, name naming.TopicName) error {
	return errNotImplemented
}
func (b *brokerState) deleteTopic(ctx context.Context, name naming.TopicName, force bool) error {
	return errNotImplemented
}
func (b *brokerState) unloadTopic(ctx context.Context, name naming.TopicName) error {
	return errNotImplemented
}
func (b *brokerState) policiesChanged(ns naming.NamespaceName) {}
func (b *brokerState) close(ctx context.Context) error         { return nil }

type topicState struct {
	name   naming.TopicName
	public *Topic
	ledger *storage.Ledger
}

func (t *topicState) addProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	return nil, errNotImplemented
}
func (t *topicState) subscribe(ctx context.Context, opts SubscribeOptions, sink ConsumerSink) (*Consumer, error) {
	return nil, errNotImplemented
}
func (t *topicState) subscriptionNames() []string { return nil }
func (t *topicState) createSubscription(ctx context.Context, name string, start storage.Position, replicated bool) error {
	return errNotImplemented
}
func (t *topicState) deleteSubscription(ctx context.Context, name string, force bool) error {
	return errNotImplemented
}
func (t *topicState) resetSubscription(ctx context.Context, name string, p storage.Position, byTime bool, ts int64) error {
	return errNotImplemented
}
func (t *topicState) skipAll(ctx context.Context, name string) error     { return errNotImplemented }
func (t *topicState) skip(ctx context.Context, name string, n int) error { return errNotImplemented }
func (t *topicState) peek(ctx context.Context, name string, n int) ([]storage.Entry, error) {
	return nil, errNotImplemented
}
func (t *topicState) terminate(ctx context.Context) (storage.Position, error) {
	return storage.Position{}, errNotImplemented
}
func (t *topicState) dedupEnabled() bool           { return false }
func (t *topicState) stats() TopicStats            { return TopicStats{} }
func (t *topicState) internalStats() InternalStats { return InternalStats{} }

type producerState struct {
	name           string
	topic          *topicState
	lastSequenceID int64
	topicEpoch     uint64
	hasTopicEpoch  bool
	connectedSince time.Time
}

func (p *producerState) publish(req PublishRequest, done func(PublishResult)) {
	done(PublishResult{Err: errNotImplemented})
}
func (p *producerState) close(ctx context.Context) error { return nil }

type subscriptionState struct {
	name  string
	topic *topicState
}

type consumerState struct {
	name           string
	sub            *subscriptionState
	connectedSince time.Time
}

func (s *subscriptionState) flow(c *consumerState, permits uint32) {}
func (s *subscriptionState) ack(ctx context.Context, c *consumerState, acks []Ack, cumulative bool) error {
	return errNotImplemented
}
func (s *subscriptionState) redeliver(c *consumerState, positions []storage.Position) {}
func (s *subscriptionState) seek(ctx context.Context, c *consumerState, p storage.Position, byTime bool, ts int64) error {
	return errNotImplemented
}
func (s *subscriptionState) lastMessageID(ctx context.Context) (LastMessageID, error) {
	return LastMessageID{}, errNotImplemented
}
func (s *subscriptionState) unsubscribe(ctx context.Context, c *consumerState, force bool) error {
	return errNotImplemented
}
func (s *subscriptionState) removeConsumer(c *consumerState, notify bool) {}
