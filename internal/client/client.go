// Package client is a small Pulsar binary-protocol client built on package wire: connections with
// CONNECT/CONNECTED and keep-alive, lookups, a pipelining Producer (with SendRaw for forwarding
// stored entries unchanged, as the replicator does) and a Consumer with flow control, acks and seek.
// Producers and consumers reconnect by themselves with backoff (100 ms doubling to 5 s).
//
// Write path: a connection's writer sends every frame queued since its last write in one writev
// (heads and small payloads copied into one reused buffer, payloads above 8 KiB sent from where they
// are); SEND heads are encoded and SEND_RECEIPTs decoded with protowire, everything else with
// protobuf through package wire. SendRawBatchAsync queues many forwarded entries with one lock.
//
// It is not a full Pulsar client: producer batching is basic (BatchingMaxMessages), no compression codecs, no
// partition routing (use PartitionedMetadata and one producer per partition), no schemas, no TLS or
// authentication, no transactions.
//
// Concurrency: every goroutine belongs to a connection, producer or consumer and stops with its
// Close (Client.Close closes everything). Blocking calls take a context first.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// ErrClosed is returned by operations on a closed client, producer or consumer.
var ErrClosed = errors.New("client: closed")

// Options configure a Client. Zero values take the defaults in the comments.
type Options struct {
	// ServiceURL is the broker to look topics up on: pulsar://host:port (or host:port), or
	// pulsar+ssl://host:port for TLS (port 6651 by default); several brokers of one cluster as
	// pulsar://h1:6650,h2:6650, asked in turn.
	ServiceURL string
	// TLS configures connections to a pulsar+ssl:// ServiceURL (and to the brokerServiceUrlTls
	// lookups answer with). nil: TLS 1.2 or later, verified against the system's roots. An empty
	// ServerName is the host dialed, so the broker's certificate must name it. Setting TLS for a
	// pulsar:// URL is an error.
	TLS *tls.Config
	// Auth, when set, supplies the credentials sent in CONNECT and in answer to the broker's
	// AUTH_CHALLENGE; nil sends none.
	Auth Credentials
	// ClientVersion is sent in CONNECT. Default "meridian-client".
	ClientVersion string
	// OperationTimeout bounds the handshake and, when the caller's context has no deadline, the
	// setup of producers and consumers. Default 30 s.
	OperationTimeout time.Duration
	// KeepAliveInterval: a PING is sent this often, and a connection silent for twice as long is
	// closed. Default 30 s.
	KeepAliveInterval time.Duration
	// MinBackoff and MaxBackoff bound reconnection delays. Defaults 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// Dialer replaces net.Dialer (tests, fault proxies).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.ClientVersion == "" {
		o.ClientVersion = "meridian-client"
	}
	if o.OperationTimeout <= 0 {
		o.OperationTimeout = 30 * time.Second
	}
	if o.KeepAliveInterval <= 0 {
		o.KeepAliveInterval = 30 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Client holds connections (one per broker address) and the client-wide id counters.
type Client struct {
	opts Options
	// serviceAddrs are the service URL's hosts (pulsar://h1:6650,h2:6650 names several brokers of
	// one cluster); requests go to them in turn, skipping one that cannot be reached.
	serviceAddrs []string
	nextService  atomic.Uint32

	reqID, producerID, consumerID atomic.Uint64

	mu        sync.Mutex
	closed    bool
	pool      map[string]*poolEntry
	producers map[*Producer]struct{}
	consumers map[*Consumer]struct{}
}

type poolEntry struct {
	mu sync.Mutex // held while dialing, so one dial per address at a time
	c  *conn
}

// New returns a client for opts.ServiceURL. It does not connect until first used.
func New(opts Options) (*Client, error) {
	opts.setDefaults()
	addrs, useTLS, err := serviceAddrs(opts.ServiceURL)
	if err != nil {
		return nil, err
	}
	switch {
	case useTLS && opts.TLS == nil:
		opts.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	case !useTLS && opts.TLS != nil:
		return nil, fmt.Errorf("client: TLS is configured but the service URL %q is not pulsar+ssl://", opts.ServiceURL)
	}
	return &Client{
		opts:         opts,
		serviceAddrs: addrs,
		pool:         make(map[string]*poolEntry),
		producers:    make(map[*Producer]struct{}),
		consumers:    make(map[*Consumer]struct{}),
	}, nil
}

// serviceAddr accepts pulsar://host:port, pulsar+ssl://host:port, host:port, or a URL without
// port (6650, 6651 for TLS), and says whether the URL asks for TLS.
func serviceAddr(s string) (addr string, useTLS bool, err error) {
	if s == "" {
		return "", false, errors.New("client: empty service URL")
	}
	if !strings.Contains(s, "://") {
		s = "pulsar://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", false, fmt.Errorf("client: service URL %q: %w", s, err)
	}
	port := "6650"
	switch u.Scheme {
	case "pulsar":
	case "pulsar+ssl":
		useTLS, port = true, "6651"
	default:
		return "", false, fmt.Errorf("client: service URL %q: only pulsar:// and pulsar+ssl:// are supported", s)
	}
	if u.Host == "" {
		return "", false, fmt.Errorf("client: service URL %q: no host", s)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), port), useTLS, nil
	}
	return u.Host, useTLS, nil
}

// serviceAddrs is serviceAddr for a service URL that may name several hosts of one scheme,
// "pulsar://h1:6650,h2:6650" (each host without a port gets the scheme's default).
func serviceAddrs(s string) (addrs []string, useTLS bool, err error) {
	scheme, hosts, found := strings.Cut(s, "://")
	if !found {
		scheme, hosts = "pulsar", s
	}
	for i, h := range strings.Split(hosts, ",") {
		addr, tls, err := serviceAddr(scheme + "://" + strings.TrimSpace(h))
		if err != nil {
			return nil, false, err
		}
		if i > 0 && tls != useTLS {
			return nil, false, fmt.Errorf("client: service URL %q mixes schemes", s)
		}
		addrs, useTLS = append(addrs, addr), tls
	}
	return addrs, useTLS, nil
}

// serviceConn connects to one of the service URL's hosts, starting with the next in turn and
// trying the others when one cannot be reached.
func (c *Client) serviceConn(ctx context.Context) (*conn, string, error) {
	start := int(c.nextService.Add(1))
	var errs []error
	for i := range c.serviceAddrs {
		addr := c.serviceAddrs[(start+i)%len(c.serviceAddrs)]
		cn, err := c.connTo(ctx, addr)
		if err == nil {
			return cn, addr, nil
		}
		if ctx.Err() != nil {
			return nil, "", err
		}
		errs = append(errs, err)
	}
	return nil, "", errors.Join(errs...)
}

// hostPort is serviceAddr for a URL of the scheme the client uses.
func (c *Client) hostPort(s string) (string, error) {
	addr, useTLS, err := serviceAddr(s)
	if err != nil {
		return "", err
	}
	if useTLS != (c.opts.TLS != nil) {
		return "", fmt.Errorf("client: broker URL %q is not of the client's scheme", s)
	}
	return addr, nil
}

// Close closes every producer, consumer and connection of the client. It does not wait for
// pending sends; use Producer.Close(ctx) first for that.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	producers, consumers := c.producers, c.consumers
	c.producers, c.consumers = nil, nil
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for p := range producers {
		p.shutdown(ctx, ErrClosed)
	}
	for cs := range consumers {
		cs.shutdown(ctx, ErrClosed)
	}
	c.mu.Lock()
	pool := c.pool
	c.pool = map[string]*poolEntry{}
	c.mu.Unlock()
	for _, e := range pool {
		e.mu.Lock()
		if e.c != nil {
			e.c.close(ErrClosed)
		}
		e.mu.Unlock()
	}
	return nil
}

func (c *Client) nextRequestID() uint64 { return c.reqID.Add(1) }

// opContext applies OperationTimeout when ctx has no deadline.
func (c *Client) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.opts.OperationTimeout)
}

// connTo returns a live connection to addr, dialing if needed.
func (c *Client) connTo(ctx context.Context, addr string) (*conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	e := c.pool[addr]
	if e == nil {
		e = &poolEntry{}
		c.pool[addr] = e
	}
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.c != nil && !e.c.isClosed() {
		return e.c, nil
	}
	if e.c != nil {
		e.c.close(nil) // reap its goroutines
		e.c = nil
	}
	cn, err := dialConn(ctx, &c.opts, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		cn.close(ErrClosed)
		return nil, ErrClosed
	}
	e.c = cn
	return cn, nil
}

// Lookup asks the service broker which broker serves topic and returns its host:port, following
// redirects (at most 20).
func (c *Client) Lookup(ctx context.Context, topic string) (string, error) {
	name, err := normalizeTopic(topic)
	if err != nil {
		return "", err
	}
	addr := ""
	authoritative := false
	for hop := 0; hop < 20; hop++ {
		var cn *conn
		var err error
		if addr == "" {
			cn, _, err = c.serviceConn(ctx)
		} else {
			cn, err = c.connTo(ctx, addr)
		}
		if err != nil {
			return "", err
		}
		id := c.nextRequestID()
		resp, err := cn.request(ctx, id, wire.Command(&pulsarpb.CommandLookupTopic{
			Topic: ptr(name), RequestId: ptr(id), Authoritative: ptr(authoritative),
		}))
		if err != nil {
			return "", fmt.Errorf("client: lookup %s: %w", name, err)
		}
		if err := errorOf(resp); err != nil {
			return "", fmt.Errorf("client: lookup %s: %w", name, err)
		}
		lr := resp.GetLookupTopicResponse()
		if lr == nil {
			return "", fmt.Errorf("client: lookup %s: unexpected %s", name, resp.GetType())
		}
		switch lr.GetResponse() {
		case pulsarpb.CommandLookupTopicResponse_Connect, pulsarpb.CommandLookupTopicResponse_Redirect:
			u := lr.GetBrokerServiceUrl()
			if c.opts.TLS != nil {
				u = lr.GetBrokerServiceUrlTls()
				if u == "" {
					return "", fmt.Errorf("client: lookup %s: the broker answered without a pulsar+ssl:// URL", name)
				}
			}
			next, err := c.hostPort(u)
			if err != nil {
				return "", fmt.Errorf("client: lookup %s: %w", name, err)
			}
			if lr.GetResponse() == pulsarpb.CommandLookupTopicResponse_Connect {
				return next, nil
			}
			addr, authoritative = next, lr.GetAuthoritative()
		default:
			return "", fmt.Errorf("client: lookup %s: %w", name, wire.ErrorFromServer(lr.GetError(), lr.GetMessage()))
		}
	}
	return "", fmt.Errorf("client: lookup %s: too many redirects", name)
}

// PartitionedMetadata returns the topic's partition count (0: not partitioned).
func (c *Client) PartitionedMetadata(ctx context.Context, topic string) (int, error) {
	name, err := normalizeTopic(topic)
	if err != nil {
		return 0, err
	}
	cn, _, err := c.serviceConn(ctx)
	if err != nil {
		return 0, err
	}
	id := c.nextRequestID()
	resp, err := cn.request(ctx, id, wire.Command(&pulsarpb.CommandPartitionedTopicMetadata{Topic: ptr(name), RequestId: ptr(id)}))
	if err != nil {
		return 0, fmt.Errorf("client: partitioned metadata %s: %w", name, err)
	}
	if err := errorOf(resp); err != nil {
		return 0, fmt.Errorf("client: partitioned metadata %s: %w", name, err)
	}
	pm := resp.GetPartitionMetadataResponse()
	if pm == nil {
		return 0, fmt.Errorf("client: partitioned metadata %s: unexpected %s", name, resp.GetType())
	}
	if pm.Error != nil || pm.GetResponse() == pulsarpb.CommandPartitionedTopicMetadataResponse_Failed {
		return 0, fmt.Errorf("client: partitioned metadata %s: %w", name, wire.ErrorFromServer(pm.GetError(), pm.GetMessage()))
	}
	return int(pm.GetPartitions()), nil
}

// connectTopic looks the topic up and returns a connection to its broker.
func (c *Client) connectTopic(ctx context.Context, topic string) (*conn, error) {
	addr, err := c.Lookup(ctx, topic)
	if err != nil {
		return nil, err
	}
	return c.connTo(ctx, addr)
}

func (c *Client) register(p *Producer, cs *Consumer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if p != nil {
		c.producers[p] = struct{}{}
	}
	if cs != nil {
		c.consumers[cs] = struct{}{}
	}
	return nil
}

func (c *Client) unregister(p *Producer, cs *Consumer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p != nil {
		delete(c.producers, p)
	}
	if cs != nil {
		delete(c.consumers, cs)
	}
}

// normalizeTopic turns short names into persistent://tenant/namespace/topic.
func normalizeTopic(topic string) (string, error) {
	t, err := naming.ParseTopic(topic)
	if err != nil {
		return "", fmt.Errorf("client: %w", err)
	}
	return t.String(), nil
}

// backoff yields reconnection delays: min, doubling, capped at max.
type backoff struct {
	min, max, next time.Duration
}

func newBackoff(o *Options) backoff { return backoff{min: o.MinBackoff, max: o.MaxBackoff} }

func (b *backoff) delay() time.Duration {
	if b.next == 0 {
		b.next = b.min
	}
	d := b.next
	b.next *= 2
	if b.next > b.max {
		b.next = b.max
	}
	return d
}

func (b *backoff) reset() { b.next = 0 }

// sleepCtx waits d or until stop is closed; false if stopped.
func sleepCtx(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// closeContext bounds a CLOSE_PRODUCER/CLOSE_CONSUMER request. It is sent even when ctx has ended
// (a producer left registered would block a successor with the same name): it keeps ctx's deadline
// while that is in the future, and otherwise allows the operation timeout.
func closeContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 0 {
		return context.WithDeadline(base, dl)
	}
	return context.WithTimeout(base, timeout)
}
