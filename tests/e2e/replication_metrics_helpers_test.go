package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// /metrics as a Prometheus server reads it (expfmt's text parser), flattened to samples so that a
// test can find the replication series a broker exports by name and labels.

// promSample is one line of a scrape: a metric name, its labels and its value.
type promSample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// promScrape is a whole /metrics answer.
type promScrape []promSample

// scrapePromMetrics GETs base+"/metrics" and parses it.
func scrapePromMetrics(ctx context.Context, base string) (promScrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s/metrics: HTTP %d: %s", base, resp.StatusCode, body)
	}
	return parsePromText(io.LimitReader(resp.Body, 64<<20))
}

// parsePromText parses the text exposition format with expfmt and flattens it: one sample per
// counter, gauge and untyped metric, and per histogram and summary their _sum and _count.
func parsePromText(r io.Reader) (promScrape, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	var out promScrape
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			add := func(name string, v float64) {
				out = append(out, promSample{Name: name, Labels: labels, Value: v})
			}
			switch {
			case m.Counter != nil:
				add(name, m.GetCounter().GetValue())
			case m.Gauge != nil:
				add(name, m.GetGauge().GetValue())
			case m.Untyped != nil:
				add(name, m.GetUntyped().GetValue())
			case m.Histogram != nil:
				add(name+"_sum", m.GetHistogram().GetSampleSum())
				add(name+"_count", float64(m.GetHistogram().GetSampleCount()))
			case m.Summary != nil:
				add(name+"_sum", m.GetSummary().GetSampleSum())
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
			}
		}
	}
	return out, nil
}

// find returns the samples named name whose labels include every pair in labels.
func (p promScrape) find(name string, labels map[string]string) []promSample {
	var out []promSample
	for _, s := range p {
		if s.Name != name {
			continue
		}
		ok := true
		for k, v := range labels {
			if s.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

// value returns the value of the one sample named name with labels, or an error if there is not
// exactly one.
func (p promScrape) value(name string, labels map[string]string) (float64, error) {
	got := p.find(name, labels)
	if len(got) != 1 {
		return 0, fmt.Errorf("%d samples of %s%v, want 1", len(got), name, labels)
	}
	return got[0].Value, nil
}

func TestReplLifecycleParsePromText(t *testing.T) {
	in := `# HELP pulsar_replication_backlog Entries not yet replicated.
# TYPE pulsar_replication_backlog gauge
pulsar_replication_backlog{cluster="east",namespace="public/default",remote_cluster="west",topic="persistent://public/default/t"} 30
pulsar_replication_connected_count{cluster="east",namespace="public/default",remote_cluster="west",topic="persistent://public/default/t"} 0
meridian_replicators_running{cluster="east"} 1
go_goroutines 42
odd{a="x\"y\\z"} 1.5e+06 1700000000000
`
	p, err := parsePromText(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 5 {
		t.Fatalf("got %d samples: %+v", len(p), p)
	}
	v, err := p.value("pulsar_replication_backlog", map[string]string{"remote_cluster": "west", "topic": "persistent://public/default/t"})
	if err != nil || v != 30 {
		t.Fatalf("backlog = %v, %v", v, err)
	}
	if v, err := p.value("go_goroutines", nil); err != nil || v != 42 {
		t.Fatalf("go_goroutines = %v, %v", v, err)
	}
	if s := p.find("odd", nil); len(s) != 1 || s[0].Labels["a"] != `x"y\z` || s[0].Value != 1.5e6 {
		t.Fatalf("odd = %+v", s)
	}
	if _, err := parsePromText(strings.NewReader("bad{a=1} 2\n")); err == nil {
		t.Fatal("malformed label accepted")
	}
}
