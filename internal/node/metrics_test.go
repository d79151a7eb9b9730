package node

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/poll"
)

// startMesh starts one node per name in this process, sharing a configuration store, with
// public/default replicated between them; edit adjusts each node's options.
func startMesh(t *testing.T, names []string, edit func(name string, o *Options)) []*Node {
	t.Helper()
	shared := memstore.New()
	t.Cleanup(func() { _ = shared.Close() }) // registered first: runs after the nodes stopped
	var nodes []*Node
	for _, name := range names {
		o := testOptions(t, t.TempDir())
		o.Cluster = name
		o.SharedConfigStore = shared
		if edit != nil {
			edit(name, &o)
		}
		nodes = append(nodes, startNode(t, o))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ReplicateFullMesh(ctx, nodes[0], names); err != nil {
		t.Fatal(err)
	}
	return nodes
}

// scrapeMetrics reads a node's /metrics with Prometheus' own text parser.
func scrapeMetrics(t *testing.T, n *Node) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(n.WebURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

func labelNames(m *dto.Metric) []string {
	var out []string
	for _, l := range m.GetLabel() {
		out = append(out, l.GetName())
	}
	slices.Sort(out)
	return out
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func seriesValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// findSeries returns the family's series whose labels include want.
func findSeries(fams map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		ok := true
		for k, v := range want {
			if labelValue(m, k) != v {
				ok = false
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// checkFamily fails unless the family exists with exactly Pulsar's label names.
func checkFamily(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.GetMetric()) == 0 {
		t.Errorf("%s: not exported", name)
		return
	}
	slices.Sort(labels)
	for _, m := range f.GetMetric() {
		if got := labelNames(m); !slices.Equal(got, labels) {
			t.Errorf("%s: labels %v, want %v", name, got, labels)
			return
		}
	}
}

var (
	pulsarTopicFamilies = []string{"pulsar_subscriptions_count", "pulsar_producers_count", "pulsar_consumers_count",
		"pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out", "pulsar_storage_size",
		"pulsar_storage_backlog_size", "pulsar_msg_backlog",
		"pulsar_storage_write_latency_le_0_5", "pulsar_storage_write_latency_le_1", "pulsar_storage_write_latency_le_5",
		"pulsar_storage_write_latency_le_10", "pulsar_storage_write_latency_le_20", "pulsar_storage_write_latency_le_50",
		"pulsar_storage_write_latency_le_100", "pulsar_storage_write_latency_le_200", "pulsar_storage_write_latency_le_1000",
		"pulsar_storage_write_latency_le_overflow", "pulsar_storage_write_latency_count", "pulsar_storage_write_latency_sum",
		"pulsar_entry_size_le_128", "pulsar_entry_size_le_512", "pulsar_entry_size_le_1_kb", "pulsar_entry_size_le_2_kb",
		"pulsar_entry_size_le_4_kb", "pulsar_entry_size_le_16_kb", "pulsar_entry_size_le_100_kb", "pulsar_entry_size_le_1_mb",
		"pulsar_entry_size_le_overflow", "pulsar_entry_size_count", "pulsar_entry_size_sum"}
	pulsarSubscriptionFamilies = []string{"pulsar_subscription_back_log", "pulsar_subscription_back_log_no_delayed",
		"pulsar_subscription_delayed", "pulsar_subscription_msg_rate_out", "pulsar_subscription_msg_throughput_out",
		"pulsar_subscription_msg_rate_redeliver", "pulsar_subscription_unacked_messages",
		"pulsar_subscription_blocked_on_unacked_messages", "pulsar_subscription_consumers_count",
		"pulsar_subscription_msg_ack_rate", "pulsar_subscription_msg_rate_expired"}
	pulsarReplicationFamilies = []string{"pulsar_replication_rate_in", "pulsar_replication_rate_out",
		"pulsar_replication_throughput_in", "pulsar_replication_throughput_out", "pulsar_replication_backlog",
		"pulsar_replication_connected_count", "pulsar_replication_delay_in_seconds", "pulsar_replication_rate_expired"}
	pulsarBrokerFamilies = []string{"pulsar_broker_topics_count", "pulsar_broker_subscriptions_count",
		"pulsar_broker_producers_count", "pulsar_broker_consumers_count", "pulsar_broker_rate_in", "pulsar_broker_rate_out",
		"pulsar_broker_throughput_in", "pulsar_broker_throughput_out", "pulsar_broker_storage_size", "pulsar_broker_msg_backlog"}
)

// TestMetricsUnderPulsarNamesAndLabels scrapes two replicating nodes: east with topic-level metrics
// (Pulsar's default), west with exposeTopicLevelMetricsInPrometheus off (namespace aggregates only).
// Every family Pulsar's dashboards query is there with Pulsar's label names, and the values follow
// the traffic.
func TestMetricsUnderPulsarNamesAndLabels(t *testing.T) {
	nodes := startMesh(t, []string{"east", "west"}, func(name string, o *Options) {
		o.HideTopicLevelMetrics = name == "west"
	})
	east, west := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "persistent://public/default/metrics-names"
	publishWithBacklog(t, ctx, east.ServiceURL(), topic, 5)

	// The write buckets are rates over the broker's stats interval (5 s): wait for the first one
	// that saw the five small entries.
	topicLabels := map[string]string{"cluster": "east", "namespace": "public/default", "topic": topic}
	var fams map[string]*dto.MetricFamily
	poll.UntilNil(t, 30*time.Second, "pulsar_entry_size_le_128 of "+topic+" above 0", func() error {
		fams = scrapeMetrics(t, east)
		if s := findSeries(fams, "pulsar_entry_size_le_128", topicLabels); len(s) == 1 && seriesValue(s[0]) > 0 {
			return nil
		}
		return fmt.Errorf("%v", fams["pulsar_entry_size_le_128"])
	})
	for _, name := range pulsarTopicFamilies {
		checkFamily(t, fams, name, "cluster", "namespace", "topic")
	}
	for _, name := range pulsarSubscriptionFamilies {
		checkFamily(t, fams, name, "cluster", "namespace", "topic", "subscription")
	}
	for _, name := range pulsarReplicationFamilies {
		checkFamily(t, fams, name, "cluster", "namespace", "topic", "remote_cluster")
	}
	for _, name := range pulsarBrokerFamilies {
		checkFamily(t, fams, name, "cluster")
	}
	checkFamily(t, fams, "pulsar_topics_count", "cluster", "namespace")
	checkFamily(t, fams, "pulsar_version_info", "cluster", "version", "commit")
	for _, name := range []string{"pulsar_active_connections", "pulsar_connection_created_total_count", "pulsar_connection_closed_total_count"} {
		checkFamily(t, fams, name, "cluster", "broker", "metric")
	}

	// Values follow the traffic: five entries of at most 128 bytes, all in the backlog of s1 (the
	// consumer has not acknowledged them), none delayed, replicated to west.
	sub := map[string]string{"topic": topic, "subscription": "s1"}
	if s := findSeries(fams, "pulsar_subscription_back_log_no_delayed", sub); len(s) != 1 || seriesValue(s[0]) != 5 {
		t.Errorf("pulsar_subscription_back_log_no_delayed of s1: %v, want 5", s)
	}
	if s := findSeries(fams, "pulsar_subscription_delayed", sub); len(s) != 1 || seriesValue(s[0]) != 0 {
		t.Errorf("pulsar_subscription_delayed of s1: %v, want 0", s)
	}
	if s := findSeries(fams, "pulsar_entry_size_le_512", topicLabels); len(s) != 1 || seriesValue(s[0]) != 0 {
		t.Errorf("pulsar_entry_size_le_512: %v, want 0 (every entry is below 128 B)", s)
	}
	if s := findSeries(fams, "pulsar_topics_count", map[string]string{"namespace": "public/default"}); len(s) != 1 || seriesValue(s[0]) < 1 {
		t.Errorf("pulsar_topics_count of public/default: %v", s)
	}
	if s := findSeries(fams, "pulsar_broker_producers_count", nil); len(s) != 1 || seriesValue(s[0]) < 1 {
		t.Errorf("pulsar_broker_producers_count: %v", s)
	}
	if s := findSeries(fams, "pulsar_active_connections", map[string]string{"cluster": "east"}); len(s) != 1 || seriesValue(s[0]) < 1 {
		t.Errorf("pulsar_active_connections: %v", s)
	}
	if s := findSeries(fams, "pulsar_version_info", map[string]string{"cluster": "east"}); len(s) != 1 || seriesValue(s[0]) != 1 {
		t.Errorf("pulsar_version_info: %v", s)
	}
	if s := findSeries(fams, "pulsar_replication_rate_expired", map[string]string{"topic": topic, "remote_cluster": "west"}); len(s) != 1 {
		t.Errorf("pulsar_replication_rate_expired to west: %v", s)
	}

	// west: namespace aggregates only, no series names a topic.
	poll.UntilNil(t, 30*time.Second, "west storing the replicated entries", func() error {
		fams = scrapeMetrics(t, west)
		if s := findSeries(fams, "pulsar_storage_size", map[string]string{"namespace": "public/default"}); len(s) == 1 && seriesValue(s[0]) > 0 {
			return nil
		}
		return fmt.Errorf("%v", fams["pulsar_storage_size"])
	})
	// west only receives: its replication stats of the topic are an inbound-only origin, and the
	// console's list of every link (AllStats) says the same.
	poll.UntilNil(t, 10*time.Second, "west's inbound stats from east", func() error {
		all := west.components.replication.AllStats()
		if len(all) != 1 || all[0].Topic != topic || all[0].RemoteCluster != "east" || all[0].MsgInCount != 5 {
			return fmt.Errorf("AllStats %+v, Stats of the topic %+v", all, west.components.replication.Stats(topic))
		}
		return nil
	})
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			if slices.Contains(labelNames(m), "topic") {
				t.Errorf("west exports %s with a topic label although topic-level metrics are off", name)
				break
			}
		}
	}
	for _, name := range pulsarTopicFamilies {
		checkFamily(t, fams, name, "cluster", "namespace")
	}
	checkFamily(t, fams, "pulsar_subscription_delayed", "cluster", "namespace")
	for _, name := range pulsarReplicationFamilies {
		checkFamily(t, fams, name, "cluster", "namespace", "remote_cluster")
	}
	if _, ok := fams["pulsar_subscription_back_log"]; ok {
		t.Errorf("west exports per-subscription series although topic-level metrics are off")
	}
	if s := findSeries(fams, "pulsar_topics_count", map[string]string{"cluster": "west", "namespace": "public/default"}); len(s) != 1 || seriesValue(s[0]) < 1 {
		t.Errorf("west pulsar_topics_count: %v", s)
	}
}
