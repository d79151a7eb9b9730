package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/node"
)

// newStandaloneCommand builds `meridian standalone`. Its settings come from a Pulsar-format
// configuration file (--config), environment variables and flags, in that order of precedence
// (internal/config; docs/operations.md, "Settings").
func newStandaloneCommand() *cobra.Command { return newStandaloneCommandFor(&standaloneFlags{}) }

// newStandaloneCommandFor builds the command with its flags bound to f.
func newStandaloneCommandFor(f *standaloneFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run one cluster (one broker) with embedded storage and metadata",
		Long: `Run one cluster (one broker) with embedded storage and metadata.

The broker speaks Pulsar's binary protocol on --broker-addr (pulsar://) and --broker-tls-addr
(pulsar+ssl://), and serves the admin REST API (/admin/v2) and /metrics on --web-addr (http://) and
--web-tls-addr (https://). On every start it registers its own cluster and creates tenant "public"
and namespace "public/default" if they do not exist.

--config FILE reads a configuration file in Apache Pulsar's format (broker.conf, standalone.conf);
PULSAR_PREFIX_<key> and MERIDIAN_STANDALONE_<FLAG> environment variables and flags override it.
Keys Meridian does not know are logged once and ignored; a security setting it cannot honour stops
startup.

With --clusters a,b,c it runs those clusters in one process instead, each with its own data dir
(<data-dir>/<name>, --data-dir defaulting to ./data-clusters) and its own ports (every listener's
port + 10*i).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			configs, err := f.nodeOptions(os.Environ(), os.Stderr)
			if err != nil {
				return err
			}
			if err := checkDataDirs(f.resolved.Clusters, f.resolved.DataDir, f.dataDirGiven); err != nil {
				return err
			}
			return runNodes(cmd.Context(), f.logger, configs)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// nodeOptions reads every source of settings (the configuration file, environ, the flags given),
// builds the process's logger (f.logger, writing to logTo in the configured format), logs what was
// ignored, and returns the options of every node to run: one, or one per name of --clusters
// (whose data dir defaults to ./data-clusters).
func (f *standaloneFlags) nodeOptions(environ []string, logTo io.Writer) ([]node.Options, error) {
	s, given, err := f.settings(environ, logTo)
	if err != nil {
		return nil, err
	}
	f.dataDirGiven = given["data-dir"]
	if len(s.Clusters) > 0 && !f.dataDirGiven {
		s.DataDir = defaultClustersDataDir
	}
	f.resolved = s
	return settingsToNodes(s, f.logger)
}

// settingsToNodes validates the settings as node options.
func settingsToNodes(s config.Settings, log *slog.Logger) ([]node.Options, error) {
	base := node.DefaultOptions()
	base.Cluster = s.Cluster
	base.DataDir = s.DataDir
	base.BrokerAddr, base.WebAddr = s.BrokerAddr, s.WebAddr
	base.BrokerTLSAddr, base.WebTLSAddr = s.BrokerTLSAddr, s.WebTLSAddr
	base.TLS = s.TLS
	base.Auth = s.Auth
	base.BrokerClient = s.BrokerClient
	base.AdvertisedAddress = s.AdvertisedAddress
	base.ConfigStore = s.ConfigStore
	base.MetadataStore, base.BrokerID = s.MetadataStore, s.BrokerID
	base.LoadSheddingInterval, base.HandOverTimeout = s.LoadSheddingInterval, s.HandOverTimeout
	if !s.LoadBalancer || !s.LoadShedding || s.LoadSheddingInterval <= 0 {
		base.LoadSheddingInterval = -1
	}
	if s.HandOverTimeout <= 0 {
		base.HandOverTimeout = -1
	}
	base.ReplicationStartAt = node.ReplicationStartAt(s.ReplicationStartAt)
	base.MaxMessageSize = s.MaxMessageSize
	base.MaxConnectionsPerIP = s.MaxConnectionsPerIP
	if s.MaxPendingPublishRequests < 1 { // node.Options reads 0 as "the default"; in settings it is a mistake
		return nil, fmt.Errorf("--max-pending-publish-requests %d: want at least 1", s.MaxPendingPublishRequests)
	}
	base.MaxPendingPublishRequests = s.MaxPendingPublishRequests
	if s.MaxPendingPublishBytes < 0 {
		return nil, fmt.Errorf("--max-pending-publish-bytes %d is negative (0: only the broker-wide budget)", s.MaxPendingPublishBytes)
	}
	if base.MaxPendingPublishBytes = int64(s.MaxPendingPublishBytes); s.MaxPendingPublishBytes == 0 {
		base.MaxPendingPublishBytes = -1 // 0 in the settings means no per-connection bound
	}
	if s.MaxOutboundBytes < 1 {
		return nil, fmt.Errorf("--max-outbound-bytes %d: want at least %d", s.MaxOutboundBytes, node.MinOutboundBytes)
	}
	base.MaxOutboundBytes = s.MaxOutboundBytes
	base.Fsync = node.FsyncMode(s.Fsync)
	base.FsyncPipeline = s.FsyncPipeline
	if s.FsyncPipeline < 1 { // node.Options reads 0 as "the default"; in settings it is a mistake
		return nil, fmt.Errorf("--fsync-pipeline %d: want 1 to %d", s.FsyncPipeline, node.MaxFsyncPipeline)
	}
	var err error
	if base.DirectWriteBytes, err = bytesOrNever("direct-write-bytes", s.DirectWriteBytes); err != nil {
		return nil, err
	}
	if base.BypassCacheBytes, err = bytesOrNever("bypass-cache-bytes", s.BypassCacheBytes); err != nil {
		return nil, err
	}
	memBytes, err := bytesOrNever("replication-memory-bytes", s.ReplicationMemoryBytes)
	if err != nil {
		return nil, err
	}
	base.ReplicationMemoryBytes = int64(memBytes)
	if s.EntryCacheMB < 0 {
		return nil, fmt.Errorf("--entry-cache-mb %d is negative (0 turns the cache off)", s.EntryCacheMB)
	}
	base.EntryCacheBytes = int64(s.EntryCacheMB) << 20
	if s.EntryCacheMB == 0 {
		base.EntryCacheBytes = -1
	}
	base.Dedup = s.Dedup
	base.HideTopicLevelMetrics = !s.TopicLevelMetrics
	if s.ReplicationStallTimeout <= 0 {
		return nil, fmt.Errorf("--replication-stall-timeout %d: want a positive number of seconds", int64(s.ReplicationStallTimeout/time.Second))
	}
	base.ReplicationStallTimeout = s.ReplicationStallTimeout
	if base.ConsoleHistoryBytes = int64(s.ConsoleHistoryBytes); s.ConsoleHistoryBytes == 0 {
		base.ConsoleHistoryBytes = -1 // 0 in the settings means no bound
	}
	base.AutoTopicCreation = s.AutoTopicCreation
	base.InsecureAllowPlaintext = s.InsecureAllowPlaintext
	base.KeepAliveInterval = s.KeepAliveInterval
	base.ShutdownTimeout = s.ShutdownTimeout
	base.Logger = log

	if s.Brokers != 1 {
		if len(s.Clusters) > 0 {
			return nil, errors.New("--brokers cannot be combined with --clusters")
		}
		return brokersOfOneCluster(base, s)
	}
	if len(s.Clusters) == 0 {
		if err := base.Validate(); err != nil {
			return nil, err
		}
		return []node.Options{base}, nil
	}
	if s.Cluster != node.DefaultCluster {
		return nil, errors.New("--cluster cannot be combined with --clusters (nor clusterName in a configuration file)")
	}
	if s.ConfigStore != "" {
		return nil, errors.New("--config-store cannot be combined with --clusters (the clusters share an in-process configuration store)")
	}
	if s.Auth.AuthenticationEnabled && s.Auth.AnonymousUserRole == "" {
		return nil, errors.New("--clusters with authenticationEnabled=true needs anonymousUserRole: the replication links between the clusters do not authenticate")
	}
	seen := map[string]bool{}
	var all []node.Options
	var errs []error
	for i, name := range s.Clusters {
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
		o.DataDir = filepath.Join(s.DataDir, name)
		shifted := true
		for _, l := range []struct {
			flag string
			addr *string
		}{{"broker-addr", &o.BrokerAddr}, {"web-addr", &o.WebAddr}, {"broker-tls-addr", &o.BrokerTLSAddr}, {"web-tls-addr", &o.WebTLSAddr}} {
			if *l.addr == "" {
				continue
			}
			var err error
			if *l.addr, err = shiftPort(*l.addr, 10*i); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", l.flag, err))
				shifted = false
			}
		}
		if !shifted {
			continue
		}
		o.Logger = log.With("cluster", name)
		if err := o.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", name, err))
			continue
		}
		all = append(all, o)
	}
	if len(s.Clusters) < 2 && len(errs) == 0 {
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
	switch {
	case len(configs) == 1:
		return runStandalone(ctx, configs[0])
	case configs[0].Cluster == configs[1].Cluster:
		return runBrokers(ctx, log, configs)
	}
	return runClusters(ctx, log, configs)
}

func runStandalone(ctx context.Context, opts node.Options) error {
	n, err := node.Start(ctx, opts)
	if err != nil {
		return err
	}
	opts.Logger.Info("meridian standalone ready",
		"cluster", n.Cluster(), "serviceUrl", n.ServiceURL(), "webServiceUrl", n.WebURL(),
		"serviceUrlTls", n.ServiceURLTLS(), "webServiceUrlTls", n.WebURLTLS(), "dataDir", opts.DataDir)
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
	names := make([]string, 0, len(configs))
	for i := range configs {
		configs[i].SharedConfigStore = shared
		names = append(names, configs[i].Cluster)
	}
	g := &nodeGroup{kind: "cluster", name: func(o node.Options) string { return o.Cluster }, configs: configs}
	if err := g.start(ctx); err != nil {
		return err
	}
	if err := node.ReplicateFullMesh(ctx, g.nodes[0], names); err != nil {
		if ctx.Err() != nil {
			// A signal arrived while replication was being configured: a graceful stop, not a
			// failure (the clusters were already serving).
			return g.closeAll("stopped while configuring replication")
		}
		_ = g.closeAll("configuring replication failed")
		return err
	}
	for _, n := range g.nodes {
		line := fmt.Sprintf("cluster %s: serviceUrl %s webServiceUrl %s", n.Cluster(), n.ServiceURL(), n.WebURL())
		if n.ServiceURLTLS() != "" || n.WebURLTLS() != "" {
			line += fmt.Sprintf(" serviceUrlTls %s webServiceUrlTls %s", n.ServiceURLTLS(), n.WebURLTLS())
		}
		fmt.Println(line)
	}
	log.Info("meridian clusters ready", "clusters", strings.Join(names, ","), "replication", "public/default full mesh")
	return g.run(ctx, log.With("clusters", strings.Join(names, ",")))
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
