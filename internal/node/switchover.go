package node

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/server"
)

// switchover is server.Migration over the catalog and the topic stats (docs/replication-design.md,
// "Planned switchover"). A topic migrates when this cluster is marked migrated, or its namespace
// is, and this cluster's data names a target URL (Pulsar's rule: the URL comes from the cluster
// even when only a namespace moves). A target URL that is this broker's own is ignored, so that
// clusters sharing a configuration store never redirect clients to themselves.
type switchover struct {
	cluster       string
	serviceURL    string
	serviceURLTLS string
	cat           *catalog.Catalog
	topics        topicService // its repl is the Manager that syncs replicated subscriptions
	// linkDefaults are the brokerClient* settings: the TLS and credentials of calls to a target
	// cluster registered here without its own.
	linkDefaults replication.LinkDefaults
}

var _ server.Migration = switchover{}

func (s switchover) target() (adminapi.ClusterData, *adminapi.ClusterURL, bool) {
	d, ok := s.cat.Cluster(s.cluster)
	if !ok || d.MigratedClusterURL == nil {
		return d, nil, false
	}
	u := d.MigratedClusterURL
	if u.BrokerServiceURL == "" && u.BrokerServiceURLTLS == "" {
		return d, nil, false
	}
	if (u.BrokerServiceURL != "" && sameURL(u.BrokerServiceURL, s.serviceURL)) ||
		(u.BrokerServiceURLTLS != "" && sameURL(u.BrokerServiceURLTLS, s.serviceURLTLS)) {
		return d, nil, false
	}
	return d, u, true
}

func (s switchover) Active() bool {
	_, _, ok := s.target()
	return ok
}

func (s switchover) Target(topic naming.TopicName) (server.MigrationTarget, bool) {
	d, u, ok := s.target()
	if !ok {
		return server.MigrationTarget{}, false
	}
	if !d.Migrated {
		p, found := s.cat.NamespaceShared(topic.Tenant + "/" + topic.Namespace)
		if !found || !p.Migrated {
			return server.MigrationTarget{}, false
		}
	}
	return server.MigrationTarget{BrokerServiceURL: u.BrokerServiceURL, BrokerServiceURLTLS: u.BrokerServiceURLTLS}, true
}

// targetCluster names the registered cluster the target URL belongs to ("" if none does: the
// topics then have no replication to it to wait for).
func (s switchover) targetCluster(u *adminapi.ClusterURL) string {
	for _, name := range s.cat.Clusters() {
		if name == s.cluster {
			continue
		}
		d, _ := s.cat.Cluster(name)
		for _, pair := range [][2]string{
			{u.BrokerServiceURL, d.BrokerServiceURL}, {u.BrokerServiceURLTLS, d.BrokerServiceURLTLS},
			{u.ServiceURL, d.ServiceURL}, {u.ServiceURLTLS, d.ServiceURLTLS},
		} {
			if pair[0] != "" && sameURL(pair[0], pair[1]) {
				return name
			}
		}
	}
	return ""
}

func sameURL(a, b string) bool {
	return strings.TrimRight(a, "/") == strings.TrimRight(b, "/")
}

func (s switchover) Progress(ctx context.Context, topic naming.TopicName) (server.TopicProgress, error) {
	_, u, ok := s.target()
	if !ok {
		return server.TopicProgress{}, nil
	}
	remote := s.targetCluster(u)
	st, err := s.topics.TopicStats(ctx, topic.String(), adminapi.GetStatsOptions{})
	if err != nil {
		return server.TopicProgress{}, err
	}
	var out server.TopicProgress
	if r, ok := st.Replication[remote]; ok && remote != "" {
		out.ReplicatesToTarget, out.ReplicationBacklog = true, r.ReplicationBacklog
	}
	out.Subscriptions = make(map[string]server.SubscriptionProgress, len(st.Subscriptions))
	for name, sub := range st.Subscriptions {
		p := server.SubscriptionProgress{Replicated: sub.IsReplicated, Backlog: sub.MsgBacklog, Unacked: sub.UnackedMessages}
		if sync := sub.ReplicatedSubscriptionSync; sync != nil && remote != "" {
			if ob, ok := sync.Outbound[remote]; ok {
				p.HasState = true
				p.SyncedToTarget = ob.PendingStates == 0 && ob.LastDeliveredTimestamp > 0
			}
		}
		out.Subscriptions[name] = p
	}
	return out, nil
}

func (s switchover) SyncSubscription(topic naming.TopicName, sub string) {
	if s.topics.repl != nil {
		s.topics.repl.SubscriptionStateChanged(topic.String(), sub, true)
	}
}

// targetPartitionsTimeout bounds the target's answer to a partition-count question.
const targetPartitionsTimeout = 2 * time.Second

// TargetPartitions asks the target's admin API for the topic's partition count: over the link's
// TLS and credentials when the target is a registered cluster (its data, else the broker's
// brokerClient* defaults), else at the migration URL's serviceUrl without credentials.
func (s switchover) TargetPartitions(ctx context.Context, topic naming.TopicName) (int, bool) {
	_, u, ok := s.target()
	if !ok {
		return 0, false
	}
	httpClient := &http.Client{Timeout: targetPartitionsTimeout}
	var client *adminapi.Client
	var err error
	if name := s.targetCluster(u); name != "" {
		d, _ := s.cat.Cluster(name)
		client, err = replication.LinkAdminClient(name, d, s.linkDefaults, httpClient)
	} else if u.ServiceURL != "" {
		client, err = adminapi.NewClient(u.ServiceURL, httpClient)
	} else {
		return 0, false
	}
	if err != nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, targetPartitionsTimeout)
	defer cancel()
	md, err := client.GetPartitionedMetadata(ctx, topic.String())
	if err != nil {
		return 0, false
	}
	return md.Partitions, true
}
