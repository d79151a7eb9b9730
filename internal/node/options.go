package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/server"
)

// Defaults of the command-line contract (docs/operations.md).
const (
	DefaultCluster              = "standalone"
	DefaultDataDir              = "./data"
	DefaultBrokerAddr           = "127.0.0.1:6650"
	DefaultWebAddr              = "127.0.0.1:8080"
	DefaultMaxMessageSize       = 5 * 1024 * 1024
	DefaultKeepAliveInterval    = 30 * time.Second
	DefaultShutdownTimeout      = 5 * time.Second
	DefaultLoadSheddingInterval = time.Minute
	DefaultHandOverTimeout      = time.Minute
	DefaultReplicationStartAt   = ReplicationStartLatest
	// DefaultFsyncPipeline: two group-commit fsyncs may run at once (see storage's pipelinesync.go).
	DefaultFsyncPipeline = 2
	// MaxFsyncPipeline bounds --fsync-pipeline.
	MaxFsyncPipeline = 16
	// DefaultDirectWriteBytes: a topic's share of one group commit from which its entries are
	// written once, straight to its segment file (see storage's directwrite.go).
	DefaultDirectWriteBytes = 1 << 20
	// DefaultBypassCacheBytes: segment writes and reads from this size on bypass the page cache
	// (see storage's unbuffered.go).
	DefaultBypassCacheBytes = 64 << 10
	// DefaultReplicationMemoryBytes: what all replicators of the broker may hold at once, read and
	// not yet acknowledged by their remote (see replication's budget.go).
	DefaultReplicationMemoryBytes = replication.DefaultReplicationMemoryBytes
	// DefaultEntryCacheBytes: the entry cache's default bound. Consumers and replicators that keep
	// up read the last milliseconds of a topic, which 16 MiB holds at 50,000 msg/s x 1 KiB many
	// times over; a cached entry keeps its whole write buffer and the collector's headroom doubles
	// what is live, so each cached MiB costs about 2.5 MiB of RSS (docs/performance.md, "Memory").
	DefaultEntryCacheBytes = 16 << 20
	// DefaultReplicationStallTimeout: see Options.ReplicationStallTimeout.
	DefaultReplicationStallTimeout = replication.DefaultStallTimeout

	// MinMaxMessageSize and MaxMaxMessageSize bound --max-message-size. The upper bound keeps one
	// frame (message + 10 KiB of framing) far below what a 32-bit frame size can express and within
	// what the storage engine accepts as one entry.
	MinMaxMessageSize = 1024
	MaxMaxMessageSize = 128 * 1024 * 1024
	// MinOutboundBytes bounds --max-outbound-bytes from below: a connection must be able to queue
	// a few messages.
	MinOutboundBytes = 64 << 10
)

// FsyncMode says when a SEND is acknowledged relative to fsync.
type FsyncMode string

const (
	// FsyncAlways: the receipt goes out only after the entry is fsync'd (group commit). The default.
	FsyncAlways FsyncMode = "always"
	// FsyncInterval: the receipt goes out once the entry is written; fsync happens periodically. A
	// crash can lose acknowledged messages. Shown in the startup log and in metrics.
	FsyncInterval FsyncMode = "interval"
)

// ReplicationStartAt is where a new replicator starts on a topic that already has data.
type ReplicationStartAt string

const (
	ReplicationStartEarliest ReplicationStartAt = "earliest"
	ReplicationStartLatest   ReplicationStartAt = "latest"
)

// Options configures one broker (one cluster of one broker). The zero value is not usable; start
// from DefaultOptions.
type Options struct {
	// Cluster is this cluster's name.
	Cluster string
	// DataDir holds storage and the local metadata store. It is bound to Cluster on first use: a data
	// dir that belongs to another cluster is refused.
	DataDir string
	// BrokerAddr is the Pulsar binary protocol listener ("host:port"; port 0 picks a free port).
	// Empty turns it off, which needs BrokerTLSAddr.
	BrokerAddr string
	// WebAddr is the admin REST and /metrics listener ("host:port"; port 0 picks a free port).
	// Empty turns it off, which needs WebTLSAddr.
	WebAddr string
	// BrokerTLSAddr (pulsar+ssl://) and WebTLSAddr (https://) are the TLS listeners; empty means
	// none. Both present TLS's identity (tls.go).
	BrokerTLSAddr, WebTLSAddr string
	// TLS is the TLS listeners' identity and policy: certificate, key and CA files, client
	// certificates, versions, cipher suites, how often the files are read again.
	TLS config.TLS
	// Auth is authentication (authn.go): providers, their keys, the anonymous role. Authorization
	// settings are not acted on.
	Auth config.Auth
	// BrokerClient is the broker's own TLS and credentials for outgoing links (Pulsar's
	// brokerClient* keys): a replication link uses them where the remote cluster's data has none
	// (replication.LinkDefaults).
	BrokerClient config.BrokerClient
	// AdvertisedAddress is the host put into the cluster's URLs and LOOKUP answers. Empty means the
	// listener's host (which must then not be a wildcard address).
	AdvertisedAddress string
	// ConfigStore is the configuration store URL ("etcd://h1:2379,h2:2379/prefix"); empty means the
	// cluster's own local store.
	ConfigStore string
	// SharedConfigStore, when set, is used as the configuration store instead of ConfigStore (the
	// in-process store shared by the clusters of `--clusters` mode and brokertest). The node does
	// not close it.
	SharedConfigStore metadata.Store
	// MetadataStore is the cluster-local metadata store URL ("etcd://h1:2379/prefix"), shared by
	// the brokers of one cluster (docs/cluster.md); empty means this broker's own bbolt file and a
	// cluster of one broker.
	MetadataStore string
	// SharedMetadataStore, when set, is used as the cluster-local store instead of MetadataStore
	// (the in-process store shared by the brokers of `--brokers N`). The node does not close it.
	SharedMetadataStore metadata.Store
	// BrokerID names this broker in its cluster (it owns bundles under this name). Empty: the id
	// recorded in the data dir, or on the first start the advertised binary address.
	BrokerID string
	// LookupHoldTimeout bounds how long a lookup of a bundle without a live owner waits before
	// ServiceNotReady (default cluster.DefaultHoldTimeout).
	LookupHoldTimeout time.Duration
	// ClusterSessionTTL is how long this broker's registration outlives it (default
	// cluster.DefaultSessionTTL).
	ClusterSessionTTL time.Duration
	// LoadSheddingInterval is how often a broker of a cluster checks whether it serves more
	// bundles than its share and hands one over (Pulsar's loadBalancerSheddingIntervalMinutes;
	// zero: DefaultLoadSheddingInterval; negative: no load shedding).
	LoadSheddingInterval time.Duration
	// HandOverTimeout bounds how long a stopping broker of a cluster spends handing its bundles
	// over to the other brokers (zero: DefaultHandOverTimeout; negative: it does not hand them
	// over, and they wait for it to come back).
	HandOverTimeout time.Duration
	// ReplicationStartAt: where a new replicator starts on a topic that already has data.
	ReplicationStartAt ReplicationStartAt
	// MaxMessageSize is advertised in CONNECTED and enforced on SEND.
	MaxMessageSize int
	// MaxPendingPublishRequests and MaxPendingPublishBytes bound one connection's publishes in
	// flight (read, not yet stored): beyond either the connection stops being read until storage
	// catches up. Zero means the server's default (4000, 32 MiB); a negative MaxPendingPublishBytes
	// leaves only the broker-wide publish budget.
	MaxPendingPublishRequests int
	MaxPendingPublishBytes    int64
	// MaxOutboundBytes bounds what is queued to one client that does not read: beyond it the
	// connection stops being read, at four times it the connection is closed. Zero means the
	// server's default (64 MiB).
	MaxOutboundBytes int
	// MaxConnectionsPerIP bounds the binary-protocol connections open from one source address
	// (Pulsar's brokerMaxConnectionsPerIp); 0 turns it off.
	MaxConnectionsPerIP int
	// Fsync says whether receipts wait for fsync.
	Fsync FsyncMode
	// FsyncPipeline bounds the group commits whose fsync runs at once with FsyncAlways (the next
	// group commit is written while the previous one is being fsynced); 1 runs one fsync at a
	// time. Zero means DefaultFsyncPipeline.
	FsyncPipeline int
	// DirectWriteBytes: with FsyncAlways, a topic's entries in one group commit that reach this
	// many bytes are written once, straight to its segment file, instead of into the journal and
	// then the segment. Zero means DefaultDirectWriteBytes; negative turns direct writes off.
	DirectWriteBytes int
	// BypassCacheBytes: a segment write or read of at least this many bytes bypasses the page
	// cache (O_DIRECT, where the file system allows it; docs/storage.md). Zero means
	// DefaultBypassCacheBytes; negative always uses the page cache.
	BypassCacheBytes int
	// EntryCacheBytes bounds the broker-wide cache of recently written entries (zero:
	// DefaultEntryCacheBytes; negative: no cache).
	EntryCacheBytes int64
	// ReplicationMemoryBytes bounds the entries all replicators hold at once (read and not yet
	// acknowledged by their remote); a catch-up read that does not fit waits. Zero means
	// DefaultReplicationMemoryBytes; negative means no bound.
	ReplicationMemoryBytes int64
	// JournalFileBytes is the size of the storage journal's files (a checkpoint per file; zero
	// means the storage default, 64 MiB). MaxJournalBacklog bounds the journal kept while
	// checkpoints fail after I/O errors or with a full disk: beyond it publishes fail (zero means
	// eight journal files; docs/operations.md, "Disk full and I/O errors"). Not flags: for
	// embedding and tests on small disks.
	JournalFileBytes, MaxJournalBacklog int64
	// HideTopicLevelMetrics turns Pulsar's exposeTopicLevelMetricsInPrometheus off: /metrics has
	// namespace aggregates instead of per-topic series (--expose-topic-level-metrics=false).
	HideTopicLevelMetrics bool
	// ReplicationStallTimeout: a replicator with a backlog that made no progress for this long is
	// reported stalled (topic stats replication.<remote>.stalled, meridian_replication_stalled).
	// Zero means DefaultReplicationStallTimeout.
	ReplicationStallTimeout time.Duration
	// Dedup is the broker-wide default for producer deduplication (namespace policy overrides).
	Dedup bool
	// AutoTopicCreation creates non-partitioned topics on first use (namespace policy overrides).
	AutoTopicCreation bool
	// InsecureAllowPlaintext must be set for a plaintext listener on a non-loopback address
	// unless authentication is on; TLS listeners do not need it.
	InsecureAllowPlaintext bool
	// KeepAliveInterval is how often the broker pings idle connections; a connection silent for
	// twice this long is closed. Zero means DefaultKeepAliveInterval.
	KeepAliveInterval time.Duration
	// ShutdownTimeout bounds Close. Zero means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Logger receives the node's logs; nil means slog.Default().
	Logger *slog.Logger
	// ConsoleInterval is how often the replication console samples the links for its charts
	// (0: console.DefaultInterval, 5 s; it keeps console.MaxSamples per link).
	ConsoleInterval time.Duration
	// ConsoleHistoryBytes bounds the memory of the console's link history (0: the console's
	// default, 16 MiB; negative: no bound). Its use is in meridian_console_history_bytes.
	ConsoleHistoryBytes int64
}

// DefaultOptions returns the defaults of `meridian standalone`.
func DefaultOptions() Options {
	return Options{
		Cluster:                DefaultCluster,
		DataDir:                DefaultDataDir,
		BrokerAddr:             DefaultBrokerAddr,
		WebAddr:                DefaultWebAddr,
		ReplicationStartAt:     DefaultReplicationStartAt,
		MaxMessageSize:         DefaultMaxMessageSize,
		Fsync:                  FsyncAlways,
		FsyncPipeline:          DefaultFsyncPipeline,
		DirectWriteBytes:       DefaultDirectWriteBytes,
		BypassCacheBytes:       DefaultBypassCacheBytes,
		AutoTopicCreation:      true,
		ReplicationMemoryBytes: DefaultReplicationMemoryBytes,
		EntryCacheBytes:        DefaultEntryCacheBytes,
		// Per-connection bounds of the binary protocol (docs/operations.md, "Limits").
		MaxPendingPublishRequests: server.DefaultMaxPendingSends,
		MaxPendingPublishBytes:    server.DefaultMaxPendingSendBytes,
		MaxOutboundBytes:          server.DefaultMaxOutboundBytes,
	}
}

// ValidateClusterName reports whether name can be used as a cluster name (Pulsar's rule, see
// naming.ValidateCluster).
func ValidateClusterName(name string) error {
	if err := naming.ValidateCluster(name); err != nil {
		return fmt.Errorf("--cluster: %w", err)
	}
	return nil
}

// Validate checks the options and fills in zero durations. It returns every problem it finds.
func (o *Options) Validate() error {
	var errs []error
	if err := ValidateClusterName(o.Cluster); err != nil {
		errs = append(errs, err)
	}
	if strings.TrimSpace(o.DataDir) == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	errs = append(errs, o.validateListeners()...)
	if o.ConfigStore != "" && !strings.HasPrefix(o.ConfigStore, "etcd://") {
		errs = append(errs, fmt.Errorf("--config-store %q: only etcd://host:port[,host:port...][/prefix] is supported", o.ConfigStore))
	}
	if o.MetadataStore != "" && !strings.HasPrefix(o.MetadataStore, "etcd://") {
		errs = append(errs, fmt.Errorf("--metadata-store %q: only etcd://host:port[,host:port...][/prefix] is supported", o.MetadataStore))
	}
	if o.BrokerID != "" && (strings.ContainsAny(o.BrokerID, "/ \t\n") || len(o.BrokerID) > 200) {
		errs = append(errs, fmt.Errorf("--broker-id %q: no '/', spaces or control characters, at most 200 bytes", o.BrokerID))
	}
	switch o.ReplicationStartAt {
	case ReplicationStartEarliest, ReplicationStartLatest:
	case "":
		o.ReplicationStartAt = DefaultReplicationStartAt
	default:
		errs = append(errs, fmt.Errorf("--replication-start-at %q: want earliest or latest", o.ReplicationStartAt))
	}
	if o.MaxMessageSize < MinMaxMessageSize || o.MaxMessageSize > MaxMaxMessageSize {
		errs = append(errs, fmt.Errorf("--max-message-size %d: want %d to %d bytes", o.MaxMessageSize, MinMaxMessageSize, MaxMaxMessageSize))
	}
	switch o.Fsync {
	case FsyncAlways, FsyncInterval:
	case "":
		o.Fsync = FsyncAlways
	default:
		errs = append(errs, fmt.Errorf("--fsync %q: want always or interval", o.Fsync))
	}
	switch {
	case o.FsyncPipeline == 0:
		o.FsyncPipeline = DefaultFsyncPipeline
	case o.FsyncPipeline < 1 || o.FsyncPipeline > MaxFsyncPipeline:
		errs = append(errs, fmt.Errorf("--fsync-pipeline %d: want 1 to %d", o.FsyncPipeline, MaxFsyncPipeline))
	}
	if o.MaxPendingPublishRequests < 0 {
		errs = append(errs, fmt.Errorf("--max-pending-publish-requests %d is negative", o.MaxPendingPublishRequests))
	}
	if o.MaxOutboundBytes < 0 || (o.MaxOutboundBytes > 0 && o.MaxOutboundBytes < MinOutboundBytes) {
		errs = append(errs, fmt.Errorf("--max-outbound-bytes %d: want at least %d", o.MaxOutboundBytes, MinOutboundBytes))
	}
	if o.MaxConnectionsPerIP < 0 {
		errs = append(errs, fmt.Errorf("--max-connections-per-ip %d is negative (0 turns the limit off)", o.MaxConnectionsPerIP))
	}
	if o.KeepAliveInterval < 0 {
		errs = append(errs, fmt.Errorf("keep-alive interval %v is negative", o.KeepAliveInterval))
	} else if o.KeepAliveInterval == 0 {
		o.KeepAliveInterval = DefaultKeepAliveInterval
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.LoadSheddingInterval == 0 {
		o.LoadSheddingInterval = DefaultLoadSheddingInterval
	}
	if o.HandOverTimeout == 0 {
		o.HandOverTimeout = DefaultHandOverTimeout
	}
	return errors.Join(errs...)
}

// validateListeners checks the four listener addresses, the advertised address and the rule that
// a plaintext listener on a non-loopback address needs InsecureAllowPlaintext.
func (o *Options) validateListeners() []error {
	var errs []error
	type listener struct {
		flag, addr string
		tls        bool
	}
	all := []listener{
		{"--broker-addr", o.BrokerAddr, false}, {"--web-addr", o.WebAddr, false},
		{"--broker-tls-addr", o.BrokerTLSAddr, true}, {"--web-tls-addr", o.WebTLSAddr, true},
	}
	wildcard := ""
	for _, l := range all {
		if l.addr == "" {
			continue
		}
		host, err := validateListenAddr(l.flag, l.addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if wildcard == "" && isWildcardHost(host) {
			wildcard = l.flag + " " + strconv.Quote(l.addr)
		}
		if !l.tls && !o.InsecureAllowPlaintext && !o.Auth.AuthenticationEnabled && !isLoopbackHost(host) {
			errs = append(errs, fmt.Errorf("%s %q is not a loopback address: without TLS or authentication this needs --insecure-allow-plaintext (or serve TLS only: --broker-tls-addr, --web-tls-addr)", l.flag, l.addr))
		}
	}
	if o.BrokerAddr == "" && o.BrokerTLSAddr == "" {
		errs = append(errs, errors.New("no binary-protocol listener: set --broker-addr and/or --broker-tls-addr"))
	}
	if o.WebAddr == "" && o.WebTLSAddr == "" {
		errs = append(errs, errors.New("no web listener: set --web-addr and/or --web-tls-addr"))
	}
	if o.AdvertisedAddress != "" {
		if strings.ContainsAny(o.AdvertisedAddress, "/ :@?#") && net.ParseIP(o.AdvertisedAddress) == nil {
			errs = append(errs, fmt.Errorf("--advertised-address %q must be a host name or IP address without port", o.AdvertisedAddress))
		}
	} else if wildcard != "" {
		errs = append(errs, fmt.Errorf("%s listens on every interface: set --advertised-address to the host clients should use", wildcard))
	}
	errs = append(errs, o.validateTLS()...)
	if err := o.linkDefaults().Check(); err != nil {
		errs = append(errs, err)
	}
	return append(errs, o.validateAuth()...)
}

// validateListenAddr checks a "host:port" listen address and returns its host.
func validateListenAddr(flag, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%s %q: port must be a number from 0 to 65535", flag, addr)
	}
	return host, nil
}

func isWildcardHost(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// advertisedHost is the host for URLs: the advertised address or the listener's own host.
func advertisedHost(advertised string, listener net.Addr) string {
	if advertised != "" {
		return advertised
	}
	host, _, err := net.SplitHostPort(listener.String())
	if err != nil {
		return listener.String()
	}
	return host
}

// hostPortURL builds scheme://host:port, bracketing IPv6 hosts.
func hostPortURL(scheme, host string, listener net.Addr) string {
	_, port, err := net.SplitHostPort(listener.String())
	if err != nil {
		port = "0"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
