package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Subscription types and initial positions (pulsarpb enums).
const (
	Exclusive = pulsarpb.CommandSubscribe_Exclusive
	Shared    = pulsarpb.CommandSubscribe_Shared
	Failover  = pulsarpb.CommandSubscribe_Failover
	KeyShared = pulsarpb.CommandSubscribe_Key_Shared

	PositionLatest   = pulsarpb.CommandSubscribe_Latest
	PositionEarliest = pulsarpb.CommandSubscribe_Earliest
)

// ConsumerOptions configure Subscribe.
type ConsumerOptions struct {
	// Topic (short names are expanded). A partitioned topic needs one consumer per partition.
	Topic        string
	Subscription string
	// Type of the subscription; default Exclusive.
	Type pulsarpb.CommandSubscribe_SubType
	// InitialPosition for a durable subscription that does not exist yet; default Latest.
	InitialPosition pulsarpb.CommandSubscribe_InitialPosition
	// NonDurable subscriptions (readers) start at StartMessageID (default Latest).
	NonDurable     bool
	StartMessageID *MessageID
	// Name of the consumer; default "meridian-<id>".
	Name string
	// ReceiverQueueSize is the flow-control window in messages; default 1000.
	ReceiverQueueSize int
	// AckWithResponse makes Ack wait for the broker's ACK_RESPONSE.
	AckWithResponse bool
	// ReplicateSubscriptionState asks the broker to replicate this subscription's position.
	ReplicateSubscriptionState bool
	// Properties are subscription properties.
	Properties map[string]string
}

// Message is a received message.
type Message struct {
	ID              MessageID
	Topic           string
	Payload         []byte
	Key             string
	Properties      map[string]string
	ProducerName    string
	SequenceID      uint64
	PublishTime     time.Time
	EventTime       time.Time
	RedeliveryCount uint32
	ReplicatedFrom  string
	// Metadata is the entry's metadata (shared by all messages of a batch).
	Metadata *pulsarpb.MessageMetadata
	// Entry is the entry bytes as dispatched (shared by all messages of a batch).
	Entry []byte
	// BrokerEntryMetadata is the broker's prefix, if it sent one.
	BrokerEntryMetadata *pulsarpb.BrokerEntryMetadata
	// Compressed is true when the entry's body is compressed: Payload is then the whole
	// compressed body (batches are not split; this client has no codecs).
	Compressed bool
}

// Consumer receives from one subscription of one topic. Safe for concurrent use.
type Consumer struct {
	client *Client
	opts   ConsumerOptions
	topic  string
	id     uint64
	name   string
	log    *slog.Logger

	mu            sync.Mutex
	cn            *conn
	queue         []*Message
	notify        chan struct{} // signalled when queue grows or state changes
	consumed      int           // messages handed out since the last FLOW
	active        bool
	lastErr       error
	lastDequeued  *MessageID // readers resume after it
	awaitingClose bool       // after SEEK: drop messages until the broker closes us
	gen           uint64     // incremented by every successful (re)subscription
	batchLeft     map[[2]uint64]int
	closed        bool
	reconnect     chan struct{}
	stop          chan struct{}
	done          chan struct{}
}

// Subscribe creates a consumer. Broker errors (ConsumerBusy, TopicNotFound, ...) are returned;
// after that the consumer resubscribes by itself when its connection is lost or the broker
// closes it.
func (c *Client) Subscribe(ctx context.Context, opts ConsumerOptions) (*Consumer, error) {
	topic, err := normalizeTopic(opts.Topic)
	if err != nil {
		return nil, err
	}
	if opts.Subscription == "" {
		return nil, errors.New("client: subscription name required")
	}
	if opts.ReceiverQueueSize <= 0 {
		opts.ReceiverQueueSize = 1000
	}
	cs := &Consumer{
		client:    c,
		opts:      opts,
		topic:     topic,
		id:        c.consumerID.Add(1),
		notify:    make(chan struct{}, 1),
		batchLeft: make(map[[2]uint64]int),
		reconnect: make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	cs.name = opts.Name
	if cs.name == "" {
		cs.name = fmt.Sprintf("meridian-%d", cs.id)
	}
	cs.log = c.opts.Logger.With("topic", topic, "subscription", opts.Subscription, "consumer_id", cs.id)
	octx, cancel := c.opContext(ctx)
	defer cancel()
	if err := cs.subscribe(octx); err != nil {
		return nil, err
	}
	if err := c.register(nil, cs); err != nil {
		cs.mu.Lock()
		cn := cs.cn
		cs.mu.Unlock()
		cs.closeOnBroker(ctx, cn)
		return nil, err
	}
	go cs.run()
	return cs, nil
}

// Topic is the consumer's fully qualified topic.
func (cs *Consumer) Topic() string { return cs.topic }

// IsActive reports the last ACTIVE_CONSUMER_CHANGE (Failover).
func (cs *Consumer) IsActive() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.active
}

// LastError is the most recent connection failure (nil after a successful resubscription).
func (cs *Consumer) LastError() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.lastErr
}

func (cs *Consumer) subscribe(ctx context.Context) error {
	cn, err := cs.client.connectTopic(ctx, cs.topic)
	if err != nil {
		return err
	}
	reqID := cs.client.nextRequestID()
	sub := &pulsarpb.CommandSubscribe{
		Topic:                      ptr(cs.topic),
		Subscription:               ptr(cs.opts.Subscription),
		SubType:                    ptr(cs.opts.Type),
		ConsumerId:                 ptr(cs.id),
		RequestId:                  ptr(reqID),
		ConsumerName:               ptr(cs.name),
		Durable:                    ptr(!cs.opts.NonDurable),
		ReadCompacted:              ptr(false),
		InitialPosition:            ptr(cs.opts.InitialPosition),
		ReplicateSubscriptionState: ptr(cs.opts.ReplicateSubscriptionState),
	}
	cs.mu.Lock()
	if cs.opts.NonDurable {
		start := Latest
		if cs.opts.StartMessageID != nil {
			start = *cs.opts.StartMessageID
		}
		if cs.lastDequeued != nil {
			start = *cs.lastDequeued
		}
		sub.StartMessageId = &pulsarpb.MessageIdData{LedgerId: ptr(start.LedgerID), EntryId: ptr(start.EntryID)}
	}
	cs.mu.Unlock()
	for _, k := range sortedKeys(cs.opts.Properties) {
		sub.SubscriptionProperties = append(sub.SubscriptionProperties, &pulsarpb.KeyValue{Key: ptr(k), Value: ptr(cs.opts.Properties[k])})
	}
	cn.addConsumer(cs.id, cs)
	resp, err := cn.request(ctx, reqID, wire.Command(sub))
	if err == nil {
		err = errorOf(resp)
	}
	if err != nil {
		cn.removeConsumer(cs.id)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			cs.closeOnBroker(context.Background(), cn)
		}
		return fmt.Errorf("client: subscribe %s on %s: %w", cs.opts.Subscription, cs.topic, err)
	}
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		cn.removeConsumer(cs.id)
		return ErrClosed
	}
	cs.cn = cn
	cs.gen++
	cs.queue = nil
	cs.consumed = 0
	cs.awaitingClose = false
	clear(cs.batchLeft)
	cs.lastErr = nil
	cs.mu.Unlock()
	return cn.send(wire.Command(&pulsarpb.CommandFlow{ConsumerId: ptr(cs.id), MessagePermits: ptr(uint32(cs.opts.ReceiverQueueSize))}), nil)
}

func (cs *Consumer) closeOnBroker(ctx context.Context, cn *conn) {
	if cn == nil || cn.isClosed() {
		return
	}
	cn.removeConsumer(cs.id)
	ctx, cancel := closeContext(ctx, cs.client.opts.OperationTimeout)
	defer cancel()
	reqID := cs.client.nextRequestID()
	_, _ = cn.request(ctx, reqID, wire.Command(&pulsarpb.CommandCloseConsumer{ConsumerId: ptr(cs.id), RequestId: ptr(reqID)}))
}

func (cs *Consumer) run() {
	defer close(cs.done)
	bo := newBackoff(&cs.client.opts)
	for {
		select {
		case <-cs.stop:
			return
		case <-cs.reconnect:
		}
		for {
			cs.mu.Lock()
			connected := cs.cn != nil
			cs.mu.Unlock()
			if connected {
				break
			}
			if !sleepCtx(cs.stop, bo.delay()) {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), cs.client.opts.OperationTimeout)
			go func() {
				select {
				case <-cs.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			err := cs.subscribe(ctx)
			cancel()
			if err == nil {
				bo.reset()
				cs.log.Info("client: consumer resubscribed")
				break
			}
			if errors.Is(err, ErrClosed) {
				return
			}
			cs.mu.Lock()
			cs.lastErr = err
			cs.mu.Unlock()
			cs.log.Warn("client: resubscribe failed", "err", err)
		}
	}
}

func (cs *Consumer) onDisconnect(c *conn, reason error) {
	cs.mu.Lock()
	if cs.cn != c {
		cs.mu.Unlock()
		return
	}
	cs.cn = nil
	cs.lastErr = reason
	cs.queue = nil // the broker redelivers whatever was not acknowledged
	cs.mu.Unlock()
	select {
	case cs.reconnect <- struct{}{}:
	default:
	}
}

func (cs *Consumer) onActiveChange(c *conn, active bool) {
	cs.mu.Lock()
	cs.active = active
	cs.mu.Unlock()
	cs.signal()
}

func (cs *Consumer) signal() {
	select {
	case cs.notify <- struct{}{}:
	default:
	}
}

// onMessage turns one MESSAGE into queued messages (one per batch index still unacknowledged).
func (cs *Consumer) onMessage(c *conn, m *pulsarpb.CommandMessage, payload []byte) {
	bem, entry, err := wire.SplitBrokerEntryMetadata(payload)
	if err == nil {
		err = wire.VerifyChecksum(entry)
	}
	var md *pulsarpb.MessageMetadata
	var parts []wire.BatchMessage
	compressed := false
	if err == nil {
		md, parts, err = wire.EntryMessages(entry)
		if errors.Is(err, wire.ErrCompressed) {
			p, _ := wire.ParseEntry(entry)
			parts, err, compressed = []wire.BatchMessage{{Index: 0, Payload: p.Body}}, nil, true
		}
	}
	ledger, entryID := m.GetMessageId().GetLedgerId(), m.GetMessageId().GetEntryId()
	if err != nil {
		cs.log.Warn("client: discarding undecodable message", "ledger", ledger, "entry", entryID, "err", err)
		validation := pulsarpb.CommandAck_BatchDeSerializeError
		if errors.Is(err, wire.ErrChecksum) {
			validation = pulsarpb.CommandAck_ChecksumMismatch
		}
		_ = c.send(wire.Command(&pulsarpb.CommandAck{
			ConsumerId: ptr(cs.id), AckType: ptr(pulsarpb.CommandAck_Individual),
			MessageId:       []*pulsarpb.MessageIdData{{LedgerId: ptr(ledger), EntryId: ptr(entryID)}},
			ValidationError: ptr(validation),
		}), nil)
		return
	}
	batched := md.NumMessagesInBatch != nil && !compressed
	batchSize := int32(len(parts))
	var msgs []*Message
	for _, part := range parts {
		if batched && wire.AckSetIsAcked(m.GetAckSet(), part.Index) {
			continue
		}
		id := MessageID{LedgerID: ledger, EntryID: entryID, BatchIndex: -1, Partition: -1}
		if batched {
			id.BatchIndex, id.BatchSize = int32(part.Index), batchSize
		}
		msg := &Message{
			ID:                  id,
			Topic:               cs.topic,
			Payload:             part.Payload,
			Key:                 md.GetPartitionKey(),
			ProducerName:        md.GetProducerName(),
			SequenceID:          md.GetSequenceId(),
			PublishTime:         time.UnixMilli(int64(md.GetPublishTime())),
			RedeliveryCount:     m.GetRedeliveryCount(),
			ReplicatedFrom:      md.GetReplicatedFrom(),
			Metadata:            md,
			Entry:               entry,
			BrokerEntryMetadata: bem,
			Compressed:          compressed,
		}
		props := md.Properties
		if et := md.GetEventTime(); et > 0 {
			msg.EventTime = time.UnixMilli(int64(et))
		}
		if s := part.Metadata; s != nil {
			props = s.Properties
			if s.PartitionKey != nil {
				msg.Key = s.GetPartitionKey()
			}
			if s.SequenceId != nil {
				msg.SequenceID = s.GetSequenceId()
			} else {
				msg.SequenceID = md.GetSequenceId() + uint64(part.Index)
			}
			if et := s.GetEventTime(); et > 0 {
				msg.EventTime = time.UnixMilli(int64(et))
			}
		}
		if len(props) > 0 {
			msg.Properties = make(map[string]string, len(props))
			for _, kv := range props {
				msg.Properties[kv.GetKey()] = kv.GetValue()
			}
		}
		msgs = append(msgs, msg)
	}
	cs.mu.Lock()
	if cs.cn != c || cs.awaitingClose {
		cs.mu.Unlock()
		return
	}
	skipped := 0
	for _, msg := range msgs {
		// A reader that reconnected resumes after what it already handed out.
		if cs.lastDequeued != nil && cs.opts.NonDurable && !cs.lastDequeued.Less(msg.ID) {
			skipped++
			continue
		}
		cs.queue = append(cs.queue, msg)
	}
	if batched && len(msgs) > 0 {
		cs.batchLeft[[2]uint64{ledger, entryID}] = len(msgs)
	}
	cs.consumed += skipped + (len(parts) - len(msgs)) // permits of messages never handed out
	flow := cs.takeFlowLocked()
	cs.mu.Unlock()
	if flow > 0 {
		_ = c.send(wire.Command(&pulsarpb.CommandFlow{ConsumerId: ptr(cs.id), MessagePermits: ptr(uint32(flow))}), nil)
	}
	cs.signal()
}

// takeFlowLocked returns the permits to grant now (when half the window was consumed).
func (cs *Consumer) takeFlowLocked() int {
	if cs.consumed >= max(1, cs.opts.ReceiverQueueSize/2) {
		n := cs.consumed
		cs.consumed = 0
		return n
	}
	return 0
}

// Receive returns the next message, waiting until one arrives or ctx ends.
func (cs *Consumer) Receive(ctx context.Context) (*Message, error) {
	for {
		cs.mu.Lock()
		if cs.closed {
			cs.mu.Unlock()
			return nil, ErrClosed
		}
		if len(cs.queue) > 0 {
			msg := cs.queue[0]
			cs.queue[0] = nil
			cs.queue = cs.queue[1:]
			id := msg.ID
			cs.lastDequeued = &id
			cs.consumed++
			flow := cs.takeFlowLocked()
			cn := cs.cn
			more := len(cs.queue) > 0
			cs.mu.Unlock()
			if flow > 0 && cn != nil {
				_ = cn.send(wire.Command(&pulsarpb.CommandFlow{ConsumerId: ptr(cs.id), MessagePermits: ptr(uint32(flow))}), nil)
			}
			if more {
				cs.signal()
			}
			return msg, nil
		}
		cs.mu.Unlock()
		select {
		case <-cs.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-cs.stop:
			return nil, ErrClosed
		}
	}
}

// Ack acknowledges one message. For a batch, the entry is acknowledged once every message of the
// batch received on this subscription instance was acked.
func (cs *Consumer) Ack(ctx context.Context, id MessageID) error {
	if id.BatchIndex >= 0 {
		cs.mu.Lock()
		key := [2]uint64{id.LedgerID, id.EntryID}
		if left, ok := cs.batchLeft[key]; ok {
			if left > 1 {
				cs.batchLeft[key] = left - 1
				cs.mu.Unlock()
				return nil
			}
			delete(cs.batchLeft, key)
		}
		cs.mu.Unlock()
	}
	return cs.sendAck(ctx, pulsarpb.CommandAck_Individual, id.LedgerID, id.EntryID)
}

// AckCumulative acknowledges everything up to id. Inside an incomplete batch it acknowledges up to
// the previous entry, as the Go client does.
func (cs *Consumer) AckCumulative(ctx context.Context, id MessageID) error {
	entry := id.EntryID
	if id.BatchIndex >= 0 && id.BatchSize > 0 && id.BatchIndex < id.BatchSize-1 {
		entry-- // wraps to EntryIDNone for entry 0, which the protocol allows
	}
	return cs.sendAck(ctx, pulsarpb.CommandAck_Cumulative, id.LedgerID, entry)
}

func (cs *Consumer) sendAck(ctx context.Context, t pulsarpb.CommandAck_AckType, ledger, entry uint64) error {
	cs.mu.Lock()
	cn, closed := cs.cn, cs.closed
	cs.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if cn == nil {
		return ErrConnectionClosed
	}
	ack := &pulsarpb.CommandAck{
		ConsumerId: ptr(cs.id), AckType: ptr(t),
		MessageId: []*pulsarpb.MessageIdData{{LedgerId: ptr(ledger), EntryId: ptr(entry)}},
	}
	if !cs.opts.AckWithResponse {
		return cn.send(wire.Command(ack), nil)
	}
	reqID := cs.client.nextRequestID()
	ack.RequestId = ptr(reqID)
	resp, err := cn.request(ctx, reqID, wire.Command(ack))
	if err != nil {
		return fmt.Errorf("client: ack: %w", err)
	}
	if ar := resp.GetAckResponse(); ar != nil && (ar.Error != nil || ar.GetMessage() != "") {
		return fmt.Errorf("client: ack: %w", wire.ErrorFromServer(ar.GetError(), ar.GetMessage()))
	}
	return errorOf(resp)
}

// Redeliver asks the broker to redeliver unacknowledged messages: the given entries, or all of
// this consumer's when none are given.
func (cs *Consumer) Redeliver(ctx context.Context, ids ...MessageID) error {
	cs.mu.Lock()
	cn := cs.cn
	cs.mu.Unlock()
	if cn == nil {
		return ErrConnectionClosed
	}
	cmd := &pulsarpb.CommandRedeliverUnacknowledgedMessages{ConsumerId: ptr(cs.id)}
	for _, id := range ids {
		cmd.MessageIds = append(cmd.MessageIds, &pulsarpb.MessageIdData{LedgerId: ptr(id.LedgerID), EntryId: ptr(id.EntryID)})
	}
	return cn.send(wire.Command(cmd), nil)
}

// Seek moves the subscription to id. The broker then closes the consumer and it resubscribes.
func (cs *Consumer) Seek(ctx context.Context, id MessageID) error {
	return cs.seek(ctx, &pulsarpb.CommandSeek{MessageId: &pulsarpb.MessageIdData{LedgerId: ptr(id.LedgerID), EntryId: ptr(id.EntryID)}}, &id)
}

// SeekByTime moves the subscription to the first message published at or after t.
func (cs *Consumer) SeekByTime(ctx context.Context, t time.Time) error {
	return cs.seek(ctx, &pulsarpb.CommandSeek{MessagePublishTime: ptr(uint64(t.UnixMilli()))}, nil)
}

func (cs *Consumer) seek(ctx context.Context, cmd *pulsarpb.CommandSeek, target *MessageID) error {
	cs.mu.Lock()
	cn, gen := cs.cn, cs.gen
	cs.mu.Unlock()
	if cn == nil {
		return ErrConnectionClosed
	}
	reqID := cs.client.nextRequestID()
	cmd.ConsumerId, cmd.RequestId = ptr(cs.id), ptr(reqID)
	resp, err := cn.request(ctx, reqID, wire.Command(cmd))
	if err == nil {
		err = errorOf(resp)
	}
	if err != nil {
		return fmt.Errorf("client: seek: %w", err)
	}
	cs.mu.Lock()
	if cs.cn == cn && cs.gen == gen {
		// The broker's CLOSE_CONSUMER has not arrived yet: drop what precedes it.
		cs.awaitingClose = true
		cs.queue = nil
	}
	cs.lastDequeued = nil
	if target != nil && cs.opts.NonDurable {
		t := *target
		cs.opts.StartMessageID = &t
	}
	cs.mu.Unlock()
	return nil
}

// GetLastMessageID returns the topic's last message id and the subscription's mark-delete
// position (nil if the broker did not send one).
func (cs *Consumer) GetLastMessageID(ctx context.Context) (MessageID, *MessageID, error) {
	cs.mu.Lock()
	cn := cs.cn
	cs.mu.Unlock()
	if cn == nil {
		return MessageID{}, nil, ErrConnectionClosed
	}
	reqID := cs.client.nextRequestID()
	resp, err := cn.request(ctx, reqID, wire.Command(&pulsarpb.CommandGetLastMessageId{ConsumerId: ptr(cs.id), RequestId: ptr(reqID)}))
	if err == nil {
		err = errorOf(resp)
	}
	if err != nil {
		return MessageID{}, nil, fmt.Errorf("client: get last message id: %w", err)
	}
	r := resp.GetGetLastMessageIdResponse()
	if r == nil {
		return MessageID{}, nil, fmt.Errorf("client: get last message id: unexpected %s", resp.GetType())
	}
	var md *MessageID
	if r.ConsumerMarkDeletePosition != nil {
		id := idFromProto(r.GetConsumerMarkDeletePosition())
		md = &id
	}
	return idFromProto(r.GetLastMessageId()), md, nil
}

// Unsubscribe deletes the subscription (force: even with other consumers attached) and closes
// the consumer.
func (cs *Consumer) Unsubscribe(ctx context.Context, force bool) error {
	cs.mu.Lock()
	cn := cs.cn
	cs.mu.Unlock()
	if cn == nil {
		return ErrConnectionClosed
	}
	reqID := cs.client.nextRequestID()
	resp, err := cn.request(ctx, reqID, wire.Command(&pulsarpb.CommandUnsubscribe{ConsumerId: ptr(cs.id), RequestId: ptr(reqID), Force: ptr(force)}))
	if err == nil {
		err = errorOf(resp)
	}
	if err != nil {
		return fmt.Errorf("client: unsubscribe: %w", err)
	}
	cn.removeConsumer(cs.id)
	cs.mu.Lock()
	cs.cn = nil
	cs.mu.Unlock()
	return cs.Close(ctx)
}

// Close closes the consumer on the broker and stops its goroutine.
func (cs *Consumer) Close(ctx context.Context) error {
	cs.shutdown(ctx, ErrClosed)
	cs.client.unregister(nil, cs)
	return nil
}

func (cs *Consumer) shutdown(ctx context.Context, reason error) {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		<-cs.done
		return
	}
	cs.closed = true
	cn := cs.cn
	cs.cn = nil
	cs.queue = nil
	cs.mu.Unlock()
	close(cs.stop)
	<-cs.done
	cs.closeOnBroker(ctx, cn)
}
