// Package brokertest starts Meridian brokers in-process for tests, as net/http/httptest starts
// HTTP servers: each broker listens on free loopback ports with its data in a temporary directory,
// and is stopped when the test ends.
//
//	b := brokertest.Start(t)
//	client, _ := pulsar.NewClient(pulsar.ClientOptions{URL: b.ServiceURL})
//	admin := adminapi.NewClient(b.AdminURL) // or pulsaradmin with b.AdminURL
//	...
//	b.Restart() // same ports, same data dir: what a client sees across a broker restart
//
// The broker is a full node (internal/node): real TCP, real storage files with fsync, the local
// metadata store, bootstrap of cluster, tenant public and namespace public/default. Set
// MERIDIAN_TEST_LOG=debug (or info) to see its logs on stderr.
package brokertest

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/node"
)

// Broker is a running (or stopped) in-process broker.
type Broker struct {
	// ServiceURL is the binary-protocol URL, pulsar://127.0.0.1:port.
	ServiceURL string
	// AdminURL is the admin REST URL, http://127.0.0.1:port.
	AdminURL string
	// Cluster is the broker's cluster name.
	Cluster string
	// DataDir holds the broker's storage and local metadata; it survives Restart.
	DataDir string

	t    testing.TB
	opts node.Options

	mu   sync.Mutex
	node *node.Node // nil while stopped
}

// Option configures Start.
type Option func(*node.Options)

// WithCluster sets the cluster name (default "standalone").
func WithCluster(name string) Option { return func(o *node.Options) { o.Cluster = name } }

// WithDataDir uses dir instead of a fresh temporary directory (to start a broker on the data of
// an earlier one).
func WithDataDir(dir string) Option { return func(o *node.Options) { o.DataDir = dir } }

// WithMaxMessageSize sets --max-message-size (the client's own test suite expects 1048576).
func WithMaxMessageSize(n int) Option { return func(o *node.Options) { o.MaxMessageSize = n } }

// WithDedup sets the broker-wide producer deduplication default (--dedup).
func WithDedup(on bool) Option { return func(o *node.Options) { o.Dedup = on } }

// WithAutoTopicCreation sets --auto-topic-creation (default true).
func WithAutoTopicCreation(on bool) Option {
	return func(o *node.Options) { o.AutoTopicCreation = on }
}

// WithFsyncInterval acknowledges before fsync (--fsync=interval): faster, not crash-safe.
func WithFsyncInterval() Option { return func(o *node.Options) { o.Fsync = node.FsyncInterval } }

// WithKeepAliveInterval shortens the server's keepalive (ping after this much silence, close after
// twice as much) for tests of dead-connection handling.
func WithKeepAliveInterval(d time.Duration) Option {
	return func(o *node.Options) { o.KeepAliveInterval = d }
}

// WithAddrs binds the binary protocol and web listeners to these addresses instead of free
// loopback ports.
func WithAddrs(brokerAddr, webAddr string) Option {
	return func(o *node.Options) { o.BrokerAddr, o.WebAddr = brokerAddr, webAddr }
}

// WithLogger sends the broker's logs to logger.
func WithLogger(logger *slog.Logger) Option { return func(o *node.Options) { o.Logger = logger } }

// WithNodeOptions edits the full node options (anything the other options do not cover).
func WithNodeOptions(edit func(*node.Options)) Option { return Option(edit) }

// Start starts a broker and registers its shutdown with t.Cleanup. It fails the test if the broker
// does not become ready.
func Start(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	o := node.DefaultOptions()
	o.BrokerAddr = "127.0.0.1:0"
	o.WebAddr = "127.0.0.1:0"
	o.DataDir = ""
	o.Logger = testLogger()
	for _, opt := range opts {
		opt(&o)
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	b := &Broker{t: t, opts: o, DataDir: o.DataDir, Cluster: o.Cluster}
	b.start()
	t.Cleanup(b.Stop)
	return b
}

func (b *Broker) start() {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, b.opts)
	if err != nil {
		b.t.Fatalf("brokertest: start broker %s: %v", b.opts.Cluster, err)
	}
	// Later restarts reuse the ports picked now, so clients reconnect to the same URLs.
	b.opts.BrokerAddr = n.BrokerAddr().String()
	b.opts.WebAddr = n.WebAddr().String()
	b.mu.Lock()
	b.node = n
	b.ServiceURL = n.ServiceURL()
	b.AdminURL = n.WebURL()
	b.mu.Unlock()
}

// Stop shuts the broker down gracefully (as SIGTERM does). Stopping a stopped broker is a no-op.
func (b *Broker) Stop() {
	b.mu.Lock()
	n := b.node
	b.node = nil
	b.mu.Unlock()
	if n == nil {
		return
	}
	if err := n.Close(); err != nil {
		b.t.Errorf("brokertest: stop broker %s: %v", b.opts.Cluster, err)
	}
}

// Restart stops the broker (if running) and starts it again on the same ports and data dir.
func (b *Broker) Restart() {
	b.t.Helper()
	b.Stop()
	b.start()
}

// Running reports whether the broker is started.
func (b *Broker) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.node != nil
}

// Node returns the running node (nil while stopped), for tests that need its internals.
func (b *Broker) Node() *node.Node {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.node
}

// Options returns the node options the broker runs with (ports resolved after the first start).
func (b *Broker) Options() node.Options { return b.opts }

func testLogger() *slog.Logger {
	var level slog.Level
	switch strings.ToLower(os.Getenv("MERIDIAN_TEST_LOG")) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn":
		level = slog.LevelWarn
	default:
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// Cluster is one member of a multi-cluster setup started by StartClusters.
type Cluster = Broker

// StartClusters starts one broker per name in this process, sharing an in-memory configuration
// store (as `meridian standalone --clusters` does), and makes namespace public/default replicate
// between all of them (full mesh) over real TCP. opts apply to every broker (WithCluster is
// overridden by the names). The brokers stop when the test ends; each can be stopped and
// restarted on its own.
func StartClusters(t testing.TB, names []string, opts ...Option) []*Cluster {
	t.Helper()
	if len(names) < 2 {
		t.Fatalf("brokertest: StartClusters needs at least two names, got %v", names)
	}
	shared := memstore.New()
	t.Cleanup(func() { _ = shared.Close() }) // registered first: runs after the brokers stopped
	out := make([]*Cluster, 0, len(names))
	for _, name := range names {
		all := append(append([]Option(nil), opts...), WithCluster(name), WithNodeOptions(func(o *node.Options) {
			o.SharedConfigStore = shared
		}))
		out = append(out, Start(t, all...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := node.ReplicateFullMesh(ctx, out[0].Node(), names); err != nil {
		t.Fatalf("brokertest: %v", err)
	}
	return out
}
