package admin

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-mq/meridian/adminapi"
)

// scrapeTimeout bounds one /metrics collection of topic stats.
const scrapeTimeout = 10 * time.Second

// TopicWriteStatsSource is optionally implemented by a TopicService: the storage write figures
// behind Pulsar's pulsar_storage_write_latency_le_* and pulsar_entry_size_le_* metrics.
type TopicWriteStatsSource interface {
	TopicWriteStats(ctx context.Context, topic string) (WriteStats, error)
}

// WriteStats is a topic's stored entries per second over the broker's last stats interval, by
// Pulsar's buckets: Latency by storage write latency (<= 0.5, 1, 5, 10, 20, 50, 100, 200, 1000 ms,
// overflow), Size by entry size (<= 128 B, 512 B, 1, 2, 4, 16, 100 KiB, 1 MiB, overflow).
// LatencySumMs is milliseconds of write latency per second, SizeSum bytes per second.
type WriteStats struct {
	Latency      [10]float64
	LatencySumMs float64
	Size         [9]float64
	SizeSum      float64
}

// Pulsar's names of the buckets of WriteStats, in order.
var (
	writeLatencyNames = []string{"pulsar_storage_write_latency_le_0_5", "pulsar_storage_write_latency_le_1",
		"pulsar_storage_write_latency_le_5", "pulsar_storage_write_latency_le_10", "pulsar_storage_write_latency_le_20",
		"pulsar_storage_write_latency_le_50", "pulsar_storage_write_latency_le_100", "pulsar_storage_write_latency_le_200",
		"pulsar_storage_write_latency_le_1000", "pulsar_storage_write_latency_le_overflow"}
	entrySizeNames = []string{"pulsar_entry_size_le_128", "pulsar_entry_size_le_512", "pulsar_entry_size_le_1_kb",
		"pulsar_entry_size_le_2_kb", "pulsar_entry_size_le_4_kb", "pulsar_entry_size_le_16_kb",
		"pulsar_entry_size_le_100_kb", "pulsar_entry_size_le_1_mb", "pulsar_entry_size_le_overflow"}
)

// nsAggregate says how a topic series becomes a namespace series when topic-level metrics are off.
type nsAggregate int

const (
	nsNone nsAggregate = iota // topic level only
	nsSum
	nsMax
	nsSumOverExtra // summed over the extra label too, which the namespace series does not have
)

// topicSeries is one metric of Pulsar's topic-level families. extra is the label after
// cluster, namespace (and topic): "", "subscription" or "remote_cluster".
type topicSeries struct {
	name, help string
	counter    bool
	extra      string
	ns         nsAggregate
	index      int // in topicFamilies
}

// Pulsar's topic families, with its names, labels and meaning, so that dashboards built for Pulsar
// work. Rates are per second over the broker's stats interval.
var (
	mSubscriptions = &topicSeries{name: "pulsar_subscriptions_count", help: "Number of subscriptions.", ns: nsSum}
	mProducers     = &topicSeries{name: "pulsar_producers_count", help: "Number of producers connected.", ns: nsSum}
	mConsumers     = &topicSeries{name: "pulsar_consumers_count", help: "Number of consumers connected.", ns: nsSum}
	mRateIn        = &topicSeries{name: "pulsar_rate_in", help: "Messages per second published.", ns: nsSum}
	mRateOut       = &topicSeries{name: "pulsar_rate_out", help: "Messages per second dispatched.", ns: nsSum}
	mThroughputIn  = &topicSeries{name: "pulsar_throughput_in", help: "Bytes per second published.", ns: nsSum}
	mThroughputOut = &topicSeries{name: "pulsar_throughput_out", help: "Bytes per second dispatched.", ns: nsSum}
	mStorageSize   = &topicSeries{name: "pulsar_storage_size", help: "Bytes stored.", ns: nsSum}
	mBacklogSize   = &topicSeries{name: "pulsar_storage_backlog_size", help: "Bytes of the backlog.", ns: nsSum}
	mMsgBacklog    = &topicSeries{name: "pulsar_msg_backlog", help: "Messages in the subscriptions' backlogs.", ns: nsSum}
	mInBytes       = &topicSeries{name: "pulsar_in_bytes_total", help: "Bytes published (since the topic was loaded).", counter: true}
	mInMessages    = &topicSeries{name: "pulsar_in_messages_total", help: "Messages published (since the topic was loaded).", counter: true}
	mOutBytes      = &topicSeries{name: "pulsar_out_bytes_total", help: "Bytes dispatched (since the topic was loaded).", counter: true}
	mOutMessages   = &topicSeries{name: "pulsar_out_messages_total", help: "Messages dispatched (since the topic was loaded).", counter: true}
	mWriteLatCount = &topicSeries{name: "pulsar_storage_write_latency_count", help: "Entries stored per second.", ns: nsSum}
	mWriteLatSum   = &topicSeries{name: "pulsar_storage_write_latency_sum", help: "Milliseconds of storage write latency per second (divided by pulsar_storage_write_latency_count: the mean latency).", ns: nsSum}
	mEntrySizeCnt  = &topicSeries{name: "pulsar_entry_size_count", help: "Entries stored per second.", ns: nsSum}
	mEntrySizeSum  = &topicSeries{name: "pulsar_entry_size_sum", help: "Bytes of entries stored per second.", ns: nsSum}
	mWriteLatency  = bucketSeries(writeLatencyNames, "Entries per second whose storage write (publish taken until the append is acknowledged) took at most the bucket's milliseconds (overflow: more than 1 s).")
	mEntrySize     = bucketSeries(entrySizeNames, "Entries per second stored with at most the bucket's size (overflow: more than 1 MiB).")

	mSubBacklog       = &topicSeries{name: "pulsar_subscription_back_log", help: "Messages in the subscription's backlog.", extra: "subscription"}
	mSubBacklogNoDel  = &topicSeries{name: "pulsar_subscription_back_log_no_delayed", help: "Messages in the subscription's backlog that are not delayed.", extra: "subscription"}
	mSubDelayed       = &topicSeries{name: "pulsar_subscription_delayed", help: "Messages of the subscription waiting for their delivery time.", extra: "subscription", ns: nsSumOverExtra}
	mSubRateOut       = &topicSeries{name: "pulsar_subscription_msg_rate_out", help: "Messages per second dispatched to the subscription.", extra: "subscription"}
	mSubThrOut        = &topicSeries{name: "pulsar_subscription_msg_throughput_out", help: "Bytes per second dispatched to the subscription.", extra: "subscription"}
	mSubRedeliver     = &topicSeries{name: "pulsar_subscription_msg_rate_redeliver", help: "Messages per second redelivered to the subscription.", extra: "subscription"}
	mSubUnacked       = &topicSeries{name: "pulsar_subscription_unacked_messages", help: "Messages delivered and not acknowledged.", extra: "subscription"}
	mSubBlocked       = &topicSeries{name: "pulsar_subscription_blocked_on_unacked_messages", help: "1 while dispatch to the subscription stops because of its unacknowledged messages.", extra: "subscription"}
	mSubConsumers     = &topicSeries{name: "pulsar_subscription_consumers_count", help: "Consumers of the subscription.", extra: "subscription"}
	mSubAckRate       = &topicSeries{name: "pulsar_subscription_msg_ack_rate", help: "Messages per second acknowledged by the subscription's consumers.", extra: "subscription"}
	mSubExpiredRate   = &topicSeries{name: "pulsar_subscription_msg_rate_expired", help: "Messages per second expired (message TTL) from the subscription.", extra: "subscription"}
	mReplRateIn       = &topicSeries{name: "pulsar_replication_rate_in", help: "Messages per second received from the remote cluster.", extra: "remote_cluster", ns: nsSum}
	mReplRateOut      = &topicSeries{name: "pulsar_replication_rate_out", help: "Messages per second sent to the remote cluster.", extra: "remote_cluster", ns: nsSum}
	mReplThrIn        = &topicSeries{name: "pulsar_replication_throughput_in", help: "Bytes per second received from the remote cluster.", extra: "remote_cluster", ns: nsSum}
	mReplThrOut       = &topicSeries{name: "pulsar_replication_throughput_out", help: "Bytes per second sent to the remote cluster.", extra: "remote_cluster", ns: nsSum}
	mReplBacklog      = &topicSeries{name: "pulsar_replication_backlog", help: "Entries not yet replicated to the remote cluster.", extra: "remote_cluster", ns: nsSum}
	mReplConnected    = &topicSeries{name: "pulsar_replication_connected_count", help: "Replicators whose producer to the remote cluster is connected.", extra: "remote_cluster", ns: nsSum}
	mReplDelay        = &topicSeries{name: "pulsar_replication_delay_in_seconds", help: "Age of the oldest entry not yet replicated (namespace level: the largest).", extra: "remote_cluster", ns: nsMax}
	mReplExpired      = &topicSeries{name: "pulsar_replication_rate_expired", help: "Messages per second expired (message TTL) before they were replicated.", extra: "remote_cluster", ns: nsSum}
	mReplError        = &topicSeries{name: "meridian_replication_error", help: "1 while the replicator reports an error (topic stats replication.<remote>.lastError; namespace level: replicators in error).", extra: "remote_cluster", ns: nsSum}
	mReplProgress     = &topicSeries{name: "meridian_replication_last_progress_timestamp_seconds", help: "When the remote cluster last acknowledged a replicated entry.", extra: "remote_cluster"}
	mReplBacklogBytes = &topicSeries{name: "meridian_replication_backlog_bytes", help: "Bytes of entries not yet acknowledged by the remote cluster.", extra: "remote_cluster", ns: nsSum}
	mReplStalled      = &topicSeries{name: "meridian_replication_stalled", help: "1 while the replicator has a backlog and made no progress for --replication-stall-timeout (namespace level: stalled replicators).", extra: "remote_cluster", ns: nsSum}

	topicFamilies = slices.Concat([]*topicSeries{mSubscriptions, mProducers, mConsumers, mRateIn, mRateOut, mThroughputIn,
		mThroughputOut, mStorageSize, mBacklogSize, mMsgBacklog, mInBytes, mInMessages, mOutBytes, mOutMessages,
		mWriteLatCount, mWriteLatSum, mEntrySizeCnt, mEntrySizeSum}, mWriteLatency, mEntrySize,
		[]*topicSeries{mSubBacklog, mSubBacklogNoDel, mSubDelayed, mSubRateOut, mSubThrOut, mSubRedeliver, mSubUnacked,
			mSubBlocked, mSubConsumers, mSubAckRate, mSubExpiredRate, mReplRateIn, mReplRateOut, mReplThrIn, mReplThrOut,
			mReplBacklog, mReplConnected, mReplDelay, mReplExpired, mReplError, mReplProgress, mReplBacklogBytes, mReplStalled})
)

func bucketSeries(names []string, help string) []*topicSeries {
	out := make([]*topicSeries, len(names))
	for i, n := range names {
		out[i] = &topicSeries{name: n, help: help, ns: nsSum}
	}
	return out
}

func init() {
	for i, s := range topicFamilies {
		s.index = i
	}
}

// brokerTotals are the broker-level aggregates.
type brokerTotals struct {
	topics, subs, producers, consumers, storage, backlog int64
	rateIn, rateOut, thrIn, thrOut                       float64
}

// topicScrape is one scrape's topic families, held compactly by family so that /metrics encodes
// them one family at a time (metricsexpo.go) instead of building every series of every topic
// before writing any: with 10,000 idle topics (about 37 series each) the registry's way allocated
// about 30 KiB per topic and scrape and held it all at once. Topic stats are read at scrape time,
// so /metrics and the stats endpoints always agree. With topic-level metrics (Pulsar's
// exposeTopicLevelMetricsInPrometheus, the default) every topic family is per topic; without, only
// namespace aggregates are exported, as Pulsar does, so that a broker with many topics keeps its
// series count bounded by its namespaces.
type topicScrape struct {
	cluster    string
	topicLevel bool
	storeOK    bool
	revision   int64
	// rowLabels are each row's labels: cluster, namespace and (topic level) topic. A row is a
	// topic, or a namespace without topic-level metrics.
	rowLabels [][]*dto.LabelPair
	extras    []string         // values of the extra label (subscription, remote cluster)
	samples   [][]scrapeSample // by topicSeries.index
	nsCounts  []namespaceCount
	totals    brokerTotals
	errs      int // topic stats that could not be read
}

// scrapeSample is one series of a topic family: its row, its extra label's value (an index into
// topicScrape.extras; -1 for none) and its value.
type scrapeSample struct {
	row, extra int32
	v          float64
}

type namespaceCount struct {
	namespace string
	topics    int
}

// scrapeTopics reads every topic's stats into a topicScrape.
func (h *Handler) scrapeTopics(ctx context.Context) *topicScrape {
	sc := &topicScrape{cluster: h.cfg.Cluster, topicLevel: !h.cfg.HideTopicLevelMetrics,
		samples: make([][]scrapeSample, len(topicFamilies))}
	sctx, scancel := context.WithTimeout(ctx, storeCheckTimeout)
	sc.storeOK = h.cat.CheckStore(sctx) == nil
	scancel()
	sc.revision = h.cat.Revision()
	if h.cfg.Topics == nil {
		return sc
	}
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	ws, _ := h.cfg.Topics.(TopicWriteStatsSource)
	type listed struct {
		namespace string
		topics    []string
	}
	var namespaces []listed
	total := 0
	for _, ns := range h.cat.AllNamespaces() {
		topics, err := h.cfg.Topics.ListTopics(ctx, ns)
		if err != nil {
			sc.errs++
			continue
		}
		namespaces = append(namespaces, listed{ns, topics})
		total += len(topics)
	}
	if sc.topicLevel { // each topic has one series of every family without an extra label
		for _, s := range topicFamilies {
			if s.extra == "" {
				sc.samples[s.index] = make([]scrapeSample, 0, total)
			}
		}
		sc.rowLabels = make([][]*dto.LabelPair, 0, total)
	}
	clusterLabel := labelPair("cluster", sc.cluster)
	for _, nt := range namespaces {
		nsLabel := labelPair("namespace", labelValue(nt.namespace))
		var agg *namespaceAggregate
		if !sc.topicLevel {
			agg = newNamespaceAggregate()
		}
		count := 0
		for _, topic := range nt.topics {
			st, err := h.cfg.Topics.TopicStats(ctx, topic, adminapi.GetStatsOptions{})
			if err != nil {
				sc.errs++
				continue
			}
			var w WriteStats
			if ws != nil {
				if w, err = ws.TopicWriteStats(ctx, topic); err != nil {
					sc.errs++
				}
			}
			count++
			sc.totals.add(st)
			if agg != nil {
				topicMetrics(st, w, agg.add)
				continue
			}
			row := sc.addRow(clusterLabel, nsLabel, labelPair("topic", labelValue(topic)))
			topicMetrics(st, w, func(s *topicSeries, v float64, extra string) { sc.add(s, row, extra, v) })
		}
		sc.nsCounts = append(sc.nsCounts, namespaceCount{nt.namespace, count})
		if agg != nil {
			row := sc.addRow(clusterLabel, nsLabel)
			agg.emit(func(s *topicSeries, v float64, extra string) { sc.add(s, row, extra, v) })
		}
	}
	return sc
}

// labelValue makes a name usable as a label value: a subscription (any client may name one) or a
// topic that is not valid UTF-8 would make the whole page unparseable, so its invalid bytes are
// replaced (U+FFFD).
func labelValue(name string) string { return strings.ToValidUTF8(name, "\uFFFD") }

func (sc *topicScrape) addRow(labels ...*dto.LabelPair) int32 {
	sc.rowLabels = append(sc.rowLabels, labels)
	return int32(len(sc.rowLabels) - 1)
}

func (sc *topicScrape) add(s *topicSeries, row int32, extra string, v float64) {
	x := int32(-1)
	if s.extra != "" {
		sc.extras = append(sc.extras, labelValue(extra))
		x = int32(len(sc.extras) - 1)
	}
	sc.samples[s.index] = append(sc.samples[s.index], scrapeSample{row: row, extra: x, v: v})
}

// hasExtraLabel reports whether s's series carry its extra label in this scrape: always at topic
// level; at namespace level not for a family summed over it.
func (sc *topicScrape) hasExtraLabel(s *topicSeries) bool {
	return s.extra != "" && (sc.topicLevel || s.ns != nsSumOverExtra)
}

func (t *brokerTotals) add(st adminapi.TopicStats) {
	t.topics++
	t.subs += int64(len(st.Subscriptions))
	t.producers += int64(len(st.Publishers))
	for _, s := range st.Subscriptions {
		t.consumers += int64(len(s.Consumers))
		t.backlog += s.MsgBacklog
	}
	t.rateIn += st.MsgRateIn
	t.rateOut += st.MsgRateOut
	t.thrIn += st.MsgThroughputIn
	t.thrOut += st.MsgThroughputOut
	t.storage += st.StorageSize
}

// topicMetrics computes one topic's series; emit receives each with its extra label's value
// (subscription or remote cluster; "" for topic series).
func topicMetrics(st adminapi.TopicStats, w WriteStats, emit func(s *topicSeries, v float64, extra string)) {
	consumers := 0
	var backlog int64
	for _, name := range sortedKeys(st.Subscriptions) { // sorted: the page is stable between scrapes
		s := st.Subscriptions[name]
		consumers += len(s.Consumers)
		backlog += s.MsgBacklog
		emit(mSubBacklog, float64(s.MsgBacklog), name)
		emit(mSubBacklogNoDel, float64(s.MsgBacklogNoDelayed), name)
		emit(mSubDelayed, float64(s.MsgDelayed), name)
		emit(mSubRateOut, s.MsgRateOut, name)
		emit(mSubThrOut, s.MsgThroughputOut, name)
		emit(mSubRedeliver, s.MsgRateRedeliver, name)
		emit(mSubUnacked, float64(s.UnackedMessages), name)
		emit(mSubBlocked, b2f(s.BlockedSubscriptionOnUnackedMsgs), name)
		emit(mSubConsumers, float64(len(s.Consumers)), name)
		emit(mSubAckRate, s.MessageAckRate, name)
		emit(mSubExpiredRate, s.MsgRateExpired, name)
	}
	emit(mSubscriptions, float64(len(st.Subscriptions)), "")
	emit(mProducers, float64(len(st.Publishers)), "")
	emit(mConsumers, float64(consumers), "")
	emit(mRateIn, st.MsgRateIn, "")
	emit(mRateOut, st.MsgRateOut, "")
	emit(mThroughputIn, st.MsgThroughputIn, "")
	emit(mThroughputOut, st.MsgThroughputOut, "")
	emit(mStorageSize, float64(st.StorageSize), "")
	emit(mBacklogSize, float64(st.BacklogSize), "")
	emit(mMsgBacklog, float64(backlog), "")
	emit(mInBytes, float64(st.BytesInCounter), "")
	emit(mInMessages, float64(st.MsgInCounter), "")
	emit(mOutBytes, float64(st.BytesOutCounter), "")
	emit(mOutMessages, float64(st.MsgOutCounter), "")
	var entries float64
	for i, s := range mWriteLatency {
		emit(s, w.Latency[i], "")
		entries += w.Latency[i]
	}
	for i, s := range mEntrySize {
		emit(s, w.Size[i], "")
	}
	emit(mWriteLatCount, entries, "")
	emit(mWriteLatSum, w.LatencySumMs, "")
	emit(mEntrySizeCnt, entries, "")
	emit(mEntrySizeSum, w.SizeSum, "")
	for _, remote := range sortedKeys(st.Replication) {
		r := st.Replication[remote]
		emit(mReplRateIn, r.MsgRateIn, remote)
		emit(mReplRateOut, r.MsgRateOut, remote)
		emit(mReplThrIn, r.MsgThroughputIn, remote)
		emit(mReplThrOut, r.MsgThroughputOut, remote)
		emit(mReplBacklog, float64(r.ReplicationBacklog), remote)
		emit(mReplConnected, b2f(r.Connected), remote)
		emit(mReplDelay, float64(r.ReplicationDelayInSeconds), remote)
		emit(mReplExpired, r.MsgRateExpired, remote)
		emit(mReplError, b2f(r.LastError != ""), remote)
		emit(mReplProgress, float64(r.LastProgressTimestamp)/1000, remote)
		emit(mReplBacklogBytes, float64(r.ReplicationBacklogBytes), remote)
		emit(mReplStalled, b2f(r.Stalled), remote)
	}
	// A cluster this one only receives from has no replicator here: its inbound rates are exported,
	// but no connected, backlog or error series that would alarm on a healthy one-way link.
	for _, source := range sortedKeys(st.InboundReplication) {
		in := st.InboundReplication[source]
		if _, outbound := st.Replication[source]; outbound {
			continue
		}
		emit(mReplRateIn, in.MsgRateIn, source)
		emit(mReplThrIn, in.MsgThroughputIn, source)
	}
}

// sortedKeys returns m's keys in order (nil for an empty map, without allocating).
func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(m))
}

// namespaceAggregate sums (or takes the largest of) a namespace's topic series.
type namespaceAggregate struct {
	values map[nsKey]float64
	order  []nsKey
}

type nsKey struct {
	s     *topicSeries
	extra string
}

func newNamespaceAggregate() *namespaceAggregate {
	a := &namespaceAggregate{values: map[nsKey]float64{}}
	for _, s := range topicFamilies {
		if s.ns == nsSumOverExtra { // a namespace total, zero without subscriptions (as Pulsar's)
			a.add(s, 0, "")
		}
	}
	return a
}

func (a *namespaceAggregate) add(s *topicSeries, v float64, extra string) {
	if s.ns == nsNone {
		return
	}
	if s.ns == nsSumOverExtra {
		extra = ""
	}
	k := nsKey{s, extra}
	old, seen := a.values[k]
	if !seen {
		a.order = append(a.order, k)
	}
	switch {
	case !seen:
		a.values[k] = v
	case s.ns == nsMax:
		a.values[k] = max(old, v)
	default:
		a.values[k] = old + v
	}
}

func (a *namespaceAggregate) emit(f func(s *topicSeries, v float64, extra string)) {
	for _, k := range a.order {
		f(k.s, a.values[k], k.extra)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
