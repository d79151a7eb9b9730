package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

var errTooManyFiles = syscall.EMFILE

// errClientClosed is the cause recorded when the peer closed its end.
var errClientClosed = errors.New("client closed the connection")

// conn is one client connection. Goroutines, all owned by run:
//
//   - the reader (run itself): reads frames in order and handles them; commands that may block
//     (topic loads, WaitForExclusive producers, seeks, unsubscribes) run in request goroutines
//     tracked by reqs, so one slow request never stalls the connection;
//   - the writer: drains the outbox with one writev per burst;
//   - the keepalive: pings an idle client, closes a silent one.
//
// Broker callbacks (publish completions, ConsumerSink) only append to the outbox: they never block.
type conn struct {
	s      *Server
	id     uint64
	nc     net.Conn
	log    *slog.Logger
	remote string
	// identity is who CONNECT authenticated as (authn.go), zero without authentication; refresh
	// is the expiry state of its credentials (authrefresh.go). Guarded by authMu.
	authMu   sync.Mutex
	identity auth.Identity
	refresh  authRefresh

	ctx    context.Context // ends when the connection is gone (or aborted): the writer stops
	cancel context.CancelCauseFunc
	// reqCtx is the context of request goroutines and broker calls; it ends as soon as the
	// connection starts closing.
	reqCtx    context.Context
	reqCancel context.CancelCauseFunc
	out       *outbox
	tryWrite  func(net.Buffers) int // writes without waiting (tryWriteFunc); nil over TLS
	unread    func() bool           // the socket holds bytes not yet read (unreadFunc); nil over TLS

	reader *wire.Reader

	// Set by CONNECT.
	connected       bool // reader goroutine only
	clientVersion   string
	protocolVersion int32

	lastRead atomic.Int64 // unix nanos of the last frame received
	// paused: the reader is not reading on the server's account (throttled, or running the group
	// commit of its SENDs), so the client's silence meanwhile is not the client's (keepAlive).
	paused atomic.Bool

	mu        sync.Mutex
	producers map[uint64]*producerHandle
	consumers map[uint64]*consumerHandle
	released  bool // finish took the maps: late registrations must release themselves
	// closedProducers are producer ids closed on this connection (by either side) and not
	// re-created since.
	closedProducers map[uint64]struct{}

	// sends are SENDs read and checked but not yet handed to the broker (reader goroutine only):
	// a run of one producer's SENDs that arrived together is published as one group.
	sends      sendGroup
	sendGroups atomic.Int64 // groups of more than one SEND handed to the broker (tests)

	// Publishes in flight (SEND received, receipt or error not yet queued).
	pendingSends atomic.Int64
	sendDone     chan struct{} // capacity 1: a publish completed
	// limiter charges in-flight publishes to this connection and, through its parent, to the
	// broker-wide budget; the reader waits on it before reading more.
	limiter *broker.MemoryLimiter

	reqs sync.WaitGroup // request goroutines

	// stopRead is closed to make the reader stop (graceful close); graceful tells run to say
	// goodbye to the client before closing.
	stopRead     chan struct{}
	readCtx      context.Context // ends with stopRead or reqCtx: bounds throttling waits
	readCancel   context.CancelFunc
	stopReadOnce sync.Once
	graceful     atomic.Bool
	closeCtx     atomic.Pointer[context.Context] // bounds the graceful close
	done         chan struct{}                   // closed when run returns
}

// preConnectMaxFrame bounds the frames read before CONNECT, when the client is not authenticated
// yet. A CONNECT carries at most two tokens the authenticator accepts (auth_data, and the
// original_auth_data a proxy forwards for its client), each at most auth.MaxTokenBytes, and
// names of a few hundred bytes; the bound has room for twice that.
const preConnectMaxFrame = 4 * auth.MaxTokenBytes

func newConn(s *Server, nc net.Conn, id uint64) *conn {
	ctx, cancel := context.WithCancelCause(s.ctx)
	reqCtx, reqCancel := context.WithCancelCause(ctx)
	remote := nc.RemoteAddr().String()
	c := &conn{
		reqCtx:          reqCtx,
		reqCancel:       reqCancel,
		s:               s,
		id:              id,
		nc:              nc,
		remote:          remote,
		log:             s.log.With("conn", id, "remote", remote),
		ctx:             ctx,
		cancel:          cancel,
		out:             newOutbox(),
		reader:          wire.NewReader(nc, min(preConnectMaxFrame, wire.MaxFrameSize(s.opts.MaxMessageSize))),
		producers:       map[uint64]*producerHandle{},
		consumers:       map[uint64]*consumerHandle{},
		closedProducers: map[uint64]struct{}{},
		sendDone:        make(chan struct{}, 1),
		stopRead:        make(chan struct{}),
		done:            make(chan struct{}),
	}
	c.tryWrite = tryWriteFunc(nc)
	c.unread = unreadFunc(nc)
	c.readCtx, c.readCancel = context.WithCancel(reqCtx)
	c.reader.ReusePayloads(true) // handleSend copies what the broker may keep
	c.limiter = broker.NewMemoryLimiter(s.opts.MaxPendingSendBytes, int64(s.opts.MaxPendingSends), s.opts.Broker.PublishLimiter())
	c.lastRead.Store(time.Now().UnixNano())
	return c
}

// run serves the connection until it ends, then releases everything it holds.
func (c *conn) run() {
	defer close(c.done)
	c.log.Debug("connection accepted")

	var helpers sync.WaitGroup
	helpers.Add(2)
	writerDone := make(chan struct{})
	go func() {
		defer helpers.Done()
		defer close(writerDone)
		c.writeLoop()
	}()
	go func() {
		defer helpers.Done()
		c.keepAliveLoop()
	}()

	err := c.readLoop()
	c.finish(err)

	c.out.close()
	// The writer flushes what is queued (goodbyes, last receipts) and exits; bound it so a client
	// that does not read cannot hold the connection open.
	select {
	case <-writerDone:
	case <-time.After(c.flushTimeout()):
		c.log.Debug("final flush timed out")
	}
	c.cancel(err)
	_ = c.nc.Close()
	helpers.Wait()
	c.log.Debug("connection closed", "reason", err)
}

func (c *conn) flushTimeout() time.Duration {
	if p := c.closeCtx.Load(); p != nil {
		if dl, ok := (*p).Deadline(); ok {
			return max(time.Until(dl), 0)
		}
	}
	return time.Second
}

// readLoop reads and handles frames until the connection fails or is told to stop. It returns the
// reason.
func (c *conn) readLoop() error {
	if err := c.tlsHandshake(); err != nil {
		return err
	}
	// The client must CONNECT promptly.
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.opts.KeepAliveInterval))
	defer c.flushSends() // whatever the reason to stop, SENDs read before it are published
	for {
		if len(c.sends.reqs) > 0 && !c.extendSends() {
			c.flushSendsBeforeRead()
			if err := c.throttle(); err != nil {
				return err
			}
		}
		buffered := c.reader.Buffered()
		f, err := c.reader.ReadFrame()
		if err != nil {
			c.flushSends() // the SENDs before the bad frame go first, as they would one by one
			if c.stopping() {
				return c.stopReason()
			}
			if errors.Is(err, wire.ErrUnknownCommand) && c.connected {
				// A well-formed frame with a command type this build does not know (a newer
				// client): say so and go on.
				c.lastRead.Store(time.Now().UnixNano())
				c.answerUnknown(f, err)
				continue
			}
			if wire.Recoverable(err) {
				// Undecodable protobuf or a command missing required fields: the peer is not
				// speaking the protocol we know, so nothing it sends next can be trusted.
				return c.badFrame(err)
			}
			switch {
			case errors.Is(err, io.EOF):
				return errClientClosed
			case errors.Is(err, wire.ErrFrameTooLarge) && !c.connected:
				return c.badFrame(fmt.Errorf("before CONNECT: %w", err))
			case errors.Is(err, wire.ErrFrameTooLarge), errors.Is(err, wire.ErrMalformedFrame):
				return c.badFrame(err)
			case errors.Is(err, wire.ErrTruncated):
				return fmt.Errorf("client closed the connection mid-frame: %w", err)
			case errors.Is(err, os.ErrDeadlineExceeded) && !c.connected:
				return c.badFrame(errors.New("no CONNECT within the keepalive interval"))
			}
			return err
		}
		if f.WireSize > buffered {
			// Only a frame that needed a read from the socket refreshes the time: the frames
			// already buffered arrived with the read that refreshed it (saves a clock read per
			// frame in a stream of small SENDs).
			c.lastRead.Store(time.Now().UnixNano())
		}
		c.s.stats.framesIn.Add(1)
		if err := c.handle(f); err != nil {
			return err
		}
		if len(c.sends.reqs) > 0 {
			continue // throttled when the group is handed on (the limiter has not seen it yet)
		}
		if err := c.throttle(); err != nil {
			return err
		}
	}
}

// badFrame logs why a connection is closed for what the client sent, and returns that reason.
func (c *conn) badFrame(err error) error {
	c.s.stats.badFrames.Add(1)
	c.log.Warn("closing connection: bad frame", "err", err)
	return fmt.Errorf("bad frame: %w", err)
}

func (c *conn) stopping() bool {
	select {
	case <-c.stopRead:
		return true
	default:
		return c.ctx.Err() != nil
	}
}

// throttle blocks the reader while the connection has too much in flight: too many publishes or
// bytes awaiting receipts (per connection or broker-wide), or too many bytes queued for a client
// that does not read. Meanwhile the socket is not read, so TCP flow control slows the client down.
func (c *conn) throttle() error {
	counted := false
	for {
		over := c.limiter.Over()
		outbound := c.out.queuedBytes() > c.s.opts.MaxOutboundBytes
		if !over && !outbound {
			if counted {
				c.paused.Store(false)
				c.lastRead.Store(time.Now().UnixNano()) // the pause was ours, not the client's silence
			}
			return nil
		}
		if !counted {
			counted = true
			c.paused.Store(true)
			c.s.stats.throttled.Add(1)
		}
		if over {
			if err := c.limiter.Wait(c.readCtx); err != nil {
				return c.stopReason()
			}
			continue
		}
		select {
		case <-c.out.drained:
		case <-c.readCtx.Done():
			return c.stopReason()
		}
	}
}

// stopReason says why the reader was told to stop.
func (c *conn) stopReason() error {
	if cause := context.Cause(c.ctx); cause != nil {
		return cause
	}
	if cause := context.Cause(c.reqCtx); cause != nil {
		return cause
	}
	return errors.New("server shutting down")
}

// writeLoop writes queued frames until the outbox is closed and empty, or a write fails.
func (c *conn) writeLoop() {
	var spare net.Buffers
	write := func(bufs *net.Buffers) error {
		_, err := bufs.WriteTo(c.nc)
		return err
	}
	if _, ok := c.nc.(*tls.Conn); ok {
		var co coalescer
		write = func(bufs *net.Buffers) error { return co.write(c.nc, *bufs) }
	}
	for {
		select {
		case <-c.out.wake:
		case <-c.ctx.Done():
			return
		}
		for {
			bufs, n := c.out.take(spare)
			if n == 0 {
				spare = bufs[:0]
				break
			}
			orig := bufs
			_ = c.nc.SetWriteDeadline(time.Now().Add(2 * c.s.opts.KeepAliveInterval))
			if err := write(&bufs); err != nil {
				c.abort(fmt.Errorf("write: %w", err))
				return
			}
			c.out.wrote()
			clear(orig)
			spare = orig[:0]
			c.out.signalDrained()
		}
		if c.out.closedAndIdle() {
			return
		}
	}
}

// keepAliveLoop pings a client that has been silent for an interval and closes the connection
// after two silent intervals (pulsar-client-go pings every 30 s and answers our PINGs).
func (c *conn) keepAliveLoop() {
	interval := c.s.opts.KeepAliveInterval
	tick := time.NewTicker(interval / 2)
	defer tick.Stop()
	k := keepAlive{interval: interval, lastTick: time.Now()}
	var authTick <-chan time.Time // credentials that expire are checked on their own period
	if c.s.opts.Authenticator != nil {
		t := time.NewTicker(c.s.opts.AuthRefreshInterval)
		defer t.Stop()
		authTick = t.C
	}
	for {
		select {
		case <-tick.C:
		case now := <-authTick:
			if !c.checkCredentials(now) {
				return
			}
			continue
		case <-c.ctx.Done():
			return
		case <-c.done:
			return
		}
		now := time.Now()
		switch k.onTick(now, time.Unix(0, c.lastRead.Load()), c.paused.Load()) {
		case keepAliveClose:
			idle := now.Sub(time.Unix(0, c.lastRead.Load()))
			c.log.Info("closing connection: no frame from the client", "idle", idle.Round(time.Millisecond))
			c.abort(fmt.Errorf("keepalive: no frame for %v", idle.Round(time.Millisecond)))
			return
		case keepAlivePing:
			c.sendCommand(&pulsarpb.CommandPing{})
		}
	}
}

// keepAliveAction is what keepAlive.onTick asks for.
type keepAliveAction int

const (
	keepAliveNothing keepAliveAction = iota
	keepAlivePing
	keepAliveClose
)

// keepAlive decides, at each tick of the keepalive loop (every interval/2), whether to ping the
// client or give up on it.
//
// A tick that comes much later than its period says this process was not running (a GC pause, a
// stalled VM, an overloaded machine): the client's answer may be sitting unread in the socket
// while we were away, and the reader has not had a chance to see it. Such a tick never closes the
// connection; the next one, on time, decides. Without that, every connection whose PONG arrived
// during a stall of more than half an interval was dropped when the process resumed.
//
// While the reader is paused on the server's account (throttled, or running a group commit that
// the disk makes slow), what the client sends waits unread: no tick decides anything, and once the
// pause is over the client's silence counts from the last tick that saw the pause at the earliest.
type keepAlive struct {
	interval   time.Duration
	lastTick   time.Time
	lastPaused time.Time // the last tick that found the reader paused
}

func (k *keepAlive) onTick(now, lastRead time.Time, paused bool) keepAliveAction {
	late := now.Sub(k.lastTick) > k.interval*3/4 // the period is interval/2
	k.lastTick = now
	if paused {
		k.lastPaused = now
		return keepAliveNothing // we are the ones not reading
	}
	idle := now.Sub(lastRead)
	if sincePause := now.Sub(k.lastPaused); sincePause < idle {
		idle = sincePause
	}
	switch {
	case idle >= 2*k.interval && !late:
		return keepAliveClose
	case idle >= k.interval:
		return keepAlivePing
	}
	return keepAliveNothing
}

// abort closes the connection at once (no goodbyes): the reader's pending read fails.
func (c *conn) abort(cause error) {
	c.cancel(cause)
	_ = c.nc.SetReadDeadline(time.Now())
	c.stopReading()
}

func (c *conn) stopReading() {
	c.stopReadOnce.Do(func() {
		close(c.stopRead)
		c.readCancel()
		_ = c.nc.SetReadDeadline(time.Now())
	})
}

// closeGracefully is the server-shutdown path: stop reading, let in-flight publishes be answered,
// tell the client its producers and consumers are closed, flush and close. Bounded by ctx.
func (c *conn) closeGracefully(ctx context.Context) {
	c.closeCtx.Store(&ctx)
	c.graceful.Store(true)
	c.stopReading()
	select {
	case <-c.done:
	case <-ctx.Done():
		c.abort(errors.New("graceful close timed out"))
		<-c.done
	}
}

// finish runs once the reader stopped: wait for in-flight publishes (graceful close only), say
// goodbye, release broker producers and consumers, wait for request goroutines.
func (c *conn) finish(reason error) {
	graceful := c.graceful.Load() && c.ctx.Err() == nil
	closeCtx, cancel := context.WithTimeout(c.closeContext(), releaseTimeout)
	defer cancel()
	if graceful {
		c.waitPendingSends(closeCtx)
	} else {
		c.reqCancel(reason) // request goroutines give up at once
	}
	c.mu.Lock()
	producers := c.producers
	consumers := c.consumers
	c.producers = map[uint64]*producerHandle{}
	c.consumers = map[uint64]*consumerHandle{}
	c.released = true
	c.mu.Unlock()
	for id, p := range producers {
		if graceful {
			c.sendCommand(&pulsarpb.CommandCloseProducer{ProducerId: proto.Uint64(id), RequestId: proto.Uint64(0)})
		}
		p.release(closeCtx)
	}
	for id, h := range consumers {
		if graceful {
			c.sendCommand(&pulsarpb.CommandCloseConsumer{ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(0)})
		}
		h.release()
	}
	c.reqCancel(reason)
	c.reqs.Wait()
	// Request goroutines that completed after the maps were emptied released their own objects.
}

// releaseTimeout bounds how long a closing connection waits for its producers' pending publishes.
const releaseTimeout = 5 * time.Second

// closeContext bounds releasing broker objects when the connection ends.
func (c *conn) closeContext() context.Context {
	if p := c.closeCtx.Load(); p != nil {
		return *p
	}
	return context.Background()
}

func (c *conn) waitPendingSends(ctx context.Context) {
	for c.pendingSends.Load() > 0 {
		select {
		case <-c.sendDone:
		case <-ctx.Done():
			return
		}
	}
}

// go runs fn as a request goroutine owned by the connection.
func (c *conn) goRequest(fn func(ctx context.Context)) {
	c.reqs.Add(1)
	go func() {
		defer c.reqs.Done()
		fn(c.reqCtx)
	}()
}

// clientHandles lists the broker-to-client commands pulsar-client-go v0.19.0 handles
// (connection.go receivedCommand). Any other type makes it drop the whole connection, so the
// server refuses to send one: a bug then costs a log line, not every client's connection.
var clientHandles = func() (known [128]bool) {
	for _, t := range []pulsarpb.BaseCommand_Type{
		pulsarpb.BaseCommand_CONNECTED, pulsarpb.BaseCommand_SUCCESS, pulsarpb.BaseCommand_ERROR,
		pulsarpb.BaseCommand_PRODUCER_SUCCESS, pulsarpb.BaseCommand_PARTITIONED_METADATA_RESPONSE,
		pulsarpb.BaseCommand_LOOKUP_RESPONSE, pulsarpb.BaseCommand_CONSUMER_STATS_RESPONSE,
		pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE, pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE,
		pulsarpb.BaseCommand_GET_SCHEMA_RESPONSE, pulsarpb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE,
		pulsarpb.BaseCommand_SEND_RECEIPT, pulsarpb.BaseCommand_SEND_ERROR, pulsarpb.BaseCommand_MESSAGE,
		pulsarpb.BaseCommand_ACK_RESPONSE, pulsarpb.BaseCommand_CLOSE_PRODUCER, pulsarpb.BaseCommand_CLOSE_CONSUMER,
		pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE, pulsarpb.BaseCommand_TOPIC_MIGRATED,
		pulsarpb.BaseCommand_AUTH_CHALLENGE, pulsarpb.BaseCommand_PING, pulsarpb.BaseCommand_PONG,
	} {
		known[t] = true
	}
	return known
}()

// sendable reports whether cmd may go to a client, logging the bug when it may not.
func (c *conn) sendable(cmd *pulsarpb.BaseCommand) bool {
	t := cmd.GetType()
	if t > 0 && int(t) < len(clientHandles) && clientHandles[t] {
		return true
	}
	c.log.Error("refusing to send a command the Pulsar Go client does not handle (it would drop the connection)", "type", t.String())
	return false
}

// sendCommand queues a simple command. It reports false if the connection is closing.
func (c *conn) sendCommand(body proto.Message) bool {
	cmd := wire.Command(body)
	if !c.sendable(cmd) {
		return false
	}
	frame, err := wire.EncodeFrame(cmd)
	if err != nil {
		// Only a missing required field can fail here: a bug, not a client problem.
		c.log.Error("encoding a command failed", "err", err)
		return false
	}
	if size := len(frame) - 4; size > c.maxFrameSize() {
		return c.refuseOversizeFrame(cmd, size)
	}
	return c.out.push(frame)
}

// maxFrameSize is the largest totalSize the client reads: the max message size announced in
// CONNECTED plus wire.FramePadding, the bound the Pulsar clients enforce (and this server's own
// reader). A larger frame makes pulsar-client-go drop the connection, and with it every producer,
// consumer and request that shares it.
func (c *conn) maxFrameSize() int { return wire.MaxFrameSize(c.s.opts.MaxMessageSize) }

// frameFits reports the totalSize body's frame would have and whether the client accepts it, for
// handlers whose answers grow with the data (handleGetTopicsOfNamespace) and that explain a refusal
// better than sendCommand's guard can.
func (c *conn) frameFits(body proto.Message) (int, bool) {
	size := 4 + proto.Size(wire.Command(body))
	return size, size <= c.maxFrameSize()
}

// refuseOversizeFrame stands in for a command whose frame the client would not read: it is not
// written. Handlers whose answers can grow check the size themselves (frameFits) and explain, so
// reaching this is a bug, logged as one. A command that answers a request becomes a short ERROR for
// that request, so the client's call fails at once instead of waiting for its operation timeout,
// and the connection lives on.
func (c *conn) refuseOversizeFrame(cmd *pulsarpb.BaseCommand, size int) bool {
	t := cmd.GetType()
	c.log.Error("refusing to send a frame larger than the client accepts (it would drop the connection)",
		"type", t.String(), "frameSize", size, "maxFrameSize", c.maxFrameSize())
	reqID, ok := requestIDOf(cmd)
	if !ok || t == pulsarpb.BaseCommand_CLOSE_PRODUCER || t == pulsarpb.BaseCommand_CLOSE_CONSUMER {
		// No request waits for it (CLOSE_* carry a request id of their own, not the client's).
		return false
	}
	code := pulsarpb.ServerError_NotAllowedError
	if t == pulsarpb.BaseCommand_ERROR {
		code = cmd.GetError().GetError()
	}
	return c.sendCommand(&pulsarpb.CommandError{
		RequestId: proto.Uint64(reqID),
		Error:     code.Enum(),
		Message:   proto.String(fmt.Sprintf("the broker's %s answer of %d bytes exceeds the max frame size %d", t, size, c.maxFrameSize())),
	})
}

// sendMessage queues a MESSAGE with the stored entry payload (not copied), its head encoded by
// hand (wire.AppendMessageFrameHeader: one per entry delivered).
func (c *conn) sendMessage(h *wire.MessageHead, payload []byte) bool {
	// The head is encoded on the stack and copied into the outbox's small-frame block, so a
	// delivered entry costs no allocation of its own; only a head with a long ack set outgrows it.
	var small [smallFrameMax]byte
	hdr, err := wire.AppendMessageFrameHeader(small[:0], h, len(payload))
	if err != nil {
		c.log.Error("encoding a MESSAGE failed", "err", err)
		return false
	}
	if !c.outboundWithinBound() {
		return false
	}
	if len(hdr) <= smallFrameMax {
		return c.out.pushHeaded(hdr, payload)
	}
	return c.out.push(bytes.Clone(hdr), payload)
}

// outboundWithinBound reports whether the client has left at most the outbound bound unread, and
// aborts the connection if it has not.
func (c *conn) outboundWithinBound() bool {
	if queued := c.out.queuedBytes(); queued > c.s.opts.maxQueuedBytes() {
		// Deliveries are bounded by the permits the client granted, but a client may grant
		// billions and then stop reading. Past this bound it is dropped rather than allowed to
		// pin unbounded memory; it reconnects and its unacknowledged messages are redelivered.
		c.log.Warn("closing connection: the client does not read what it asked for", "queuedBytes", queued)
		c.abort(fmt.Errorf("outbound queue of %d bytes: client not reading", queued))
		return false
	}
	return true
}

// sendError answers a request with ERROR.
func (c *conn) sendError(requestID uint64, err error) {
	code, msg := toServerError(err)
	c.sendCommand(&pulsarpb.CommandError{RequestId: proto.Uint64(requestID), Error: code.Enum(), Message: proto.String(msg)})
}

// sendSuccess answers a request with SUCCESS.
func (c *conn) sendSuccess(requestID uint64) {
	c.sendCommand(&pulsarpb.CommandSuccess{RequestId: proto.Uint64(requestID)})
}

// answerUnknown answers a command this server does not know or cannot decode: ERROR to its request
// id when one can be found, and a log line either way. The connection lives on.
func (c *conn) answerUnknown(f wire.Frame, err error) {
	c.log.Info("unsupported or malformed command", "type", f.Cmd.GetType().String(), "err", err)
	reqID, _ := requestIDOf(f.Cmd)
	c.sendCommand(&pulsarpb.CommandError{
		RequestId: proto.Uint64(reqID),
		Error:     pulsarpb.ServerError_NotAllowedError.Enum(),
		Message:   proto.String(fmt.Sprintf("command not supported by this broker: %v", err)),
	})
}

// requestIDOf finds the request_id of whatever sub-command cmd carries.
func requestIDOf(cmd *pulsarpb.BaseCommand) (uint64, bool) {
	if cmd == nil {
		return 0, false
	}
	var id uint64
	var found bool
	cmd.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind {
			return true
		}
		sub := v.Message()
		if f := sub.Descriptor().Fields().ByName("request_id"); f != nil && sub.Has(f) {
			id, found = sub.Get(f).Uint(), true
			return false
		}
		return true
	})
	return id, found
}
