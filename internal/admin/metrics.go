package admin

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/adminapi"
)

// scrapeTimeout bounds one /metrics collection of topic stats.
const scrapeTimeout = 10 * time.Second

// metric descriptions, with Pulsar's names and labels so that Pulsar's dashboards work.
var (
	topicLabels = []string{"cluster", "namespace", "topic"}
	replLabels  = []string{"cluster", "namespace", "topic", "remote_cluster"}
	subLabels   = []string{"cluster", "namespace", "topic", "subscription"}

	descSubscriptions = prometheus.NewDesc("pulsar_subscriptions_count", "Number of subscriptions of the topic.", topicLabels, nil)
	descProducers     = prometheus.NewDesc("pulsar_producers_count", "Number of producers connected to the topic.", topicLabels, nil)
	descConsumers     = prometheus.NewDesc("pulsar_consumers_count", "Number of consumers connected to the topic.", topicLabels, nil)
	descRateIn        = prometheus.NewDesc("pulsar_rate_in", "Messages per second published to the topic.", topicLabels, nil)
	descRateOut       = prometheus.NewDesc("pulsar_rate_out", "Messages per second dispatched from the topic.", topicLabels, nil)
	descThroughputIn  = prometheus.NewDesc("pulsar_throughput_in", "Bytes per second published to the topic.", topicLabels, nil)
	descThroughputOut = prometheus.NewDesc("pulsar_throughput_out", "Bytes per second dispatched from the topic.", topicLabels, nil)
	descStorageSize   = prometheus.NewDesc("pulsar_storage_size", "Bytes stored for the topic.", topicLabels, nil)
	descBacklogSize   = prometheus.NewDesc("pulsar_storage_backlog_size", "Bytes of the topic's backlog.", topicLabels, nil)
	descMsgBacklog    = prometheus.NewDesc("pulsar_msg_backlog", "Messages in the topic's subscriptions' backlogs.", topicLabels, nil)
	descInBytes       = prometheus.NewDesc("pulsar_in_bytes_total", "Bytes published to the topic.", topicLabels, nil)
	descInMessages    = prometheus.NewDesc("pulsar_in_messages_total", "Messages published to the topic.", topicLabels, nil)
	descOutBytes      = prometheus.NewDesc("pulsar_out_bytes_total", "Bytes dispatched from the topic.", topicLabels, nil)
	descOutMessages   = prometheus.NewDesc("pulsar_out_messages_total", "Messages dispatched from the topic.", topicLabels, nil)

	descSubBacklog  = prometheus.NewDesc("pulsar_subscription_back_log", "Messages in the subscription's backlog.", subLabels, nil)
	descSubRateOut  = prometheus.NewDesc("pulsar_subscription_msg_rate_out", "Messages per second dispatched to the subscription.", subLabels, nil)
	descSubThrOut   = prometheus.NewDesc("pulsar_subscription_msg_throughput_out", "Bytes per second dispatched to the subscription.", subLabels, nil)
	descSubUnacked  = prometheus.NewDesc("pulsar_subscription_unacked_messages", "Messages delivered and not acknowledged.", subLabels, nil)
	descSubConsumer = prometheus.NewDesc("pulsar_subscription_consumers_count", "Consumers of the subscription.", subLabels, nil)

	descReplRateIn    = prometheus.NewDesc("pulsar_replication_rate_in", "Messages per second received from the remote cluster.", replLabels, nil)
	descReplRateOut   = prometheus.NewDesc("pulsar_replication_rate_out", "Messages per second sent to the remote cluster.", replLabels, nil)
	descReplThrIn     = prometheus.NewDesc("pulsar_replication_throughput_in", "Bytes per second received from the remote cluster.", replLabels, nil)
	descReplThrOut    = prometheus.NewDesc("pulsar_replication_throughput_out", "Bytes per second sent to the remote cluster.", replLabels, nil)
	descReplBacklog   = prometheus.NewDesc("pulsar_replication_backlog", "Entries not yet replicated to the remote cluster.", replLabels, nil)
	descReplConnected = prometheus.NewDesc("pulsar_replication_connected_count", "1 when the replicator's producer to the remote cluster is connected.", replLabels, nil)
	descReplDelay     = prometheus.NewDesc("pulsar_replication_delay_in_seconds", "Age of the oldest entry not yet replicated.", replLabels, nil)
	descReplError     = prometheus.NewDesc("meridian_replication_error", "1 while the replicator reports an error (see topic stats replication.<remote>.lastError).", replLabels, nil)
	descReplProgress  = prometheus.NewDesc("meridian_replication_last_progress_timestamp_seconds", "When the remote cluster last acknowledged a replicated entry.", replLabels, nil)

	descScrapeErrors = prometheus.NewDesc("meridian_admin_topic_stats_errors", "Topic stats that could not be collected in this scrape.", []string{"cluster"}, nil)
	descCatalogOK    = prometheus.NewDesc("meridian_configuration_store_following", "1 while the configuration store answers and the broker's catalog follows its watch.", []string{"cluster"}, nil)
	descCatalogRev   = prometheus.NewDesc("meridian_configuration_store_revision", "Configuration store revision the broker's catalog reflects.", []string{"cluster"}, nil)

	allDescs = []*prometheus.Desc{descSubscriptions, descProducers, descConsumers, descRateIn, descRateOut, descThroughputIn,
		descThroughputOut, descStorageSize, descBacklogSize, descMsgBacklog, descInBytes, descInMessages, descOutBytes,
		descOutMessages, descSubBacklog, descSubRateOut, descSubThrOut, descSubUnacked, descSubConsumer, descReplRateIn,
		descReplRateOut, descReplThrIn, descReplThrOut, descReplBacklog, descReplConnected, descReplDelay, descReplError,
		descReplProgress, descScrapeErrors, descCatalogOK, descCatalogRev}
)

// topicCollector turns topic stats into Pulsar's per-topic metrics at scrape time, so /metrics and
// the stats endpoints always agree.
type topicCollector struct{ h *Handler }

func newTopicCollector(h *Handler) prometheus.Collector { return topicCollector{h} }

func (c topicCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c topicCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.h
	cluster := h.cfg.Cluster
	sctx, scancel := context.WithTimeout(context.Background(), storeCheckTimeout)
	storeOK := h.cat.CheckStore(sctx) == nil
	scancel()
	ch <- prometheus.MustNewConstMetric(descCatalogOK, prometheus.GaugeValue, b2f(storeOK), cluster)
	ch <- prometheus.MustNewConstMetric(descCatalogRev, prometheus.GaugeValue, float64(h.cat.Revision()), cluster)
	if h.cfg.Topics == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	errs := 0
	for _, ns := range h.cat.AllNamespaces() {
		topics, err := h.cfg.Topics.ListTopics(ctx, ns)
		if err != nil {
			errs++
			continue
		}
		for _, topic := range topics {
			st, err := h.cfg.Topics.TopicStats(ctx, topic, adminapi.GetStatsOptions{})
			if err != nil {
				errs++
				continue
			}
			emitTopic(ch, cluster, ns, topic, st)
		}
	}
	ch <- prometheus.MustNewConstMetric(descScrapeErrors, prometheus.GaugeValue, float64(errs), cluster)
}

func emitTopic(ch chan<- prometheus.Metric, cluster, ns, topic string, st adminapi.TopicStats) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	cnt := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	consumers := 0
	var backlog int64
	for name, s := range st.Subscriptions {
		consumers += len(s.Consumers)
		backlog += s.MsgBacklog
		g(descSubBacklog, float64(s.MsgBacklog), cluster, ns, topic, name)
		g(descSubRateOut, s.MsgRateOut, cluster, ns, topic, name)
		g(descSubThrOut, s.MsgThroughputOut, cluster, ns, topic, name)
		g(descSubUnacked, float64(s.UnackedMessages), cluster, ns, topic, name)
		g(descSubConsumer, float64(len(s.Consumers)), cluster, ns, topic, name)
	}
	g(descSubscriptions, float64(len(st.Subscriptions)), cluster, ns, topic)
	g(descProducers, float64(len(st.Publishers)), cluster, ns, topic)
	g(descConsumers, float64(consumers), cluster, ns, topic)
	g(descRateIn, st.MsgRateIn, cluster, ns, topic)
	g(descRateOut, st.MsgRateOut, cluster, ns, topic)
	g(descThroughputIn, st.MsgThroughputIn, cluster, ns, topic)
	g(descThroughputOut, st.MsgThroughputOut, cluster, ns, topic)
	g(descStorageSize, float64(st.StorageSize), cluster, ns, topic)
	g(descBacklogSize, float64(st.BacklogSize), cluster, ns, topic)
	g(descMsgBacklog, float64(backlog), cluster, ns, topic)
	cnt(descInBytes, float64(st.BytesInCounter), cluster, ns, topic)
	cnt(descInMessages, float64(st.MsgInCounter), cluster, ns, topic)
	cnt(descOutBytes, float64(st.BytesOutCounter), cluster, ns, topic)
	cnt(descOutMessages, float64(st.MsgOutCounter), cluster, ns, topic)
	for remote, r := range st.Replication {
		l := []string{cluster, ns, topic, remote}
		g(descReplRateIn, r.MsgRateIn, l...)
		g(descReplRateOut, r.MsgRateOut, l...)
		g(descReplThrIn, r.MsgThroughputIn, l...)
		g(descReplThrOut, r.MsgThroughputOut, l...)
		g(descReplBacklog, float64(r.ReplicationBacklog), l...)
		g(descReplConnected, b2f(r.Connected), l...)
		g(descReplDelay, float64(r.ReplicationDelayInSeconds), l...)
		g(descReplError, b2f(r.LastError != ""), l...)
		g(descReplProgress, float64(r.LastProgressTimestamp)/1000, l...)
	}
	// A cluster this one only receives from has no replicator here: its inbound rates are exported,
	// but no connected, backlog or error series that would alarm on a healthy one-way link.
	for source, in := range st.InboundReplication {
		if _, outbound := st.Replication[source]; outbound {
			continue
		}
		l := []string{cluster, ns, topic, source}
		g(descReplRateIn, in.MsgRateIn, l...)
		g(descReplThrIn, in.MsgThroughputIn, l...)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
