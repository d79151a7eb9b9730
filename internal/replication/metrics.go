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

// Collector returns a Prometheus collector of the Manager's own figures.
func (m *Manager) Collector() prometheus.Collector { return managerCollector{m} }

type managerCollector struct{ m *Manager }

func (c managerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAbandoned
	ch <- descDuplicates
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
	for topic, x := range indexes {
		ns := namespaceOf(topic)
		for _, in := range x.Inbound() {
			ch <- prometheus.MustNewConstMetric(descDuplicates, prometheus.CounterValue, float64(in.DuplicatesDropped), local, ns, topic, in.Origin)
		}
	}
	if c.m.subsync == nil {
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
