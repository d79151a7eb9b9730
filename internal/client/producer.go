package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Producer access modes (pulsarpb.ProducerAccessMode).
const (
	AccessShared           = pulsarpb.ProducerAccessMode_Shared
	AccessExclusive        = pulsarpb.ProducerAccessMode_Exclusive
	AccessWaitForExclusive = pulsarpb.ProducerAccessMode_WaitForExclusive
)

// ProducerOptions configure CreateProducer.
type ProducerOptions struct {
	// Topic to publish to (short names are expanded to persistent://public/default/...). A
	// partitioned topic needs one producer per partition ("<topic>-partition-<i>").
	Topic string
	// Name of the producer; empty lets the broker choose (the chosen name is kept across
	// reconnections). With deduplication, the name is the dedup key.
	Name string
	// InitialSequenceID, if set, is the sequence id of the first message; otherwise the broker's
	// last_sequence_id + 1 (0 for a new producer).
	InitialSequenceID *uint64
	// AccessMode: AccessShared (default), AccessExclusive or AccessWaitForExclusive.
	AccessMode pulsarpb.ProducerAccessMode
	// MaxPending bounds sends awaiting their receipt; Send blocks beyond it. Default 1000.
	MaxPending int
	// Properties are the producer's metadata (CommandProducer.metadata).
	Properties map[string]string
	// BatchingMaxMessages > 1 turns batching on: up to this many messages share one entry (one
	// SEND, one receipt). Messages with DeliverAt or ReplicateTo are always sent alone.
	BatchingMaxMessages int
	// BatchingMaxBytes bounds a batch's body; default 128 KiB.
	BatchingMaxBytes int
	// BatchingMaxDelay is how long a batch waits for more messages; default 10 ms.
	BatchingMaxDelay time.Duration
}

// ProducerMessage is one message to send.
type ProducerMessage struct {
	Payload    []byte
	Key        string
	Properties map[string]string
	EventTime  time.Time
	// SequenceID overrides the producer's counter (the counter continues after it).
	SequenceID *uint64
	// DeliverAt asks the broker to hold the message until then (Shared subscriptions).
	DeliverAt time.Time
	// ReplicateTo restricts geo-replication to these clusters ("__local__": none).
	ReplicateTo []string
}

// RawMessage is an already-encoded entry to forward unchanged: the entry bytes as the broker
// stores them (magic, checksum, metadata size, metadata, body; see package wire). The metadata's
// own sequence id and producer name are kept; the SEND command carries the producer's sequence
// counter, which is what receipts are matched on.
type RawMessage struct {
	Entry []byte
	// Body, if set, is the rest of the entry: the entry sent is Entry followed by Body (Entry must
	// then hold magic, checksum and the whole metadata, and the checksum covers both parts). It lets
	// a forwarder send a large payload from where it is, without copying it into one buffer; it is
	// only read, until the send completes.
	Body []byte
	// SourcePosition, if set, is sent as CommandSend.message_id: the entry's position in its
	// origin topic (replication).
	SourcePosition *MessageID
	// Info, when Known, is what the SEND says about the entry, as the caller read it from the
	// entry's metadata; otherwise the client scans the metadata (ScanRawInfo).
	Info RawInfo
}

// Producer publishes to one topic. Sends are pipelined: many may be in flight, receipts complete
// them in order. Safe for concurrent use.
type Producer struct {
	client *Client
	opts   ProducerOptions
	topic  string
	id     uint64
	log    *slog.Logger

	slots *slotPool // one slot per pending message

	mu         sync.Mutex
	name       string
	cn         *conn // nil while disconnected
	epoch      uint64
	nextSeq    uint64
	pending    []*pendingSend
	batch      *openBatch    // messages waiting to be sent as one entry
	frameBuf   []outFrame    // queueRaw's reused list of frames for the connection
	changed    chan struct{} // made by a waiting Flush, closed and dropped when a send settles
	lastErr    error
	lostAt     time.Time // when the connection was lost (zero while connected)
	reconnects int64     // successful reconnections after a lost connection
	closed     bool
	reconnect  chan struct{}
	stop       chan struct{}
	done       chan struct{}
}

type pendingSend struct {
	seq   uint64
	frame outFrame // the SEND: command (or encoded head) and entry
	// cbs has one callback (possibly nil) per message of the entry; each holds a pending slot.
	cbs []func(MessageID, error)
	cb1 [1]func(MessageID, error) // backing of cbs for a single message (no extra allocation)
	// bcb, when set, replaces cbs: the callback of a SendRawBatchAsync, told the message's index.
	bcb     func(int, MessageID, error)
	bidx    int
	batched bool
	done    bool // callbacks have run (guarded by Producer.mu)
}

// CreateProducer registers a producer on the topic's broker. Errors from the broker (ProducerBusy,
// TopicNotFound, ...) are returned, not retried; after creation the producer reconnects by itself.
func (c *Client) CreateProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	topic, err := normalizeTopic(opts.Topic)
	if err != nil {
		return nil, err
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 1000
	}
	if opts.BatchingMaxBytes <= 0 {
		opts.BatchingMaxBytes = 128 * 1024
	}
	if opts.BatchingMaxDelay <= 0 {
		opts.BatchingMaxDelay = 10 * time.Millisecond
	}
	p := &Producer{
		client:    c,
		opts:      opts,
		topic:     topic,
		id:        c.producerID.Add(1),
		name:      opts.Name,
		slots:     newSlotPool(opts.MaxPending),
		reconnect: make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	p.log = c.opts.Logger.With("topic", topic, "producer_id", p.id)
	octx, cancel := c.opContext(ctx)
	defer cancel()
	if err := p.connect(octx, true); err != nil {
		return nil, err
	}
	if err := c.register(p, nil); err != nil {
		p.mu.Lock()
		cn := p.cn
		p.mu.Unlock()
		p.closeOnBroker(ctx, cn)
		return nil, err
	}
	go p.run()
	return p, nil
}

// Topic is the producer's fully qualified topic.
func (p *Producer) Topic() string { return p.topic }

// Name is the producer name (chosen by the broker unless given).
func (p *Producer) Name() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name
}

// LastError is the most recent connection or send failure (nil if none since the last success).
func (p *Producer) LastError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// Connected reports whether the producer is currently registered on a live connection.
func (p *Producer) Connected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cn != nil
}

// DisconnectedSince is when the producer lost its connection (zero while connected, and before
// the first connection).
func (p *Producer) DisconnectedSince() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cn != nil {
		return time.Time{}
	}
	return p.lostAt
}

// Reconnects counts the producer's successful reconnections after a lost connection.
func (p *Producer) Reconnects() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reconnects
}

// Pending is the number of sends awaiting a receipt.
func (p *Producer) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// connect looks the topic up, registers the producer and resends what is pending.
func (p *Producer) connect(ctx context.Context, first bool) error {
	cn, err := p.client.connectTopic(ctx, p.topic)
	if err != nil {
		return err
	}
	p.mu.Lock()
	name, epoch := p.name, p.epoch
	p.mu.Unlock()
	reqID := p.client.nextRequestID()
	cmd := &pulsarpb.CommandProducer{
		Topic:                    ptr(p.topic),
		ProducerId:               ptr(p.id),
		RequestId:                ptr(reqID),
		Epoch:                    ptr(epoch),
		UserProvidedProducerName: ptr(p.opts.Name != ""),
		ProducerAccessMode:       ptr(p.opts.AccessMode),
	}
	if name != "" {
		cmd.ProducerName = ptr(name)
	}
	for _, k := range sortedKeys(p.opts.Properties) {
		cmd.Metadata = append(cmd.Metadata, &pulsarpb.KeyValue{Key: ptr(k), Value: ptr(p.opts.Properties[k])})
	}
	cn.addProducer(p.id, p)
	resp, err := cn.request(ctx, reqID, wire.Command(cmd))
	if err == nil {
		err = errorOf(resp)
	}
	if err == nil && resp.GetProducerSuccess() == nil {
		err = fmt.Errorf("unexpected %s", resp.GetType())
	}
	if err != nil {
		cn.removeProducer(p.id)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			// The broker may still create it: tell it we gave up.
			p.closeOnBroker(context.Background(), cn)
		}
		return fmt.Errorf("client: create producer on %s: %w", p.topic, err)
	}
	ps := resp.GetProducerSuccess()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		cn.removeProducer(p.id)
		return ErrClosed
	}
	p.name = ps.GetProducerName()
	if first {
		if p.opts.InitialSequenceID != nil {
			p.nextSeq = *p.opts.InitialSequenceID
		} else if last := ps.GetLastSequenceId(); last >= 0 {
			p.nextSeq = uint64(last) + 1
		}
	}
	p.epoch++
	p.cn = cn
	p.lastErr = nil
	if !first {
		p.reconnects++
	}
	for _, s := range p.pending {
		_ = cn.sendFrame(s.frame)
	}
	return nil
}

// closeOnBroker sends CLOSE_PRODUCER (best effort, bounded by ctx and the operation timeout).
func (p *Producer) closeOnBroker(ctx context.Context, cn *conn) {
	if cn == nil || cn.isClosed() {
		return
	}
	cn.removeProducer(p.id)
	// Sent even when the caller's context has ended (Close after a failed Flush): a producer left
	// registered on the broker would make a successor with the same name get ProducerBusy.
	ctx, cancel := closeContext(ctx, p.client.opts.OperationTimeout)
	defer cancel()
	reqID := p.client.nextRequestID()
	_, _ = cn.request(ctx, reqID, wire.Command(&pulsarpb.CommandCloseProducer{ProducerId: ptr(p.id), RequestId: ptr(reqID)}))
}

// run reconnects after a lost connection, with backoff, until Close.
func (p *Producer) run() {
	defer close(p.done)
	bo := newBackoff(&p.client.opts)
	for {
		select {
		case <-p.stop:
			return
		case <-p.reconnect:
		}
		for {
			p.mu.Lock()
			connected := p.cn != nil
			p.mu.Unlock()
			if connected {
				break
			}
			if !sleepCtx(p.stop, bo.delay()) {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), p.client.opts.OperationTimeout)
			go func() { // stop aborts a connection attempt in progress
				select {
				case <-p.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			err := p.connect(ctx, false)
			cancel()
			if err == nil {
				bo.reset()
				p.log.Info("client: producer reconnected")
				break
			}
			if errors.Is(err, ErrClosed) {
				return
			}
			p.mu.Lock()
			p.lastErr = err
			p.mu.Unlock()
			p.log.Warn("client: producer reconnect failed", "err", err)
		}
	}
}

func (p *Producer) onDisconnect(c *conn, reason error) {
	p.mu.Lock()
	if p.cn != c {
		p.mu.Unlock()
		return
	}
	p.cn = nil
	p.lastErr = reason
	p.lostAt = time.Now()
	p.mu.Unlock()
	select {
	case p.reconnect <- struct{}{}:
	default:
	}
}

func (p *Producer) onReceipt(c *conn, r receipt) { p.onReceipts(c, []receipt{r}) }

// onReceipts completes the sends of receipts that arrived together (in order), with one lock
// and one wake-up of Flush waiters for the lot.
func (p *Producer) onReceipts(c *conn, rs []receipt) {
	var popped [64]*pendingSend
	var ids [64]MessageID
	for len(rs) > 0 {
		n := 0
		p.mu.Lock()
		for ; len(rs) > 0 && n < len(popped); rs = rs[1:] {
			if p.cn != c || len(p.pending) == 0 {
				rs = nil
				break
			}
			head := p.pending[0]
			seq := rs[0].sequenceID
			if seq < head.seq {
				continue // late receipt for something already settled
			}
			if seq > head.seq {
				p.mu.Unlock()
				p.settleAll(popped[:n], ids[:n])
				// Receipts must come in order; a gap means the broker lost track: start over on
				// a new connection and resend everything pending (the Go client does the same).
				p.log.Warn("client: out-of-order receipt, reconnecting", "expected", head.seq, "got", seq)
				c.shutdown(fmt.Errorf("receipt for sequence %d while expecting %d", seq, head.seq))
				return
			}
			popped[n] = p.popLocked()
			ids[n] = MessageID{BatchIndex: -1, Partition: -1}
			if r := rs[0]; r.hasMessageID {
				ids[n].LedgerID, ids[n].EntryID = r.ledgerID, r.entryID
			}
			n++
		}
		p.mu.Unlock()
		p.settleAll(popped[:n], ids[:n])
	}
}

func (p *Producer) onSendError(c *conn, e *pulsarpb.CommandSendError) {
	p.mu.Lock()
	if p.cn != c || len(p.pending) == 0 || p.pending[0].seq != e.GetSequenceId() {
		p.mu.Unlock()
		return
	}
	head := p.popLocked()
	p.lastErr = wire.ErrorFromServer(e.GetError(), e.GetMessage())
	err := p.lastErr
	p.mu.Unlock()
	p.settle(head, MessageID{}, fmt.Errorf("client: send to %s: %w", p.topic, err))
}

// popLocked removes the head of pending; the caller settles it after unlocking.
func (p *Producer) popLocked() *pendingSend {
	head := p.pending[0]
	p.pending[0] = nil
	p.pending = p.pending[1:]
	return head
}

// settle completes a send that was removed from pending: frees its slots, runs its callbacks (each
// message of a batch gets its batch index) and then wakes Flush waiters (so Flush returns only
// after the callbacks ran).
func (p *Producer) settle(s *pendingSend, id MessageID, err error) {
	p.settleAll([]*pendingSend{s}, []MessageID{id}, err)
}

// settleAll settles sends (ids[i] is ss[i]'s) with one slot release and one lock for the lot.
func (p *Producer) settleAll(ss []*pendingSend, ids []MessageID, errs ...error) {
	if len(ss) == 0 {
		return
	}
	var err error
	if len(errs) > 0 {
		err = errs[0]
	}
	slots := 0
	for _, s := range ss {
		if s.bcb != nil {
			slots++
		}
		slots += len(s.cbs)
	}
	p.slots.give(slots)
	for i, s := range ss {
		id := ids[i]
		if s.bcb != nil {
			s.bcb(s.bidx, id, err)
		}
		for i, cb := range s.cbs {
			if cb == nil {
				continue
			}
			mid := id
			if s.batched && err == nil {
				mid.BatchIndex, mid.BatchSize = int32(i), int32(len(s.cbs))
			}
			cb(mid, err)
		}
	}
	p.mu.Lock()
	for _, s := range ss {
		s.done = true
	}
	if p.changed != nil { // only while Flush waits: no channel per send otherwise
		close(p.changed)
		p.changed = nil
	}
	p.mu.Unlock()
}

// SendAsync queues a message; cb runs once with its id or error, on a connection goroutine, and
// must not block. SendAsync blocks only while MaxPending sends are outstanding.
func (p *Producer) SendAsync(ctx context.Context, msg ProducerMessage, cb func(MessageID, error)) error {
	if p.opts.BatchingMaxMessages > 1 && msg.DeliverAt.IsZero() && len(msg.ReplicateTo) == 0 {
		return p.addToBatch(ctx, msg, cb)
	}
	return p.enqueue(ctx, func(seq uint64) (uint64, outFrame, error) {
		if msg.SequenceID != nil {
			seq = *msg.SequenceID
		}
		md := &pulsarpb.MessageMetadata{
			ProducerName: ptr(p.name),
			SequenceId:   ptr(seq),
			PublishTime:  ptr(uint64(time.Now().UnixMilli())),
			ReplicateTo:  msg.ReplicateTo,
		}
		if msg.Key != "" {
			md.PartitionKey = ptr(msg.Key)
		}
		if !msg.EventTime.IsZero() {
			md.EventTime = ptr(uint64(msg.EventTime.UnixMilli()))
		}
		if !msg.DeliverAt.IsZero() {
			md.DeliverAtTime = ptr(msg.DeliverAt.UnixMilli())
		}
		for _, k := range sortedKeys(msg.Properties) {
			md.Properties = append(md.Properties, &pulsarpb.KeyValue{Key: ptr(k), Value: ptr(msg.Properties[k])})
		}
		entry, err := wire.EncodeEntry(md, msg.Payload)
		if err != nil {
			return 0, outFrame{}, err
		}
		head, err := appendSendHead(make([]byte, 0, sendHeadCap), sendFields{producerID: p.id, sequenceID: seq}, len(entry))
		return seq, outFrame{head: head, payload: entry}, err
	}, cb)
}

// Send sends a message and waits for its receipt. If ctx ends first the message may still be
// persisted.
func (p *Producer) Send(ctx context.Context, msg ProducerMessage) (MessageID, error) {
	return wait(ctx, func(cb func(MessageID, error)) error { return p.SendAsync(ctx, msg, cb) })
}

// SendRawAsync forwards an encoded entry (see RawMessage). The SEND's num_messages,
// highest_sequence_id, is_chunk and marker are taken from the entry's metadata, which is scanned,
// not decoded.
func (p *Producer) SendRawAsync(ctx context.Context, msg RawMessage, cb func(MessageID, error)) error {
	return p.enqueue(ctx, func(seq uint64) (uint64, outFrame, error) {
		f, err := p.rawFrame(msg, seq)
		return seq, f, err
	}, cb)
}

// rawFrame builds the SEND of a raw message with sequence id seq.
func (p *Producer) rawFrame(msg RawMessage, seq uint64) (outFrame, error) {
	return p.rawFrameInto(nil, msg, seq)
}

// rawFrameInto is rawFrame appending the SEND head to *heads (nil: its own allocation). Heads never
// share bytes: each is capped at its length, and a block that is short is replaced, not grown.
func (p *Producer) rawFrameInto(heads *[]byte, msg RawMessage, seq uint64) (outFrame, error) {
	entry := msg.Entry
	if len(msg.Body) > 0 {
		if parts, err := wire.ParseEntry(entry); err != nil {
			return outFrame{}, err
		} else if !parts.HasChecksum {
			return outFrame{}, fmt.Errorf("%w: an entry sent in two parts needs magic and checksum in its first part", wire.ErrMalformedPayload)
		}
	} else {
		var err error
		if entry, err = wire.NormalizeEntry(entry); err != nil {
			return outFrame{}, err
		}
	}
	var f sendFields
	if msg.Info.Known {
		f = sendFieldsOf(msg.Info)
	} else {
		var err error
		if f, err = scanSendFields(entry); err != nil {
			return outFrame{}, err
		}
	}
	f.producerID, f.sequenceID = p.id, seq
	if msg.SourcePosition != nil {
		send := f.command()
		send.MessageId = &pulsarpb.MessageIdData{LedgerId: ptr(msg.SourcePosition.LedgerID), EntryId: ptr(msg.SourcePosition.EntryID)}
		return outFrame{cmd: wire.Command(send), payload: entry, tail: msg.Body}, nil
	}
	if heads == nil {
		head, err := appendSendHead(make([]byte, 0, sendHeadCap), f, len(entry)+len(msg.Body))
		return outFrame{head: head, payload: entry, tail: msg.Body}, err
	}
	h := *heads
	if cap(h)-len(h) < sendHeadCap {
		h = make([]byte, 0, 4<<10)
	}
	head, err := appendSendHead(h[len(h):len(h):len(h)+sendHeadCap], f, len(entry)+len(msg.Body))
	head = head[:len(head):len(head)]
	*heads = h[:len(h)+len(head)]
	return outFrame{head: head, payload: entry, tail: msg.Body}, err
}

// SendRawBatchAsync queues msgs in order, each as SendRawAsync would, taking the producer's lock
// and waking the connection's writer once for the lot (a forwarder's hot path). cb runs once per
// message with its index, on a connection goroutine, and must not block. It blocks while
// MaxPending sends are outstanding. If a message cannot be queued (closed producer, malformed
// entry, ctx ended), cb gets the error for it and every later message, and those are not sent;
// the earlier ones stay queued.
func (p *Producer) SendRawBatchAsync(ctx context.Context, msgs []RawMessage, cb func(i int, id MessageID, err error)) {
	failFrom := func(k int, err error) {
		for j := k; j < len(msgs); j++ {
			cb(j, MessageID{}, err)
		}
	}
	// In chunks of at most MaxPending: a chunk's slots are taken at once.
	for lo := 0; lo < len(msgs); {
		hi := min(len(msgs), lo+p.opts.MaxPending)
		if err := p.slots.take(ctx, p.stop, hi-lo); err != nil {
			failFrom(lo, err)
			return
		}
		queued, err := p.queueRaw(msgs, lo, hi, cb)
		p.slots.give(hi - lo - queued)
		if err != nil {
			failFrom(lo+queued, err)
			return
		}
		lo = hi
	}
}

// queueRaw queues msgs[lo:hi] (their slots taken) and reports how many it queued; an error stops
// it at the message that caused it. The chunk's pending records and SEND heads are allocated
// together, not one by one.
func (p *Producer) queueRaw(msgs []RawMessage, lo, hi int, cb func(i int, id MessageID, err error)) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, ErrClosed
	}
	if p.batch != nil {
		p.flushBatchLocked() // keep send order
	}
	frames := p.frameBuf[:0] // sendFrames copies them
	defer func() {
		clear(frames)
		p.frameBuf = frames[:0]
	}()
	sends := make([]pendingSend, hi-lo)
	heads := make([]byte, 0, (hi-lo)*rawHeadSize)
	var err error
	for i := lo; i < hi; i++ {
		var f outFrame
		seq := p.nextSeq
		f, err = p.rawFrameInto(&heads, msgs[i], seq)
		if size := len(f.payload) + len(f.tail); err == nil && p.cn != nil && size > p.cn.maxMsg {
			err = fmt.Errorf("client: %d bytes: %w", size, wire.ErrTooLarge)
		}
		if err != nil {
			break
		}
		p.nextSeq = seq + 1
		s := &sends[i-lo]
		s.seq, s.frame, s.bcb, s.bidx = seq, f, cb, i
		p.pending = append(p.pending, s)
		frames = append(frames, f)
	}
	if p.cn != nil && len(frames) > 0 {
		_ = p.cn.sendFrames(frames)
	}
	return len(frames), err
}

// rawHeadSize is the room reserved per SEND head of a chunk (a typical head takes 20-30 bytes;
// a longer one starts a new block, see rawFrameInto).
const rawHeadSize = 32

// SendRaw forwards an encoded entry and waits for its receipt.
func (p *Producer) SendRaw(ctx context.Context, msg RawMessage) (MessageID, error) {
	return wait(ctx, func(cb func(MessageID, error)) error { return p.SendRawAsync(ctx, msg, cb) })
}

// enqueue takes a pending slot, builds the frame with the next sequence id and sends it if
// connected (otherwise it goes out after reconnection). build gets the counter's value and returns
// the SEND's sequence id (which may differ, for user-supplied ids) and frame.
func (p *Producer) enqueue(ctx context.Context, build func(seq uint64) (uint64, outFrame, error), cb func(MessageID, error)) error {
	if err := p.slots.take(ctx, p.stop, 1); err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.slots.give(1)
		return ErrClosed
	}
	if p.batch != nil {
		p.flushBatchLocked() // keep send order
	}
	seq, frame, err := build(p.nextSeq)
	if size := len(frame.payload) + len(frame.tail); err == nil && p.cn != nil && size > p.cn.maxMsg {
		err = fmt.Errorf("client: %d bytes: %w", size, wire.ErrTooLarge)
	}
	if err != nil {
		p.mu.Unlock()
		p.slots.give(1)
		return err
	}
	if len(p.pending) > 0 && seq <= p.pending[len(p.pending)-1].seq {
		p.mu.Unlock()
		p.slots.give(1)
		return fmt.Errorf("client: sequence id %d not above the last pending %d", seq, p.pending[len(p.pending)-1].seq)
	}
	p.nextSeq = seq + 1
	s := &pendingSend{seq: seq, frame: frame}
	s.cb1[0] = cb
	s.cbs = s.cb1[:]
	p.pending = append(p.pending, s)
	if p.cn != nil {
		_ = p.cn.sendFrame(frame)
	}
	p.mu.Unlock()
	return nil
}

// Flush waits until every send queued so far has its receipt or error.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	if p.batch != nil {
		p.flushBatchLocked()
	}
	if len(p.pending) == 0 {
		p.mu.Unlock()
		return nil
	}
	last := p.pending[len(p.pending)-1]
	p.mu.Unlock()
	for {
		p.mu.Lock()
		if last.done {
			p.mu.Unlock()
			return nil
		}
		if p.changed == nil {
			p.changed = make(chan struct{})
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close flushes pending sends (until ctx ends), closes the producer on the broker and stops its
// goroutine. Sends still pending fail with ErrClosed.
func (p *Producer) Close(ctx context.Context) error {
	ferr := p.Flush(ctx)
	p.shutdown(ctx, ErrClosed)
	p.client.unregister(p, nil)
	return ferr
}

// Abort closes the producer without flushing: sends still pending fail with ErrClosed at once, and
// CLOSE_PRODUCER is sent (bounded by OperationTimeout even if ctx has ended), so that a new producer
// with the same name can register right away.
func (p *Producer) Abort(ctx context.Context) error {
	p.shutdown(ctx, ErrClosed)
	p.client.unregister(p, nil)
	return nil
}

func (p *Producer) shutdown(ctx context.Context, reason error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return
	}
	p.closed = true
	cn := p.cn
	p.cn = nil
	rest := p.pending
	p.pending = nil
	if b := p.batch; b != nil {
		p.batch = nil
		b.timer.Stop()
		rest = append(rest, &pendingSend{cbs: b.cbs})
	}
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	p.closeOnBroker(ctx, cn)
	for _, s := range rest {
		p.settle(s, MessageID{}, reason)
	}
}

// wait turns an async send into a blocking one.
func wait(ctx context.Context, start func(cb func(MessageID, error)) error) (MessageID, error) {
	type result struct {
		id  MessageID
		err error
	}
	ch := make(chan result, 1)
	if err := start(func(id MessageID, err error) { ch <- result{id, err} }); err != nil {
		return MessageID{}, err
	}
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return MessageID{}, ctx.Err()
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// openBatch collects messages sent as one batch entry.
type openBatch struct {
	firstSeq, lastSeq uint64
	key               string
	body              []byte
	cbs               []func(MessageID, error)
	timer             *time.Timer
}

// addToBatch appends a message to the open batch (opening one, with its delay timer, if needed)
// and sends the batch when it is full.
func (p *Producer) addToBatch(ctx context.Context, msg ProducerMessage, cb func(MessageID, error)) error {
	if err := p.slots.take(ctx, p.stop, 1); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.slots.give(1)
		return ErrClosed
	}
	seq := p.nextSeq
	if msg.SequenceID != nil {
		seq = *msg.SequenceID
	}
	last, hasLast := uint64(0), false
	if p.batch != nil {
		last, hasLast = p.batch.lastSeq, true
	} else if n := len(p.pending); n > 0 {
		last, hasLast = p.pending[n-1].seq, true
	}
	if hasLast && seq <= last {
		p.slots.give(1)
		return fmt.Errorf("client: sequence id %d not above the last pending %d", seq, last)
	}
	if b := p.batch; b != nil && len(b.body)+len(msg.Payload) > p.opts.BatchingMaxBytes {
		p.flushBatchLocked()
	}
	smm := &pulsarpb.SingleMessageMetadata{SequenceId: ptr(seq)}
	if msg.Key != "" {
		smm.PartitionKey = ptr(msg.Key)
	}
	if !msg.EventTime.IsZero() {
		smm.EventTime = ptr(uint64(msg.EventTime.UnixMilli()))
	}
	for _, k := range sortedKeys(msg.Properties) {
		smm.Properties = append(smm.Properties, &pulsarpb.KeyValue{Key: ptr(k), Value: ptr(msg.Properties[k])})
	}
	b := p.batch
	if b == nil {
		b = &openBatch{firstSeq: seq, key: msg.Key}
		b.timer = time.AfterFunc(p.opts.BatchingMaxDelay, func() {
			p.mu.Lock()
			if p.batch == b {
				p.flushBatchLocked()
			}
			p.mu.Unlock()
		})
		p.batch = b
	}
	body, err := wire.AppendBatchRecord(b.body, smm, msg.Payload)
	if err != nil {
		p.slots.give(1)
		return err
	}
	b.body, b.lastSeq = body, seq
	b.cbs = append(b.cbs, cb)
	p.nextSeq = seq + 1
	if len(b.cbs) >= p.opts.BatchingMaxMessages || len(b.body) >= p.opts.BatchingMaxBytes {
		p.flushBatchLocked()
	}
	return nil
}

// flushBatchLocked turns the open batch into one pending SEND. Called with p.mu held.
func (p *Producer) flushBatchLocked() {
	b := p.batch
	p.batch = nil
	b.timer.Stop()
	n := len(b.cbs)
	md := &pulsarpb.MessageMetadata{
		ProducerName:       ptr(p.name),
		SequenceId:         ptr(b.firstSeq),
		HighestSequenceId:  ptr(b.lastSeq),
		PublishTime:        ptr(uint64(time.Now().UnixMilli())),
		NumMessagesInBatch: ptr(int32(n)),
		UncompressedSize:   ptr(uint32(len(b.body))),
	}
	if b.key != "" {
		md.PartitionKey = ptr(b.key) // the broker routes Key_Shared by the entry's key
	}
	s := &pendingSend{seq: b.firstSeq, cbs: b.cbs, batched: true}
	entry, err := wire.EncodeEntry(md, b.body)
	var head []byte
	if err == nil {
		head, err = appendSendHead(nil, sendFields{producerID: p.id, sequenceID: b.firstSeq, highestSequenceID: b.lastSeq, hasHighestSequenceID: true, numMessages: int32(n), hasNumMessages: true}, len(entry))
	}
	if err != nil {
		// Cannot happen with the fields set above; fail the messages rather than send garbage.
		go p.settle(s, MessageID{}, err)
		return
	}
	s.frame = outFrame{head: head, payload: entry}
	p.pending = append(p.pending, s)
	if p.cn != nil {
		_ = p.cn.sendFrame(s.frame)
	}
}
