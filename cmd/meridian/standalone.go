package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/node"
)

// standaloneFlags are the flags of `meridian standalone` (docs/operations.md), before validation.
type standaloneFlags struct {
	cluster                string
	dataDir                string
	brokerAddr             string
	webAddr                string
	advertisedAddress      string
	configStore            string
	replicationStartAt     string
	maxMessageSize         int
	fsync                  string
	fsyncPipeline          int
	directWriteBytes       int
	bypassCacheBytes       int
	replicationMemoryBytes int
	dedup                  bool
	topicLevelMetrics      bool
	replicationStall       time.Duration
	autoTopicCreation      bool
	insecureAllowPlaintext bool
	clusters               []string
	logFormat              string

	logger *slog.Logger // the process's logger, built by nodeOptions; each node's adds its cluster
}

func newStandaloneCommand() *cobra.Command { return newStandaloneCommandFor(&standaloneFlags{}) }

// newStandaloneCommandFor builds the command with its flags bound to f.
func newStandaloneCommandFor(f *standaloneFlags) *cobra.Command {
	defaults := node.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run one cluster (one broker) with embedded storage and metadata",
		Long: `Run one cluster (one broker) with embedded storage and metadata.

The broker speaks Pulsar's binary protocol on --broker-addr and serves the admin REST API
(/admin/v2) and /metrics on --web-addr. On every start it registers its own cluster and creates
tenant "public" and namespace "public/default" if they do not exist.

With --clusters a,b,c it runs those clusters in one process instead, each with its own data dir
(<data-dir>/<name>, --data-dir defaulting to ./data-clusters) and its own ports
(--broker-addr/--web-addr port + 10*i).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.applyModeDefaults(cmd.Flags().Changed("data-dir"))
			configs, err := f.nodeOptions(cmd.Flags().Changed("cluster"))
			if err != nil {
				return err
			}
			if err := f.checkDataDirs(cmd.Flags().Changed("data-dir")); err != nil {
				return err
			}
			return runNodes(cmd.Context(), f.logger, configs)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.cluster, "cluster", defaults.Cluster, "this cluster's name")
	fl.StringVar(&f.dataDir, "data-dir", defaults.DataDir, "storage and local metadata; bound to its cluster")
	fl.StringVar(&f.brokerAddr, "broker-addr", defaults.BrokerAddr, "Pulsar binary protocol listener (host:port)")
	fl.StringVar(&f.webAddr, "web-addr", defaults.WebAddr, "admin REST and /metrics listener (host:port)")
	fl.StringVar(&f.advertisedAddress, "advertised-address", "", "host put into the cluster's URLs and LOOKUP answers (default: the listener's host)")
	fl.StringVar(&f.configStore, "config-store", "", "configuration store shared with other clusters: etcd://h1:2379,h2:2379[/prefix] (default: the local store)")
	fl.StringVar(&f.replicationStartAt, "replication-start-at", string(defaults.ReplicationStartAt), "where a new replicator starts on a topic that already has data: earliest|latest")
	fl.IntVar(&f.maxMessageSize, "max-message-size", defaults.MaxMessageSize, "largest message in bytes; advertised to clients and enforced")
	fl.StringVar(&f.fsync, "fsync", string(defaults.Fsync), "always: acknowledge after fsync; interval: acknowledge before fsync (a crash can lose acknowledged messages)")
	fl.IntVar(&f.fsyncPipeline, "fsync-pipeline", defaults.FsyncPipeline, "with --fsync always: group commits whose fsync may run at once (1 = one at a time)")
	fl.IntVar(&f.directWriteBytes, "direct-write-bytes", defaults.DirectWriteBytes, "with --fsync always: a topic's share of one group commit from which it is written once, straight to its segment file, instead of journal + segment (0 = never)")
	fl.IntVar(&f.bypassCacheBytes, "bypass-cache-bytes", defaults.BypassCacheBytes, "segment writes and reads of at least this many bytes bypass the page cache (O_DIRECT, where the file system allows it; 0 = never)")
	fl.IntVar(&f.replicationMemoryBytes, "replication-memory-bytes", int(defaults.ReplicationMemoryBytes), "bytes of entries all replicators may hold at once, read and not yet acknowledged by their remote; a catch-up read that does not fit waits (0 = no bound)")
	fl.BoolVar(&f.topicLevelMetrics, "expose-topic-level-metrics", true, "per-topic series on /metrics (Pulsar's exposeTopicLevelMetricsInPrometheus); false: namespace aggregates only, for brokers with many topics")
	fl.DurationVar(&f.replicationStall, "replication-stall-timeout", node.DefaultReplicationStallTimeout, "a replicator with a backlog that made no progress for this long is reported stalled (topic stats, meridian_replication_stalled)")
	fl.BoolVar(&f.dedup, "dedup", defaults.Dedup, "broker-wide default for producer deduplication (the namespace policy overrides)")
	fl.BoolVar(&f.autoTopicCreation, "auto-topic-creation", defaults.AutoTopicCreation, "create non-partitioned topics on first use (the namespace policy overrides)")
	fl.BoolVar(&f.insecureAllowPlaintext, "insecure-allow-plaintext", false, "allow listening on non-loopback addresses without TLS or authentication")
	fl.StringVar(&f.logFormat, "log-format", logFormatText, "log lines as text (key=value) or json (one object per line)")
	fl.StringSliceVar(&f.clusters, "clusters", nil, "run these clusters in one process, replicating public/default full mesh (a,b,c)")
	return cmd
}

// nodeOptions validates the flags and returns the options of every node to run: one, or one per
// name of --clusters.
func (f *standaloneFlags) nodeOptions(clusterFlagSet bool) ([]node.Options, error) {
	base := node.DefaultOptions()
	base.Cluster = f.cluster
	base.DataDir = f.dataDir
	base.BrokerAddr = f.brokerAddr
	base.WebAddr = f.webAddr
	base.AdvertisedAddress = f.advertisedAddress
	base.ConfigStore = f.configStore
	base.ReplicationStartAt = node.ReplicationStartAt(f.replicationStartAt)
	base.MaxMessageSize = f.maxMessageSize
	base.Fsync = node.FsyncMode(f.fsync)
	base.FsyncPipeline = f.fsyncPipeline
	if f.fsyncPipeline < 1 { // node.Options reads 0 as "the default"; on the command line it is a mistake
		return nil, fmt.Errorf("--fsync-pipeline %d: want 1 to %d", f.fsyncPipeline, node.MaxFsyncPipeline)
	}
	var err error
	if base.DirectWriteBytes, err = bytesOrNever("direct-write-bytes", f.directWriteBytes); err != nil {
		return nil, err
	}
	if base.BypassCacheBytes, err = bytesOrNever("bypass-cache-bytes", f.bypassCacheBytes); err != nil {
		return nil, err
	}
	memBytes, err := bytesOrNever("replication-memory-bytes", f.replicationMemoryBytes)
	if err != nil {
		return nil, err
	}
	base.ReplicationMemoryBytes = int64(memBytes)
	base.Dedup = f.dedup
	base.HideTopicLevelMetrics = !f.topicLevelMetrics
	if f.replicationStall <= 0 {
		return nil, fmt.Errorf("--replication-stall-timeout %s: want a positive duration", f.replicationStall)
	}
	base.ReplicationStallTimeout = f.replicationStall
	base.AutoTopicCreation = f.autoTopicCreation
	base.InsecureAllowPlaintext = f.insecureAllowPlaintext
	if f.logger, err = newLoggerTo(os.Stderr, f.logFormat); err != nil {
		return nil, err
	}
	base.Logger = f.logger

	if len(f.clusters) == 0 {
		if err := base.Validate(); err != nil {
			return nil, err
		}
		return []node.Options{base}, nil
	}
	if clusterFlagSet {
		return nil, errors.New("--cluster cannot be combined with --clusters")
	}
	if f.configStore != "" {
		return nil, errors.New("--config-store cannot be combined with --clusters (the clusters share an in-process configuration store)")
	}
	seen := map[string]bool{}
	var all []node.Options
	var errs []error
	for i, name := range f.clusters {
		name = strings.TrimSpace(name)
		if err := node.ValidateClusterName(name); err != nil {
			errs = append(errs, fmt.Errorf("--clusters: %w", err))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("--clusters: %q is listed twice", name))
			continue
		}
		seen[name] = true
		o := base
		o.Cluster = name
		o.DataDir = filepath.Join(f.dataDir, name)
		var err error
		if o.BrokerAddr, err = shiftPort(f.brokerAddr, 10*i); err != nil {
			errs = append(errs, fmt.Errorf("--broker-addr: %w", err))
			continue
		}
		if o.WebAddr, err = shiftPort(f.webAddr, 10*i); err != nil {
			errs = append(errs, fmt.Errorf("--web-addr: %w", err))
			continue
		}
		o.Logger = f.logger.With("cluster", name)
		if err := o.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", name, err))
			continue
		}
		all = append(all, o)
	}
	if len(f.clusters) < 2 && len(errs) == 0 {
		errs = append(errs, errors.New("--clusters needs at least two cluster names"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return all, nil
}

// shiftPort adds delta to the port of a host:port address. Port 0 (pick a free port) stays 0.
func shiftPort(addr string, delta int) (string, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return "", fmt.Errorf("%q: port is not a number", addr)
	}
	if port == 0 {
		return addr, nil
	}
	if port+delta > 65535 {
		return "", fmt.Errorf("%q + %d is beyond port 65535", addr, delta)
	}
	return net.JoinHostPort(host, strconv.Itoa(port+delta)), nil
}

// runNodes starts the nodes, reports their URLs and runs until ctx ends (SIGTERM or interrupt),
// then shuts them down gracefully.
func runNodes(ctx context.Context, log *slog.Logger, configs []node.Options) error {
	if len(configs) == 1 {
		return runStandalone(ctx, configs[0])
	}
	return runClusters(ctx, log, configs)
}

func runStandalone(ctx context.Context, opts node.Options) error {
	n, err := node.Start(ctx, opts)
	if err != nil {
		return err
	}
	opts.Logger.Info("meridian standalone ready",
		"cluster", n.Cluster(), "serviceUrl", n.ServiceURL(), "webServiceUrl", n.WebURL(), "dataDir", opts.DataDir)
	select {
	case <-ctx.Done():
		opts.Logger.Info("shutting down", "reason", context.Cause(ctx))
	case err := <-n.Done():
		if err != nil {
			opts.Logger.Error("node failed", "err", err)
			_ = n.Close()
			return err
		}
	}
	return n.Close()
}

// runClusters is `--clusters a,b,c`: one full broker per cluster in this process, sharing an
// in-process configuration store, with public/default replicated full mesh over real TCP. log is
// the process's logger; each cluster logs its own shutdown through its own (cluster=<name>).
func runClusters(ctx context.Context, log *slog.Logger, configs []node.Options) error {
	shared := memstore.New()
	defer shared.Close()
	var nodes []*node.Node
	closeAll := func(reason any) error {
		var errs []error
		for i := len(nodes) - 1; i >= 0; i-- {
			configs[i].Logger.Info("shutting down", "reason", reason)
			errs = append(errs, nodes[i].Close())
		}
		return errors.Join(errs...)
	}
	names := make([]string, 0, len(configs))
	for _, o := range configs {
		o.SharedConfigStore = shared
		n, err := node.Start(ctx, o)
		if err != nil {
			_ = closeAll(fmt.Sprintf("cluster %s failed to start", o.Cluster))
			return fmt.Errorf("cluster %s: %w", o.Cluster, err)
		}
		nodes = append(nodes, n)
		names = append(names, o.Cluster)
	}
	if err := node.ReplicateFullMesh(ctx, nodes[0], names); err != nil {
		_ = closeAll("configuring replication failed")
		return err
	}
	for _, n := range nodes {
		fmt.Printf("cluster %s: serviceUrl %s webServiceUrl %s\n", n.Cluster(), n.ServiceURL(), n.WebURL())
	}
	log.Info("meridian clusters ready", "clusters", strings.Join(names, ","), "replication", "public/default full mesh")
	failed := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() {
			if err := <-n.Done(); err != nil {
				failed <- fmt.Errorf("cluster %s: %w", n.Cluster(), err)
			}
		}()
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down", "clusters", strings.Join(names, ","), "reason", context.Cause(ctx))
		return closeAll(context.Cause(ctx))
	case err := <-failed:
		log.Error("a cluster failed; stopping all", "err", err)
		return errors.Join(err, closeAll(err))
	}
}

// bytesOrNever turns a byte-threshold flag where 0 means "never" into the node option, where 0
// means "the default" and a negative value "never".
func bytesOrNever(flag string, v int) (int, error) {
	switch {
	case v == 0:
		return -1, nil
	case v < 0:
		return 0, fmt.Errorf("--%s %d: want 0 (never) or a number of bytes", flag, v)
	default:
		return v, nil
	}
}
