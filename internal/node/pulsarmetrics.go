package node

import (
	"context"
	"net/url"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/internal/admin"
)

// connectionCollector exports the binary-protocol connection counts under Pulsar's names and labels
// (cluster, broker: the broker's advertised web address as in Pulsar's broker ids, metric:
// "broker_connection"), all gauges as in Pulsar.
type connectionCollector struct{ n *Node }

var (
	connLabels           = []string{"cluster", "broker", "metric"}
	descPulsarActiveConn = prometheus.NewDesc("pulsar_active_connections", "Binary-protocol connections currently open.", connLabels, nil)
	descPulsarConnTotal  = prometheus.NewDesc("pulsar_connection_created_total_count", "Binary-protocol connections accepted since the broker started.", connLabels, nil)
	descPulsarConnClosed = prometheus.NewDesc("pulsar_connection_closed_total_count", "Binary-protocol connections closed since the broker started.", connLabels, nil)
)

func (cc connectionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPulsarActiveConn
	ch <- descPulsarConnTotal
	ch <- descPulsarConnClosed
}

func (cc connectionCollector) Collect(ch chan<- prometheus.Metric) {
	s := cc.n.components.server
	if s == nil {
		return
	}
	st := s.Stats()
	broker := cc.n.webURL
	if u, err := url.Parse(broker); err == nil && u.Host != "" {
		broker = u.Host
	}
	l := []string{cc.n.opts.Cluster, broker, "broker_connection"}
	ch <- prometheus.MustNewConstMetric(descPulsarActiveConn, prometheus.GaugeValue, float64(st.ConnectionsOpen), l...)
	ch <- prometheus.MustNewConstMetric(descPulsarConnTotal, prometheus.GaugeValue, float64(st.ConnectionsAccepted), l...)
	ch <- prometheus.MustNewConstMetric(descPulsarConnClosed, prometheus.GaugeValue, float64(max(0, st.ConnectionsAccepted-st.ConnectionsOpen)), l...)
}

// TopicWriteStats implements admin.TopicWriteStatsSource.
func (s topicService) TopicWriteStats(ctx context.Context, topic string) (admin.WriteStats, error) {
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return admin.WriteStats{}, err
	}
	w := t.WriteStats()
	out := admin.WriteStats{LatencySumMs: w.LatencySumMs, SizeSum: w.SizeSum}
	copy(out.Latency[:], w.Latency)
	copy(out.Size[:], w.Size)
	return out, nil
}

var _ admin.TopicWriteStatsSource = topicService{}
