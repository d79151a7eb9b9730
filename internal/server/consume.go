package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/schema"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// consumerHandle is one consumer id of a connection, from SUBSCRIBE until CLOSE_CONSUMER (either
// side), UNSUBSCRIBE or the end of the connection; cons is nil while the broker subscribes.
type consumerHandle struct {
	id    uint64
	topic naming.TopicName
	sink  *consumerSink
	cons  *broker.Consumer // nil while subscribing
	// answered: SUBSCRIBE was answered; a switchover moves only answered consumers.
	answered atomic.Bool
}

func (h *consumerHandle) release() {
	h.sink.detach()
	if h.cons != nil {
		h.cons.Close()
	}
}

// consumerSink is the broker's way to one consumer: it turns deliveries into MESSAGE frames on the
// connection's outbox. It never blocks.
//
// ACTIVE_CONSUMER_CHANGE is held back until the client can route it: pulsar-client-go registers a
// consumer's handler only after it has processed the SUBSCRIBE answer, on another goroutine, and
// drops the event for an unknown consumer. So the event waits for the consumer's first FLOW (which
// the client sends after registering), or activeFallback after SUCCESS for consumers that send no
// FLOW yet (zero-queue consumers send theirs on the first Receive).
type consumerSink struct {
	c  *conn
	h  *consumerHandle
	id uint64

	mu            sync.Mutex
	routable      bool        // the client knows the consumer: FLOW seen, or the fallback fired
	pendingActive *bool       // latest ACTIVE_CONSUMER_CHANGE not sent yet
	fallback      *time.Timer // makes the consumer routable if no FLOW comes
	detached      bool        // nothing more is sent
}

// activeFallback bounds how long ACTIVE_CONSUMER_CHANGE waits for the consumer's first FLOW.
const activeFallback = 500 * time.Millisecond

var _ broker.ConsumerSink = (*consumerSink)(nil)

// SendMessages queues one MESSAGE per delivery; the stored entry goes out as is.
func (s *consumerSink) SendMessages(msgs []broker.Delivery) {
	s.mu.Lock()
	detached := s.detached
	s.mu.Unlock()
	if detached {
		return
	}
	for i := range msgs {
		d := &msgs[i]
		head := wire.MessageHead{ConsumerID: s.id, LedgerID: uint64(d.Position.LedgerID), EntryID: uint64(d.Position.EntryID),
			Partition: d.Partition, RedeliveryCount: d.RedeliveryCount, AckSet: d.AckSet}
		if !s.c.sendMessage(&head, d.Data) {
			return
		}
	}
}

// ActiveConsumerChanged sends ACTIVE_CONSUMER_CHANGE once the client can route it.
func (s *consumerSink) ActiveConsumerChanged(active bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.detached {
		return
	}
	if !s.routable {
		s.pendingActive = &active
		return
	}
	s.sendActiveLocked(active)
}

func (s *consumerSink) sendActiveLocked(active bool) {
	s.c.sendCommand(&pulsarpb.CommandActiveConsumerChange{ConsumerId: proto.Uint64(s.id), IsActive: proto.Bool(active)})
}

// Closed is the broker closing the consumer (seek, forced unsubscribe by another consumer, unload,
// delete): CLOSE_CONSUMER makes the client re-subscribe.
func (s *consumerSink) Closed(to broker.Reassigned) {
	s.mu.Lock()
	if s.detached {
		s.mu.Unlock()
		return
	}
	s.detachLocked()
	s.mu.Unlock()
	s.c.forgetConsumer(s.h)
	s.c.sendCommand(&pulsarpb.CommandCloseConsumer{ConsumerId: proto.Uint64(s.id), RequestId: proto.Uint64(0),
		AssignedBrokerServiceUrl: optionalString(to.ServiceURL), AssignedBrokerServiceUrlTls: optionalString(to.ServiceURLTLS)})
}

// answer queues the SUBSCRIBE answer and starts the fallback for held-back events.
func (s *consumerSink) answer(reqID uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.sendSuccess(reqID)
	if !s.detached && !s.routable {
		s.fallback = time.AfterFunc(activeFallback, s.makeRoutable)
	}
}

// makeRoutable sends the held-back ACTIVE_CONSUMER_CHANGE: the first FLOW arrived, or the
// fallback fired.
func (s *consumerSink) makeRoutable() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.routable || s.detached {
		return
	}
	s.routable = true
	if s.fallback != nil {
		s.fallback.Stop()
	}
	if s.pendingActive != nil {
		s.sendActiveLocked(*s.pendingActive)
		s.pendingActive = nil
	}
}

func (s *consumerSink) detachLocked() {
	s.detached = true
	if s.fallback != nil {
		s.fallback.Stop()
	}
}

func (s *consumerSink) detach() {
	s.mu.Lock()
	s.detachLocked()
	s.mu.Unlock()
}

func (s *consumerSink) isDetached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.detached
}

// handleSubscribe attaches a consumer in a request goroutine and answers SUCCESS or ERROR.
func (c *conn) handleSubscribe(cmd *pulsarpb.CommandSubscribe) {
	reqID, id := cmd.GetRequestId(), cmd.GetConsumerId()
	topic, err := parseTopic(cmd.GetTopic())
	if err != nil {
		c.sendError(reqID, err)
		return
	}
	err = checkSubscribeCommand(cmd)
	if err == nil {
		err = c.checkServedHere(topic)
	}
	if err != nil {
		c.log.Debug("subscribe refused", "topic", topic.String(), "consumerId", id, "err", err)
		c.sendError(reqID, err)
		return
	}
	c.mu.Lock()
	if h, ok := c.consumers[id]; ok {
		cons := h.cons
		c.mu.Unlock()
		if cons == nil {
			c.sendError(reqID, fmt.Errorf("%w: consumer %d is already being created on this connection", wire.ErrServiceNotReady, id))
			return
		}
		// Pulsar answers a repeated SUBSCRIBE for an existing consumer with SUCCESS. The client
		// dropped what it had queued for that consumer: it is delivered again.
		cons.Resubscribed()
		c.sendSuccess(reqID)
		return
	}
	h := &consumerHandle{id: id, topic: topic}
	h.sink = &consumerSink{c: c, h: h, id: id}
	c.consumers[id] = h
	c.mu.Unlock()

	opts := broker.SubscribeOptions{
		Subscription:               cmd.GetSubscription(),
		Type:                       mtypes.SubType(cmd.GetSubType()),
		Durable:                    cmd.GetDurable(),
		InitialPosition:            mtypes.InitialPosition(cmd.GetInitialPosition()),
		ConsumerID:                 id,
		ConsumerName:               cmd.GetConsumerName(),
		PriorityLevel:              cmd.GetPriorityLevel(),
		ReplicateSubscriptionState: cmd.GetReplicateSubscriptionState(),
		Metadata:                   keyValues(cmd.GetMetadata()),
		SubscriptionProperties:     keyValues(cmd.GetSubscriptionProperties()),
		Address:                    c.remote,
		ClientVersion:              c.clientVersion,
	}
	if !opts.Durable && cmd.StartMessageId != nil {
		p := position(cmd.GetStartMessageId())
		opts.StartPosition = &p
	}
	if ks := cmd.GetKeySharedMeta(); ks != nil {
		opts.KeyShared = &broker.KeySharedOptions{
			Mode:                    mtypes.KeySharedMode(ks.GetKeySharedMode()),
			AllowOutOfOrderDelivery: ks.GetAllowOutOfOrderDelivery(),
		}
		for _, r := range ks.GetHashRanges() {
			opts.KeyShared.Ranges = append(opts.KeyShared.Ranges, broker.HashRange{Start: r.GetStart(), End: r.GetEnd()})
		}
	}
	create := cmd.ForceTopicCreation == nil || cmd.GetForceTopicCreation()

	c.goRequest(func(ctx context.Context) {
		err := c.awaitServed(ctx, topic)
		var cons *broker.Consumer
		if err == nil {
			cons, err = c.subscribe(ctx, topic, create, opts, h.sink, schemaInfoOf(cmd.GetSchema()))
		}
		if err != nil {
			c.forgetConsumer(h)
			c.log.Debug("subscribe refused", "topic", topic.String(), "subscription", opts.Subscription, "err", err)
			c.sendError(reqID, err)
			return
		}
		c.mu.Lock()
		current, stillWanted := c.consumers[id]
		stillWanted = stillWanted && current == h && !c.released && !h.sink.isDetached()
		if stillWanted {
			h.cons = cons
		}
		c.mu.Unlock()
		if !stillWanted {
			h.sink.detach()
			cons.Close()
			c.sendError(reqID, fmt.Errorf("%w: consumer closed while subscribing", wire.ErrServiceNotReady))
			return
		}
		h.sink.answer(reqID)
		h.answered.Store(true) // from now on a switchover may move it (switchover.go)
	})
}

// checkSubscribeCommand applies the limits on a SUBSCRIBE's names and properties before anything
// is built from them (or the topic is created).
func checkSubscribeCommand(cmd *pulsarpb.CommandSubscribe) error {
	if err := wire.CheckName("subscription", cmd.GetSubscription()); err != nil {
		return err
	}
	if err := wire.CheckNameLength("consumer", cmd.GetConsumerName()); err != nil {
		return err
	}
	if err := wire.CheckKeyValues("consumer", cmd.GetMetadata()); err != nil {
		return err
	}
	return wire.CheckKeyValues("subscription", cmd.GetSubscriptionProperties())
}

func (c *conn) subscribe(ctx context.Context, topic naming.TopicName, create bool, opts broker.SubscribeOptions, sink *consumerSink, info *schema.Info) (*broker.Consumer, error) {
	t, err := c.s.opts.Broker.GetTopic(ctx, topic, create)
	if err != nil {
		return nil, err
	}
	if err := c.consumerSchema(ctx, t, info); err != nil {
		return nil, err
	}
	return t.Subscribe(ctx, opts, sink)
}

// forgetConsumer removes h from the connection if it is still registered.
func (c *conn) forgetConsumer(h *consumerHandle) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.consumers[h.id]; ok && cur == h {
		delete(c.consumers, h.id)
		return true
	}
	return false
}

// consumer returns the ready consumer with id, or nil.
func (c *conn) consumer(id uint64) *consumerHandle {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.consumers[id]
	if h == nil || h.cons == nil {
		return nil
	}
	return h
}

var errConsumerNotFound = fmt.Errorf("%w: Consumer not found", wire.ErrMetadata)

func (c *conn) handleFlow(cmd *pulsarpb.CommandFlow) {
	if h := c.consumer(cmd.GetConsumerId()); h != nil {
		h.sink.makeRoutable()
		h.cons.Flow(cmd.GetMessagePermits())
	}
}

// handleAck applies acknowledgements in the reader, in order, and answers ACK_RESPONSE when the
// client asked for one. Acks that report a corrupt message (validation_error) are not applied: the
// client dropped the message, and keeping it unacknowledged means it is redelivered rather than
// lost.
func (c *conn) handleAck(cmd *pulsarpb.CommandAck) {
	id := cmd.GetConsumerId()
	respond := func(err error) {
		if cmd.RequestId == nil {
			return
		}
		resp := &pulsarpb.CommandAckResponse{ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(cmd.GetRequestId())}
		if err != nil {
			code, msg := toServerError(err)
			resp.Error, resp.Message = code.Enum(), proto.String(msg)
		}
		c.sendCommand(resp)
	}
	if cmd.ValidationError != nil {
		c.log.Warn("client reports a corrupt message; not acknowledging it", "consumerId", id, "validationError", cmd.GetValidationError().String())
		respond(nil)
		return
	}
	if cmd.TxnidMostBits != nil || cmd.TxnidLeastBits != nil {
		respond(fmt.Errorf("%w: transactions are not supported by this broker", wire.ErrNotAllowed))
		return
	}
	h := c.consumer(id)
	if h == nil {
		respond(errConsumerNotFound)
		return
	}
	acks := make([]broker.Ack, 0, len(cmd.GetMessageId()))
	for _, m := range cmd.GetMessageId() {
		acks = append(acks, broker.Ack{Position: position(m), AckSet: m.GetAckSet(), BatchSize: int(m.GetBatchSize())})
	}
	if len(acks) == 0 {
		respond(nil)
		return
	}
	cumulative := cmd.GetAckType() == pulsarpb.CommandAck_Cumulative
	if cumulative {
		acks = acks[:1]
	}
	err := h.cons.Ack(c.reqCtx, acks, cumulative)
	if err != nil && cmd.RequestId == nil {
		c.log.Debug("ack failed", "consumerId", id, "err", err)
	}
	respond(err)
}

func (c *conn) handleRedeliver(cmd *pulsarpb.CommandRedeliverUnacknowledgedMessages) {
	h := c.consumer(cmd.GetConsumerId())
	if h == nil {
		return
	}
	var positions []mtypes.Position
	for _, m := range cmd.GetMessageIds() {
		positions = append(positions, position(m))
	}
	h.cons.RedeliverUnacknowledged(positions)
}

// handleSeek resets the subscription; the broker closes its consumers (CLOSE_CONSUMER, so the
// client re-subscribes from the new position) before SUCCESS goes out.
func (c *conn) handleSeek(cmd *pulsarpb.CommandSeek) {
	reqID := cmd.GetRequestId()
	h := c.consumer(cmd.GetConsumerId())
	if h == nil {
		c.sendError(reqID, errConsumerNotFound)
		return
	}
	switch {
	case cmd.MessageId != nil:
		p := position(cmd.GetMessageId())
		c.goRequest(func(ctx context.Context) { c.answer(reqID, h.cons.Seek(ctx, p)) })
	case cmd.MessagePublishTime != nil:
		t := int64(cmd.GetMessagePublishTime())
		c.goRequest(func(ctx context.Context) { c.answer(reqID, h.cons.SeekByTime(ctx, t)) })
	default:
		c.sendError(reqID, fmt.Errorf("%w: SEEK without message id or publish time", wire.ErrMetadata))
	}
}

// answer sends SUCCESS for a nil error, else ERROR.
func (c *conn) answer(reqID uint64, err error) {
	if err != nil {
		c.sendError(reqID, err)
		return
	}
	c.sendSuccess(reqID)
}

func (c *conn) handleGetLastMessageID(cmd *pulsarpb.CommandGetLastMessageId) {
	reqID := cmd.GetRequestId()
	h := c.consumer(cmd.GetConsumerId())
	if h == nil {
		c.sendError(reqID, errConsumerNotFound)
		return
	}
	partition := int32(h.topic.PartitionIndex)
	c.goRequest(func(ctx context.Context) {
		last, err := h.cons.LastMessageID(ctx)
		if err != nil {
			c.sendError(reqID, err)
			return
		}
		lastID := &pulsarpb.MessageIdData{
			LedgerId:  proto.Uint64(uint64(last.Position.LedgerID)),
			EntryId:   proto.Uint64(uint64(last.Position.EntryID)),
			Partition: proto.Int32(partition),
		}
		if last.BatchIndex >= 0 {
			lastID.BatchIndex = proto.Int32(last.BatchIndex)
		}
		c.sendCommand(&pulsarpb.CommandGetLastMessageIdResponse{
			RequestId:     proto.Uint64(reqID),
			LastMessageId: lastID,
			ConsumerMarkDeletePosition: &pulsarpb.MessageIdData{
				LedgerId: proto.Uint64(uint64(last.MarkDelete.LedgerID)),
				EntryId:  proto.Uint64(uint64(last.MarkDelete.EntryID)),
			},
		})
	})
}

func (c *conn) handleUnsubscribe(cmd *pulsarpb.CommandUnsubscribe) {
	reqID := cmd.GetRequestId()
	h := c.consumer(cmd.GetConsumerId())
	if h == nil {
		c.sendError(reqID, errConsumerNotFound)
		return
	}
	force := cmd.GetForce()
	c.goRequest(func(ctx context.Context) {
		if err := h.cons.Unsubscribe(ctx, force); err != nil {
			c.sendError(reqID, err)
			return
		}
		h.sink.detach()
		c.forgetConsumer(h)
		c.sendSuccess(reqID)
	})
}

// handleCloseConsumer detaches a consumer and answers SUCCESS (also for unknown ids, as Pulsar does).
func (c *conn) handleCloseConsumer(cmd *pulsarpb.CommandCloseConsumer) {
	reqID, id := cmd.GetRequestId(), cmd.GetConsumerId()
	c.mu.Lock()
	h, ok := c.consumers[id]
	if ok {
		delete(c.consumers, id)
	}
	c.mu.Unlock()
	if ok {
		h.release() // a consumer still subscribing is closed by its goroutine, which sees it is gone
	}
	c.sendSuccess(reqID)
}

// handleConsumerStats answers CONSUMER_STATS with what the connection knows about the consumer.
func (c *conn) handleConsumerStats(cmd *pulsarpb.CommandConsumerStats) {
	reqID := cmd.GetRequestId()
	h := c.consumer(cmd.GetConsumerId())
	if h == nil {
		code, msg := toServerError(errConsumerNotFound)
		c.sendCommand(&pulsarpb.CommandConsumerStatsResponse{RequestId: proto.Uint64(reqID), ErrorCode: code.Enum(), ErrorMessage: proto.String(msg)})
		return
	}
	c.sendCommand(&pulsarpb.CommandConsumerStatsResponse{
		RequestId:      proto.Uint64(reqID),
		ConsumerName:   proto.String(h.cons.Name()),
		Address:        proto.String(c.remote),
		ConnectedSince: proto.String(h.cons.ConnectedSince().UTC().Format(time.RFC3339Nano)),
	})
}

// position converts a wire message id to a storage position (uint64 reinterpreted as int64, so the
// wire sentinels become mtypes.Earliest and mtypes.Latest).
func position(m *pulsarpb.MessageIdData) mtypes.Position {
	return mtypes.Position{LedgerID: int64(m.GetLedgerId()), EntryID: int64(m.GetEntryId())}
}
