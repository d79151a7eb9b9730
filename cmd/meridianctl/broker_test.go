package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/brokertest"
)

// Against a real in-process broker (brokertest): messaging commands and the topic/subscription verbs
// that need topic data.

func ctlBroker(t *testing.T, b *brokertest.Broker, args ...string) result {
	t.Helper()
	return ctl(t, b.AdminURL, append([]string{"--service-url", b.ServiceURL}, args...)...)
}

func mustBroker(t *testing.T, b *brokertest.Broker, args ...string) string {
	t.Helper()
	r := ctlBroker(t, b, args...)
	if r.code != 0 {
		t.Fatalf("meridianctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func TestProduceConsumeAndTopicVerbs(t *testing.T) {
	b := brokertest.Start(t)
	topic := "persistent://public/default/ctl"
	mustBroker(t, b, "topics", "create", topic)
	mustBroker(t, b, "subscriptions", "create", topic, "audit", "-m", "earliest")
	out := mustBroker(t, b, "produce", topic, "-m", "hello", "-m", "world", "-n", "2", "-k", "k1", "-p", "a=b")
	if !strings.Contains(out, "4 messages produced") {
		t.Fatalf("produce = %q", out)
	}
	stats := mustBroker(t, b, "topics", "stats", topic)
	if !strings.Contains(stats, "audit") || !strings.Contains(stats, "4 msgs total") {
		t.Fatalf("stats = %q", stats)
	}
	peek := mustBroker(t, b, "topics", "peek-messages", topic, "-s", "audit", "-n", "2")
	if !strings.Contains(peek, `"hello"`) || !strings.Contains(peek, `"world"`) || !strings.Contains(peek, "a:b") {
		t.Fatalf("peek = %q", peek)
	}
	out = mustBroker(t, b, "-o", "json", "consume", topic, "-s", "audit", "-n", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("consume = %q", out)
	}
	var m struct {
		Payload    string
		Key        string
		Properties map[string]string
	}
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil || m.Payload != "hello" || m.Key != "k1" || m.Properties["a"] != "b" {
		t.Fatalf("first message = %q (%v)", lines[0], err)
	}
	mustBroker(t, b, "subscriptions", "clear-backlog", topic, "audit")
	if out := mustBroker(t, b, "-o", "json", "topics", "stats", topic); !strings.Contains(out, `"msgBacklog": 0`) {
		t.Fatalf("backlog after clear = %q", out)
	}
	if out := mustBroker(t, b, "topics", "subscriptions", topic); out != "audit\n" {
		t.Fatalf("subscriptions = %q", out)
	}
	mustBroker(t, b, "topics", "unsubscribe", topic, "-s", "audit")
	mustBroker(t, b, "topics", "delete", topic, "--force")
}

func TestProduceConsumePartitioned(t *testing.T) {
	b := brokertest.Start(t)
	topic := "persistent://public/default/ctl-parts"
	mustBroker(t, b, "topics", "create", topic, "-p", "3")
	mustBroker(t, b, "subscriptions", "create", topic, "s", "-m", "earliest")
	mustBroker(t, b, "produce", topic, "-m", "x", "-n", "9")
	out := mustBroker(t, b, "consume", topic, "-s", "s", "-n", "9", "--hide-content")
	if !strings.Contains(out, "9 messages received") {
		t.Fatalf("consume = %q", out)
	}
}

func TestPerf(t *testing.T) {
	b := brokertest.Start(t)
	topic := "persistent://public/default/ctl-perf"
	out := mustBroker(t, b, "perf", "produce", topic, "-r", "0", "-n", "300", "-s", "100", "-i", "50ms")
	if !strings.Contains(out, "summary: produce 300 messages") || !strings.Contains(out, "p99") {
		t.Fatalf("perf produce = %q", out)
	}
	out = mustBroker(t, b, "perf", "produce", topic, "-r", "0", "-n", "300", "-s", "100", "--disable-batching")
	if !strings.Contains(out, "summary: produce 300 messages") {
		t.Fatalf("perf produce unbatched = %q", out)
	}
	if r := ctlBroker(t, b, "perf", "consume", topic, "-p", "earliest", "-n", "600", "-i", "50ms"); r.code != 0 || !strings.Contains(r.stdout, "summary: consume 600 messages") {
		t.Fatalf("perf consume = %+v", r)
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(timeMs(i))
	}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 500}, {0.99, 990}, {0.999, 999}} {
		got := ms(h.quantile(c.q))
		if got < c.want*0.97 || got > c.want*1.03 {
			t.Fatalf("p%v = %.1f ms, want about %.0f", c.q*100, got, c.want)
		}
	}
	if ms(h.max) != 1000 {
		t.Fatalf("max = %v", h.max)
	}
}

func timeMs(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestSchemasGroup(t *testing.T) {
	b := brokertest.Start(t)
	if r := ctlBroker(t, b, "schemas", "get", "orders"); r.code != 1 || !strings.Contains(r.stderr, "Schema not found") {
		t.Fatalf("get missing = %+v", r)
	}
	f := t.TempDir() + "/s.json"
	if err := os.WriteFile(f, []byte(`{"type":"STRING","schema":"","properties":{"a":"b"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustBroker(t, b, "schemas", "upload", "orders", "-f", f); !strings.Contains(out, "schema version 0") {
		t.Fatalf("upload = %q", out)
	}
	if out := mustBroker(t, b, "schemas", "get", "orders"); !strings.Contains(out, "STRING") {
		t.Fatalf("get = %q", out)
	}
	mustBroker(t, b, "schemas", "delete", "orders", "--force")
}
