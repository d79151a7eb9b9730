package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/cluster"
	"github.com/meridian-mq/meridian/internal/console"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/stores"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/schema"
	"github.com/meridian-mq/meridian/internal/server"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/wire"
)

// components are the pieces a node builds, in start order.
type components struct {
	engine      *storage.Engine
	localStore  metadata.Store
	configStore metadata.Store // == localStore without --config-store
	ownsConfig  bool           // configStore is ours to close
	ownsLocal   bool           // localStore is ours to close (not the in-process store of --brokers N)
	member      *clusterMember // nil for a cluster of one broker (cluster.go)
	catalog     *catalog.Catalog
	broker      *broker.Broker
	server      *server.Server
	admin       *admin.Handler
	console     *console.Console // the replication console's sampler; its page is on the web mux
	schemas     *schema.Registry
	replication *replication.Manager

	watchStop func()         // ends the catalog subscription that feeds the broker
	shedStop  func()         // ends the load shedder and the orphaned-move check (cluster members only)
	bg        sync.WaitGroup // background goroutines: server accept loop, policy watcher
}

// ledgerIDTimeout bounds one reservation of ledger ids from the cluster's store.
const ledgerIDTimeout = 10 * time.Second

// openLocalStore opens the cluster-local store: the shared one of a cluster of several brokers,
// else a bbolt file with an exclusive lock (one instance then serves both roles unless a
// configuration store is given).
func (n *Node) openLocalStore(ctx context.Context) error {
	c := &n.components
	if n.opts.SharedMetadataStore != nil {
		c.localStore = n.opts.SharedMetadataStore
		return nil
	}
	store, err := stores.Open(ctx, n.opts.MetadataStore, n.opts.DataDir)
	if err != nil {
		return fmt.Errorf("open local metadata store %s: %w", n.opts.MetadataStore, err)
	}
	c.localStore, c.ownsLocal = store, true
	return nil
}

// ownership is the server's view of the cluster: nil for a cluster of one broker.
func (c *components) ownership() server.Ownership {
	if c.member == nil {
		return nil
	}
	return c.member
}

// ownsTopic is the broker's ownership check: nil (every topic) for a cluster of one broker.
func (c *components) ownsTopic() func(naming.TopicName) bool {
	if c.member == nil {
		return nil
	}
	return c.member.Serves
}

// ledgerIDFloor is the broker's LedgerIDFloor: in a cluster, the floor of the topic's bundle record
// (a bundle taken over from a dead broker, takeover.go).
func (c *components) ledgerIDFloor() func(naming.TopicName) int64 {
	if c.member == nil {
		return nil
	}
	return func(t naming.TopicName) int64 {
		own, _ := c.member.coord.Record(t.NamespaceName().String(), t.String())
		return own.IDFloor
	}
}

// holdsStrandedSubscriptions is the broker's HoldsStrandedSubscriptions: in a cluster, whether the
// topic's bundle record names stranded brokers (takeover.go).
func (c *components) holdsStrandedSubscriptions() func(naming.TopicName) bool {
	if c.member == nil {
		return nil
	}
	return func(t naming.TopicName) bool {
		own, _ := c.member.coord.Record(t.NamespaceName().String(), t.String())
		return len(own.Stranded) > 0
	}
}

// storageDir is where the storage engine keeps its files inside the data dir.
func storageDir(dataDir string) string { return filepath.Join(dataDir, "storage") }

// compose builds the components and starts serving. Called from start with the listeners bound.
func (n *Node) compose(ctx context.Context) error {
	c := &n.components
	log := n.opts.Logger
	if log == nil {
		log = slog.Default()
	}
	sync := storage.SyncAlways
	if n.opts.Fsync == FsyncInterval {
		sync = storage.SyncInterval
	}
	var err error
	// A cluster of several brokers shares its local store; its ledger ids come from there, so it
	// is opened before the storage engine.
	var ledgerIDs func(floor, size int64) (int64, error)
	if n.opts.clustered() {
		if err := n.openLocalStore(ctx); err != nil {
			return err
		}
		store := c.localStore
		ledgerIDs = func(floor, size int64) (int64, error) {
			ctx, cancel := context.WithTimeout(context.Background(), ledgerIDTimeout)
			defer cancel()
			return cluster.AllocateLedgerIDs(ctx, store, floor, size)
		}
	}
	c.engine, err = storage.Open(ctx, storage.Options{
		Dir:               storageDir(n.opts.DataDir),
		Sync:              sync,
		SyncPipelineDepth: n.opts.FsyncPipeline,
		DirectWriteBytes:  n.opts.DirectWriteBytes,
		BypassCacheBytes:  n.opts.BypassCacheBytes,
		CacheBytes:        n.opts.EntryCacheBytes,
		JournalFileBytes:  n.opts.JournalFileBytes,
		MaxJournalBacklog: n.opts.MaxJournalBacklog,
		MaxEntrySize:      n.opts.MaxMessageSize + server.FramePadding,
		LedgerIDBlock:     ledgerIDs,
		Logger:            log,
	})
	if err != nil {
		return fmt.Errorf("open storage: %w", err)
	}
	if c.localStore == nil {
		if err := n.openLocalStore(ctx); err != nil {
			return err
		}
	}
	switch {
	case n.opts.SharedConfigStore != nil:
		c.configStore = n.opts.SharedConfigStore
	case n.opts.ConfigStore != "":
		c.configStore, err = stores.Open(ctx, n.opts.ConfigStore, n.opts.DataDir)
		if err != nil {
			return fmt.Errorf("open configuration store %s: %w", n.opts.ConfigStore, err)
		}
		c.ownsConfig = true
	default:
		c.configStore = c.localStore
	}

	c.catalog, err = catalog.New(ctx, c.configStore, log.With("component", "catalog"))
	if err != nil {
		return fmt.Errorf("load catalog: %w", err)
	}
	if err := bootstrapCatalog(ctx, c.catalog, n.opts.Cluster, adminapi.ClusterData{
		ServiceURL:          n.webURL,
		ServiceURLTLS:       n.tls.webURL,
		BrokerServiceURL:    n.serviceURL,
		BrokerServiceURLTLS: n.tls.serviceURL,
	}, log); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}

	if n.opts.clustered() {
		if err := n.joinCluster(ctx); err != nil {
			return err
		}
	}

	// The replication manager exists before the broker: the broker's topic loads call it (the
	// ReplicatedIndex hook opens each topic's inbound index through it, and the
	// replicated-subscription hooks). It gets the broker's topics when it starts, below.
	c.schemas = newSchemaRegistry(c.localStore, c.catalog)
	c.replication, err = replication.NewManager(replication.ManagerOptions{
		// Schemas are read in process (not through this cluster's admin API, which may need
		// credentials) when they are registered on a remote.
		LocalSchemas: localSchemaReader(c.schemas),
		Local:        n.opts.Cluster,
		Policies:     c.catalog,
		StartAt:      replication.StartAt(n.opts.ReplicationStartAt),
		MemoryBytes:  n.opts.ReplicationMemoryBytes,
		Logger:       log.With("component", "replication"),
		LinkDefaults: n.opts.linkDefaults(),
		// --replication-stall-timeout.
		StallTimeout: n.opts.ReplicationStallTimeout,
	})
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}

	c.broker, err = broker.New(broker.Config{
		Cluster:           n.opts.Cluster,
		DedupDefault:      n.opts.Dedup,
		AutoTopicCreation: n.opts.AutoTopicCreation,
	}, broker.Deps{
		Storage:                    c.engine,
		Policies:                   policySource{cat: c.catalog},
		Logger:                     log,
		ReplicatedIndex:            replicatedIndexHook(c.replication),
		SubscriptionSync:           subscriptionSync{m: c.replication},
		Owns:                       c.ownsTopic(),
		LedgerIDFloor:              c.ledgerIDFloor(),
		HoldsStrandedSubscriptions: c.holdsStrandedSubscriptions(),
	})
	if err != nil {
		return fmt.Errorf("start broker: %w", err)
	}
	if c.member != nil {
		// Before the web listener serves the hand-over endpoint: no move to this broker can be
		// under way while stale copies are deleted (handover_run.go).
		if err := n.dropStaleCopies(ctx); err != nil {
			return err
		}
	}
	n.followPolicies()

	n.buildAuthorizer()
	c.server, err = server.New(server.Options{
		Broker:            c.broker,
		Catalog:           serverCatalog{cat: c.catalog, broker: c.broker},
		ServiceURL:        n.serviceURL,
		ServiceURLTLS:     n.tls.serviceURL,
		MaxMessageSize:    n.opts.MaxMessageSize,
		KeepAliveInterval: n.opts.KeepAliveInterval,
		AdmitReplicator:   n.admitReplicator,
		Authenticator:     n.authn,
		Authorizer:        n.authz,
		// Per-connection bounds (0: the server's defaults).
		MaxPendingSends:     n.opts.MaxPendingPublishRequests,
		MaxPendingSendBytes: n.opts.MaxPendingPublishBytes,
		MaxOutboundBytes:    n.opts.MaxOutboundBytes,
		// Pulsar's brokerMaxConnectionsPerIp (0: off).
		MaxConnectionsPerAddress: n.opts.MaxConnectionsPerIP,
		// Pulsar's authenticationRefreshCheckSeconds.
		AuthRefreshInterval: n.opts.Auth.RefreshCheckInterval,
		Migration: switchover{cluster: n.opts.Cluster, serviceURL: n.serviceURL, serviceURLTLS: n.tls.serviceURL, cat: c.catalog,
			topics: topicService{broker: c.broker, cat: c.catalog, repl: c.replication}, linkDefaults: n.opts.linkDefaults()},
		Ownership: c.ownership(),
		Logger:    log,
	})
	if err != nil {
		return err
	}
	c.server.SetSchemas(c.schemas, schemaAutoUpdate(c.catalog))
	c.server.SetSchemaValidationEnforced(schemaValidationEnforced(c.catalog))
	for name, ln := range map[string]net.Listener{"broker listener": n.brokerLn, "broker TLS listener": n.tlsBrokerListener()} {
		if ln == nil {
			continue
		}
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			if err := c.server.Serve(ln); err != nil && !errors.Is(err, server.ErrServerClosed) {
				n.fatal(fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
	if err := n.mountAdmin(); err != nil {
		return err
	}
	// Replicators start once this broker serves: remotes replicating into us need the listener,
	// and our replicators need loaded topics.
	if err := c.replication.Start(context.WithoutCancel(ctx), replicationTopics(c.broker)); err != nil {
		return err
	}
	if c.member != nil {
		return n.startMoving(ctx)
	}
	return nil
}

// startMoving readies a cluster member to move bundles (handover_run.go): replication follows
// bundles that arrive, and the load shedder starts.
func (n *Node) startMoving(ctx context.Context) error {
	c := &n.components
	c.member.repl.Store(c.replication)
	c.member.serving.Store(true)
	moveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.shedStop = stop
	c.bg.Add(2)
	go func() {
		defer c.bg.Done()
		c.member.endOrphanedMoves(moveCtx)
	}()
	go func() {
		defer c.bg.Done()
		n.followStranded(moveCtx)
	}()
	if n.opts.LoadSheddingInterval > 0 {
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			n.shedLoad(moveCtx, n.opts.LoadSheddingInterval)
		}()
	}
	return nil
}

// followPolicies tells the broker about policy changes (namespace and topic policies, partition
// counts), so loaded topics pick them up within the catalog's watch latency.
func (n *Node) followPolicies() {
	c := &n.components
	events, stop := c.catalog.Subscribe()
	c.watchStop = stop
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		for ev := range events {
			switch ev.Kind {
			case catalog.EventNamespace:
				if ns, err := naming.ParseNamespace(ev.Name); err == nil {
					c.broker.PoliciesChanged(ns)
				}
			case catalog.EventTopicPolicies, catalog.EventPartitionedTopic:
				if t, err := naming.ParseTopic(ev.Name); err == nil {
					c.broker.PoliciesChanged(t.NamespaceName())
				}
			case catalog.EventResync:
				for _, ns := range c.catalog.AllNamespaces() {
					if name, err := naming.ParseNamespace(ns); err == nil {
						c.broker.PoliciesChanged(name)
					}
				}
			}
		}
	}()
}

// close stops the components in reverse start order.
func (c *components) close(ctx context.Context, log *slog.Logger) error {
	var errs []error
	if c.shedStop != nil {
		c.shedStop()
	}
	if c.server != nil {
		if err := c.server.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close server: %w", err))
		}
	}
	if c.admin != nil {
		_ = c.admin.Close()
	}
	if c.console != nil {
		c.console.Close()
	}
	if c.member != nil {
		c.member.coord.Close(ctx)
	}
	if c.watchStop != nil {
		c.watchStop()
	}
	if c.replication != nil {
		if err := c.replication.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close replication: %w", err))
		}
	}
	if c.broker != nil {
		if err := c.broker.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close broker: %w", err))
		}
	}
	c.bg.Wait()
	if c.catalog != nil {
		if err := c.catalog.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close catalog: %w", err))
		}
	}
	if c.engine != nil {
		if err := c.engine.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close storage: %w", err))
		}
	}
	if c.ownsConfig && c.configStore != nil {
		if err := c.configStore.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close configuration store: %w", err))
		}
	}
	if c.localStore != nil && c.ownsLocal {
		if err := c.localStore.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close local metadata store: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		log.Warn("shutdown had errors", "err", err)
		return err
	}
	return nil
}

// admitReplicator is the receiving side of replication (docs/design.md, "Replication invariants"): replicated traffic from
// source is accepted into an existing namespace of a tenant whose allowedClusters include source,
// whatever the namespace's own replication list. Refusals carry a named ServerError (TopicNotFound
// for a missing namespace, NotAllowedError for an unknown or disallowed source); the sending
// replicator keeps its cursor, retries and shows the reason as lastError.
func (n *Node) admitReplicator(_ context.Context, topic naming.TopicName, source string) error {
	cat := n.components.catalog
	ns := topic.NamespaceName().String()
	if _, ok := cat.Namespace(ns); !ok {
		return fmt.Errorf("namespace %s does not exist on cluster %s: %w", ns, n.opts.Cluster, broker.ErrNamespaceNotFound)
	}
	if _, ok := cat.Cluster(source); !ok {
		return fmt.Errorf("%w: replication source cluster %s is not registered on cluster %s", wire.ErrNotAllowed, source, n.opts.Cluster)
	}
	allowed, _ := cat.AllowedClusters(topic.Tenant)
	if !slices.Contains(allowed, source) {
		return fmt.Errorf("%w: cluster %s is not allowed for tenant %s on cluster %s", wire.ErrNotAllowed, source, topic.Tenant, n.opts.Cluster)
	}
	if n.authz != nil {
		// With authorization, the namespace itself must replicate with the source (docs/security.md).
		if p, _ := cat.NamespaceShared(ns); p == nil || !slices.Contains(p.ReplicationClusters, source) {
			return fmt.Errorf("%w: namespace %s on cluster %s does not replicate with cluster %s", wire.ErrAuthorization, ns, n.opts.Cluster, source)
		}
	}
	return nil
}
