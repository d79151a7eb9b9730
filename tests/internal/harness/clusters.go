package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/node"
	"github.com/meridian-mq/meridian/tests/internal/checker"
)

// Multi-cluster helpers for geo-replication tests: start several clusters (one broker each) with
// independent configuration stores or one shared store, and configure them the way a user does,
// through each cluster's admin REST API with pulsaradmin (register remote clusters, tenant
// allowedClusters, namespace replication clusters). Every wait polls with a deadline.

// Cluster is one cluster of a multi-cluster test: a broker (in-process or a real process) and a
// pulsaradmin client for its admin API.
type Cluster struct {
	// Name is the cluster name (`--cluster`).
	Name string
	// Broker gives the cluster's URLs.
	Broker
	// InProcess is the broker when it runs in this process (StartClusters), else nil.
	InProcess *InProcess
	// Process is the broker when it is a real `meridian standalone` process (NewCluster with a
	// *Process), else nil.
	Process *Process
	// Admin is a pulsaradmin client for the cluster's admin API.
	Admin pulsaradmin.Client
	// Meridian is Meridian's own admin client (adminapi), for the stats fields pulsaradmin does not
	// decode (msgInCounter/msgOutCounter per remote, lastError, startMode, skipped...).
	Meridian *adminapi.Client
}

// NewCluster wraps a running broker of cluster name (for example one StartStandalone started) so the
// configuration helpers can drive it.
func NewCluster(t testing.TB, name string, b Broker) *Cluster {
	t.Helper()
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	mer, err := adminapi.NewClient(b.WebURL(), &http.Client{Transport: transport, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("adminapi client for %s: %v", b.WebURL(), err)
	}
	c := &Cluster{Name: name, Broker: b, Admin: NewAdmin(t, b), Meridian: mer}
	switch v := b.(type) {
	case *InProcess:
		c.InProcess = v
	case *Process:
		c.Process = v
	}
	return c
}

// ClustersOptions says how StartClusters starts its clusters.
type ClustersOptions struct {
	// ConfigStore is a configuration store URL (`--config-store`, "etcd://host:port/prefix") shared
	// by every cluster. Empty, with SharedStore nil, means independent clusters: each keeps its
	// configuration in its own local store and knows nothing of the others until told through its
	// admin API.
	ConfigStore string
	// SharedStore, when set, is an in-process configuration store shared by every cluster (the
	// `--clusters` mode); it takes precedence over ConfigStore. The caller closes it.
	SharedStore metadata.Store
	// Node, when set, edits each cluster's options after the harness set them (name, store,
	// loopback ports, data dir).
	Node func(cluster string, o *node.Options)
}

// StartClusters starts one in-process cluster per name, in order, as opts says. Clusters sharing a
// store register themselves in it on start; independent clusters know only themselves (see
// RegisterEachOther). Nothing is replicated until a namespace lists remote clusters.
func StartClusters(t testing.TB, opts ClustersOptions, names ...string) []*Cluster {
	t.Helper()
	out := make([]*Cluster, 0, len(names))
	for _, name := range names {
		b := StartInProcess(t, func(o *node.Options) {
			o.Cluster = name
			switch {
			case opts.SharedStore != nil:
				o.SharedConfigStore = opts.SharedStore
			case opts.ConfigStore != "":
				o.ConfigStore = opts.ConfigStore
			}
			if opts.Node != nil {
				opts.Node(name, o)
			}
		})
		out = append(out, NewCluster(t, name, b))
	}
	return out
}

// StartIndependentClusters starts in-process clusters with independent configuration stores and
// registers every cluster in every other one (RegisterEachOther). Tenants and namespaces are left
// to the test.
func StartIndependentClusters(t testing.TB, names ...string) []*Cluster {
	t.Helper()
	cs := StartClusters(t, ClustersOptions{}, names...)
	RegisterEachOther(t, cs...)
	return cs
}

// StartSharedClusters starts in-process clusters on one configuration store (configStoreURL,
// "etcd://host:port/prefix"), each registering itself there, and waits until every cluster sees
// every other one registered.
func StartSharedClusters(t testing.TB, configStoreURL string, names ...string) []*Cluster {
	t.Helper()
	cs := StartClusters(t, ClustersOptions{ConfigStore: configStoreURL}, names...)
	for _, c := range cs {
		c.WaitClustersKnown(t, 10*time.Second, names...)
	}
	return cs
}

// Client creates a pulsar-client-go client for the cluster, closed in t.Cleanup.
func (c *Cluster) Client(t testing.TB) pulsar.Client {
	t.Helper()
	return NewClient(t, c, nil)
}

// clusterData is how c is registered in other clusters.
func (c *Cluster) clusterData() utils.ClusterData {
	return utils.ClusterData{Name: c.Name, ServiceURL: c.WebURL(), BrokerServiceURL: c.ServiceURL()}
}

// Register registers each of others in c's configuration store (PUT /admin/v2/clusters/{name}) with
// its current URLs, updating a registration that exists already.
func (c *Cluster) Register(t testing.TB, others ...*Cluster) {
	t.Helper()
	for _, o := range others {
		if o.Name == c.Name {
			continue
		}
		data := o.clusterData()
		if _, err := c.Admin.Clusters().Get(o.Name); err == nil {
			if err := c.Admin.Clusters().Update(data); err != nil {
				t.Fatalf("%s: update cluster %s: %v", c.Name, o.Name, err)
			}
			continue
		}
		if err := c.Admin.Clusters().Create(data); err != nil {
			t.Fatalf("%s: register cluster %s: %v", c.Name, o.Name, err)
		}
	}
}

// RegisterEachOther registers every cluster in every other one (independent stores).
func RegisterEachOther(t testing.TB, cs ...*Cluster) {
	t.Helper()
	for _, c := range cs {
		c.Register(t, cs...)
	}
}

// WaitClustersKnown waits until c's admin API lists every cluster in names.
func (c *Cluster) WaitClustersKnown(t testing.TB, timeout time.Duration, names ...string) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("%s to know clusters %v", c.Name, names), func() error {
		got, err := c.Admin.Clusters().List()
		if err != nil {
			return err
		}
		for _, n := range names {
			if !slices.Contains(got, n) {
				return fmt.Errorf("clusters %v, missing %s", got, n)
			}
		}
		return nil
	})
}

// SetTenant creates tenant on c with allowedClusters allowed, or updates it if it exists.
func (c *Cluster) SetTenant(t testing.TB, tenant string, allowed ...string) {
	t.Helper()
	data := utils.TenantData{Name: tenant, AllowedClusters: allowed, AdminRoles: []string{}}
	if _, err := c.Admin.Tenants().Get(tenant); err == nil {
		if err := c.Admin.Tenants().Update(data); err != nil {
			t.Fatalf("%s: update tenant %s allowedClusters=%v: %v", c.Name, tenant, allowed, err)
		}
		return
	}
	if err := c.Admin.Tenants().Create(data); err != nil {
		t.Fatalf("%s: create tenant %s allowedClusters=%v: %v", c.Name, tenant, allowed, err)
	}
}

// CreateNamespace creates namespace ns ("tenant/name") on c unless it exists, then, if replication
// is not empty, sets its replication clusters (POST .../replication).
func (c *Cluster) CreateNamespace(t testing.TB, ns string, replication ...string) {
	t.Helper()
	if _, err := c.Admin.Namespaces().GetPolicies(ns); err != nil {
		if err := c.Admin.Namespaces().CreateNamespace(ns); err != nil {
			t.Fatalf("%s: create namespace %s: %v", c.Name, ns, err)
		}
	}
	if len(replication) > 0 {
		c.SetReplicationClusters(t, ns, replication...)
	}
}

// SetReplicationClusters sets ns's replication clusters on c.
func (c *Cluster) SetReplicationClusters(t testing.TB, ns string, clusters ...string) {
	t.Helper()
	if err := c.Admin.Namespaces().SetNamespaceReplicationClusters(ns, clusters); err != nil {
		t.Fatalf("%s: namespace %s replication clusters %v: %v", c.Name, ns, clusters, err)
	}
}

// WaitReplicationClusters waits until c's admin API answers exactly clusters (in any order) as ns's
// replication clusters: with a shared store, the policy set through one cluster has reached c.
func (c *Cluster) WaitReplicationClusters(t testing.TB, timeout time.Duration, ns string, clusters ...string) {
	t.Helper()
	want := slices.Sorted(slices.Values(clusters))
	Eventually(t, timeout, fmt.Sprintf("%s to see %s replicating to %v", c.Name, ns, want), func() error {
		got, err := c.Admin.Namespaces().GetNamespaceReplicationClusters(ns)
		if err != nil {
			return err
		}
		got = slices.Sorted(slices.Values(got))
		if !slices.Equal(got, want) {
			return fmt.Errorf("replication clusters %v", got)
		}
		return nil
	})
}

// TopicStats returns c's stats of topic (a full name, persistent://tenant/ns/topic).
func (c *Cluster) TopicStats(topic string) (utils.TopicStats, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return utils.TopicStats{}, fmt.Errorf("topic name %q: %w", topic, err)
	}
	return c.Admin.Topics().GetStats(*tn)
}

// MeridianStats returns c's stats of topic as Meridian writes them (every field, adminapi.TopicStats).
func (c *Cluster) MeridianStats(ctx context.Context, topic string) (adminapi.TopicStats, error) {
	return c.Meridian.TopicStats(ctx, topic)
}

// ErrNoReplicator is returned by ReplicatorStats when the topic's stats have no replication.<remote>.
var ErrNoReplicator = errors.New("no replicator")

// ReplicatorStats returns the stats of c's replicator of topic towards remote (topic stats
// replication.<remote>).
func (c *Cluster) ReplicatorStats(topic, remote string) (utils.ReplicatorStats, error) {
	st, err := c.TopicStats(topic)
	if err != nil {
		return utils.ReplicatorStats{}, err
	}
	r, ok := st.Replication[remote]
	if !ok {
		have := make([]string, 0, len(st.Replication))
		for k := range st.Replication {
			have = append(have, k)
		}
		return utils.ReplicatorStats{}, fmt.Errorf("%w: %s has no replication.%s on %s (has %v)", ErrNoReplicator, c.Name, remote, topic, have)
	}
	return r, nil
}

// WaitReplicatorsConnected waits until c's replicators of topic towards every remote report
// connected=true. The topic must exist on c.
func (c *Cluster) WaitReplicatorsConnected(t testing.TB, timeout time.Duration, topic string, remotes ...string) {
	t.Helper()
	c.waitReplicators(t, timeout, topic, remotes, "connected", func(r utils.ReplicatorStats) error {
		if !r.Connected {
			return errors.New("not connected")
		}
		return nil
	})
}

// WaitReplicationCaughtUp waits until c's replicators of topic towards every remote are connected
// with replicationBacklog 0: everything c stored on topic has reached the remotes.
func (c *Cluster) WaitReplicationCaughtUp(t testing.TB, timeout time.Duration, topic string, remotes ...string) {
	t.Helper()
	c.waitReplicators(t, timeout, topic, remotes, "caught up (connected, backlog 0)", func(r utils.ReplicatorStats) error {
		if !r.Connected || r.ReplicationBacklog != 0 {
			return fmt.Errorf("connected=%v backlog=%d", r.Connected, r.ReplicationBacklog)
		}
		return nil
	})
}

// WaitNoReplicator waits until c's stats of topic have no replicator towards any of remotes.
func (c *Cluster) WaitNoReplicator(t testing.TB, timeout time.Duration, topic string, remotes ...string) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("%s: no replicator of %s towards %v", c.Name, topic, remotes), func() error {
		st, err := c.TopicStats(topic)
		if err != nil {
			return err
		}
		for _, r := range remotes {
			if _, ok := st.Replication[r]; ok {
				return fmt.Errorf("replication.%s still present", r)
			}
		}
		return nil
	})
}

func (c *Cluster) waitReplicators(t testing.TB, timeout time.Duration, topic string, remotes []string, what string, ok func(utils.ReplicatorStats) error) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("%s: replicators of %s towards %v %s", c.Name, topic, remotes, what), func() error {
		st, err := c.TopicStats(topic)
		if err != nil {
			return err
		}
		for _, remote := range remotes {
			r, found := st.Replication[remote]
			if !found {
				return fmt.Errorf("%w towards %s", ErrNoReplicator, remote)
			}
			if err := ok(r); err != nil {
				return fmt.Errorf("towards %s: %w (lastError in the broker's stats/logs)", remote, err)
			}
		}
		return nil
	})
}

// Drain receives exactly n messages from cons within timeout, records each in chk as stream, acks
// it, and returns them in arrival order. It fails the test if fewer arrive.
func Drain(t testing.TB, chk *checker.Checker, stream string, cons pulsar.Consumer, n int, timeout time.Duration) []pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msgs := make([]pulsar.Message, 0, n)
	for len(msgs) < n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("%s: received %d of %d messages within %v: %v", stream, len(msgs), n, timeout, err)
		}
		chk.Received(stream, m.Payload(), m.ID().String())
		if err := cons.Ack(m); err != nil {
			t.Fatalf("%s: ack %v: %v", stream, m.ID(), err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// DrainQuiet records into chk (as stream, acking each) whatever cons delivers until nothing arrives
// for quiet; it returns those messages. Use it after Drain to catch duplicates and messages that
// should not have arrived: it waits exactly quiet when there are none.
func DrainQuiet(t testing.TB, chk *checker.Checker, stream string, cons pulsar.Consumer, quiet time.Duration) []pulsar.Message {
	t.Helper()
	var extra []pulsar.Message
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		m, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			return extra
		}
		chk.Received(stream, m.Payload(), m.ID().String())
		_ = cons.Ack(m)
		extra = append(extra, m)
	}
}
