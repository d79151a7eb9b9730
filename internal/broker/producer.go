package broker

import (
	"context"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// ProducerOptions describe a PRODUCER request.
type ProducerOptions struct {
	// ProducerID is the connection-scoped id (stats only).
	ProducerID uint64
	// Name is the requested producer name; empty = generate a unique one ("<cluster>-<brokerID>-<n>").
	Name string
	// UserProvidedName is CommandProducer.user_provided_producer_name.
	UserProvidedName bool
	// AccessMode is the producer's access mode.
	AccessMode mtypes.AccessMode
	// Epoch is CommandProducer.epoch (reconnection counter).
	Epoch uint64
	// TopicEpoch is CommandProducer.topic_epoch when set (exclusive producers after a first success).
	TopicEpoch *uint64
	// Properties are the producer's metadata (stats "metadata").
	Properties map[string]string
	// Address and ClientVersion are shown in stats.
	Address       string
	ClientVersion string
	// Limiter accounts the bytes of this producer's in-flight publishes (normally the connection's
	// limiter, a child of Broker.PublishLimiter). nil = the broker-wide limiter.
	Limiter *MemoryLimiter
	// OnQueued is called (at most once, from AddProducer's goroutine) when a WaitForExclusive producer
	// has to wait: the server answers PRODUCER_SUCCESS with producer_ready=false, and AddProducer
	// returns once the producer is ready (or ctx ends).
	OnQueued func()
	// OnClosed is called when the broker closes the producer (unload, delete, fencing): the server
	// sends CLOSE_PRODUCER, naming the broker the topic moved to when to is not empty. Not called
	// for Producer.Close. Must not block.
	OnClosed func(to Reassigned)
}

// Producer is one producer attached to a topic.
type Producer struct {
	p *producerState
}

// Name is the producer's name (generated if none was requested): PRODUCER_SUCCESS.producer_name.
func (p *Producer) Name() string { return p.p.name }

// Topic is the topic the producer publishes to.
func (p *Producer) Topic() *Topic { return &p.p.topic.public }

// LastSequenceID is PRODUCER_SUCCESS.last_sequence_id: the highest sequence id persisted for this
// producer name when dedup is enabled, -1 otherwise.
func (p *Producer) LastSequenceID() int64 { return p.p.lastSequenceID }

// IsReplicator reports whether this is a replicator's producer (its name has the replicator
// prefix): its entries go through the replicated-entry index.
func (p *Producer) IsReplicator() bool { return p.p.isReplicator }

// TopicEpoch is PRODUCER_SUCCESS.topic_epoch (exclusive access modes), and whether it is set.
func (p *Producer) TopicEpoch() (uint64, bool) { return p.p.topicEpoch, p.p.hasTopicEpoch }

// ConnectedSince is when the producer was added.
func (p *Producer) ConnectedSince() time.Time { return p.p.connectedSince }

// Publish stores one entry. done is called exactly once per request, in request order per
// producer, once the entry is durable (or deduplicated, or failed); it runs on a broker or storage
// goroutine and must not block. Publish itself never blocks: throttling is the caller's job via the
// producer's MemoryLimiter (Wait before reading the next SEND).
func (p *Producer) Publish(req PublishRequest, done func(PublishResult)) { p.p.publish(req, done) }

// PublishBatch is Publish of each request in turn, with the same done for all: the same results
// in the same order (a request refused or deduplicated in the middle completes on its own, the
// others go on), but admitted and appended under one hold of the topic's locks. A server hands it
// the SENDs of one producer that arrived together. reqs is not kept after PublishBatch returns
// (the entries are, as with Publish).
func (p *Producer) PublishBatch(reqs []PublishRequest, done func(PublishResult)) {
	p.p.publishBatch(reqs, done, false, nil)
}

// PublishBatchCharged is PublishBatch of requests the caller has already charged to the producer's
// limiter (ProducerOptions.Limiter, or the broker's when none was given): one request of
// len(Entry) bytes each, as Publish would charge them. They are released as usual when done. A
// server charges SENDs as it reads them, so that its limits bound what it holds while it collects
// a group, exactly as when it published them one by one.
func (p *Producer) PublishBatchCharged(reqs []PublishRequest, done func(PublishResult)) {
	p.p.publishBatch(reqs, done, true, nil)
}

// PublishBatchChargedLast is PublishBatchCharged for a caller that waits for its next requests
// once it returns (a connection with nothing more in its read buffer): under a light load the
// group commit then runs on the caller's goroutine instead of waking storage's
// (storage.Engine.LeadCommitBegin). The callbacks of that group commit, done among them and those
// of other producers and topics, may then run on the caller's goroutine before this returns; the
// caller must hold no lock that any of them takes. arrived reports whether the caller's next
// requests came while it committed (its socket holds unread bytes): then the load is not light,
// and the next group commits are handed to storage's goroutine, which overlaps their fsyncs.
func (p *Producer) PublishBatchChargedLast(reqs []PublishRequest, done func(PublishResult), arrived func() bool) {
	p.p.publishBatchLeading(reqs, done, arrived)
}

// Close detaches the producer after its pending publishes complete (or ctx ends). Closing twice is
// a no-op.
func (p *Producer) Close(ctx context.Context) error { return p.p.close(ctx) }
