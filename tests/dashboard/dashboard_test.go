// Package dashboard checks the Grafana dashboard shipped in docs/grafana against a real broker.
package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/brokertest"
	"github.com/meridian-mq/meridian/internal/poll"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const dashboardFile = "../../docs/grafana/meridian-replication.json"

// grafanaDashboard is the part of Grafana's dashboard JSON that holds queries.
type grafanaDashboard struct {
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's panels
}

// grafanaVariables are Grafana's template variables as they appear in the dashboard's queries;
// they are replaced by PromQL-valid stand-ins before parsing.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$cluster", "x", "$namespace", "x")

// labelValuesQuery is a template variable's query: label_values(<selector>, <label>).
var labelValuesQuery = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// dashboardQueries returns every PromQL expression of the dashboard, by panel title.
func dashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string][]string{}
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr != "" {
					out[p.Title] = append(out[p.Title], tg.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesQuery.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("template variable %s: query %q is not label_values(selector, label)", v.Name, v.Definition)
		}
		out["variable "+v.Name] = append(out["variable "+v.Name], m[1])
	}
	return out
}

// metricNames parses a PromQL expression and returns the metric names it selects.
func metricNames(expr string) ([]string, error) {
	e, err := parser.ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				err = fmt.Errorf("selector %s has no metric name", vs)
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, err
}

// exportedNames are the series names a scrape holds: every family's name, and a histogram's or
// summary's _bucket, _sum and _count series.
func exportedNames(fams map[string]*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for name, f := range fams {
		out[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name+"_sum"], out[name+"_count"] = true, true
		}
	}
	return out
}

func scrape(t *testing.T, webURL string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(webURL + "/metrics")
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

// TestDashboardQueriesOnlyExportedMetrics parses every query of the Grafana dashboard with
// Prometheus' PromQL parser and checks that each metric it selects is one a broker exports: two
// in-process clusters replicating public/default both ways, a producer on each and a subscription
// on east, scraped on east.
func TestDashboardQueriesOnlyExportedMetrics(t *testing.T) {
	queries := dashboardQueries(t)
	used := map[string][]string{} // metric -> panels
	for title, exprs := range queries {
		for _, expr := range exprs {
			names, err := metricNames(expr)
			if err != nil {
				t.Errorf("panel %q: %q does not parse: %v", title, expr, err)
				continue
			}
			for _, n := range names {
				if !slices.Contains(used[n], title) {
					used[n] = append(used[n], title)
				}
			}
		}
	}
	if len(used) < 40 {
		t.Fatalf("only %d metrics found in the dashboard's queries: is the extraction broken?", len(used))
	}

	clusters := brokertest.StartClusters(t, []string{"east", "west"})
	east, west := clusters[0].Node(), clusters[1].Node()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "persistent://public/default/dashboard"
	for _, n := range []string{east.ServiceURL(), west.ServiceURL()} {
		c, err := pulsar.NewClient(pulsar.ClientOptions{URL: n, Logger: plog.DefaultNopLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if n == east.ServiceURL() {
			cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "dash"})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
		}
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true,
			SendTimeout: -1, // no send-timeout goroutine outliving Close (goleak)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := range 3 {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Wait until east has received west's messages (its inbound series exist from then on).
	var exported map[string]bool
	poll.UntilNil(t, 30*time.Second, "east showing replication from and to west", func() error {
		exported = exportedNames(scrape(t, east.WebURL()))
		if !exported["meridian_replication_duplicates_dropped_total"] || !exported["pulsar_replication_backlog"] {
			return fmt.Errorf("not yet exported")
		}
		return nil
	})
	var missing []string
	for name, panels := range used {
		if !exported[name] {
			missing = append(missing, fmt.Sprintf("%s (panels %q)", name, panels))
		}
	}
	slices.Sort(missing)
	for _, m := range missing {
		t.Errorf("the dashboard queries %s, which the broker does not export", m)
	}
}

// TestMetricNamesFindsEverySelector: the extraction sees selectors inside functions, aggregations,
// binary operations and range vectors, so a dashboard query cannot hide a metric from the check.
func TestMetricNamesFindsEverySelector(t *testing.T) {
	got, err := metricNames(`sum by (cluster) (rate(a_total{cluster=~"$cluster"}[$__rate_interval])) / (sum(b) > 0) + histogram_quantile(0.9, rate(c_bucket[5m]))`)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"a_total", "b", "c_bucket"}; !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
	if _, err := metricNames(`sum(`); err == nil {
		t.Error("a broken query parsed")
	}
}
