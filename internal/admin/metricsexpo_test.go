package admin_test

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// parseMetrics parses a /metrics body with Prometheus' own parser (it refuses a family that
// appears twice and a label value that is not UTF-8).
func parseMetrics(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return fams
}

// TestMetricsSubscriptionNamesAnyClientChooses: a subscription name is the client's choice, and one
// that is not UTF-8 must not make the page unparseable for everyone (its invalid bytes are
// replaced); subscriptions are written in name order, so the page is the same from one scrape to
// the next.
func TestMetricsSubscriptionNamesAnyClientChooses(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	const topic = "persistent://public/default/subs"
	e.expect("PUT", "/admin/v2/persistent/public/default/subs", "", 204, "")
	for _, sub := range []string{"zeta", "bad\xffname", "alpha"} {
		if err := e.topics.CreateSubscription(context.Background(), topic, sub, adminapi.MessageID{}, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, first, _ := e.call("GET", "/metrics", "")
	fams := parseMetrics(t, first)
	var subs []string
	for _, m := range fams["pulsar_subscription_back_log"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "subscription" {
				subs = append(subs, l.GetValue())
			}
		}
	}
	if want := []string{"alpha", "bad\uFFFDname", "zeta"}; strings.Join(subs, ",") != strings.Join(want, ",") {
		t.Fatalf("subscriptions %q, want %q", subs, want)
	}
	for range 3 {
		if _, again, _ := e.call("GET", "/metrics", ""); stripVolatile(again) != stripVolatile(first) {
			t.Fatal("the page changed between two scrapes of an unchanged broker")
		}
	}
}

// stripVolatile drops the families whose values move on their own (runtime, process, timings).
func stripVolatile(body string) string {
	var keep []string
	for _, line := range strings.Split(body, "\n") {
		if strings.Contains(line, "go_") || strings.Contains(line, "process_") || strings.Contains(line, "_seconds") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// TestMetricsFamilyNamesReserved: the topic families are written after the registry's, so a
// registry family of the same name would make the page unparseable; the handler reserves their
// names in the registry, which refuses such a collector.
func TestMetricsFamilyNamesReserved(t *testing.T) {
	cat := memCatalog(t)
	for _, name := range []string{"pulsar_broker_topics_count", "pulsar_rate_in", "pulsar_version_info"} {
		reg := prometheus.NewRegistry()
		if _, err := admin.NewHandler(admin.Config{Cluster: "c", Catalog: cat, Registry: reg}); err != nil {
			t.Fatal(err)
		}
		clash := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: "a clash"}, func() float64 { return 1 })
		if err := reg.Register(clash); err == nil {
			t.Fatalf("the registry took a second family %s", name)
		}
	}
}

// memCatalog returns a catalog over a new in-memory store.
func memCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	cat, err := catalog.New(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

// failingGatherer fails every Gather.
type failingGatherer struct{}

func (failingGatherer) Gather() ([]*dto.MetricFamily, error) {
	return nil, errors.New("test: a collector failed")
}

// TestMetricsNegotiation: gzip when the scraper accepts it (not with q=0), the protobuf format when
// asked for, name[] selects families.
func TestMetricsNegotiation(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	e.expect("PUT", "/admin/v2/persistent/public/default/neg", "", 204, "")
	get := func(path string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", e.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r io.Reader = resp.Body
		if resp.Header.Get("Content-Encoding") == "gzip" {
			if r, err = gzip.NewReader(resp.Body); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s %s", path, resp.Status, b)
		}
		return resp, string(b)
	}
	for _, c := range []struct {
		accept string
		gzip   bool
	}{{"gzip", true}, {"deflate, GZIP;q=0.5", true}, {"gzip;q=0", false}, {"gzip;Q=0.0", false}, {"br", false}, {"", false}} {
		resp, body := get("/metrics", "Accept-Encoding", c.accept)
		if got := resp.Header.Get("Content-Encoding") == "gzip"; got != c.gzip {
			t.Fatalf("Accept-Encoding %q: gzip %v, want %v", c.accept, got, c.gzip)
		}
		if fams := parseMetrics(t, body); fams["pulsar_rate_in"] == nil {
			t.Fatalf("Accept-Encoding %q: no pulsar_rate_in", c.accept)
		}
	}
	_, body := get("/metrics?name[]=pulsar_rate_in&name[]=pulsar_version_info")
	if fams := parseMetrics(t, body); len(fams) != 2 || fams["pulsar_rate_in"] == nil || fams["pulsar_version_info"] == nil {
		t.Fatalf("name[] selected %d families:\n%s", len(fams), body)
	}
	resp, body := get("/metrics", "Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	if expfmt.ResponseFormat(resp.Header).FormatType() != expfmt.TypeProtoDelim {
		t.Fatalf("Content-Type %q, want delimited protobuf", resp.Header.Get("Content-Type"))
	}
	dec := expfmt.NewDecoder(strings.NewReader(body), expfmt.ResponseFormat(resp.Header))
	found := false
	for {
		var f dto.MetricFamily
		if err := dec.Decode(&f); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		found = found || f.GetName() == "pulsar_rate_in" && len(f.GetMetric()) == 1
	}
	if !found {
		t.Fatal("the protobuf answer lacks pulsar_rate_in of the topic")
	}
}

// TestMetricsGatherErrorIs500: a registry that fails to gather answers 500 (as promhttp does), so
// the scrape fails instead of quietly losing families.
func TestMetricsGatherErrorIs500(t *testing.T) {
	cat := memCatalog(t)
	h, err := admin.NewHandler(admin.Config{Cluster: "c", Catalog: cat, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	admin.SetGathererForTest(h, failingGatherer{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", rec.Code)
	}
}
