package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsScrapeMemoryPerTopic bounds what one /metrics scrape allocates per topic. Every idle
// topic exports about 40 series; building them all as client_golang metrics before encoding any
// (the registry's Gather) allocated about 30 KiB per topic and scrape, so a Prometheus scraping a
// broker with 10,000 idle topics kept its RSS several times above the topics' own memory
// (docs/performance.md, "Idle memory"). The scrape is also checked to parse, to hold every topic's
// series once, and to answer gzip when asked. broker-stats/metrics, the same series as JSON entries,
// is held to the same budget (it allocated about 48 KiB per topic when it grouped every series in
// maps before answering).
func TestMetricsScrapeMemoryPerTopic(t *testing.T) {
	const topics = 2000
	const budget = 6 << 10 // bytes allocated per topic and scrape (about 3 KiB measured)
	n := startNode(t, testOptions(t, t.TempDir()))
	c := &n.components
	svc := topicService{broker: c.broker, cat: c.catalog, repl: c.replication, schema: c.schemas}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, topics)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < topics; i += 8 {
				if err := svc.CreateTopic(ctx, fmt.Sprintf("persistent://public/default/scrape-%d", i), nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create topic: %v", err)
	}

	get := func(gzip bool) *http.Response {
		req, err := http.NewRequest(http.MethodGet, n.WebURL()+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{DisableCompression: !gzip}
		t.Cleanup(tr.CloseIdleConnections)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %s", resp.Status)
		}
		if gzip && !resp.Uncompressed {
			t.Fatalf("/metrics answered a gzip request with Content-Encoding %q", resp.Header.Get("Content-Encoding"))
		}
		return resp
	}
	scrape := func(gzip bool) (allocated uint64, size int64) {
		return allocatedByCall(t, func() *http.Response { return get(gzip) })
	}
	scrape(false) // warm: first-use allocations (rate windows, pools) are not the scrape's
	for _, gz := range []bool{false, true} {
		allocated, size := scrape(gz)
		perTopic := allocated / topics
		t.Logf("gzip=%v: %d B of text, %d B allocated per topic and scrape (budget %d)", gz, size, perTopic, budget)
		resp := get(gz)
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("/metrics does not parse: %v", err)
		}
		for _, name := range []string{"pulsar_rate_in", "pulsar_storage_size", "pulsar_storage_write_latency_le_1"} {
			f := fams[name]
			if f == nil {
				t.Fatalf("%s is missing", name)
			}
			seen := map[string]bool{}
			for _, m := range f.GetMetric() {
				topic := labelValue(m, "topic")
				if seen[topic] {
					t.Fatalf("%s has topic %q twice", name, topic)
				}
				seen[topic] = true
			}
			if len(seen) != topics {
				t.Fatalf("%s has %d topics, want %d", name, len(seen), topics)
			}
		}
		if perTopic > budget {
			t.Errorf("a scrape allocated %d B per topic, budget %d", perTopic, budget)
		}
	}

	// broker-stats/metrics groups the same series by label set: one entry per topic, subscription
	// and remote cluster, written as it goes rather than all built before the answer.
	statsURL := n.WebURL() + "/admin/v2/broker-stats/metrics"
	getStats := func() *http.Response {
		resp, err := http.Get(statsURL)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("broker-stats/metrics: %s %s", resp.Status, b)
		}
		return resp
	}
	allocatedByCall(t, getStats) // warm
	allocated, size := allocatedByCall(t, getStats)
	perTopic := allocated / topics
	t.Logf("broker-stats/metrics: %d B of JSON, %d B allocated per topic (budget %d)", size, perTopic, budget)
	resp := getStats()
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		Metrics    map[string]float64 `json:"metrics"`
		Dimensions map[string]string  `json:"dimensions"`
	}
	if err := json.Unmarshal(body, &entries); err != nil {
		t.Fatalf("broker-stats/metrics does not parse: %v", err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		topic := e.Dimensions["topic"]
		if topic == "" || e.Dimensions["subscription"] != "" || e.Dimensions["remote_cluster"] != "" {
			continue
		}
		if seen[topic] {
			t.Fatalf("broker-stats/metrics has two entries for topic %q", topic)
		}
		seen[topic] = true
		if _, ok := e.Metrics["pulsar_storage_write_latency_le_1"]; !ok {
			t.Fatalf("broker-stats/metrics: topic %q has no pulsar_storage_write_latency_le_1: %v", topic, e.Metrics)
		}
	}
	if len(seen) != topics {
		t.Fatalf("broker-stats/metrics has %d topic entries, want %d", len(seen), topics)
	}
	if perTopic > budget {
		t.Errorf("broker-stats/metrics allocated %d B per topic, budget %d", perTopic, budget)
	}
}

// allocatedByCall returns what one call allocated in the process (the server's work: the client
// drains the body through a fixed buffer) and the bytes of the body.
func allocatedByCall(t *testing.T, get func() *http.Response) (allocated uint64, size int64) {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	runtime.GC()
	metrics.Read(s)
	start := s[0].Value.Uint64()
	resp := get()
	defer resp.Body.Close()
	size, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, resp.Body, make([]byte, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	metrics.Read(s)
	return s[0].Value.Uint64() - start, size
}
