package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/schema"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// producerHandle is one producer id of a connection. It exists from PRODUCER until CLOSE_PRODUCER
// (either side) or the end of the connection; prod is nil while the broker is still creating it.
type producerHandle struct {
	id        uint64
	topic     naming.TopicName
	requestID uint64
	prod      *broker.Producer // nil while creating
	// lastSequenceID and topicEpoch are remembered for a repeated PRODUCER on a ready producer.
	lastSequenceID int64
	// schemaVersion is the producer's schema version for PRODUCER_SUCCESS (nil: none).
	schemaVersion []byte
	// Used by handleSend only (the read loop): the publish completion, made once per producer
	// rather than a closure per SEND (the result echoes the SEND's sequence id), and the
	// producer_name of the last SEND's metadata, reused while it stays the same.
	complete     func(broker.PublishResult)
	lastMetaName string
	// originChecked: with authorization, this producer is neither a replicator nor a superuser's,
	// so its entries must not carry replicated_from (authz.go).
	originChecked bool
	// fence stops the producer's SENDs while its topic switches over (switchover.go).
	fence producerFence
}

// release closes the broker producer, if it was created.
func (h *producerHandle) release(ctx context.Context) {
	if h.prod != nil {
		_ = h.prod.Close(ctx)
	}
}

// handleProducer creates a producer in a request goroutine (topic loads and WaitForExclusive
// producers may take long) and answers PRODUCER_SUCCESS or ERROR.
func (c *conn) handleProducer(cmd *pulsarpb.CommandProducer) {
	reqID, id := cmd.GetRequestId(), cmd.GetProducerId()
	topic, err := parseTopic(cmd.GetTopic())
	if err == nil {
		err = checkProducerCommand(cmd)
	}
	if err == nil {
		err = c.checkServedHere(topic)
	}
	if err != nil {
		c.log.Debug("producer refused", "topic", cmd.GetTopic(), "producerId", id, "err", err)
		c.sendError(reqID, err)
		return
	}
	c.mu.Lock()
	if h, ok := c.producers[id]; ok {
		prod, version := h.prod, h.schemaVersion
		c.mu.Unlock()
		if prod == nil {
			c.sendError(reqID, fmt.Errorf("%w: producer %d is already being created on this connection", wire.ErrServiceNotReady, id))
			return
		}
		// The client repeats PRODUCER for a producer that exists: Pulsar answers success again.
		c.sendProducerSuccess(reqID, prod, version, true)
		return
	}
	h := &producerHandle{id: id, topic: topic, requestID: reqID, originChecked: c.mustCheckOrigin(cmd.GetProducerName())}
	c.producers[id] = h
	delete(c.closedProducers, id)
	c.mu.Unlock()

	opts := broker.ProducerOptions{
		ProducerID:       id,
		Name:             cmd.GetProducerName(),
		UserProvidedName: cmd.GetUserProvidedProducerName(),
		AccessMode:       mtypes.AccessMode(cmd.GetProducerAccessMode()),
		Epoch:            cmd.GetEpoch(),
		Properties:       keyValues(cmd.GetMetadata()),
		Address:          c.remote,
		ClientVersion:    c.clientVersion,
		Limiter:          c.limiter,
	}
	if cmd.TopicEpoch != nil {
		e := cmd.GetTopicEpoch()
		opts.TopicEpoch = &e
	}
	opts.OnQueued = func() {
		// WaitForExclusive: the client keeps the request open until a second PRODUCER_SUCCESS.
		c.sendCommand(&pulsarpb.CommandProducerSuccess{
			RequestId:     proto.Uint64(reqID),
			ProducerName:  proto.String(cmd.GetProducerName()),
			ProducerReady: proto.Bool(false),
		})
	}
	opts.OnClosed = func(to broker.Reassigned) { c.brokerClosedProducer(h, to) }

	c.goRequest(func(ctx context.Context) {
		err := c.awaitServed(ctx, topic)
		var prod *broker.Producer
		var version []byte
		if err == nil {
			prod, version, err = c.createProducer(ctx, topic, opts, schemaInfoOf(cmd.GetSchema()), cmd.GetInitialSubscriptionName())
		}
		if err != nil {
			c.forgetProducer(h)
			c.log.Debug("producer refused", "topic", topic.String(), "producerId", id, "err", err)
			c.sendError(reqID, err)
			return
		}
		c.mu.Lock()
		current, stillWanted := c.producers[id]
		stillWanted = stillWanted && current == h && !c.released
		if stillWanted {
			h.prod = prod
			h.lastSequenceID = prod.LastSequenceID()
			h.schemaVersion = version
		}
		c.mu.Unlock()
		if !stillWanted {
			// Closed by the client (or the connection ended) while we were creating it.
			_ = prod.Close(ctx)
			c.sendError(reqID, fmt.Errorf("%w: producer closed while being created", wire.ErrServiceNotReady))
			return
		}
		c.sendProducerSuccess(reqID, prod, version, true)
		h.fence.answered.Store(true) // from now on a switchover may move it (switchover.go)
	})
}

// checkProducerCommand applies the limits on a PRODUCER's name and metadata before anything is
// built from them.
func checkProducerCommand(cmd *pulsarpb.CommandProducer) error {
	if err := wire.CheckNameLength("producer", cmd.GetProducerName()); err != nil {
		return err
	}
	return wire.CheckKeyValues("producer", cmd.GetMetadata())
}

// replicatorPrefix marks replicator producers (Pulsar's replicatorPrefix): "pulsar.repl.<source>--><target>".
const replicatorPrefix = "pulsar.repl."

// replicatorSource returns the source cluster named by a replicator producer name.
func replicatorSource(producerName string) (string, bool) {
	rest, ok := strings.CutPrefix(producerName, replicatorPrefix)
	if !ok {
		return "", false
	}
	src, _, _ := strings.Cut(rest, "-->")
	return src, src != ""
}

// createProducer checks a replicator's source, loads (or creates) the topic, registers the
// producer's schema, creates the producer's initial subscription if it asked for one, and attaches
// the producer.
func (c *conn) createProducer(ctx context.Context, topic naming.TopicName, opts broker.ProducerOptions, info *schema.Info, initialSub string) (*broker.Producer, []byte, error) {
	if src, ok := replicatorSource(opts.Name); ok && c.s.opts.AdmitReplicator != nil {
		if err := c.s.opts.AdmitReplicator(ctx, topic, src); err != nil {
			return nil, nil, err
		}
	}
	t, err := c.s.opts.Broker.GetTopic(ctx, topic, true)
	if err != nil {
		return nil, nil, err
	}
	version, err := c.producerSchema(ctx, topic, info)
	if err != nil {
		return nil, nil, err
	}
	if initialSub != "" {
		// PRODUCER.initial_subscription_name (the Go client's DLQ producer): a durable subscription
		// that exists before the first message, so a consumer that comes later misses nothing. An
		// existing subscription is left as it is.
		err := t.CreateSubscription(ctx, initialSub, mtypes.Earliest, false)
		if err != nil && !errors.Is(err, broker.ErrNotAllowed) {
			return nil, nil, fmt.Errorf("initial subscription %q: %w", initialSub, err)
		}
	}
	p, err := t.AddProducer(ctx, opts)
	return p, version, err
}

func (c *conn) sendProducerSuccess(reqID uint64, prod *broker.Producer, schemaVersion []byte, ready bool) {
	resp := &pulsarpb.CommandProducerSuccess{
		RequestId:      proto.Uint64(reqID),
		ProducerName:   proto.String(prod.Name()),
		LastSequenceId: proto.Int64(prod.LastSequenceID()),
		ProducerReady:  proto.Bool(ready),
		SchemaVersion:  schemaVersion,
	}
	if epoch, ok := prod.TopicEpoch(); ok {
		resp.TopicEpoch = proto.Uint64(epoch)
	}
	c.sendCommand(resp)
}

// forgetProducer removes h from the connection if it is still registered.
func (c *conn) forgetProducer(h *producerHandle) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.producers[h.id]; ok && cur == h {
		delete(c.producers, h.id)
		c.markProducerClosedLocked(h.id)
		return true
	}
	return false
}

// maxRecentlyClosed bounds the set of closed producer ids remembered per connection.
const maxRecentlyClosed = 10000

// markProducerClosedLocked remembers a closed producer id, so that SENDs already on the wire for it
// are dropped instead of closing the connection. Producer ids come from a client-wide counter and
// are only reused when the same producer reconnects, which clears the mark.
func (c *conn) markProducerClosedLocked(id uint64) {
	if len(c.closedProducers) >= maxRecentlyClosed {
		clear(c.closedProducers) // forgetting is safe: a stray SEND then closes the connection
	}
	c.closedProducers[id] = struct{}{}
}

// brokerClosedProducer is the broker closing a producer (unload, delete, fencing): the client is
// told with CLOSE_PRODUCER and reconnects it, directly to the broker to names when the topic's
// bundle moves there.
func (c *conn) brokerClosedProducer(h *producerHandle, to broker.Reassigned) {
	if c.forgetProducer(h) {
		c.sendCommand(&pulsarpb.CommandCloseProducer{ProducerId: proto.Uint64(h.id), RequestId: proto.Uint64(0),
			AssignedBrokerServiceUrl: optionalString(to.ServiceURL), AssignedBrokerServiceUrlTls: optionalString(to.ServiceURLTLS)})
	}
}

// optionalString is s as an optional protobuf field: unset when empty.
func optionalString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// handleCloseProducer detaches a producer once its pending publishes are done and answers
// SUCCESS (also for unknown ids, as Pulsar does).
func (c *conn) handleCloseProducer(cmd *pulsarpb.CommandCloseProducer) {
	reqID, id := cmd.GetRequestId(), cmd.GetProducerId()
	c.mu.Lock()
	h, ok := c.producers[id]
	if ok {
		delete(c.producers, id)
	}
	c.markProducerClosedLocked(id)
	var prod *broker.Producer
	if ok {
		prod = h.prod
	}
	c.mu.Unlock()
	if prod == nil {
		// Unknown, or still being created: the creating goroutine sees it is gone and closes it.
		c.sendSuccess(reqID)
		return
	}
	c.goRequest(func(ctx context.Context) {
		if err := prod.Close(ctx); err != nil && ctx.Err() == nil {
			c.log.Debug("closing producer", "producerId", id, "err", err)
		}
		c.sendSuccess(reqID)
	})
}

// handleSend verifies and publishes one SEND. A bad checksum or malformed payload is answered with
// SEND_ERROR and the connection lives on; a SEND for a producer that does not exist closes the
// connection (the client's state is out of step with ours), as Pulsar does.
func (c *conn) handleSend(cmd *pulsarpb.CommandSend, payload []byte) error {
	id, seq := cmd.GetProducerId(), cmd.GetSequenceId()
	if g := &c.sends; len(g.reqs) > 0 && g.h.id != id {
		c.flushSends() // another producer's SENDs are not grouped with these
	}
	c.mu.Lock()
	h := c.producers[id]
	var prod *broker.Producer
	if h != nil {
		prod = h.prod // written under c.mu by the creating goroutine
	}
	_, recentlyClosed := c.closedProducers[id]
	c.mu.Unlock()
	if g := &c.sends; len(g.reqs) > 0 && (h == nil || g.h != h) {
		c.flushSends() // the producer id was closed (and perhaps re-created) meanwhile
	}
	if h == nil && recentlyClosed {
		// SENDs the client wrote before it learnt of the close (CLOSE_PRODUCER either way): it
		// resends them after re-creating the producer, so they are dropped here, as Pulsar does.
		c.log.Debug("SEND for a recently closed producer ignored", "producerId", id, "sequenceId", seq)
		return nil
	}
	if prod == nil {
		return c.badFrame(fmt.Errorf("SEND for producer %d, which is not ready on this connection", id))
	}
	sendError := func(code pulsarpb.ServerError, msg string) {
		c.flushSends() // the SENDs before this one are published first, as one by one
		c.sendCommand(&pulsarpb.CommandSendError{
			ProducerId: proto.Uint64(id),
			SequenceId: proto.Uint64(seq),
			Error:      code.Enum(),
			Message:    proto.String(msg),
		})
	}
	if !h.topic.IsPersistent() {
		// The reader reuses its payload buffer (and the decoded SEND) for the next frame
		// (wire.Reader.ReusePayloads; nothing here keeps cmd past this call):
		// on a persistent topic the entry is copied (into storage's batch) before Publish returns
		// (and broker.ReplicatedEntryIndex.Admit must not keep it); a non-persistent topic hands
		// it to its consumers as is.
		payload = bytes.Clone(payload)
	}
	if cmd.TxnidMostBits != nil || cmd.TxnidLeastBits != nil {
		sendError(pulsarpb.ServerError_NotAllowedError, "transactions are not supported by this broker")
		return nil
	}
	if err := wire.VerifyChecksum(payload); err != nil {
		if errors.Is(err, wire.ErrChecksum) {
			c.s.stats.checksumErrors.Add(1)
			c.log.Warn("SEND with a wrong checksum refused", "producerId", id, "sequenceId", seq, "err", err)
			sendError(pulsarpb.ServerError_ChecksumError, err.Error())
			return nil
		}
		c.log.Warn("malformed SEND payload refused", "producerId", id, "sequenceId", seq, "err", err)
		sendError(pulsarpb.ServerError_MetadataError, err.Error())
		return nil
	}
	entry, err := wire.NormalizeEntry(payload)
	if err != nil {
		sendError(pulsarpb.ServerError_MetadataError, err.Error())
		return nil
	}
	var md wire.PublishMetadata
	var origin wire.ReplicatedOrigin
	var hasOrigin bool
	if prod.IsReplicator() {
		// The replicated-entry index needs the origin fields: collected in this scan, so the
		// index does not scan every replicated entry a second time.
		md, origin, hasOrigin, err = wire.ScanPublishMetadataOrigin(entry, h.lastMetaName)
	} else if h.originChecked {
		var scanned wire.ReplicatedOrigin
		var ok bool
		md, scanned, ok, err = wire.ScanPublishMetadataOrigin(entry, h.lastMetaName)
		if err == nil && claimsReplication(entry, scanned, ok) {
			c.s.stats.authzFailures.Add(1)
			c.log.Info("SEND refused: replicated_from set by a producer that is not a replicator", "producerId", id, "sequenceId", seq)
			sendError(pulsarpb.ServerError_AuthorizationError, "replicated_from may be set only by a replicator of that cluster")
			return nil
		}
	} else {
		md, err = wire.ScanPublishMetadataReusing(entry, h.lastMetaName)
	}
	if err != nil {
		c.log.Warn("SEND with undecodable metadata refused", "producerId", id, "sequenceId", seq, "err", err)
		sendError(pulsarpb.ServerError_MetadataError, err.Error())
		return nil
	}
	if parts, _ := wire.ParseEntry(entry); len(parts.Body) > c.s.opts.MaxMessageSize {
		// The frame limit (max message size + FramePadding) already bounds what is read; this
		// refuses a payload that alone exceeds the max message size from a client that does not
		// check it (Pulsar: NotAllowedError, which makes the client give up on the message rather
		// than reconnect and resend it). Metadata is not counted: the Go client sizes a chunk as
		// the max message size minus its metadata, and its chunk metadata grows a little after that.
		sendError(pulsarpb.ServerError_NotAllowedError, fmt.Sprintf("message payload of %d bytes exceeds the max message size %d", len(parts.Body), c.s.opts.MaxMessageSize))
		return nil
	}
	if 4+messageHeadRoom+len(entry) > c.maxFrameSize() {
		// Every consumer gets this entry in a MESSAGE frame, whose command is longer than the
		// SEND's: stored, it would exceed the max frame size the clients read, and each delivery
		// would make the consumer's client drop its connection.
		sendError(pulsarpb.ServerError_NotAllowedError, fmt.Sprintf("message of %d bytes with its metadata leaves no room for the MESSAGE command within the max frame size %d", len(entry), c.maxFrameSize()))
		return nil
	}
	if (cmd.GetMarker() || md.Marker) && !prod.IsReplicator() {
		// Markers are the broker's own entries (a replicated subscription's state is appended
		// with Topic.AppendMarker) or a replicator's, forwarding another cluster's. Stored from a
		// client, a marker would be replicated as this cluster's own and could move a remote
		// cluster's replicated subscription (docs/security.md, "Replication links").
		c.log.Info("SEND refused: a marker from a producer that is not a replicator", "producerId", id, "sequenceId", seq)
		sendError(pulsarpb.ServerError_NotAllowedError, "marker messages are written by the broker or a replicator only")
		return nil
	}
	numMessages := 1
	if cmd.NumMessages != nil {
		numMessages = int(cmd.GetNumMessages())
	}
	if err := checkBatchCounts(numMessages, md); err != nil {
		// Stored, such an entry would need a batch-acknowledgement state the storage reader
		// refuses: NotAllowedError makes the client give up on the message (not resend it).
		c.log.Warn("SEND with too many messages refused", "producerId", id, "sequenceId", seq, "err", err)
		sendError(pulsarpb.ServerError_NotAllowedError, err.Error())
		return nil
	}
	req := broker.PublishRequest{
		Entry:        entry,
		SequenceID:   int64(seq),
		NumMessages:  numMessages,
		PublishTime:  int64(md.PublishTime),
		ProducerName: md.ProducerName,
		Marker:       cmd.GetMarker() || md.Marker,
		Origin:       origin,
		HasOrigin:    hasOrigin,
	}
	if cmd.HighestSequenceId != nil {
		req.HighestSequenceID = int64(cmd.GetHighestSequenceId())
	}
	if cmd.GetIsChunk() || md.HasChunkID {
		req.Chunk = true
		req.LastChunk = md.ChunkID >= md.NumChunksFromMsg-1
	}
	h.lastMetaName = md.ProducerName
	if !h.fence.admit() {
		// The topic is switching over (switchover.go): the client resends this on the target.
		c.log.Debug("SEND for a fenced producer ignored", "producerId", id, "sequenceId", seq)
		return nil
	}
	if h.complete == nil {
		h.complete = func(res broker.PublishResult) {
			c.completeSend(id, uint64(res.SequenceID), res)
			h.fence.done()
		}
	}
	// Charged now, as the broker would charge it on Publish: the connection's limits (checked
	// before each frame is read) bound the SENDs collected in a group as they bound published ones.
	c.limiter.Acquire(int64(len(entry)))
	g := &c.sends
	g.h, g.prod = h, prod
	g.reqs = append(g.reqs, req)
	return nil
}

// checkBatchCounts refuses a SEND whose num_messages, or whose metadata's num_messages_in_batch,
// is negative or above wire.MaxBatchMessages.
func checkBatchCounts(numMessages int, md wire.PublishMetadata) error {
	if numMessages < 0 || numMessages > wire.MaxBatchMessages {
		return fmt.Errorf("num_messages %d is outside 0..%d", numMessages, wire.MaxBatchMessages)
	}
	if md.HasNumMessages && (md.NumMessagesInBatch < 0 || md.NumMessagesInBatch > wire.MaxBatchMessages) {
		return fmt.Errorf("num_messages_in_batch %d is outside 0..%d", md.NumMessagesInBatch, wire.MaxBatchMessages)
	}
	return nil
}

// sendGroup collects consecutive SENDs of one producer that were read from the buffer together,
// so that the broker takes them in one PublishBatchCharged: one round of its locks and of the
// producer's completion queue per group instead of per SEND. Their payloads stay valid meanwhile: the group only grows
// by frames that were wholly buffered (wire.Reader.NextFrameBuffered), whose reads leave the
// payloads read before intact.
type sendGroup struct {
	h    *producerHandle
	prod *broker.Producer
	reqs []broker.PublishRequest // charged to the connection's limiter
}

// maxSendGroup bounds a group (the broker splits larger ones anyway).
const maxSendGroup = 256

// extendSends reports whether the reader may read another frame into the pending group: the
// next frame is already buffered (reading it moves no payload of the group), the group is not
// full, and the connection is within its limits (where the reader, publishing one by one, would
// have stopped to wait).
func (c *conn) extendSends() bool {
	return len(c.sends.reqs) < maxSendGroup && c.reader.NextFrameBuffered() && !c.limiter.Over()
}

// flushSends hands the pending group (if any) to the broker.
func (c *conn) flushSends() { c.handOnSends(false) }

// flushSendsBeforeRead is flushSends where the reader goes to its socket next: with nothing else
// in the read buffer, the reader has nothing to do until the client sends more, so the group is
// published as the read's last (Producer.PublishBatchChargedLast: under a light load its group
// commit runs here, without waking storage's goroutine). Only where the socket can be asked
// whether more arrived meanwhile (not over TLS): that is what tells a light load from a heavy one.
func (c *conn) flushSendsBeforeRead() { c.handOnSends(c.unread != nil && c.reader.Buffered() == 0) }

// handOnSends hands the pending group (if any) to the broker; last: nothing follows it before
// the reader's next socket read.
func (c *conn) handOnSends(last bool) {
	g := &c.sends
	n := len(g.reqs)
	if n == 0 {
		return
	}
	c.pendingSends.Add(int64(n))
	if n > 1 {
		c.sendGroups.Add(1)
	}
	if last {
		// The group commit may run here, as long as the disk takes: the client's frames meanwhile
		// wait unread on our account, as when throttled (keepAlive).
		c.paused.Store(true)
		g.prod.PublishBatchChargedLast(g.reqs, g.h.complete, c.unread)
		c.paused.Store(false)
	} else {
		g.prod.PublishBatchCharged(g.reqs, g.h.complete)
	}
	clear(g.reqs) // drop the references to the payloads, which the reader reuses
	g.reqs, g.h, g.prod = g.reqs[:0], nil, nil
}

// completeSend queues the receipt (or SEND_ERROR) of one publish. The broker calls it in publish
// order per producer, so receipts leave in order.
func (c *conn) completeSend(producerID, seq uint64, res broker.PublishResult) {
	if res.Err != nil {
		code, msg := toServerError(res.Err)
		if code == pulsarpb.ServerError_UnknownError {
			code = pulsarpb.ServerError_PersistenceError // storage failures are what is left
		}
		c.log.Debug("publish failed", "producerId", producerID, "sequenceId", seq, "err", res.Err)
		c.sendCommand(&pulsarpb.CommandSendError{
			ProducerId: proto.Uint64(producerID),
			SequenceId: proto.Uint64(seq),
			Error:      code.Enum(),
			Message:    proto.String(msg),
		})
	} else {
		// Hand-encoded (the same bytes as the protobuf encoding of CommandSendReceipt): one per
		// SEND, so it is on the hot path.
		var highest uint64
		if res.HighestSequenceID > int64(seq) {
			highest = uint64(res.HighestSequenceID)
		}
		// Appended into the outbox's shared block (no allocation and no iovec of its own per receipt).
		ledger, entry := uint64(res.Position.LedgerID), uint64(res.Position.EntryID)
		c.out.appendFrameNow(func(dst []byte) []byte {
			return wire.AppendSendReceiptFrame(dst, producerID, seq, ledger, entry, highest)
		}, c.tryWrite)
	}
	c.pendingSends.Add(-1)
	select {
	case c.sendDone <- struct{}{}:
	default:
	}
}

// keyValues turns protocol key-value pairs into a map (nil for none).
func keyValues(kvs []*pulsarpb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// messageHeadRoom is the room a stored entry leaves in a frame for the MESSAGE command that
// delivers it: the command with every field at its largest and an ack set of up to six words
// (smallFrameMax; wire.AppendMessageFrameHeader).
const messageHeadRoom = smallFrameMax
