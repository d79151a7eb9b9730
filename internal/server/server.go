// Package server is Meridian's Pulsar binary-protocol server (protocol v20, as spoken by
// pulsar-client-go v0.19.0 and the Java, C++ and Python clients). It accepts TCP connections, decodes
// frames with internal/wire and translates commands into calls on internal/broker; it owns sockets,
// per-connection goroutines and flow control, and no message semantics.
//
// # Files
//
//	server.go     Server, Options, accept loop, graceful close
//	conn.go       one connection: reader goroutine, writer goroutine, keepalive, throttling
//	outbox.go     the batched outbound queue (one writev per burst)
//	tls.go        connections on TLS listeners: bounded handshake, bursts written as large records
//	authn.go      authentication of CONNECT (Options.Authenticator)
//	authrefresh.go  expiring credentials: AUTH_CHALLENGE / AUTH_RESPONSE
//	connect.go    command dispatch, CONNECT/CONNECTED, PING/PONG
//	lookup.go     LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, topic name normalisation
//	ownership.go  several brokers per cluster: LOOKUP names the owner, non-owners refuse clients
//	produce.go    PRODUCER, SEND, SEND_RECEIPT/SEND_ERROR, CLOSE_PRODUCER
//	consume.go    SUBSCRIBE, FLOW, MESSAGE, ACK/ACK_RESPONSE, REDELIVER, SEEK, GET_LAST_MESSAGE_ID,
//	              UNSUBSCRIBE, CLOSE_CONSUMER, CONSUMER_STATS, ACTIVE_CONSUMER_CHANGE
//	errors.go     broker errors to ServerError codes (through wire's table)
//	schema.go, topics_of_namespace.go   schema commands and namespace listing (issue 4, features helper)
//
// # Command coverage
//
//	CONNECT                      CONNECTED {server_version, protocol_version = min(client, 20),
//	                             max_message_size}; versions below v6 get ERROR UnsupportedVersion;
//	                             with Options.Authenticator, credentials that do not authenticate
//	                             get ERROR AuthenticationError and the connection closes
//	AUTH_CHALLENGE / AUTH_RESPONSE  with Options.Authenticator: expired credentials are challenged
//	                             every AuthRefreshInterval; a valid answer of the same role keeps
//	                             the connection, anything else closes it
//	PING / PONG                  answered; the server pings idle connections itself
//	LOOKUP                       Connect, authoritative, brokerServiceUrl and brokerServiceUrlTls =
//	                             the advertised URLs of the listeners there are;
//	                             Failed + InvalidTopicName for bad names; with Options.Ownership,
//	                             Redirect (authoritative) to another broker that owns the topic,
//	                             or Failed + ServiceNotReady when it has no live owner in time
//	PARTITIONED_METADATA         partition count from the catalog (0: not partitioned, a partition,
//	                             or not created yet); missing namespace: TopicNotFound
//	GET_TOPICS_OF_NAMESPACE      topics of the mode's domains, partitions individually, pattern and
//	                             hash applied as Pulsar does (topics_of_namespace.go); missing
//	                             namespace: empty list
//	PRODUCER                     PRODUCER_SUCCESS {producer_name, last_sequence_id, topic_epoch,
//	                             schema_version}; producer_ready=false first for a queued
//	                             WaitForExclusive producer; initial_subscription_name creates that
//	                             durable subscription first; replicator producers ("pulsar.repl.")
//	                             pass Options.AdmitReplicator; with Options.Ownership, a topic
//	                             this broker does not own gets ServiceNotReady (also SUBSCRIBE)
//	SEND                         checksum verified; SEND_RECEIPT in order per producer, or SEND_ERROR
//	CLOSE_PRODUCER/CONSUMER      SUCCESS (also for unknown ids); sent by the server when the broker
//	                             closes one (unload, seek, fencing) and on shutdown
//	SUBSCRIBE, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, SEEK, GET_LAST_MESSAGE_ID, UNSUBSCRIBE,
//	CONSUMER_STATS               on the broker's consumer; ACK_RESPONSE when a request id is given
//	ACTIVE_CONSUMER_CHANGE       sent once the consumer's first FLOW shows the client has registered
//	                             it (or 500 ms after SUCCESS), never before
//	GET_SCHEMA, GET_OR_CREATE_SCHEMA   served from internal/schema (schema.go); PRODUCER and SUBSCRIBE
//	                             schemas are checked and registered there
//	anything else                ERROR NotAllowedError (transactions, AUTH_RESPONSE, WATCH_TOPIC_LIST)
//
// # Rules the server keeps
//
//   - Never send a command pulsar-client-go v0.19.0 does not handle (it drops the connection):
//     REACHED_END_OF_TOPIC and WATCH_TOPIC_* are never sent.
//   - A frame larger than max message size + 10 KiB, a frame whose sizes are inconsistent, a command
//     that does not decode (or lacks required fields), anything before CONNECT and a SEND for a
//     producer the connection never had close that connection with a logged reason. A command type
//     this build does not know gets ERROR and the connection lives on; so does a SEND with a wrong
//     checksum (SEND_ERROR ChecksumError) and a SEND for a producer closed a moment ago (dropped, as
//     Pulsar does: the client resends after re-creating it).
//   - Stored entries are the client's bytes from the magic on (magic and checksum added for
//     payloads without them); MESSAGE frames carry them unchanged, without copying.
//   - Throttling pauses reading (TCP flow control), never drops: a connection stops reading when it
//     has MaxPendingSends publishes or MaxPendingSendBytes bytes in flight, when the broker-wide
//     publish memory budget is exhausted, or when its own outbound queue exceeds MaxOutboundBytes. A client that granted
//     permits and stopped reading is disconnected at 4x MaxOutboundBytes queued.
//   - Every command type sent is checked against the list pulsar-client-go v0.19.0 handles.
//   - ACKs that report a corrupt message (validation_error) are not applied, so the message is
//     redelivered instead of lost.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/naming"
)

// Defaults for Options.
const (
	DefaultMaxMessageSize    = 5 * 1024 * 1024
	DefaultKeepAliveInterval = 30 * time.Second
	// DefaultAuthRefreshInterval is Pulsar's authenticationRefreshCheckSeconds default.
	DefaultAuthRefreshInterval = 60 * time.Second
	// DefaultMaxPendingSends is 4x Pulsar's maxPendingPublishRequestsPerConnection: a replication
	// link carries every replicated topic of a remote cluster on one connection, one SEND per entry,
	// and at 1000 the limit, not the disk, set the catch-up rate of unbatched entries (152-162k
	// against 191-211k msg/s at 4000, docs/performance.md). Memory stays bounded by the broker-wide
	// publish budget and MaxPendingSendBytes.
	DefaultMaxPendingSends = 4000
	// DefaultMaxPendingSendBytes bounds one connection's publishes in flight (read, not yet
	// stored) in bytes: an eighth of the broker-wide publish budget's default (256 MiB), so one
	// connection that pipelines SENDs faster than storage takes cannot exhaust the budget and stall
	// every other connection. A replication link, which carries a remote cluster's topics on one
	// connection, needs far less in flight than this to keep the disk busy.
	DefaultMaxPendingSendBytes = 32 * 1024 * 1024
	DefaultMaxOutboundBytes    = 64 * 1024 * 1024
	// FramePadding is what a frame may carry beyond the message: command, checksum, metadata.
	// Pulsar's clients use the same 10 KiB.
	FramePadding = 10 * 1024
	// ServerVersion is sent in CONNECTED.
	ServerVersion = "Meridian-0.1"
)

// Options configure a Server.
type Options struct {
	// Broker is the broker core the server drives. Required.
	Broker *broker.Broker
	// Catalog answers partition counts and lists partitioned topics; nil means none exist.
	Catalog Catalog
	// ServiceURL is this broker's advertised pulsar://host:port and ServiceURLTLS its
	// pulsar+ssl://host:port, both returned by LOOKUP (clients on TLS take the second). At least
	// one is required; an empty one means the broker has no such listener.
	ServiceURL, ServiceURLTLS string
	// MaxMessageSize is advertised in CONNECTED; frames above it plus FramePadding close the
	// connection. Zero means DefaultMaxMessageSize.
	MaxMessageSize int
	// KeepAliveInterval: the server pings a connection idle this long and closes it after twice this
	// long without any frame. Zero means DefaultKeepAliveInterval.
	KeepAliveInterval time.Duration
	// MaxPendingSends per connection: beyond it the connection stops reading until receipts go out.
	MaxPendingSends int
	// MaxPendingSendBytes per connection: beyond it the connection stops reading until storage
	// catches up. Zero means DefaultMaxPendingSendBytes; negative leaves only the broker-wide
	// budget (broker.Config.MaxPublishBytesInFlight).
	MaxPendingSendBytes int64
	// MaxOutboundBytes per connection: beyond it the connection stops reading until the client
	// drains its socket; at four times it the connection is closed (a client that granted permits
	// and stopped reading must not pin unbounded memory).
	MaxOutboundBytes int
	// Authenticator, when set, authenticates every CONNECT (authn.go): a connection whose
	// credentials fail gets ERROR AuthenticationError and is closed. Nil accepts every client.
	Authenticator *auth.Authenticator
	// MaxConnectionsPerAddress bounds the connections open from one source IP (Pulsar's
	// brokerMaxConnectionsPerIp); a connection beyond it is closed at once. 0 turns it off.
	MaxConnectionsPerAddress int
	// Authorizer, when set, checks every command that names a topic or namespace against the
	// connection's role (authz.go). Nil allows every command.
	Authorizer *auth.Authorizer
	// AuthRefreshInterval is how often a connection's credentials are checked for expiry
	// (authrefresh.go; Pulsar's authenticationRefreshCheckSeconds). Zero means
	// DefaultAuthRefreshInterval.
	AuthRefreshInterval time.Duration
	// AdmitReplicator decides whether a replicator producer (name "pulsar.repl.<source>-->...")
	// from cluster source may publish to topic (docs/design.md, "Replication invariants": the tenant must allow the source and
	// the namespace must exist). A refusal is sent as ERROR with the error's ServerError code, and
	// the remote replicator shows it as its lastError. nil admits every replicator.
	AdmitReplicator func(ctx context.Context, topic naming.TopicName, source string) error
	// Migration, if set, moves the clients of topics whose cluster or namespace is marked migrated
	// to the target cluster (switchover.go); nil: no topic ever migrates.
	Migration Migration
	// Ownership, if set, makes this broker one of several serving the cluster (ownership.go):
	// LOOKUP names each topic's owner, and only the owner serves its producers and consumers.
	Ownership Ownership
	// SwitchoverInterval is how often migrating topics are checked (DefaultSwitchoverInterval).
	SwitchoverInterval time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// maxQueuedBytes is the outbound queue size at which a connection is closed.
func (o *Options) maxQueuedBytes() int { return 4 * o.MaxOutboundBytes }

func (o *Options) setDefaults() error {
	if o.Broker == nil {
		return errors.New("server: Options.Broker is required")
	}
	if o.ServiceURL == "" && o.ServiceURLTLS == "" {
		return errors.New("server: Options.ServiceURL or ServiceURLTLS is required")
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.AuthRefreshInterval <= 0 {
		o.AuthRefreshInterval = DefaultAuthRefreshInterval
	}
	if o.KeepAliveInterval <= 0 {
		o.KeepAliveInterval = DefaultKeepAliveInterval
	}
	if o.MaxPendingSends <= 0 {
		o.MaxPendingSends = DefaultMaxPendingSends
	}
	switch {
	case o.MaxPendingSendBytes == 0:
		o.MaxPendingSendBytes = DefaultMaxPendingSendBytes
	case o.MaxPendingSendBytes < 0:
		o.MaxPendingSendBytes = 0 // the limiter's "no bound of its own"
	}
	if o.MaxOutboundBytes <= 0 {
		o.MaxOutboundBytes = DefaultMaxOutboundBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Server serves the binary protocol on any number of listeners.
type Server struct {
	opts Options
	log  *slog.Logger

	ctx    context.Context // ends when the server closes: every connection's parent
	cancel context.CancelFunc

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closed    bool
	wg        sync.WaitGroup // accept loops and connections

	nextConnID atomic.Uint64
	stats      serverStats
	perAddress *addrLimiter // nil: no per-address limit
}

// serverStats are counters for metrics and tests.
type serverStats struct {
	connsAccepted        atomic.Int64
	connsOpen            atomic.Int64
	framesIn             atomic.Int64
	badFrames            atomic.Int64 // connections closed for oversized or malformed frames
	tlsHandshakeFailures atomic.Int64
	authFailures         atomic.Int64 // connections closed because CONNECT did not authenticate
	authzFailures        atomic.Int64 // commands refused because the role lacks the permission
	// connsRefusedPerAddress: connections closed at accept by MaxConnectionsPerAddress.
	connsRefusedPerAddress atomic.Int64
	checksumErrors         atomic.Int64
	throttled              atomic.Int64 // times a connection paused reading
}

// Stats is a snapshot of the server's counters.
type Stats struct {
	ConnectionsAccepted int64
	ConnectionsOpen     int64
	FramesIn            int64
	BadFrames           int64
	// TLSHandshakeFailures counts connections on a TLS listener closed because the handshake
	// failed (a client certificate that does not verify, a plaintext client, a timeout).
	TLSHandshakeFailures int64
	// AuthenticationFailures counts connections closed because CONNECT did not authenticate.
	AuthenticationFailures int64
	// AuthorizationFailures counts commands refused because the role lacks the permission.
	AuthorizationFailures int64
	// RefusedPerAddress counts connections closed at accept by MaxConnectionsPerAddress.
	RefusedPerAddress int64
	ChecksumErrors    int64
	Throttled         int64
}

// New builds a server. Call Serve for each listener and Close to stop.
func New(opts Options) (*Server, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts:       opts,
		log:        opts.Logger.With("component", "server"),
		ctx:        ctx,
		cancel:     cancel,
		listeners:  map[net.Listener]struct{}{},
		conns:      map[*conn]struct{}{},
		perAddress: newAddrLimiter(opts.MaxConnectionsPerAddress),
	}
	if opts.Migration != nil {
		interval := opts.SwitchoverInterval
		if interval <= 0 {
			interval = DefaultSwitchoverInterval
		}
		s.wg.Add(1)
		go s.switchoverLoop(interval)
	}
	return s, nil
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return Stats{
		ConnectionsAccepted:    s.stats.connsAccepted.Load(),
		ConnectionsOpen:        s.stats.connsOpen.Load(),
		FramesIn:               s.stats.framesIn.Load(),
		BadFrames:              s.stats.badFrames.Load(),
		TLSHandshakeFailures:   s.stats.tlsHandshakeFailures.Load(),
		AuthenticationFailures: s.stats.authFailures.Load(),
		AuthorizationFailures:  s.stats.authzFailures.Load(),
		RefusedPerAddress:      s.stats.connsRefusedPerAddress.Load(),
		ChecksumErrors:         s.stats.checksumErrors.Load(),
		Throttled:              s.stats.throttled.Load(),
	}
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("server: closed")

// Serve accepts connections on ln until Close; it always returns a non-nil error (ErrServerClosed
// after Close). The server closes ln. A listener from tls.NewListener serves pulsar+ssl://: each
// connection completes its TLS handshake within the keepalive interval (tls.go).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				// Transient (EMFILE and the like): back off instead of spinning.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-s.ctx.Done():
					return ErrServerClosed
				}
			}
			return fmt.Errorf("server: accept on %s: %w", ln.Addr(), err)
		}
		backoff = 0
		s.startConn(nc)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) startConn(nc net.Conn) {
	raw := nc
	if tc, ok := nc.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetKeepAlive(true)
	}
	source := sourceOf(raw.RemoteAddr())
	if !s.perAddress.acquire(source) {
		s.stats.connsRefusedPerAddress.Add(1)
		s.log.Info("connection refused: too many connections from one address", "remote", source, "limit", s.opts.MaxConnectionsPerAddress)
		_ = nc.Close()
		return
	}
	c := newConn(s, nc, s.nextConnID.Add(1))
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.perAddress.release(source)
		_ = nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.stats.connsAccepted.Add(1)
	s.stats.connsOpen.Add(1)
	go func() {
		defer s.wg.Done()
		c.run()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.perAddress.release(source)
		s.stats.connsOpen.Add(-1)
	}()
}

// Close stops accepting, tells every client that its producers and consumers are closed
// (CLOSE_PRODUCER / CLOSE_CONSUMER, so clients reconnect elsewhere or retry), waits for in-flight
// publishes to be answered, and closes the connections. It returns when every goroutine has
// stopped, or ctx's error when ctx ends first (connections are then closed hard).
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for ln := range s.listeners {
		_ = ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()

	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.closeGracefully(ctx)
		}()
	}
	wg.Wait()
	s.cancel() // anything still running stops now

	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, c := range conns {
			c.abort(errors.New("server shutdown timed out"))
		}
		<-done
		return fmt.Errorf("server: close: %w", ctx.Err())
	}
}
