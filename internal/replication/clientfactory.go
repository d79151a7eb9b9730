package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/naming"
)

// ClusterDirectory is what the producer factory needs from the configuration store:
// *catalog.Catalog implements it.
type ClusterDirectory interface {
	// Cluster returns a registered cluster's URLs.
	Cluster(name string) (adminapi.ClusterData, bool)
	// PartitionedTopic returns the (local view of the) partitioned-topic metadata of a base topic.
	PartitionedTopic(topic string) (adminapi.PartitionedTopicMetadata, bool)
}

// ErrClusterNotRegistered: a replication target that is not in the cluster registry.
var ErrClusterNotRegistered = errors.New("replication: cluster not registered")

// ErrPartitionMismatch: the remote topic has another partition count than the local one. It is
// reported (lastError) and retried, never papered over.
var ErrPartitionMismatch = errors.New("replication: partition count mismatch")

// ClientFactoryOptions configure a ClientFactory.
type ClientFactoryOptions struct {
	Local    string           // this cluster's name
	Clusters ClusterDirectory // the cluster registry
	// Dialer replaces net.Dialer for the binary protocol (tests, fault proxies).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// HTTPClient is used for the remote admin API (creating partitioned topics); nil = a client with
	// a 10 s timeout.
	HTTPClient *http.Client
	// LocalSchemas reads this cluster's schema versions in process; nil reads them through this
	// cluster's admin API (its serviceUrl, without credentials).
	LocalSchemas LocalSchemaReader
	// LinkDefaults are the broker's brokerClient* settings: a link's TLS and credentials where the
	// remote cluster's data has none.
	LinkDefaults LinkDefaults
	Logger       *slog.Logger
}

// LocalSchemaReader returns version of topic's schema from this cluster's registry.
type LocalSchemaReader func(ctx context.Context, topic string, version int64) (adminapi.SchemaPayload, error)

// ClientFactory is the RemoteProducerFactory over internal/client: one client (connection pool)
// per remote cluster, rebuilt when the cluster's brokerServiceUrl changes.
type ClientFactory struct {
	opts    ClientFactoryOptions
	schemas schemaCache
	mu      sync.Mutex
	remotes map[string]*remoteClient
	closed  bool
}

type remoteClient struct {
	link linkConfig
	c    *client.Client
}

// NewClientFactory returns a factory; Close closes every remote client.
func NewClientFactory(opts ClientFactoryOptions) *ClientFactory {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &ClientFactory{opts: opts, remotes: map[string]*remoteClient{}}
}

func (f *ClientFactory) remote(name string) (*remoteClient, error) {
	cd, ok := f.opts.Clusters.Cluster(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q (register it with `meridianctl clusters create`)", ErrClusterNotRegistered, name)
	}
	if cd.BrokerServiceURL == "" && cd.BrokerServiceURLTLS == "" {
		return nil, fmt.Errorf("%w: %q has no brokerServiceUrl", ErrClusterNotRegistered, name)
	}
	link, err := linkConfigOf(name, cd, f.opts.LinkDefaults)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, client.ErrClosed
	}
	if rc := f.remotes[name]; rc != nil && rc.link.key == link.key {
		return rc, nil
	} else if rc != nil {
		_ = rc.c.Close() // the cluster moved or its link changed; producers on the old client fail and are recreated
	}
	c, err := client.New(client.Options{
		ServiceURL:    link.brokerURL,
		TLS:           link.tls,
		Auth:          link.creds,
		ClientVersion: "meridian-replicator",
		Dialer:        f.opts.Dialer,
		Logger:        f.opts.Logger.With("remote_cluster", name),
	})
	if err != nil {
		return nil, fmt.Errorf("replication: client for cluster %q: %w", name, err)
	}
	rc := &remoteClient{link: link, c: c}
	f.remotes[name] = rc
	return rc, nil
}

// NewProducer implements RemoteProducerFactory. For a partition it first makes sure the remote
// partitioned topic exists with the local partition count (creating it through the remote's admin
// API if it does not exist; a different count is ErrPartitionMismatch).
func (f *ClientFactory) NewProducer(ctx context.Context, remote, topic, producerName string) (RemoteProducer, error) {
	rc, err := f.remote(remote)
	if err != nil {
		return nil, err
	}
	if err := f.preparePartitions(ctx, rc, remote, topic); err != nil {
		return nil, err
	}
	p, err := rc.c.CreateProducer(ctx, client.ProducerOptions{Topic: topic, Name: producerName, MaxPending: DefaultMaxInflightEntries})
	if err != nil {
		return nil, fmt.Errorf("create producer %s on %s: %w", producerName, remote, err)
	}
	return &clientProducer{p: p}, nil
}

func (f *ClientFactory) preparePartitions(ctx context.Context, rc *remoteClient, remote, topic string) error {
	tn, err := naming.ParseTopic(topic)
	if err != nil || !tn.IsPartition() {
		return nil
	}
	base := tn.Base().String()
	pm, ok := f.opts.Clusters.PartitionedTopic(base)
	if !ok || pm.Partitions <= 0 {
		return nil
	}
	want := pm.Partitions
	got, err := rc.c.PartitionedMetadata(ctx, base)
	if err != nil {
		return fmt.Errorf("partitioned metadata of %s on %s: %w", base, remote, err)
	}
	if got == 0 {
		if rc.link.adminURL == "" {
			return fmt.Errorf("%w: %s is not partitioned on %s, which has no serviceUrl to create it", ErrPartitionMismatch, base, remote)
		}
		admin, err := adminapi.NewClient(rc.link.adminURL, rc.link.httpClient(f.opts.HTTPClient))
		if err != nil {
			return fmt.Errorf("admin client for %s: %w", remote, err)
		}
		if err := admin.CreateTopic(ctx, base, want, nil); err != nil {
			// Another broker may have created it meanwhile; the check below decides.
			f.opts.Logger.Debug("create partitioned topic on remote", "remote_cluster", remote, "topic", base, "err", err)
		}
		if got, err = rc.c.PartitionedMetadata(ctx, base); err != nil {
			return fmt.Errorf("partitioned metadata of %s on %s: %w", base, remote, err)
		}
	}
	if got != want {
		return fmt.Errorf("%w: %s has %d partitions here and %d on %s", ErrPartitionMismatch, base, want, got, remote)
	}
	return nil
}

// forget drops the client of a cluster whose registry entry changed, if its URL or link security
// changed; producers on it fail and the replicators create new ones against the new settings.
func (f *ClientFactory) forget(name string) {
	cd, ok := f.opts.Clusters.Cluster(name)
	var link linkConfig
	if ok {
		var err error
		if link, err = linkConfigOf(name, cd, f.opts.LinkDefaults); err != nil {
			ok = false // unusable now: drop the client; the next producer reports why
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rc := f.remotes[name]
	if rc == nil || (ok && rc.link.key == link.key) {
		return
	}
	delete(f.remotes, name)
	_ = rc.c.Close()
}

// Close closes every remote client (and with them their producers).
func (f *ClientFactory) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	var errs []error
	for name, rc := range f.remotes {
		if err := rc.c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close client of %s: %w", name, err))
		}
	}
	f.remotes = map[string]*remoteClient{}
	return errors.Join(errs...)
}

// clientProducer adapts *client.Producer. The client reconnects by itself and resends what is
// pending, in order; a SEND_ERROR fails the send, and the replicator then starts over with a new
// producer from its oldest unacknowledged entry.
type clientProducer struct {
	p *client.Producer
	// msgs is SendBatch's reused conversion buffer (the client copies what it keeps; SendBatch
	// is called from the replicator's loop only).
	msgs []client.RawMessage
}

func (c *clientProducer) Send(out Outbound, done func(error)) {
	err := c.p.SendRawAsync(context.Background(), client.RawMessage{Entry: out.Data, Body: out.Body, Info: out.Info}, func(_ client.MessageID, err error) { done(err) })
	if err != nil {
		done(err)
	}
}

// SendBatch sends several entries with one call into the client (see batchSender).
func (c *clientProducer) SendBatch(outs []Outbound, done func(i int, err error)) {
	msgs := c.msgs[:0]
	for _, o := range outs {
		msgs = append(msgs, client.RawMessage{Entry: o.Data, Body: o.Body, Info: o.Info})
	}
	c.p.SendRawBatchAsync(context.Background(), msgs, func(i int, _ client.MessageID, err error) { done(i, err) })
	clear(msgs) // drop the entries' bytes
	c.msgs = msgs[:0]
}

// Close abandons what is pending (the replicator resends it from its cursor) and closes the producer
// on the broker, so that a new producer with the same name is not refused as busy. It uses the
// client's Abort when it has one; Close otherwise (which first waits for pending receipts).
func (c *clientProducer) Close(ctx context.Context) error {
	if a, ok := any(c.p).(interface{ Abort(context.Context) error }); ok {
		return a.Abort(ctx)
	}
	return c.p.Close(ctx)
}

// Connected reports whether the producer's connection is up (for stats).
func (c *clientProducer) Connected() bool { return c.p.Connected() }

// LastError is the client's most recent connection or send failure.
func (c *clientProducer) LastError() error { return c.p.LastError() }

// DisconnectedSince is when the producer's connection was lost (zero while connected).
func (c *clientProducer) DisconnectedSince() time.Time { return c.p.DisconnectedSince() }

// Reconnects counts the client's own reconnections of this producer.
func (c *clientProducer) Reconnects() int64 { return c.p.Reconnects() }
