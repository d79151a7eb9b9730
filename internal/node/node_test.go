package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/metadata/etcdstore/etcdtest"
	"github.com/meridian-mq/meridian/internal/poll"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testOptions(t *testing.T, dir string) Options {
	t.Helper()
	o := DefaultOptions()
	o.DataDir = dir
	o.BrokerAddr = "127.0.0.1:0"
	o.WebAddr = "127.0.0.1:0"
	if os.Getenv("NODE_TEST_LOG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	} else {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func startNode(t *testing.T, o Options) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, o)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestStartBootstrapsClusterTenantNamespaceAndIsReady(t *testing.T) {
	n := startNode(t, testOptions(t, t.TempDir()))
	if code, body := httpGet(t, n.WebURL()+"/admin/v2/brokers/ready"); code != http.StatusOK {
		t.Fatalf("ready: %d %s", code, body)
	}
	cat := n.components.catalog
	cluster, ok := cat.Cluster("standalone")
	if !ok {
		t.Fatal("cluster standalone not registered")
	}
	if cluster.ServiceURL != n.WebURL() || cluster.BrokerServiceURL != n.ServiceURL() {
		t.Errorf("cluster URLs %q %q, want %q %q", cluster.ServiceURL, cluster.BrokerServiceURL, n.WebURL(), n.ServiceURL())
	}
	tenant, ok := cat.Tenant("public")
	if !ok || len(tenant.AllowedClusters) != 1 || tenant.AllowedClusters[0] != "standalone" {
		t.Errorf("tenant public: %+v %v", tenant, ok)
	}
	ns, ok := cat.Namespace("public/default")
	if !ok || len(ns.ReplicationClusters) != 1 || ns.ReplicationClusters[0] != "standalone" {
		t.Errorf("namespace public/default: %+v %v", ns.ReplicationClusters, ok)
	}
	if !strings.HasPrefix(n.ServiceURL(), "pulsar://127.0.0.1:") || !strings.HasPrefix(n.WebURL(), "http://127.0.0.1:") {
		t.Errorf("URLs %s %s", n.ServiceURL(), n.WebURL())
	}
	// The admin API is mounted beside readiness.
	if code, body := httpGet(t, n.WebURL()+"/admin/v2/clusters"); code != http.StatusOK || !strings.Contains(body, "standalone") {
		t.Errorf("GET clusters: %d %s", code, body)
	}
	code, body := httpGet(t, n.WebURL()+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, `meridian_fsync_mode{mode="always"} 1`) {
		t.Errorf("GET metrics: %d, fsync mode missing", code)
	}
	// Storage latency histograms: bootstrap wrote metadata through the engine, so both have counts.
	// The broker's publish latency histogram is there from the start (no publish yet).
	for _, want := range []string{`meridian_storage_sync_seconds_bucket{le="0.005"}`, `meridian_storage_sync_seconds_count`,
		`meridian_storage_commit_seconds_bucket{le="+Inf"}`, `meridian_storage_commit_seconds_sum`,
		`meridian_publish_latency_seconds_bucket{le="0.005"}`, `meridian_publish_latency_seconds_count`, "meridian_ignored_acks_total 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET metrics: %s missing", want)
		}
	}
}

func TestReadinessAnswers503WithReason(t *testing.T) {
	n := &Node{}
	n.setNotReady(errors.New("recovering storage"))
	rec := httptest.NewRecorder()
	n.serveReady(rec, httptest.NewRequest(http.MethodGet, "/admin/v2/brokers/ready", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "recovering storage") {
		t.Errorf("got %d %q", rec.Code, rec.Body.String())
	}
	n.setNotReady(nil)
	rec = httptest.NewRecorder()
	n.serveReady(rec, httptest.NewRequest(http.MethodGet, "/admin/v2/brokers/ready", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("ready node answered %d", rec.Code)
	}
}

func TestRestartOnSameDataDirAndPortsKeepsPolicies(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, dir)
	n := startNode(t, o)
	dedup := true
	if err := n.components.catalog.UpdateNamespace(context.Background(), "public/default", func(p *adminapi.Policies) error {
		p.DeduplicationEnabled = &dedup
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	o.BrokerAddr, o.WebAddr = n.BrokerAddr().String(), n.WebAddr().String()
	start := time.Now()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close took %v, over 5 s", took)
	}
	n2 := startNode(t, o) // same ports, at once
	if n2.BrokerAddr().String() != o.BrokerAddr {
		t.Errorf("restarted on %s, want %s", n2.BrokerAddr(), o.BrokerAddr)
	}
	ns, _ := n2.components.catalog.Namespace("public/default")
	if ns.DeduplicationEnabled == nil || !*ns.DeduplicationEnabled {
		t.Error("bootstrap on restart overwrote the existing namespace's policies")
	}
}

func TestDataDirOfAnotherClusterIsRefused(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, testOptions(t, dir))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, dir)
	o.Cluster = "elsewhere"
	_, err := Start(context.Background(), o)
	if !errors.Is(err, ErrForeignDataDir) {
		t.Fatalf("got %v, want ErrForeignDataDir", err)
	}
}

func TestSecondNodeOnALockedDataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	startNode(t, testOptions(t, dir))
	_, err := Start(context.Background(), testOptions(t, dir))
	if !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("got %v, want ErrDataDirLocked", err)
	}
}

func TestStartFailsCleanlyWhenAPortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	o := testOptions(t, dir)
	o.WebAddr = ln.Addr().String()
	if _, err := Start(context.Background(), o); err == nil || !strings.Contains(err.Error(), "--web-addr") {
		t.Fatalf("got %v, want a --web-addr listen error", err)
	}
	// Everything was released: the data dir can be used at once.
	n := startNode(t, testOptions(t, dir))
	_ = n.Close()
}

func TestClusterFileIsWrittenOnce(t *testing.T) {
	dir := t.TempDir()
	if err := bindDataDir(dir, "east"); err != nil {
		t.Fatal(err)
	}
	if err := bindDataDir(dir, "east"); err != nil {
		t.Fatalf("rebinding the same cluster: %v", err)
	}
	if err := bindDataDir(dir, "west"); !errors.Is(err, ErrForeignDataDir) {
		t.Fatalf("got %v, want ErrForeignDataDir", err)
	}
	if err := os.WriteFile(filepath.Join(dir, clusterFileName), []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := bindDataDir(dir, "east"); err == nil {
		t.Fatal("a corrupt cluster.json was accepted")
	}
}

func TestOptionsValidation(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	o.BrokerAddr = "0.0.0.0:6650"
	o.AdvertisedAddress = "broker.example"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--insecure-allow-plaintext") {
		t.Errorf("non-loopback without plaintext flag: %v", err)
	}
	o.InsecureAllowPlaintext = true
	if err := o.Validate(); err != nil {
		t.Errorf("non-loopback with plaintext flag: %v", err)
	}
	o.AdvertisedAddress = ""
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--advertised-address") {
		t.Errorf("wildcard listener without advertised address: %v", err)
	}
}

func TestReadinessFollowsConfigurationStoreReachability(t *testing.T) {
	etcd := etcdtest.Start(t)
	proxy, err := etcdtest.NewProxy(etcd.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	o := testOptions(t, t.TempDir())
	o.ConfigStore = "etcd://" + proxy.Addr() + "/meridian-node-test"
	n := startNode(t, o)
	ready := func() int {
		code, _ := httpGet(t, n.WebURL()+"/admin/v2/brokers/ready")
		return code
	}
	if code := ready(); code != http.StatusOK {
		t.Fatalf("ready with etcd up: %d", code)
	}
	proxy.Cut()
	waitForCode(t, ready, http.StatusServiceUnavailable)
	if err := proxy.Resume(); err != nil {
		t.Fatal(err)
	}
	waitForCode(t, ready, http.StatusOK)
}

func waitForCode(t *testing.T, get func() int, want int) {
	t.Helper()
	poll.UntilNil(t, 20*time.Second, fmt.Sprintf("status %d", want), func() error {
		if got := get(); got != want {
			return fmt.Errorf("status %d", got)
		}
		return nil
	})
}

func TestAdminTopicOperationsOnTheBroker(t *testing.T) {
	n := startNode(t, testOptions(t, t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(client.Options{ServiceURL: n.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: "admin-ops"})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().UnixMilli()
	for i := 0; i < 3; i++ {
		if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	base := n.WebURL() + "/admin/v2/persistent/public/default/admin-ops"
	// Peek on a subscription that was never created reads from the first entry.
	if code, body := httpGet(t, base+"/subscription/never-created/position/1"); code != http.StatusOK || body != "m0" {
		t.Errorf("peek: %d %q", code, body)
	}
	if code, body := httpGet(t, base+"/subscription/never-created/position/3"); code != http.StatusOK || body != "m2" {
		t.Errorf("peek 3: %d %q", code, body)
	}
	if code, _ := httpGet(t, base+"/subscription/never-created/position/4"); code != http.StatusNotFound {
		t.Errorf("peek past the end: %d, want 404", code)
	}
	// Message id by timestamp: the first message published at or after the time.
	if code, body := httpGet(t, fmt.Sprintf("%s/messageid/%d", base, before)); code != http.StatusOK || !strings.Contains(body, `"entryId":0`) {
		t.Errorf("messageid by time: %d %s", code, body)
	}
	if code, body := httpGet(t, base+"/stats"); code != http.StatusOK || !strings.Contains(body, `"publishers"`) {
		t.Errorf("stats: %d %s", code, body)
	}
}
