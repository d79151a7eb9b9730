package admin_test

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// TestBrokerStatsMetricsGroupsWhatMetricsShows: broker-stats/metrics is /metrics grouped by label
// set (the dimensions: the labels plus broker and cluster; a histogram gives its _count and _sum),
// one entry per label set, with or without topic-level metrics. It is written a row of the topic
// scrape at a time; a registry series whose label set is a topic's joins that topic's entry. A NaN
// (which JSON cannot carry, and which failed the whole answer) is left out of its entry.
func TestBrokerStatsMetricsGroupsWhatMetricsShows(t *testing.T) {
	for _, topicLevel := range []bool{true, false} {
		t.Run("topicLevel="+strconv.FormatBool(topicLevel), func(t *testing.T) {
			s := memstore.New()
			t.Cleanup(func() { s.Close() })
			e := newEnvWith(t, s, func(c *admin.Config) { c.HideTopicLevelMetrics = !topicLevel })
			ctx := context.Background()
			// Names that are not UTF-8 are written with U+FFFD: "x\xfe" and "x\xff" become one
			// label value, as do topics e\xfe and e\xff, and each label set is still one entry.
			subsOf := [][]string{nil, {"s1"}, {"s1", "bad\xffname"}, {"x\xfe", "x\xff", "zeta"}, nil, nil}
			for i, topic := range []string{"persistent://public/default/a", "persistent://public/default/b", "persistent://public/default/c",
				"persistent://public/default/d", "persistent://public/default/e\xfe", "persistent://public/default/e\xff"} {
				if err := e.topics.CreateTopic(ctx, topic, nil); err != nil {
					t.Fatal(err)
				}
				for _, sub := range subsOf[i] {
					if err := e.topics.CreateSubscription(ctx, topic, sub, adminapi.MessageID{}, false, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			reg := prometheus.NewRegistry()
			plain := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_plain", Help: "h"})
			plain.Set(7)
			sameAsTopic := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "test_per_topic", Help: "h"}, []string{"cluster", "namespace", "topic"})
			sameAsTopic.WithLabelValues("standalone", "public/default", "persistent://public/default/b").Set(3)
			sameAsNamespace := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "test_per_namespace", Help: "h"}, []string{"namespace"})
			sameAsNamespace.WithLabelValues("public/default").Set(4)
			otherCluster := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_other_cluster_total", Help: "h"}, []string{"cluster"})
			otherCluster.WithLabelValues("elsewhere").Add(2)
			hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "test_latency_seconds", Help: "h"})
			hist.Observe(0.5)
			hist.Observe(1.5)
			notANumber := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_nan", Help: "JSON has no NaN: left out"})
			notANumber.Set(math.NaN())
			reg.MustRegister(plain, sameAsTopic, sameAsNamespace, otherCluster, hist, notANumber)
			admin.SetGathererForTest(e.h, reg)

			code, body, hdr := e.call("GET", "/admin/v2/broker-stats/metrics", "")
			if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
				t.Fatalf("broker-stats/metrics: %d %s %s", code, hdr.Get("Content-Type"), body)
			}
			noDuplicateKeys(t, body)
			var entries []struct {
				Metrics    map[string]float64 `json:"metrics"`
				Dimensions map[string]string  `json:"dimensions"`
			}
			if err := json.Unmarshal([]byte(body), &entries); err != nil {
				t.Fatalf("broker-stats/metrics does not parse: %v\n%s", err, body)
			}
			if len(entries) == 0 {
				t.Fatal("no entries")
			}
			broker := entries[0].Dimensions["broker"]
			got := map[string]map[string]float64{}
			for _, en := range entries {
				k := dimsKey(en.Dimensions)
				if got[k] != nil {
					t.Fatalf("two entries for %s", k)
				}
				got[k] = en.Metrics
			}

			// What /metrics shows, grouped by label set.
			_, page, _ := e.call("GET", "/metrics", "")
			want := map[string]map[string]float64{}
			for _, f := range parseMetrics(t, page) {
				for _, m := range f.GetMetric() {
					dims := map[string]string{"broker": broker, "cluster": "standalone"}
					for _, l := range m.GetLabel() {
						dims[l.GetName()] = l.GetValue()
					}
					k := dimsKey(dims)
					if want[k] == nil {
						want[k] = map[string]float64{}
					}
					switch f.GetType() {
					case dto.MetricType_HISTOGRAM:
						want[k][f.GetName()+"_count"] = float64(m.GetHistogram().GetSampleCount())
						want[k][f.GetName()+"_sum"] = m.GetHistogram().GetSampleSum()
					case dto.MetricType_COUNTER:
						want[k][f.GetName()] = m.GetCounter().GetValue()
					default:
						if v := m.GetGauge().GetValue(); !math.IsNaN(v) {
							want[k][f.GetName()] = v
						}
					}
				}
			}
			for _, k := range slices.Sorted(maps.Keys(want)) {
				if !maps.Equal(got[k], want[k]) {
					t.Errorf("%s:\n got %v\nwant %v", k, got[k], want[k])
				}
			}
			for k := range got {
				if want[k] == nil {
					t.Errorf("an entry /metrics does not show: %s %v", k, got[k])
				}
			}
			topicB := dimsKey(map[string]string{"broker": broker, "cluster": "standalone", "namespace": "public/default", "topic": "persistent://public/default/b"})
			if topicLevel && (got[topicB]["test_per_topic"] != 3 || got[topicB]["pulsar_rate_in"] != 10) {
				t.Errorf("the registry's series of topic b did not join the topic's entry: %v", got[topicB])
			}
		})
	}
}

func dimsKey(d map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(d)) {
		b.WriteString(k + "=" + strconv.Quote(d[k]) + ",")
	}
	return b.String()
}

// noDuplicateKeys fails if an object of the JSON document has a key twice (encoding/json takes
// the last silently).
func noDuplicateKeys(t *testing.T, doc string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(doc))
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				if seen[k.(string)] {
					t.Fatalf("key %q twice in one object", k)
				}
				seen[k.(string)] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if err := walk(); err != nil {
		t.Fatalf("broker-stats/metrics: %v", err)
	}
}
