package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// ErrConnectionClosed is returned for requests whose connection went away before an answer.
var ErrConnectionClosed = errors.New("client: connection closed")

// outFrame is one frame waiting for the writer goroutine: a command to encode, or (head != nil)
// an already encoded frame head, followed by the payload if any, in one or two parts.
type outFrame struct {
	cmd     *pulsarpb.BaseCommand
	head    []byte
	payload []byte
	tail    []byte // second part of the payload (RawMessage.Body)
}

// producerHandler and consumerHandler receive the frames addressed to one producer or consumer.
// They run on the connection's reader goroutine and must not block.
type producerHandler interface {
	onReceipt(c *conn, r receipt)
	// onReceipts: receipts that arrived together, in order (one producer's).
	onReceipts(c *conn, rs []receipt)
	onSendError(c *conn, e *pulsarpb.CommandSendError)
	// onDisconnect: the connection is gone, or the broker closed this producer.
	onDisconnect(c *conn, reason error)
}

type consumerHandler interface {
	onMessage(c *conn, m *pulsarpb.CommandMessage, payload []byte)
	onActiveChange(c *conn, active bool)
	onDisconnect(c *conn, reason error)
}

// conn is one TCP connection to a broker. It owns three goroutines: reader, writer and keepalive,
// all stopped by close.
type conn struct {
	// auth answers AUTH_CHALLENGE (nil: no credentials); version is sent with the answer.
	auth    Credentials
	version string
	addr    string
	nc      net.Conn
	log     *slog.Logger
	maxMsg  int

	mu        sync.Mutex
	closed    bool
	closeErr  error
	out       []outFrame
	pending   map[uint64]chan *pulsarpb.BaseCommand
	producers map[uint64]producerHandler
	consumers map[uint64]consumerHandler

	wake     chan struct{} // writer has frames to write
	done     chan struct{} // closed by close
	wg       sync.WaitGroup
	lastRecv time.Time // guarded by mu
}

// dialConn connects and performs CONNECT/CONNECTED within ctx.
func dialConn(ctx context.Context, o *Options, addr string) (*conn, error) {
	d := o.Dialer
	if d == nil {
		var nd net.Dialer
		d = nd.DialContext
	}
	method, authData, err := credentialsOf(o.Auth)
	if err != nil {
		return nil, err
	}
	nc, err := d(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	} else {
		_ = nc.SetDeadline(time.Now().Add(o.OperationTimeout))
	}
	if o.TLS != nil {
		cfg, err := tlsFor(o, addr)
		if err != nil {
			nc.Close()
			return nil, err
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("client: TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	connect := wire.Command(&pulsarpb.CommandConnect{
		ClientVersion:   ptr(o.ClientVersion),
		ProtocolVersion: ptr(wire.ProtocolVersion),
		AuthMethodName:  ptr(method),
		AuthData:        authData,
		FeatureFlags: &pulsarpb.FeatureFlags{
			SupportsAuthRefresh:         ptr(true),
			SupportsBrokerEntryMetadata: ptr(true),
		},
	})
	w := wire.NewWriter(nc)
	r := newFrameReader(nc, wire.DefaultMaxFrameSize)
	err = w.WriteCommand(connect)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("client: connect to %s: %w", addr, err)
	}
	var rc receipt
	f, isReceipt, err := r.next(&rc)
	if err == nil && isReceipt {
		err = errors.New("SEND_RECEIPT before CONNECTED")
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("client: connect to %s: %w", addr, err)
	}
	switch f.Type() {
	case pulsarpb.BaseCommand_CONNECTED:
	case pulsarpb.BaseCommand_ERROR:
		nc.Close()
		e := f.Cmd.GetError()
		return nil, fmt.Errorf("client: connect to %s: %w", addr, wire.ErrorFromServer(e.GetError(), e.GetMessage()))
	default:
		nc.Close()
		return nil, fmt.Errorf("client: connect to %s: unexpected %s", addr, f.Type())
	}
	_ = nc.SetDeadline(time.Time{})
	maxMsg := int(f.Cmd.GetConnected().GetMaxMessageSize())
	if maxMsg <= 0 {
		maxMsg = wire.DefaultMaxMessageSize
	}
	r.setMaxFrameSize(wire.MaxFrameSize(maxMsg))
	c := &conn{
		auth:      o.Auth,
		version:   o.ClientVersion,
		addr:      addr,
		nc:        nc,
		log:       o.Logger.With("broker", addr),
		maxMsg:    maxMsg,
		pending:   make(map[uint64]chan *pulsarpb.BaseCommand),
		producers: make(map[uint64]producerHandler),
		consumers: make(map[uint64]consumerHandler),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		lastRecv:  time.Now(),
	}
	c.wg.Add(3)
	go c.readLoop(r)
	go c.writeLoop(newBurstWriter(nc))
	go c.keepAlive(o.KeepAliveInterval)
	return c, nil
}

// isClosed reports whether the connection is closed.
func (c *conn) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// close shuts the connection down, fails every pending request and tells every producer and
// consumer. It waits for the connection's goroutines unless called from one of them.
func (c *conn) close(reason error) {
	c.shutdown(reason)
	c.wg.Wait()
}

// shutdown is close without waiting, for use on the connection's own goroutines.
func (c *conn) shutdown(reason error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.closeErr = reason
	pending := c.pending
	c.pending = map[uint64]chan *pulsarpb.BaseCommand{}
	producers, consumers := c.producers, c.consumers
	c.producers, c.consumers = map[uint64]producerHandler{}, map[uint64]consumerHandler{}
	c.out = nil
	c.mu.Unlock()

	close(c.done)
	_ = c.nc.Close()
	for _, ch := range pending {
		close(ch)
	}
	err := fmt.Errorf("%w: %v", ErrConnectionClosed, reason)
	for _, p := range producers {
		p.onDisconnect(c, err)
	}
	for _, h := range consumers {
		h.onDisconnect(c, err)
	}
}

// send queues a frame for the writer. It never blocks: the queue is bounded by the callers
// (producers limit their pending sends, requests wait for answers).
func (c *conn) send(cmd *pulsarpb.BaseCommand, payload []byte) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrConnectionClosed
	}
	c.out = append(c.out, outFrame{cmd: cmd, payload: payload})
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// sendFrames queues several frames with one lock and one wake-up of the writer.
func (c *conn) sendFrames(fs []outFrame) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrConnectionClosed
	}
	c.out = append(c.out, fs...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// sendFrame queues f (any form).
func (c *conn) sendFrame(f outFrame) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrConnectionClosed
	}
	c.out = append(c.out, f)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// request sends cmd (whose request id is reqID) and waits for the response with that id.
func (c *conn) request(ctx context.Context, reqID uint64, cmd *pulsarpb.BaseCommand) (*pulsarpb.BaseCommand, error) {
	ch := make(chan *pulsarpb.BaseCommand, 2)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrConnectionClosed
	}
	c.pending[reqID] = ch
	c.mu.Unlock()
	if err := c.send(cmd, nil); err != nil {
		c.forget(reqID)
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, ErrConnectionClosed
		}
		return resp, nil
	case <-ctx.Done():
		c.forget(reqID)
		return nil, ctx.Err()
	}
}

func (c *conn) forget(reqID uint64) {
	c.mu.Lock()
	delete(c.pending, reqID)
	c.mu.Unlock()
}

func (c *conn) addProducer(id uint64, h producerHandler) {
	c.mu.Lock()
	if !c.closed {
		c.producers[id] = h
	}
	c.mu.Unlock()
}

func (c *conn) removeProducer(id uint64) {
	c.mu.Lock()
	delete(c.producers, id)
	c.mu.Unlock()
}

func (c *conn) addConsumer(id uint64, h consumerHandler) {
	c.mu.Lock()
	if !c.closed {
		c.consumers[id] = h
	}
	c.mu.Unlock()
}

func (c *conn) removeConsumer(id uint64) {
	c.mu.Lock()
	delete(c.consumers, id)
	c.mu.Unlock()
}

// writeLoop writes everything queued since its last write in one system call (see burstWriter).
func (c *conn) writeLoop(w *burstWriter) {
	defer c.wg.Done()
	var batch []outFrame
	for {
		select {
		case <-c.done:
			return
		case <-c.wake:
		}
		c.mu.Lock()
		batch, c.out = c.out, batch[:0]
		c.mu.Unlock()
		for i, f := range batch {
			if err := w.add(f); err != nil {
				// A command we cannot encode is a bug in this package; drop the connection
				// rather than send garbage.
				c.log.Error("client: encode failed", "type", f.cmd.GetType(), "err", err)
				c.shutdown(err)
				return
			}
			batch[i] = outFrame{}
			if w.full() {
				if err := w.flush(); err != nil {
					c.shutdown(err)
					return
				}
			}
		}
		if err := w.flush(); err != nil {
			c.shutdown(err)
			return
		}
	}
}

func (c *conn) keepAlive(interval time.Duration) {
	defer c.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.mu.Lock()
		idle := time.Since(c.lastRecv)
		c.mu.Unlock()
		if idle > 2*interval {
			c.log.Warn("client: broker silent, closing connection", "idle", idle)
			c.shutdown(fmt.Errorf("no frame from broker for %s", idle.Round(time.Millisecond)))
			return
		}
		_ = c.send(wire.Command(&pulsarpb.CommandPing{}), nil)
	}
}

func (c *conn) readLoop(r *frameReader) {
	defer c.wg.Done()
	var rc receipt
	// Receipts already buffered behind the one just read are decoded and handed over together:
	// a forwarder gets one receipt per entry, and per-receipt locking and wake-ups were a
	// good part of its receive path.
	rcs := make([]receipt, 0, 256)
	for {
		f, isReceipt, err := r.next(&rc)
		if err != nil {
			if wire.Recoverable(err) {
				c.log.Warn("client: ignoring bad frame", "err", err)
				continue
			}
			if !c.isClosed() {
				c.log.Debug("client: connection lost", "err", err)
			}
			c.shutdown(err)
			return
		}
		if !isReceipt {
			c.mu.Lock()
			c.lastRecv = time.Now()
			c.mu.Unlock()
			c.dispatch(f)
			continue
		}
		rcs = append(rcs[:0], rc)
		for len(rcs) < cap(rcs) && r.bufferedReceipt(&rc) {
			rcs = append(rcs, rc)
		}
		for lo := 0; lo < len(rcs); { // one call per run of one producer's receipts
			hi := lo + 1
			for hi < len(rcs) && rcs[hi].producerID == rcs[lo].producerID {
				hi++
			}
			c.mu.Lock()
			if lo == 0 {
				c.lastRecv = time.Now()
			}
			h := c.producers[rcs[lo].producerID]
			c.mu.Unlock()
			if h != nil {
				h.onReceipts(c, rcs[lo:hi])
			}
			lo = hi
		}
	}
}

// dispatch routes one frame from the broker.
func (c *conn) dispatch(f wire.Frame) {
	cmd := f.Cmd
	switch f.Type() {
	case pulsarpb.BaseCommand_PING:
		_ = c.send(wire.Command(&pulsarpb.CommandPong{}), nil)
	case pulsarpb.BaseCommand_PONG:
	case pulsarpb.BaseCommand_SEND_RECEIPT:
		if h := c.producer(cmd.GetSendReceipt().GetProducerId()); h != nil {
			h.onReceipt(c, receiptOf(cmd.GetSendReceipt()))
		}
	case pulsarpb.BaseCommand_SEND_ERROR:
		if h := c.producer(cmd.GetSendError().GetProducerId()); h != nil {
			h.onSendError(c, cmd.GetSendError())
		}
	case pulsarpb.BaseCommand_CLOSE_PRODUCER:
		id := cmd.GetCloseProducer().GetProducerId()
		if h := c.producer(id); h != nil {
			c.removeProducer(id)
			h.onDisconnect(c, errors.New("producer closed by broker"))
		}
	case pulsarpb.BaseCommand_TOPIC_MIGRATED:
		tm := cmd.GetTopicMigrated()
		if tm.GetResourceType() == pulsarpb.CommandTopicMigrated_Producer {
			if h := c.producer(tm.GetResourceId()); h != nil {
				c.removeProducer(tm.GetResourceId())
				h.onDisconnect(c, wire.ErrTopicMigrated)
			}
		} else if h := c.consumer(tm.GetResourceId()); h != nil {
			c.removeConsumer(tm.GetResourceId())
			h.onDisconnect(c, wire.ErrTopicMigrated)
		}
	case pulsarpb.BaseCommand_MESSAGE:
		if h := c.consumer(cmd.GetMessage().GetConsumerId()); h != nil {
			h.onMessage(c, cmd.GetMessage(), f.Payload)
		}
	case pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE:
		if h := c.consumer(cmd.GetActiveConsumerChange().GetConsumerId()); h != nil {
			h.onActiveChange(c, cmd.GetActiveConsumerChange().GetIsActive())
		}
	case pulsarpb.BaseCommand_CLOSE_CONSUMER:
		id := cmd.GetCloseConsumer().GetConsumerId()
		if h := c.consumer(id); h != nil {
			c.removeConsumer(id)
			h.onDisconnect(c, errors.New("consumer closed by broker"))
		}
	case pulsarpb.BaseCommand_AUTH_CHALLENGE:
		c.answerChallenge()
	case pulsarpb.BaseCommand_REACHED_END_OF_TOPIC:
		// Informational; the consumer stays subscribed.
	default:
		if id, ok := responseRequestID(cmd); ok {
			if ps := cmd.GetProducerSuccess(); ps != nil && !ps.GetProducerReady() {
				// WaitForExclusive: queued behind another producer. A second PRODUCER_SUCCESS
				// with the same request id and producer_ready = true follows; keep waiting.
				return
			}
			c.mu.Lock()
			ch := c.pending[id]
			delete(c.pending, id)
			c.mu.Unlock()
			if ch != nil {
				select {
				case ch <- cmd:
				default:
				}
			} else {
				c.log.Debug("client: response for unknown request", "type", f.Type(), "request_id", id)
			}
			return
		}
		c.log.Warn("client: unexpected command from broker", "type", f.Type())
	}
}

func (c *conn) producer(id uint64) producerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.producers[id]
}

func (c *conn) consumer(id uint64) consumerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumers[id]
}

// responseRequestID extracts the request id of a response command.
func responseRequestID(cmd *pulsarpb.BaseCommand) (uint64, bool) {
	switch cmd.GetType() {
	case pulsarpb.BaseCommand_SUCCESS:
		return cmd.GetSuccess().GetRequestId(), true
	case pulsarpb.BaseCommand_ERROR:
		return cmd.GetError().GetRequestId(), true
	case pulsarpb.BaseCommand_PRODUCER_SUCCESS:
		return cmd.GetProducerSuccess().GetRequestId(), true
	case pulsarpb.BaseCommand_LOOKUP_RESPONSE:
		return cmd.GetLookupTopicResponse().GetRequestId(), true
	case pulsarpb.BaseCommand_PARTITIONED_METADATA_RESPONSE:
		return cmd.GetPartitionMetadataResponse().GetRequestId(), true
	case pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE:
		return cmd.GetGetLastMessageIdResponse().GetRequestId(), true
	case pulsarpb.BaseCommand_ACK_RESPONSE:
		return cmd.GetAckResponse().GetRequestId(), true
	case pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE:
		return cmd.GetGetTopicsOfNamespaceResponse().GetRequestId(), true
	case pulsarpb.BaseCommand_GET_SCHEMA_RESPONSE:
		return cmd.GetGetSchemaResponse().GetRequestId(), true
	case pulsarpb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE:
		return cmd.GetGetOrCreateSchemaResponse().GetRequestId(), true
	case pulsarpb.BaseCommand_CONSUMER_STATS_RESPONSE:
		return cmd.GetConsumerStatsResponse().GetRequestId(), true
	}
	return 0, false
}

// errorOf turns an ERROR response into a Go error (nil for anything else).
func errorOf(resp *pulsarpb.BaseCommand) error {
	if e := resp.GetError(); e != nil {
		return wire.ErrorFromServer(e.GetError(), e.GetMessage())
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// answerChallenge answers the broker's AUTH_CHALLENGE (its check found the credentials expired)
// with fresh credentials from the source; a connection without credentials, or whose source
// fails, is closed, as the broker would close it at its next check anyway.
func (c *conn) answerChallenge() {
	method, data, err := credentialsOf(c.auth)
	if err == nil && c.auth == nil {
		err = errors.New("client: AUTH_CHALLENGE on a connection without credentials")
	}
	if err != nil {
		c.log.Warn("closing connection: cannot answer the broker's authentication challenge", "err", err)
		c.shutdown(err)
		return
	}
	_ = c.send(wire.Command(&pulsarpb.CommandAuthResponse{
		ClientVersion:   ptr(c.version),
		Response:        &pulsarpb.AuthData{AuthMethodName: ptr(method), AuthData: data},
		ProtocolVersion: ptr(wire.ProtocolVersion),
	}), nil)
}
