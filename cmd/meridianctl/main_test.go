package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"text/tabwriter"

	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// The tests run meridianctl's cobra commands against the real admin handler over HTTP, with the
// catalog on an in-memory store (no topic service: topic data operations are covered by tests/).

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

func server(t *testing.T) string {
	t.Helper()
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	cat, err := catalog.New(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	if err := cat.EnsureCluster(ctx, "east", adminapi.ClusterData{ServiceURL: "http://127.0.0.1:8080", BrokerServiceURL: "pulsar://127.0.0.1:6650"}); err != nil {
		t.Fatal(err)
	}
	if err := cat.EnsureTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"east"}}); err != nil {
		t.Fatal(err)
	}
	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{"east"}
	if err := cat.EnsureNamespace(ctx, "public/default", p); err != nil {
		t.Fatal(err)
	}
	h, err := admin.NewHandler(admin.Config{Cluster: "east", Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

type result struct {
	code           int
	stdout, stderr string
}

func ctl(t *testing.T, url string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	env := func(k string) (string, bool) {
		if k == "MERIDIAN_ADMIN_URL" {
			return url, true
		}
		return "", false
	}
	code := run(context.Background(), args, &out, &errOut, env)
	return result{code, out.String(), errOut.String()}
}

func mustCtl(t *testing.T, url string, args ...string) string {
	t.Helper()
	r := ctl(t, url, args...)
	if r.code != 0 {
		t.Fatalf("meridianctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func TestGeoReplicationSetup(t *testing.T) {
	url := server(t)
	mustCtl(t, url, "clusters", "create", "west", "--url", "http://10.0.0.2:8080", "--broker-url", "pulsar://10.0.0.2:6650")
	if out := mustCtl(t, url, "clusters", "list"); out != "east\nwest\n" {
		t.Fatalf("clusters list = %q", out)
	}
	out := mustCtl(t, url, "clusters", "get", "west")
	if !strings.Contains(out, "pulsar://10.0.0.2:6650") {
		t.Fatalf("clusters get = %q", out)
	}
	// Replicating to a cluster the tenant does not allow fails with Pulsar's reason and a hint.
	r := ctl(t, url, "namespaces", "set-clusters", "public/default", "--clusters", "east,west")
	if r.code != 1 || !strings.Contains(r.stderr, "not in the list of allowed clusters") || !strings.Contains(r.stderr, "hint: allow the cluster") {
		t.Fatalf("set-clusters refused = %+v", r)
	}
	mustCtl(t, url, "tenants", "update", "public", "--allowed-clusters", "east,west")
	mustCtl(t, url, "namespaces", "set-clusters", "public/default", "--clusters", "east,west")
	if out := mustCtl(t, url, "namespaces", "get-clusters", "public/default"); out != "east\nwest\n" {
		t.Fatalf("get-clusters = %q", out)
	}
	if out := mustCtl(t, url, "-o", "json", "namespaces", "get-clusters", "public/default"); strings.Join(strings.Fields(out), "") != `["east","west"]` {
		t.Fatalf("json get-clusters = %q", out)
	}
	// Unknown cluster: hint to register it.
	r = ctl(t, url, "namespaces", "set-clusters", "public/default", "--clusters", "mars")
	if r.code != 1 || !strings.Contains(r.stderr, "Invalid cluster id: mars") || !strings.Contains(r.stderr, "clusters create") {
		t.Fatalf("unknown cluster = %+v", r)
	}
}

func TestNamespacePolicies(t *testing.T) {
	url := server(t)
	mustCtl(t, url, "tenants", "create", "acme", "--allowed-clusters", "east")
	mustCtl(t, url, "namespaces", "create", "acme/orders")
	if out := mustCtl(t, url, "namespaces", "list", "acme"); out != "acme/orders\n" {
		t.Fatalf("list = %q", out)
	}
	mustCtl(t, url, "namespaces", "set-retention", "acme/orders", "--time", "3h", "--size", "10G")
	if out := mustCtl(t, url, "namespaces", "get-retention", "acme/orders"); !strings.Contains(out, `"retentionTimeInMinutes": 180`) || !strings.Contains(out, `"retentionSizeInMB": 10240`) {
		t.Fatalf("retention = %q", out)
	}
	mustCtl(t, url, "namespaces", "set-message-ttl", "acme/orders", "--ttl", "1h")
	if out := mustCtl(t, url, "namespaces", "get-message-ttl", "acme/orders"); strings.TrimSpace(out) != "3600" {
		t.Fatalf("ttl = %q", out)
	}
	mustCtl(t, url, "namespaces", "remove-message-ttl", "acme/orders")
	if out := mustCtl(t, url, "namespaces", "get-message-ttl", "acme/orders"); strings.TrimSpace(out) != "(not set)" {
		t.Fatalf("ttl after remove = %q", out)
	}
	mustCtl(t, url, "namespaces", "set-deduplication", "acme/orders", "--enable")
	if out := mustCtl(t, url, "namespaces", "get-deduplication", "acme/orders"); strings.TrimSpace(out) != "true" {
		t.Fatalf("dedup = %q", out)
	}
	mustCtl(t, url, "namespaces", "set-backlog-quota", "acme/orders", "--limit-size", "1G", "--policy", "producer_exception")
	if out := mustCtl(t, url, "namespaces", "get-backlog-quotas", "acme/orders"); !strings.Contains(out, "destination_storage") || !strings.Contains(out, "1073741824") {
		t.Fatalf("quotas = %q", out)
	}
	mustCtl(t, url, "namespaces", "set-replicator-dispatch-rate", "acme/orders", "--msg-dispatch-rate", "500")
	mustCtl(t, url, "namespaces", "set-auto-topic-creation", "acme/orders", "--enable", "--type", "partitioned", "--num-partitions", "3")
	mustCtl(t, url, "namespaces", "set-policy", "acme/orders", "maxProducersPerTopic", "7")
	if out := mustCtl(t, url, "namespaces", "get-policy", "acme/orders", "maxProducersPerTopic"); strings.TrimSpace(out) != "7" {
		t.Fatalf("generic get = %q", out)
	}
	out := mustCtl(t, url, "namespaces", "policies", "acme/orders")
	var p adminapi.Policies
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if p.ReplicatorDispatchRate["east"].DispatchThrottlingRateInMsg != 500 || p.AutoTopicCreationOverride == nil || *p.MaxProducersPerTopic != 7 {
		t.Fatalf("policies = %+v", p)
	}
	// Bad values: a clear error and exit status 1; usage errors exit 2.
	if r := ctl(t, url, "namespaces", "set-policy", "acme/orders", "messageTTL", "--", "-5"); r.code != 1 || !strings.Contains(r.stderr, "Invalid value for message TTL (HTTP 412)") {
		t.Fatalf("bad ttl = %+v", r)
	}
	if r := ctl(t, url, "namespaces", "set-retention", "acme/orders", "--time", "soon", "--size", "1G"); r.code != 2 {
		t.Fatalf("usage error = %+v", r)
	}
	if r := ctl(t, url, "namespaces", "delete", "acme/nope"); r.code != 1 || !strings.Contains(r.stderr, "Namespace does not exist") {
		t.Fatalf("delete missing = %+v", r)
	}
	if r := ctl(t, url, "tenants", "delete", "acme"); r.code != 1 || !strings.Contains(r.stderr, "hint: delete its namespaces first") {
		t.Fatalf("delete tenant = %+v", r)
	}
	mustCtl(t, url, "namespaces", "delete", "acme/orders")
	mustCtl(t, url, "tenants", "delete", "acme")
}

func TestTopicsPartitioned(t *testing.T) {
	url := server(t)
	mustCtl(t, url, "topics", "create", "persistent://public/default/orders", "-p", "4")
	if out := mustCtl(t, url, "topics", "get-partitioned-topic-metadata", "orders"); !strings.Contains(out, "4") {
		t.Fatalf("metadata = %q", out)
	}
	mustCtl(t, url, "topics", "update-partitioned-topic", "orders", "-p", "6")
	if out := mustCtl(t, url, "topics", "list-partitioned-topics", "public/default"); out != "persistent://public/default/orders\n" {
		t.Fatalf("partitioned = %q", out)
	}
	if out := mustCtl(t, url, "topics", "lookup", "orders"); !strings.Contains(out, "pulsar://127.0.0.1:6650") {
		t.Fatalf("lookup = %q", out)
	}
	mustCtl(t, url, "topics", "set-policy", "orders", "retention", `{"retentionTimeInMinutes":60,"retentionSizeInMB":-1}`)
	if out := mustCtl(t, url, "topics", "get-policy", "orders", "retention"); !strings.Contains(out, `"retentionTimeInMinutes": 60`) {
		t.Fatalf("topic retention = %q", out)
	}
	mustCtl(t, url, "topics", "set-replication-clusters", "orders", "--clusters", "east")
	if out := mustCtl(t, url, "topics", "get-replication-clusters", "orders"); out != "east\n" {
		t.Fatalf("topic replication = %q", out)
	}
	mustCtl(t, url, "topics", "delete", "orders")
	if r := ctl(t, url, "topics", "stats", "orders"); r.code != 1 {
		t.Fatalf("stats without topic service = %+v", r)
	}
}

func TestBrokersAndConnectionErrors(t *testing.T) {
	url := server(t)
	if out := mustCtl(t, url, "brokers", "healthcheck"); out != "ok\n" {
		t.Fatalf("healthcheck = %q", out)
	}
	if out := mustCtl(t, url, "brokers", "ready", "--wait", "5s"); out != "ok\n" {
		t.Fatalf("ready = %q", out)
	}
	if out := mustCtl(t, url, "brokers", "list"); out != "127.0.0.1:8080\n" {
		t.Fatalf("brokers = %q", out)
	}
	r := ctl(t, "http://127.0.0.1:1", "clusters", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "is the broker running") {
		t.Fatalf("unreachable = %+v", r)
	}
	if r := ctl(t, url, "-o", "yaml", "clusters", "list"); r.code != 2 {
		t.Fatalf("bad output = %+v", r)
	}
	if r := ctl(t, url, "clusters", "frobnicate"); r.code == 0 {
		t.Fatalf("unknown verb = %+v", r)
	}
}

func TestStatsTable(t *testing.T) {
	var buf bytes.Buffer
	a := &app{out: &buf, output: "table"}
	st := adminapi.TopicStats{
		MsgRateIn: 100, Subscriptions: map[string]adminapi.SubscriptionStats{"s": {Type: "Shared", MsgBacklog: 50, MsgRateOut: 10}},
		Replication: map[string]adminapi.ReplicatorStats{
			"west":  {Connected: false, ReplicationBacklog: 300, LastError: "connection refused"},
			"north": {Connected: true, ReplicationBacklog: 40, MsgRateOut: 20, MemoryLimited: true},
			"south": {Connected: true, ReplicationBacklog: 40, MsgRateOut: 20, RateLimited: true},
		},
	}
	if err := a.show(st, func(tw *tabwriter.Writer) { writeStats(tw, "t", 0, st) }); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"REPLICATION TO", "west", "not draining", "connection refused", "~5s",
		"~2s (waiting for replication memory)", "~2s (rate-limited)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("stats table lacks %q:\n%s", want, out)
		}
	}
}
