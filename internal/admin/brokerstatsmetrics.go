package admin

import (
	"bufio"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
)

// GET /admin/v2/broker-stats/metrics answers Pulsar's list of {"metrics": {...}, "dimensions":
// {...}}: the series of one label set are one entry, keyed by their Prometheus names (a histogram
// or summary contributes its _count and _sum), and the dimensions are the labels plus broker and
// cluster. The registry's families and the scrape's broker-level ones have few label sets and are
// grouped in memory. The topic families are most of the answer (an entry per topic, subscription
// and remote cluster), so they are written from the topic scrape's compact table one row at a
// time as the answer goes out, instead of every entry being built before the first byte: with
// 10,000 idle topics that held about 120 MiB for the call. A value that JSON cannot carry (NaN,
// ±Inf) is left out of its entry rather than failing the whole answer.

// statsDim is one dimension of an entry.
type statsDim struct{ name, value string }

// statsSeries is one metric of an entry.
type statsSeries struct {
	name string
	v    float64
}

// statsGroup is the metrics of one label set of the registry's and broker-level families.
type statsGroup struct {
	dims    []statsDim // sorted by name
	metrics map[string]float64
	written bool
}

// statsGroups groups families by label set, in the order label sets first appear.
type statsGroups struct {
	byKey map[string]*statsGroup
	order []*statsGroup
	// withNamespace: some group has a namespace dimension, so it may share its label set with
	// a row of the topic families (every row has one).
	withNamespace bool
}

// addFamily adds f's series, each under base's dimensions plus its own labels (a label wins).
func (g *statsGroups) addFamily(f *dto.MetricFamily, base []statsDim) {
	for _, m := range f.GetMetric() {
		var series []statsSeries
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			series = []statsSeries{{f.GetName(), m.GetCounter().GetValue()}}
		case dto.MetricType_GAUGE:
			series = []statsSeries{{f.GetName(), m.GetGauge().GetValue()}}
		case dto.MetricType_UNTYPED:
			series = []statsSeries{{f.GetName(), m.GetUntyped().GetValue()}}
		case dto.MetricType_HISTOGRAM:
			series = []statsSeries{{f.GetName() + "_count", float64(m.GetHistogram().GetSampleCount())},
				{f.GetName() + "_sum", m.GetHistogram().GetSampleSum()}}
		case dto.MetricType_SUMMARY:
			series = []statsSeries{{f.GetName() + "_count", float64(m.GetSummary().GetSampleCount())},
				{f.GetName() + "_sum", m.GetSummary().GetSampleSum()}}
		default:
			continue // a type Pulsar's answer has no shape for
		}
		dims := slices.Clone(base)
		for _, l := range m.GetLabel() {
			dims = setDim(dims, l.GetName(), l.GetValue())
		}
		g.add(dims, series)
	}
}

// add adds series under dims (a later value of a name wins, as in a map).
func (g *statsGroups) add(dims []statsDim, series []statsSeries) {
	sortDims(dims)
	key := statsKey(dims)
	grp := g.byKey[key]
	if grp == nil {
		grp = &statsGroup{dims: dims, metrics: map[string]float64{}}
		g.byKey[key] = grp
		g.order = append(g.order, grp)
		if hasDim(dims, "namespace") {
			g.withNamespace = true
		}
	}
	for _, s := range series {
		grp.metrics[s.name] = s.v
	}
}

// sortDims sorts dims by name, as statsKey, hasDim and the JSON entries want them.
func sortDims(dims []statsDim) {
	slices.SortFunc(dims, func(a, b statsDim) int { return strings.Compare(a.name, b.name) })
}

// hasDim reports whether sorted dims have a dimension called name.
func hasDim(dims []statsDim, name string) bool {
	_, found := slices.BinarySearchFunc(dims, name, func(d statsDim, n string) int { return strings.Compare(d.name, n) })
	return found
}

func setDim(dims []statsDim, name, value string) []statsDim {
	for i := range dims {
		if dims[i].name == name {
			dims[i].value = value
			return dims
		}
	}
	return append(dims, statsDim{name, value})
}

// statsKey identifies a sorted label set.
func statsKey(dims []statsDim) string {
	var k strings.Builder
	for _, d := range dims {
		k.WriteString(d.name + "=" + strconv.Quote(d.value) + ",")
	}
	return k.String()
}

// writeUnwritten writes the groups not written yet that pass keep, in order.
func (g *statsGroups) writeUnwritten(out *statsWriter, keep func(*statsGroup) bool) {
	for _, grp := range g.order {
		if !grp.written && keep(grp) {
			grp.written = true
			out.group(grp, nil)
		}
	}
}

func (h *Handler) brokerStatsMetrics(w http.ResponseWriter, r *http.Request) error {
	fams, err := h.gatherer.Gather()
	if err != nil && len(fams) == 0 {
		return err
	}
	sc := h.scrapeTopics(r.Context())
	base := []statsDim{{"broker", h.brokerID()}, {"cluster", h.cfg.Cluster}}
	groups := &statsGroups{byKey: map[string]*statsGroup{}}
	add := func(f *dto.MetricFamily) error { groups.addFamily(f, base); return nil }
	for _, f := range fams {
		groups.addFamily(f, base)
	}
	_ = sc.headFamilies(add)
	_ = sc.totalFamilies(add)

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	out := newStatsWriter(w)
	defer out.release()
	groups.writeUnwritten(out, func(grp *statsGroup) bool { return !hasDim(grp.dims, "namespace") }) // the broker's own entries first
	var dims []statsDim
	_ = sc.eachRowEntry(func(row int32, extraName, extra string, series []statsSeries) error {
		dims = append(dims[:0], base...)
		for _, l := range sc.rowLabels[row] {
			dims = setDim(dims, l.GetName(), l.GetValue())
		}
		if extraName != "" {
			dims = setDim(dims, extraName, extra)
		}
		if renamed(dims) {
			// A name with bytes that are not UTF-8 is written with U+FFFD (labelValue), so two
			// rows, or a row and a registry series, may share a label set: such rows are grouped
			// with the registry's series and written at the end, one entry per label set.
			groups.add(slices.Clone(dims), series)
			return nil
		}
		sortDims(dims)
		if groups.withNamespace {
			if grp := groups.byKey[statsKey(dims)]; grp != nil && !grp.written {
				grp.written = true
				out.group(grp, series)
				return out.err
			}
		}
		out.entry(dims, series)
		return out.err
	})
	groups.writeUnwritten(out, func(*statsGroup) bool { return true })
	if err := out.finish(); err != nil {
		h.log.Debug("broker-stats/metrics: writing the answer", "err", err)
	}
	return nil // the status is sent: a write error means the client went away
}

// renamed reports whether a dimension's value carries U+FFFD, as labelValue writes bytes that
// are not UTF-8.
func renamed(dims []statsDim) bool {
	return slices.ContainsFunc(dims, func(d statsDim) bool { return strings.ContainsRune(d.value, utf8.RuneError) })
}

// familiesByName are the topic families sorted by name, so that a row's metrics come out in the
// order JSON objects are written here (and encoding/json writes a map's keys).
var familiesByName = sync.OnceValue(func() []*topicSeries {
	return slices.SortedFunc(slices.Values(topicFamilies), func(a, b *topicSeries) int { return strings.Compare(a.name, b.name) })
})

// eachRowEntry calls fn with every label set of the scrape's topic families, row by row (a topic,
// or a namespace without topic-level metrics): first the row's own series (extraName ""), then
// those of each value of an extra label (a subscription, a remote cluster), each list sorted by
// name. series is valid only during the call.
func (sc *topicScrape) eachRowEntry(fn func(row int32, extraName, extra string, series []statsSeries) error) error {
	type labelSet struct {
		extraName, extra string
		series           []statsSeries
	}
	cursors := make([]int, len(topicFamilies))
	sets := []labelSet{{}} // sets[0]: the row's own series; reused from row to row
	setIndex := map[[2]string]int{}
	for row := range int32(len(sc.rowLabels)) {
		for i := range sets {
			sets[i].series = sets[i].series[:0]
		}
		sets = sets[:1]
		clear(setIndex)
		for _, s := range familiesByName() {
			samples, withExtra := sc.samples[s.index], sc.hasExtraLabel(s)
			c := cursors[s.index]
			for ; c < len(samples) && samples[c].row == row; c++ {
				i := 0
				if withExtra {
					k := [2]string{s.extra, sc.extras[samples[c].extra]}
					var found bool
					if i, found = setIndex[k]; !found {
						i = len(sets)
						setIndex[k] = i
						if i < cap(sets) {
							sets = sets[:i+1]
							sets[i].extraName, sets[i].extra = k[0], k[1]
						} else {
							sets = append(sets, labelSet{extraName: k[0], extra: k[1]})
						}
					}
				}
				if n := len(sets[i].series); n > 0 && sets[i].series[n-1].name == s.name {
					// Two extra values that labelValue wrote alike: the later wins, as in a map.
					sets[i].series[n-1].v = samples[c].v
					continue
				}
				sets[i].series = append(sets[i].series, statsSeries{s.name, samples[c].v})
			}
			cursors[s.index] = c
		}
		for _, set := range sets {
			if len(set.series) == 0 {
				continue
			}
			if err := fn(row, set.extraName, set.extra, set.series); err != nil {
				return err
			}
		}
	}
	return nil
}

// statsWriter writes the JSON list of entries.
type statsWriter struct {
	w   *bufio.Writer
	b   []byte // one entry
	n   int    // entries written
	err error
}

var statsBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

func newStatsWriter(w http.ResponseWriter) *statsWriter {
	bw := statsBuffers.Get().(*bufio.Writer)
	bw.Reset(w)
	out := &statsWriter{w: bw}
	out.err = out.w.WriteByte('[')
	return out
}

// entry writes one entry: dims sorted by name, series sorted by name.
func (o *statsWriter) entry(dims []statsDim, series []statsSeries) {
	if o.err != nil {
		return
	}
	b := o.b[:0]
	if o.n > 0 {
		b = append(b, ',')
	}
	b = append(b, `{"metrics":{`...)
	first := true
	for _, s := range series {
		if math.IsNaN(s.v) || math.IsInf(s.v, 0) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, s.name)
		b = append(b, ':')
		b = appendJSONFloat(b, s.v)
	}
	b = append(b, `},"dimensions":{`...)
	for i, d := range dims {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, d.name)
		b = append(b, ':')
		b = appendJSONString(b, d.value)
	}
	b = append(b, "}}"...)
	o.b = b
	o.n++
	_, o.err = o.w.Write(b)
}

// group writes grp's entry, with series (from a row of the same label set) merged in.
func (o *statsWriter) group(grp *statsGroup, series []statsSeries) {
	all := make([]statsSeries, 0, len(grp.metrics)+len(series))
	for name, v := range grp.metrics {
		all = append(all, statsSeries{name, v})
	}
	for _, s := range series {
		if _, dup := grp.metrics[s.name]; !dup {
			all = append(all, s)
		}
	}
	slices.SortFunc(all, func(a, b statsSeries) int { return strings.Compare(a.name, b.name) })
	o.entry(grp.dims, all)
}

func (o *statsWriter) finish() error {
	if o.err == nil {
		o.err = o.w.WriteByte(']')
	}
	if o.err == nil {
		o.err = o.w.Flush()
	}
	return o.err
}

func (o *statsWriter) release() {
	o.w.Reset(nil)
	statsBuffers.Put(o.w)
}

// appendJSONString appends s as a JSON string: plain printable ASCII as it is, anything else
// through encoding/json (which also replaces invalid UTF-8).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends a finite v as encoding/json writes a float64: the shortest
// representation, in exponent form only below 1e-6 or from 1e21, with a one-digit negative
// exponent written without its leading zero.
func appendJSONFloat(b []byte, v float64) []byte {
	format := byte('f')
	if abs := math.Abs(v); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, v, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
