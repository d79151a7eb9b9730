package node

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/console"
	"github.com/meridian-mq/meridian/internal/failover"
	"github.com/meridian-mq/meridian/internal/replication"
)

// consoleSource adapts the catalog and the replication manager to what the console draws.
type consoleSource struct {
	local  string
	webURL string // this broker's admin API, which the failover check reads as the source
	cat    *catalog.Catalog
	repl   *replication.Manager // nil without replication
}

func (s consoleSource) LocalCluster() string { return s.local }

func (s consoleSource) Clusters() []console.Cluster {
	names := s.cat.Clusters()
	out := make([]console.Cluster, 0, len(names)+1)
	local := false
	for _, n := range names {
		d, _ := s.cat.Cluster(n)
		out = append(out, console.Cluster{Name: n, ServiceURL: d.ServiceURL, BrokerServiceURL: d.BrokerServiceURL, Local: n == s.local})
		local = local || n == s.local
	}
	if !local {
		out = append(out, console.Cluster{Name: s.local, Local: true})
	}
	return out
}

// Links lists every replicator of this cluster and every origin replicating into its topics.
func (s consoleSource) Links() []console.LinkState {
	if s.repl == nil {
		return nil
	}
	all := s.repl.AllStats()
	out := make([]console.LinkState, 0, len(all))
	for _, st := range all {
		if st.Phase != replication.PhaseInboundOnly {
			out = append(out, console.LinkState{
				Topic: st.Topic, Remote: st.RemoteCluster, Outbound: true, Connected: st.Connected,
				Backlog: st.ReplicationBacklog, RateOut: st.MsgRateOut, DelaySeconds: st.ReplicationDelayInSeconds,
				LastError: st.LastError, SentTotal: st.MsgOutCount,
				Stalled: st.Stalled, StalledReason: st.StalledReason, StalledSince: unixMilliOrZero(st.StalledSince),
			})
		}
		if st.MsgInCount > 0 || st.Phase == replication.PhaseInboundOnly {
			out = append(out, console.LinkState{Topic: st.Topic, Remote: st.RemoteCluster, RateIn: st.MsgRateIn, Connected: true})
		}
	}
	return out
}

func unixMilliOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Subscriptions lists the replicated subscriptions' sync with each other cluster.
func (s consoleSource) Subscriptions() []console.SubscriptionSync {
	if s.repl == nil {
		return nil
	}
	var out []console.SubscriptionSync
	for _, topic := range s.repl.SyncedTopics() {
		for sub, st := range s.repl.SubscriptionSyncStats(topic) {
			for remote, ob := range st.Outbound {
				out = append(out, console.SubscriptionSync{Topic: topic, Subscription: sub, Remote: remote, Outbound: true, LagMs: ob.SyncLagMs, PendingStates: ob.PendingStates})
			}
			for source, in := range st.Inbound {
				out = append(out, console.SubscriptionSync{Topic: topic, Subscription: sub, Remote: source, LagMs: in.ApplyLagMs, WaitingFor: in.WaitingFor})
			}
		}
	}
	slices.SortFunc(out, func(a, b console.SubscriptionSync) int {
		return strings.Compare(a.Topic+"\x00"+a.Subscription+"\x00"+a.Remote, b.Topic+"\x00"+b.Subscription+"\x00"+b.Remote)
	})
	return out
}

// FailoverCheck implements console.FailoverChecker: the checklist of internal/failover with this
// broker's admin API as the source and the target's registered serviceUrl, both read with the
// console user's credentials (the same token must be valid on the target).
func (s consoleSource) FailoverCheck(ctx context.Context, namespace, target, authorization string) (any, error) {
	httpClient := &http.Client{Timeout: 10 * time.Second}
	if authorization != "" {
		httpClient.Transport = headerTransport{name: "Authorization", value: authorization, next: http.DefaultTransport}
	}
	src, err := adminapi.NewClient(s.webURL, httpClient)
	if err != nil {
		return nil, err
	}
	ck := failover.Checker{Source: src, Timeout: 10 * time.Second,
		Target: func(ctx context.Context, name string) (*adminapi.Client, error) {
			d, ok := s.cat.Cluster(name)
			if !ok || d.ServiceURL == "" {
				return nil, fmt.Errorf("cluster %s is not registered here with a serviceUrl", name)
			}
			return adminapi.NewClient(d.ServiceURL, httpClient)
		}}
	return ck.Check(ctx, namespace, target), nil
}

// headerTransport sets one header on every request.
type headerTransport struct {
	name, value string
	next        http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(t.name, t.value)
	return t.next.RoundTrip(r)
}
