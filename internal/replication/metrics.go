package replication

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The per-topic pulsar_replication_* series (backlog, rates, delay, connected) are exported by the
// admin package from the topic stats' replication section, which the node fills from
// Manager.AdminStats. Collector adds what topic stats cannot carry.
var (
	descAbandoned = prometheus.NewDesc("meridian_replication_abandoned_entries_total",
		"Entries never replicated because the remote cluster was removed from a topic's replication clusters (since start).",
		[]string{"cluster", "remote_cluster"}, nil)
	descDuplicates = prometheus.NewDesc("meridian_replication_duplicates_dropped_total",
		"Replicated entries received again from a remote cluster and dropped by source position (since the topic was loaded).",
		[]string{"cluster", "namespace", "topic", "remote_cluster"}, nil)
	descDuplicatesByNamespace = prometheus.NewDesc("meridian_replication_duplicates_dropped_total",
		"Replicated entries received again from a remote cluster and dropped by source position (since the topics were loaded).",
		[]string{"cluster", "namespace", "remote_cluster"}, nil)
	descRunning = prometheus.NewDesc("meridian_replicators_running",
		"Replicators running on this broker.", []string{"cluster"}, nil)
	descMemory = prometheus.NewDesc("meridian_replication_memory_bytes",
		"Bytes of entries the replicators hold (read, not yet acknowledged by the remote), against --replication-memory-bytes.",
		[]string{"cluster"}, nil)
	descMemoryLimit = prometheus.NewDesc("meridian_replication_memory_limit_bytes",
		"--replication-memory-bytes: catch-up reads wait while the replicators hold this much (0: no bound).",
		[]string{"cluster"}, nil)
	descSubSyncLag = prometheus.NewDesc("meridian_replicated_subscription_sync_lag_seconds",
		"Replicated subscriptions: outbound, the age of the oldest state the remote has not acknowledged (else the last state's delivery time); inbound, applied minus taken (two clusters' clocks).",
		[]string{"cluster", "namespace", "topic", "subscription", "remote_cluster", "direction"}, nil)
)

// Collector returns a Prometheus collector of the Manager's own figures. Without topicLevel
// (Pulsar's exposeTopicLevelMetricsInPrometheus off) per-topic figures are summed per namespace.
func (m *Manager) Collector(topicLevel bool) prometheus.Collector {
	c := managerCollector{m: m, topicLevel: topicLevel, duplicates: descDuplicates}
	if !topicLevel {
		c.duplicates = descDuplicatesByNamespace
	}
	return c
}

type managerCollector struct {
	m          *Manager
	topicLevel bool
	duplicates *prometheus.Desc
}

func (c managerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAbandoned
	ch <- c.duplicates
	ch <- descRunning
	ch <- descMemory
	ch <- descMemoryLimit
	ch <- descSubSyncLag
}

func (c managerCollector) Collect(ch chan<- prometheus.Metric) {
	local := c.m.opts.Local
	for remote, n := range c.m.Abandoned() {
		ch <- prometheus.MustNewConstMetric(descAbandoned, prometheus.CounterValue, float64(n), local, remote)
	}
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(len(c.m.Running())), local)
	ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(c.m.budget.Used()), local)
	ch <- prometheus.MustNewConstMetric(descMemoryLimit, prometheus.GaugeValue, float64(max(0, c.m.budget.Limit())), local)
	c.m.mu.Lock()
	indexes := make(map[string]*Index, len(c.m.indexes))
	for t, x := range c.m.indexes {
		indexes[t] = x
	}
	c.m.mu.Unlock()
	type nsRemote struct{ ns, remote string }
	byNamespace := map[nsRemote]int64{}
	for topic, x := range indexes {
		ns := namespaceOf(topic)
		for _, in := range x.Inbound() {
			if c.topicLevel {
				ch <- prometheus.MustNewConstMetric(descDuplicates, prometheus.CounterValue, float64(in.DuplicatesDropped), local, ns, topic, in.Origin)
			} else {
				byNamespace[nsRemote{ns, in.Origin}] += in.DuplicatesDropped
			}
		}
	}
	for k, n := range byNamespace {
		ch <- prometheus.MustNewConstMetric(descDuplicatesByNamespace, prometheus.CounterValue, float64(n), local, k.ns, k.remote)
	}
	// The sync lag is per subscription: exported only with topic-level metrics.
	if !c.topicLevel {
		return
	}
	for _, topic := range c.m.subsync.syncedTopics() {
		ns := namespaceOf(topic)
		for sub, st := range c.m.subsync.stats(topic) {
			for remote, ob := range st.Outbound {
				ch <- prometheus.MustNewConstMetric(descSubSyncLag, prometheus.GaugeValue, float64(ob.SyncLagMs)/1000, local, ns, topic, sub, remote, "outbound")
			}
			for source, in := range st.Inbound {
				ch <- prometheus.MustNewConstMetric(descSubSyncLag, prometheus.GaugeValue, float64(in.ApplyLagMs)/1000, local, ns, topic, sub, source, "inbound")
			}
		}
	}
}
