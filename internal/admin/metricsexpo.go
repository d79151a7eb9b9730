package admin

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meridian-mq/meridian/internal/buildinfo"
)

// /metrics: the registry's families (broker, storage, replication, Go runtime), then the topic
// families of a topicScrape, encoded one family at a time, so that a scrape holds the series of
// one family, not those of every topic at once (metrics.go, topicScrape). Content negotiation and
// compression follow promhttp's defaults: the Prometheus text format unless the scraper asks for
// another format expfmt offers, gzip when accepted, and the name[] query parameter selects
// families by name.

// Broker and namespace families that are not per topic.
const (
	famTopicsCount  = "pulsar_topics_count"
	famVersion      = "pulsar_version_info"
	famScrapeErrors = "meridian_admin_topic_stats_errors"
	famCatalogOK    = "meridian_configuration_store_following"
	famCatalogRev   = "meridian_configuration_store_revision"
)

// gzipWriters reuses the compressors of scrapes (each holds about 800 KB of state).
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

// The broker totals (brokerTotals), in the order families writes them, with their help.
var (
	brokerFamilies = []string{"pulsar_broker_topics_count", "pulsar_broker_subscriptions_count",
		"pulsar_broker_producers_count", "pulsar_broker_consumers_count", "pulsar_broker_rate_in",
		"pulsar_broker_rate_out", "pulsar_broker_throughput_in", "pulsar_broker_throughput_out",
		"pulsar_broker_storage_size", "pulsar_broker_msg_backlog"}
	brokerFamilyHelp = []string{"Number of topics on this broker.", "Number of subscriptions on this broker.",
		"Number of producers connected to this broker.", "Number of consumers connected to this broker.",
		"Messages per second published to this broker.", "Messages per second dispatched by this broker.",
		"Bytes per second published to this broker.", "Bytes per second dispatched by this broker.",
		"Bytes stored by this broker's topics.", "Messages in the backlogs of this broker's subscriptions."}
)

// serveMetrics answers GET /metrics. A registry that fails to gather answers 500 before anything
// is written (promhttp's default); an error once the body has started aborts the response, so the
// scraper sees a failed scrape rather than a well-formed, truncated one.
func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request) {
	fams, err := h.gatherer.Gather()
	if err != nil {
		h.log.Error("metrics: gathering", "err", err)
		http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultAcceptedFormats()...)
	w.Header().Set("Content-Type", string(format))
	w.Header().Add("Vary", "Accept")
	w.Header().Add("Vary", "Accept-Encoding")
	var out io.Writer = w
	if acceptsGzip(r.Header) {
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzipWriters.Get().(*gzip.Writer)
		gz.Reset(w)
		defer func() {
			if err := gz.Close(); err != nil {
				h.log.Debug("metrics: finishing the gzip stream", "err", err)
			}
			gz.Reset(io.Discard) // drop the reference to this response
			gzipWriters.Put(gz)
		}()
		out = gz
	}
	bw := bufio.NewWriterSize(out, 32<<10)
	enc := newFamilyEncoder(bw, format)
	var only map[string]bool
	if names := r.URL.Query()["name[]"]; len(names) > 0 {
		only = map[string]bool{}
		for _, n := range names {
			only[n] = true
		}
	}
	err = h.eachMetricFamily(r.Context(), fams, func(f *dto.MetricFamily) error {
		if only != nil && !only[f.GetName()] {
			return nil
		}
		return enc.Encode(f)
	})
	if c, ok := enc.(expfmt.Closer); ok && err == nil {
		err = c.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			h.log.Error("metrics: writing the scrape", "err", err)
		}
		panic(http.ErrAbortHandler) // the status is sent: only breaking the connection tells the scraper
	}
}

// newFamilyEncoder returns expfmt's encoder for format, except that in the text format a family
// whose names need no escaping is written as it is: expfmt's encoder first copies every family
// into an escaped one (EscapeMetricFamily), which for a topic family is a slice of 10,000 series.
func newFamilyEncoder(w io.Writer, format expfmt.Format) expfmt.Encoder {
	enc := expfmt.NewEncoder(w, format)
	if format.FormatType() != expfmt.TypeTextPlain {
		return enc
	}
	return familyEncoderFunc{enc, func(f *dto.MetricFamily) error {
		if needsEscaping(f) {
			return enc.Encode(f)
		}
		_, err := expfmt.MetricFamilyToText(w, f)
		return err
	}}
}

type familyEncoderFunc struct {
	expfmt.Encoder
	encode func(*dto.MetricFamily) error
}

func (e familyEncoderFunc) Encode(f *dto.MetricFamily) error { return e.encode(f) }

// needsEscaping reports whether a family's name or a label name is outside the legacy
// character set, which the text format's escaping rewrites.
func needsEscaping(f *dto.MetricFamily) bool {
	if !model.LegacyValidation.IsValidMetricName(f.GetName()) {
		return true
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if !model.LegacyValidation.IsValidLabelName(l.GetName()) {
				return true
			}
		}
	}
	return false
}

// acceptsGzip reports whether an Accept-Encoding header lists gzip with a quality above zero.
func acceptsGzip(h http.Header) bool {
	for _, v := range h.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				continue
			}
			for param := range strings.SplitSeq(params, ";") {
				name, value, _ := strings.Cut(strings.TrimSpace(param), "=")
				if strings.EqualFold(strings.TrimSpace(name), "q") {
					q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
					return err == nil && q > 0
				}
			}
			return true
		}
	}
	return false
}

// eachMetricFamily calls fn with every family of /metrics: fams (the registry's, gathered by the
// caller), then the topic scrape's. A family passed to fn is valid only during the call (the topic
// families reuse their series).
func (h *Handler) eachMetricFamily(ctx context.Context, fams []*dto.MetricFamily, fn func(*dto.MetricFamily) error) error {
	for _, f := range fams {
		if err := fn(f); err != nil {
			return err
		}
	}
	return h.scrapeTopics(ctx).families(fn)
}

// families calls fn with the scrape's families: the broker's version, the configuration store's
// state, topic counts, the topic families and the broker totals.
func (sc *topicScrape) families(fn func(*dto.MetricFamily) error) error {
	if err := sc.headFamilies(fn); err != nil {
		return err
	}
	var reuse seriesPool
	for _, s := range topicFamilies {
		samples := sc.samples[s.index]
		if len(samples) == 0 {
			continue
		}
		if err := fn(sc.family(s, samples, &reuse)); err != nil {
			return err
		}
	}
	return sc.totalFamilies(fn)
}

// headFamilies calls fn with the families written before the topic families: the broker's
// version, the configuration store's state and the namespaces' topic counts.
func (sc *topicScrape) headFamilies(fn func(*dto.MetricFamily) error) error {
	bi := buildinfo.Read()
	fixed := []*dto.MetricFamily{
		sc.brokerGauge(famVersion, "The broker's version and the commit it was built from (value 1).", 1,
			labelPair("version", bi.Version), labelPair("commit", bi.Commit)),
		sc.brokerGauge(famCatalogOK, "1 while the configuration store answers and the broker's catalog follows its watch.", b2f(sc.storeOK)),
		sc.brokerGauge(famCatalogRev, "Configuration store revision the broker's catalog reflects.", float64(sc.revision)),
	}
	if len(sc.nsCounts) > 0 {
		clusterLabel := labelPair("cluster", sc.cluster)
		counts := gaugeFamily(famTopicsCount, "Number of topics of the namespace on this broker.")
		for _, c := range sc.nsCounts {
			counts.Metric = append(counts.Metric, gaugeMetric(float64(c.topics), clusterLabel, labelPair("namespace", labelValue(c.namespace))))
		}
		fixed = append(fixed, counts)
	}
	for _, f := range fixed {
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// totalFamilies calls fn with the families written after the topic families: the broker totals
// and the count of topic stats that could not be read.
func (sc *topicScrape) totalFamilies(fn func(*dto.MetricFamily) error) error {
	t := sc.totals
	values := []float64{float64(t.topics), float64(t.subs), float64(t.producers), float64(t.consumers),
		t.rateIn, t.rateOut, t.thrIn, t.thrOut, float64(t.storage), float64(t.backlog)}
	for i, name := range brokerFamilies {
		if err := fn(sc.brokerGauge(name, brokerFamilyHelp[i], values[i])); err != nil {
			return err
		}
	}
	return fn(sc.brokerGauge(famScrapeErrors, "Topic stats that could not be collected in this scrape.", float64(sc.errs)))
}

// brokerGauge is a family of one gauge with the cluster label and labels, sorted by name.
func (sc *topicScrape) brokerGauge(name, help string, v float64, labels ...*dto.LabelPair) *dto.MetricFamily {
	labels = append(labels, labelPair("cluster", sc.cluster))
	slices.SortFunc(labels, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	return gaugeFamily(name, help, gaugeMetric(v, labels...))
}

// family builds topic family s from its samples, its series taken from reuse (valid until the
// next call).
func (sc *topicScrape) family(s *topicSeries, samples []scrapeSample, reuse *seriesPool) *dto.MetricFamily {
	f := &dto.MetricFamily{Name: &s.name, Help: &s.help, Type: dto.MetricType_GAUGE.Enum()}
	if s.counter {
		f.Type = dto.MetricType_COUNTER.Enum()
	}
	withExtra := sc.hasExtraLabel(s)
	f.Metric = reuse.take(len(samples))
	for i := range samples {
		smp := &samples[i]
		m, sr := f.Metric[i], &reuse.series[i]
		// Labels sorted by name, as client_golang writes them: the extra label goes before topic.
		labels, pending := sr.labels[:0], withExtra
		if withExtra {
			sr.extra.Name, sr.extra.Value = &s.extra, &sc.extras[smp.extra]
		}
		for _, l := range sc.rowLabels[smp.row] {
			if pending && l.GetName() > s.extra {
				labels, pending = append(labels, &sr.extra), false
			}
			labels = append(labels, l)
		}
		if pending {
			labels = append(labels, &sr.extra)
		}
		m.Label, sr.labels = labels, labels
		m.Gauge, m.Counter = nil, nil
		if s.counter {
			sr.counter.Value = &smp.v
			m.Counter = &sr.counter
		} else {
			sr.gauge.Value = &smp.v
			m.Gauge = &sr.gauge
		}
	}
	return f
}

// familyNames describes the families a topic scrape writes, with their labels, and collects
// nothing: registered, it reserves their names in the registry (Register refuses a collector that
// describes one of them).
type familyNames struct{ topicLevel bool }

func (c familyNames) Describe(ch chan<- *prometheus.Desc) {
	cluster := []string{"cluster"}
	ch <- prometheus.NewDesc(famVersion, "", []string{"cluster", "commit", "version"}, nil)
	ch <- prometheus.NewDesc(famTopicsCount, "", []string{"cluster", "namespace"}, nil)
	for _, name := range append([]string{famScrapeErrors, famCatalogOK, famCatalogRev}, brokerFamilies...) {
		ch <- prometheus.NewDesc(name, "", cluster, nil)
	}
	sc := topicScrape{topicLevel: c.topicLevel}
	for _, s := range topicFamilies {
		labels := []string{"cluster", "namespace"}
		if c.topicLevel {
			labels = append(labels, "topic")
		}
		if sc.hasExtraLabel(s) {
			labels = append(labels, s.extra)
		}
		ch <- prometheus.NewDesc(s.name, "", labels, nil)
	}
}

func (familyNames) Collect(chan<- prometheus.Metric) {}

// seriesPool holds the series of one topic family at a time, reused by the next.
type seriesPool struct {
	metrics []*dto.Metric
	series  []pooledSeries
}

type pooledSeries struct {
	metric  dto.Metric
	gauge   dto.Gauge
	counter dto.Counter
	extra   dto.LabelPair
	labels  []*dto.LabelPair
}

// take returns n series (their previous contents to be overwritten).
func (p *seriesPool) take(n int) []*dto.Metric {
	if n > len(p.series) {
		p.series = make([]pooledSeries, n) // the pointers below are into it
		p.metrics = make([]*dto.Metric, n)
		for i := range p.series {
			p.metrics[i] = &p.series[i].metric
		}
	}
	return p.metrics[:n]
}

func labelPair(name, value string) *dto.LabelPair { return &dto.LabelPair{Name: &name, Value: &value} }

func gaugeMetric(v float64, labels ...*dto.LabelPair) *dto.Metric {
	return &dto.Metric{Label: labels, Gauge: &dto.Gauge{Value: &v}}
}

func gaugeFamily(name, help string, metrics ...*dto.Metric) *dto.MetricFamily {
	return &dto.MetricFamily{Name: &name, Help: &help, Type: dto.MetricType_GAUGE.Enum(), Metric: metrics}
}
