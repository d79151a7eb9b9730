package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/cluster"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/server"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/tlsreload"
	"github.com/meridian-mq/meridian/internal/wire"
)

// A node with a shared cluster-local store (--metadata-store) is one of several brokers of its
// cluster (docs/cluster.md): it registers in the store, owns the bundles the lookups give it, draws
// ledger ids from the cluster's counter and records its topics where every broker lists them.

// brokerIDFileName holds the broker id in the data dir: the bundles this broker owns are recorded
// under it, and its data dir holds their messages, so the id follows the data dir.
const brokerIDFileName = "broker-id"

// topicsPrefix is the cluster-wide topic registry: /local/topics/<tenant>/<ns>/<local name>.
const topicsPrefix = "/local/topics/"

// clustered reports whether the node is one of several brokers of its cluster.
func (o *Options) clustered() bool { return o.MetadataStore != "" || o.SharedMetadataStore != nil }

// resolveBrokerID returns the broker id: the flag, else the data dir's record, else the advertised
// binary address; it records the id in the data dir and refuses a flag that contradicts the record.
func resolveBrokerID(dataDir, flag, advertised string) (string, error) {
	path := filepath.Join(dataDir, brokerIDFileName)
	b, err := os.ReadFile(path)
	recorded := strings.TrimSpace(string(b))
	switch {
	case err == nil && recorded != "":
		if flag != "" && flag != recorded {
			return "", fmt.Errorf("--broker-id %s: the data dir %s belongs to broker %s (its bundles' messages are there)", flag, dataDir, recorded)
		}
		return recorded, nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	id := flag
	if id == "" {
		id = advertised
	}
	if id == "" {
		return "", errors.New("--broker-id is required without a plaintext binary listener")
	}
	if err := writeFileDurably(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("record the broker id: %w", err)
	}
	return id, nil
}

// clusterMember adapts the coordinator to the server (server.Ownership) and keeps the topic
// registry.
type clusterMember struct {
	coord *cluster.Coordinator
	store metadata.Store
	cat   *catalog.Catalog
	log   *slog.Logger

	http *http.Client // calls to the other brokers' admin API (cluster_remote.go)

	// Bundle hand-over (handover.go): the node that moves bundles, this broker's storage, the
	// bound of one entry, and the client that streams ledgers to other brokers with this broker's
	// brokerClient* credentials (no overall timeout: a stream lasts as long as its data needs).
	node          *Node
	engine        *storage.Engine
	maxEntryBytes int
	handOverHTTP  *http.Client
	// repl is the replication manager once it exists: a bundle this broker starts serving asks it
	// for a pass over the bundle's namespace (replicators move with their topics).
	repl *atomic.Pointer[replication.Manager]
	// importMu serialises receiving topics of a move with deleting what an abandoned move left
	// (handover.go): a copy is deleted only after the record, read under it, says it is not ours.
	importMu sync.Mutex
	// serving: the broker and replication exist (set once, when bundles start to move): a lost
	// bundle's topics can be closed (takeover.go).
	serving atomic.Bool
	// moves are the bundles this broker is moving now (handover.go), guarded by movesMu.
	movesMu sync.Mutex
	moves   map[cluster.Bundle]bool

	mu         sync.Mutex
	registered map[string]bool // persistent topics this broker has recorded in the registry
}

// bundleRanges reads a namespace's bundle ranges from its policy.
func bundleRanges(cat *catalog.Catalog) func(string) []cluster.Range {
	return func(ns string) []cluster.Range {
		p, ok := cat.Namespace(ns)
		if !ok || p.Bundles == nil {
			return nil
		}
		if len(p.Bundles.Boundaries) >= 2 {
			if rs, err := cluster.RangesFromBoundaries(p.Bundles.Boundaries); err == nil {
				return rs
			}
		}
		if p.Bundles.NumBundles > 0 {
			return cluster.EvenRanges(p.Bundles.NumBundles)
		}
		return nil
	}
}

// Lookup implements server.Ownership.
func (m *clusterMember) Lookup(ctx context.Context, topic naming.TopicName) (server.Owner, error) {
	d, err := m.coord.Lookup(ctx, topic.NamespaceName().String(), topic.String())
	if err != nil {
		if errors.Is(err, cluster.ErrNotReady) {
			return server.Owner{}, fmt.Errorf("%w: %v", wire.ErrServiceNotReady, err)
		}
		return server.Owner{}, err
	}
	if d.Action == cluster.Connect {
		m.register(ctx, topic)
		return server.Owner{Self: true}, nil
	}
	return server.Owner{ServiceURL: d.Broker.ServiceURL, ServiceURLTLS: d.Broker.ServiceURLTLS}, nil
}

// Serves implements server.Ownership.
func (m *clusterMember) Serves(topic naming.TopicName) bool {
	return m.coord.Owns(topic.NamespaceName().String(), topic.String())
}

// register records a persistent topic this broker serves in the cluster's topic registry, once per
// run; a failure is logged and retried at the next lookup.
func (m *clusterMember) register(ctx context.Context, topic naming.TopicName) {
	if !topic.IsPersistent() {
		return
	}
	name := topic.String()
	m.mu.Lock()
	done := m.registered[name]
	m.mu.Unlock()
	if done {
		return
	}
	_, err := m.store.Put(ctx, topicRegistryKey(topic), []byte(name), 0)
	if err != nil && !errors.Is(err, metadata.ErrBadVersion) {
		m.log.Warn("recording the topic in the cluster's registry failed", "topic", name, "err", err)
		return
	}
	m.mu.Lock()
	m.registered[name] = true
	m.mu.Unlock()
}

// forget removes a deleted topic from the registry.
func (m *clusterMember) forget(ctx context.Context, topic naming.TopicName) {
	m.mu.Lock()
	delete(m.registered, topic.String())
	m.mu.Unlock()
	if err := m.store.Delete(ctx, topicRegistryKey(topic), metadata.AnyVersion); err != nil && !errors.Is(err, metadata.ErrNotFound) {
		m.log.Warn("removing the topic from the cluster's registry failed", "topic", topic.String(), "err", err)
	}
}

func topicRegistryKey(t naming.TopicName) string {
	return topicsPrefix + t.Tenant + "/" + t.Namespace + "/" + t.Local
}

// Topics implements server.Ownership: the registry's topics of a namespace.
func (m *clusterMember) Topics(ctx context.Context, ns naming.NamespaceName) ([]string, error) {
	kvs, _, err := m.store.List(ctx, topicsPrefix+ns.Tenant+"/"+ns.Namespace+"/")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		// Only a valid name of this namespace is listed: the store is shared, and a damaged
		// value must not reach clients.
		if t, err := naming.ParseTopic(string(kv.Value)); err == nil && t.NamespaceName() == ns && topicRegistryKey(t) == kv.Key {
			out = append(out, t.String())
		} else {
			m.log.Warn("ignoring a malformed topic registry entry", "key", kv.Key)
		}
	}
	return out, nil
}

// joinCluster registers this broker with the cluster's coordinator (after the catalog, which
// holds the namespaces' bundle splits, and before the server, which answers lookups with it).
func (n *Node) joinCluster(ctx context.Context) error {
	c := &n.components
	id, err := resolveBrokerID(n.opts.DataDir, n.opts.BrokerID, strings.TrimPrefix(n.serviceURL, "pulsar://"))
	if err != nil {
		return err
	}
	log := n.log.With("brokerId", id)
	repl := new(atomic.Pointer[replication.Manager])
	member := new(atomic.Pointer[clusterMember]) // set once the member exists; the watch may call before

	coord, err := cluster.Start(ctx, cluster.Options{
		Store: c.localStore,
		Self: cluster.BrokerInfo{ID: id, ServiceURL: n.serviceURL, ServiceURLTLS: n.tls.serviceURL,
			WebURL: n.webURL, WebURLTLS: n.tls.webURL},
		SessionTTL:   n.opts.ClusterSessionTTL,
		HoldTimeout:  n.opts.LookupHoldTimeout,
		BundleRanges: bundleRanges(c.catalog),
		OnServe: func(b cluster.Bundle) {
			if r := repl.Load(); r != nil {
				r.NamespaceChanged(b.Namespace)
			}
		},
		OnLost: func(b cluster.Bundle) {
			m := member.Load()
			if m == nil || !m.serving.Load() {
				return // nothing is loaded before the broker serves
			}
			c.bg.Add(1)
			go func() {
				defer c.bg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), topicCloseTimeout)
				defer cancel()
				n.releaseLostBundle(ctx, b)
			}()
		},
		OnMoveAbandoned: func(b cluster.Bundle) {
			// Off the watch goroutine; coord.Close stops the watch before c.bg is waited for.
			c.bg.Add(1)
			go func() {
				defer c.bg.Done()
				if m := member.Load(); m != nil {
					m.dropAbandonedCopies(context.Background(), b)
				}
			}()
		},
		Logger: log,
	})
	if err != nil {
		return fmt.Errorf("join the cluster: %w", err)
	}
	peers, err := n.peerHTTPClient()
	if err != nil {
		coord.Close(ctx)
		return err
	}
	handOverHTTP, err := replication.BrokerHTTPClient(n.opts.linkDefaults(), &http.Client{Transport: peers.Transport})
	if err != nil {
		coord.Close(ctx)
		return fmt.Errorf("hand-over client: %w", err)
	}
	c.member = &clusterMember{coord: coord, store: c.localStore, cat: c.catalog, log: log, http: peers, registered: map[string]bool{},
		node: n, engine: c.engine, maxEntryBytes: n.opts.MaxMessageSize + server.FramePadding, handOverHTTP: handOverHTTP, repl: repl}
	member.Store(c.member)
	log.Info("joined the cluster", "brokers", len(coord.Brokers()))
	return nil
}

// adminOwnership is the admin API's view of the cluster: nil for a cluster of one broker.
func (c *components) adminOwnership() admin.Ownership {
	if c.member == nil {
		return nil
	}
	return adminMember{c.member}
}

// adminMember adapts the cluster member to the admin API.
type adminMember struct{ m *clusterMember }

func (a adminMember) TopicOwner(ctx context.Context, topic naming.TopicName) (admin.TopicOwner, error) {
	return a.owner(a.m.coord.Lookup(ctx, topic.NamespaceName().String(), topic.String()))
}

func (a adminMember) BundleOwner(ctx context.Context, ns naming.NamespaceName, bundle string) (admin.TopicOwner, error) {
	r, err := cluster.ParseRange(bundle)
	if err != nil {
		return admin.TopicOwner{}, fmt.Errorf("%w: %v", admin.ErrInvalidArgument, err)
	}
	known := false
	for _, have := range a.m.coord.Ranges(ns.String()) {
		known = known || have == r
	}
	if !known {
		return admin.TopicOwner{}, fmt.Errorf("%w: namespace %s has no bundle %s", admin.ErrInvalidArgument, ns, bundle)
	}
	return a.owner(a.m.coord.LookupBundle(ctx, cluster.Bundle{Namespace: ns.String(), Range: r}))
}

func (a adminMember) owner(d cluster.Decision, err error) (admin.TopicOwner, error) {
	if err != nil {
		if errors.Is(err, cluster.ErrNotReady) {
			return admin.TopicOwner{}, fmt.Errorf("%w: %v", admin.ErrNotReady, err)
		}
		return admin.TopicOwner{}, err
	}
	b := d.Broker
	return admin.TopicOwner{Self: d.Action == cluster.Connect, URLs: adminapi.LookupData{
		BrokerURL: b.ServiceURL, BrokerURLTLS: b.ServiceURLTLS, HTTPURL: b.WebURL, HTTPURLTLS: b.WebURLTLS}}, nil
}

func (a adminMember) BundleRange(topic naming.TopicName) string {
	return a.m.coord.BundleOf(topic.NamespaceName().String(), topic.String()).Range.String()
}

func (a adminMember) Brokers() []string {
	var out []string
	for _, b := range a.m.coord.Brokers() {
		u := b.WebURL
		if u == "" {
			u = b.WebURLTLS
		}
		if host := hostOf(u); host != "" {
			out = append(out, host)
		}
	}
	return out
}

// peerHTTPClient is the client for the other brokers' admin API: their https:// listeners are
// verified against the CA this broker's TLS settings trust (the system's without one).
func (n *Node) peerHTTPClient() (*http.Client, error) {
	cfg, err := tlsreload.ClientConfig(tlsreload.Files{CAFile: n.opts.TLS.TrustCertsFile}, false)
	if err != nil {
		return nil, fmt.Errorf("peer TLS trust: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr, Timeout: remoteCallTimeout}, nil
}

func (a adminMember) Topics(ctx context.Context, ns naming.NamespaceName) ([]string, error) {
	return a.m.Topics(ctx, ns)
}

// Incoming implements server.Ownership.
func (m *clusterMember) Incoming(topic naming.TopicName) bool {
	return m.coord.Incoming(topic.NamespaceName().String(), topic.String())
}

// AwaitServing implements server.Ownership.
func (m *clusterMember) AwaitServing(ctx context.Context, topic naming.TopicName) bool {
	return m.coord.AwaitServing(ctx, topic.NamespaceName().String(), topic.String())
}
