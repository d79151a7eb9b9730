package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/localstore"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

type env struct {
	t      testing.TB
	store  metadata.Store
	cat    *catalog.Catalog
	topics *fakeTopics
	h      *admin.Handler
	srv    *httptest.Server
	client *adminapi.Client
}

// stores runs fn against a memstore and a bbolt localstore.
func stores(t *testing.T, fn func(t *testing.T, s metadata.Store)) {
	t.Run("memstore", func(t *testing.T) {
		s := memstore.New()
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
	t.Run("localstore", func(t *testing.T) {
		s, err := localstore.Open(filepath.Join(t.TempDir(), "meta.db"), localstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(t, s)
	})
}

func newEnv(t testing.TB, s metadata.Store) *env {
	t.Helper()
	return newEnvWith(t, s, nil)
}

// newEnvWith is newEnv with the handler's configuration changed by configure first.
func newEnvWith(t testing.TB, s metadata.Store, configure func(*admin.Config)) *env {
	t.Helper()
	ctx := context.Background()
	cat, err := catalog.New(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	if err := cat.EnsureCluster(ctx, "standalone", adminapi.ClusterData{ServiceURL: "http://127.0.0.1:8080", BrokerServiceURL: "pulsar://127.0.0.1:6650"}); err != nil {
		t.Fatal(err)
	}
	if err := cat.EnsureCluster(ctx, "west", adminapi.ClusterData{ServiceURL: "http://127.0.0.2:8080", BrokerServiceURL: "pulsar://127.0.0.2:6650"}); err != nil {
		t.Fatal(err)
	}
	if err := cat.EnsureTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"standalone", "west"}}); err != nil {
		t.Fatal(err)
	}
	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{"standalone"}
	if err := cat.EnsureNamespace(ctx, "public/default", p); err != nil {
		t.Fatal(err)
	}
	topics := newFakeTopics()
	cfg := admin.Config{Cluster: "standalone", Catalog: cat, Topics: topics, Registry: prometheus.NewRegistry(), MaxBodyBytes: 64 << 10}
	if configure != nil {
		configure(&cfg)
	}
	h, err := admin.NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client, err := adminapi.NewClient(srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, store: s, cat: cat, topics: topics, h: h, srv: srv, client: client}
}

// call sends a raw request and returns status and body.
func (e *env) call(method, path, body string, hdr ...string) (int, string, http.Header) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// expect checks status and, if reason is non-empty, the {"reason"} of an error answer (substring).
func (e *env) expect(method, path, body string, status int, reason string) string {
	e.t.Helper()
	got, b, _ := e.call(method, path, body)
	if got != status {
		e.t.Fatalf("%s %s: status %d, want %d (body %s)", method, path, got, status, b)
	}
	if reason != "" && status < 300 {
		if !strings.Contains(b, reason) {
			e.t.Fatalf("%s %s: body %q, want it to contain %q", method, path, b, reason)
		}
	} else if reason != "" {
		var r struct{ Reason string }
		if err := json.Unmarshal([]byte(b), &r); err != nil || !strings.Contains(r.Reason, reason) {
			e.t.Fatalf("%s %s: reason %q, want it to contain %q", method, path, b, reason)
		}
	}
	return b
}

func TestClustersAndTenants(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		e := newEnv(t, s)
		e.expect("GET", "/admin/v2/clusters", "", 200, "")
		e.expect("PUT", "/admin/v2/clusters/east", `{"serviceUrl":"http://e:8080","brokerServiceUrl":"pulsar://e:6650","peerClusterNames":null,"authenticationPlugin":"","authenticationParameters":"","brokerClientTrustCertsFilePath":"","brokerClientTlsEnabled":false,"serviceUrlTls":"","brokerServiceUrlTls":""}`, 204, "")
		e.expect("PUT", "/admin/v2/clusters/east", `{}`, 409, "Cluster already exists")
		// Field names Pulsar's newer versions may send are ignored, as Pulsar's JSON mapper does.
		e.expect("PUT", "/admin/v2/clusters/newer", `{"serviceUrl":"http://n:8080","fieldOfANewerVersion":{"x":1}}`, 204, "")
		e.expect("GET", "/admin/v2/clusters/newer", "", 200, `"serviceUrl":"http://n:8080"`)
		e.expect("PUT", "/admin/v2/clusters/bad", `{"serviceUrl":`, 400, "invalid JSON")
		e.expect("GET", "/admin/v2/clusters/nope", "", 404, "Cluster does not exist")
		e.expect("POST", "/admin/v2/clusters/nope", `{}`, 404, "Cluster does not exist")
		e.expect("POST", "/admin/v2/clusters/east", `{"serviceUrl":"http://e2:8080"}`, 204, "")
		got, err := e.client.GetCluster(context.Background(), "east")
		if err != nil || got.ServiceURL != "http://e2:8080" {
			t.Fatalf("cluster = %+v, %v", got, err)
		}
		// 413 for a huge body, and nothing written.
		big := `{"serviceUrl":"http://x:1","authenticationParameters":"` + strings.Repeat("a", 100<<10) + `"}`
		e.expect("PUT", "/admin/v2/clusters/big", big, 413, "larger than")
		e.expect("GET", "/admin/v2/clusters/big", "", 404, "")

		e.expect("PUT", "/admin/v2/tenants/acme", `{"adminRoles":["ops"],"allowedClusters":["east"]}`, 204, "")
		e.expect("PUT", "/admin/v2/tenants/acme", `{"allowedClusters":["east"]}`, 409, "Tenant already exists")
		e.expect("PUT", "/admin/v2/tenants/t2", `{"allowedClusters":["mars"]}`, 412, "Clusters do not exist")
		e.expect("PUT", "/admin/v2/tenants/t2", `{"allowedClusters":[]}`, 412, "Clusters can not be empty")
		e.expect("PUT", "/admin/v2/tenants/bad%20name", `{"allowedClusters":["east"]}`, 412, "Tenant name is not valid")
		e.expect("DELETE", "/admin/v2/clusters/east", "", 412, "tenant acme")
		ti, err := e.client.GetTenant(context.Background(), "acme")
		if err != nil || !slices.Equal(ti.AllowedClusters, []string{"east"}) || !slices.Equal(ti.AdminRoles, []string{"ops"}) {
			t.Fatalf("tenant = %+v %v", ti, err)
		}
		e.expect("DELETE", "/admin/v2/tenants/public", "", 409, "The tenant still has active namespaces")
		e.expect("DELETE", "/admin/v2/tenants/public%2Fdefault", "", 412, "Tenant name is not valid")
		e.expect("POST", "/admin/v2/tenants/public%2Fdefault", `{"allowedClusters":["standalone"]}`, 412, "Tenant name is not valid")
		e.expect("DELETE", "/admin/v2/clusters/west%2Fx", "", 412, "Cluster name is not valid")
		e.expect("GET", "/admin/v2/namespaces/public/default", "", 200, "")
		e.expect("DELETE", "/admin/v2/tenants/acme", "", 204, "")
		e.expect("DELETE", "/admin/v2/tenants/acme", "", 404, "Tenant does not exist")
		e.expect("DELETE", "/admin/v2/clusters/east", "", 204, "")
		e.expect("GET", "/admin/v2/nope", "", 404, "Not found")
		e.expect("PATCH", "/admin/v2/clusters/east", "", 405, "not allowed")
		e.expect("DELETE", "/admin/v2/clusters", "", 405, "allowed: GET")
	})
}

// pulsaradminPolicies is what pulsaradmin's CreateNsWithPolices sends for NewDefaultPolicies() plus a
// replication list: every field, many null.
const pulsaradminPolicies = `{"bundles":null,"persistence":null,"retention_policies":null,"schema_validation_enforced":false,
"deduplicationEnabled":null,"deleted":false,"encryption_required":false,"message_ttl_in_seconds":null,
"max_producers_per_topic":null,"max_consumers_per_topic":null,"max_consumers_per_subscription":null,
"compaction_threshold":null,"offload_threshold":-1,"offload_deletion_lag_ms":null,"antiAffinityGroup":"",
"replication_clusters":["standalone","west"],"latency_stats_sample_rate":{},"backlog_quota_map":{},"topicDispatchRate":{},
"subscriptionDispatchRate":{},"replicatorDispatchRate":{},"publishMaxMessageRate":{},"clusterSubscribeRate":{},
"autoTopicCreationOverride":null,"schema_auto_update_compatibility_strategy":"Full","schema_compatibility_strategy":"UNDEFINED",
"auth_policies":{"namespace_auth":{},"destination_auth":{},"subscription_auth_roles":{}},"subscription_auth_mode":"None",
"is_allow_auto_update_schema":null}`

func TestNamespacesAndPolicies(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		e := newEnv(t, s)
		ctx := context.Background()
		// No body: replication_clusters = [this cluster].
		e.expect("PUT", "/admin/v2/namespaces/public/ns1", "", 204, "")
		p, err := e.client.GetPolicies(ctx, "public/ns1")
		if err != nil || !slices.Equal(p.ReplicationClusters, []string{"standalone"}) || p.Bundles == nil || p.Bundles.NumBundles != 4 || len(p.Bundles.Boundaries) != 5 {
			t.Fatalf("policies = %+v %v", p, err)
		}
		e.expect("PUT", "/admin/v2/namespaces/public/ns1", "", 409, "Namespace already exists")
		e.expect("PUT", "/admin/v2/namespaces/nope/ns1", "", 404, "Tenant does not exist")
		// The full document pulsaradmin sends is accepted.
		e.expect("PUT", "/admin/v2/namespaces/public/ns2", pulsaradminPolicies, 204, "")
		got, _ := e.client.GetReplicationClusters(ctx, "public/ns2")
		if !slices.Equal(got, []string{"standalone", "west"}) {
			t.Fatalf("replication = %v", got)
		}
		// The client test suite's creation body.
		e.expect("PUT", "/admin/v2/namespaces/public/ns3", `{"auth_policies":{"namespace_auth":{"anonymous":["produce","consume"]}},"replication_clusters":["standalone"]}`, 204, "")
		// BundlesData as body (CreateNsWithBundlesData).
		e.expect("PUT", "/admin/v2/namespaces/public/ns4", `{"boundaries":["0x00000000","0xffffffff"],"numBundles":1}`, 204, "")
		// Unknown field names are ignored (as Pulsar does); the known ones are applied.
		e.expect("PUT", "/admin/v2/namespaces/public/ns5", `{"replication_clusters":["standalone"],"message_ttl_in_seconds":7,"fieldOfANewerVersion":1}`, 204, "")
		e.expect("GET", "/admin/v2/namespaces/public/ns5", "", 200, `"message_ttl_in_seconds":7`)
		// Malformed JSON is still refused and creates nothing.
		e.expect("PUT", "/admin/v2/namespaces/public/ns6", `{"replication_clusters":["standalone"],`, 400, "invalid JSON")
		e.expect("GET", "/admin/v2/namespaces/public/ns6", "", 404, "Namespace does not exist")
		list, _ := e.client.ListNamespaces(ctx, "public")
		if !slices.Equal(list, []string{"public/default", "public/ns1", "public/ns2", "public/ns3", "public/ns4", "public/ns5"}) {
			t.Fatalf("namespaces = %v", list)
		}

		ns := "/admin/v2/namespaces/public/default"
		// replication: unknown and not-allowed clusters are refused with Pulsar's reasons; nothing changes.
		e.expect("POST", ns+"/replication", `["standalone","mars"]`, 403, "Invalid cluster id: mars")
		e.expect("PUT", "/admin/v2/clusters/south", `{"serviceUrl":"http://s:8080"}`, 204, "")
		e.expect("POST", ns+"/replication", `["south"]`, 403, "Cluster [south] is not in the list of allowed clusters list for tenant [public]")
		e.expect("POST", ns+"/replication", `["global"]`, 412, "Cannot specify global")
		e.expect("POST", ns+"/replication", `[]`, 412, "ClusterIds should not be null or empty")
		if b := e.expect("GET", ns+"/replication", "", 200, ""); b != `["standalone"]` {
			t.Fatalf("replication after refusals = %s", b)
		}
		e.expect("POST", ns+"/replication", `["standalone","west"]`, 204, "")
		e.expect("POST", "/admin/v2/namespaces/public/nope/replication", `["standalone"]`, 404, "Namespace does not exist")

		// messageTTL triple: unset reads as 204 with an empty body.
		if st, b, _ := e.call("GET", ns+"/messageTTL", ""); st != 204 || b != "" {
			t.Fatalf("unset TTL = %d %q", st, b)
		}
		e.expect("POST", ns+"/messageTTL", `3600`, 204, "")
		if b := e.expect("GET", ns+"/messageTTL", "", 200, ""); b != "3600" {
			t.Fatalf("ttl = %s", b)
		}
		e.expect("POST", ns+"/messageTTL", `-1`, 412, "Invalid value for message TTL")
		e.expect("POST", ns+"/messageTTL", `"abc"`, 400, "")
		e.expect("DELETE", ns+"/messageTTL", "", 204, "")
		e.expect("GET", ns+"/messageTTL", "", 204, "")

		e.expect("POST", ns+"/subscriptionExpirationTime", `-60`, 412, "Invalid value for subscription expiration time")
		e.expect("POST", ns+"/maxTopicsPerNamespace", `-1`, 412, "maxTopicsPerNamespace must be 0 or more")
		e.expect("PUT", ns+"/offloadThresholdInSeconds", `-60`, 412, "Invalid value for offloadThresholdInSecond")
		if b := e.expect("GET", ns+"/offloadThreshold", "", 200, ""); b != "-1" {
			t.Fatalf("offloadThreshold = %s", b)
		}

		// autoTopicCreation with Pulsar's detail texts.
		e.expect("POST", ns+"/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"partitioned"}`, 412,
			"Invalid configuration for autoTopicCreationOverride. the detail is [defaultNumPartitions] cannot be null when the type is partitioned.")
		e.expect("POST", ns+"/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"non-partitioned","defaultNumPartitions":3}`, 412,
			"[defaultNumPartitions] is not allowed to be set when the type is non-partition.")
		e.expect("POST", ns+"/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":3}`, 204, "")
		e.expect("POST", "/admin/v2/namespaces/public/nonexist/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"non-partitioned"}`, 404, "Namespace does not exist")
		e.expect("POST", "/admin/v2/namespaces/non-exist/default/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"non-partitioned"}`, 404, "Tenant does not exist")

		// retention, backlog quota (the suite's string "limit"), dedup, dispatch rates.
		e.expect("POST", ns+"/retention", `{"retentionTimeInMinutes":60,"retentionSizeInMB":1024}`, 204, "")
		e.expect("POST", ns+"/backlogQuota", `{"limit":"1048576","policy":"producer_request_hold"}`, 204, "")
		e.expect("POST", ns+"/backlogQuota?backlogQuotaType=message_age", `{"limitTime":60,"limitSize":0,"policy":"producer_exception"}`, 204, "")
		e.expect("POST", ns+"/backlogQuota", `{"limitSize":1,"policy":"drop_everything"}`, 412, "Invalid backlog quota policy")
		b := e.expect("GET", ns+"/backlogQuotaMap", "", 200, "")
		var quotas map[string]adminapi.BacklogQuota
		_ = json.Unmarshal([]byte(b), &quotas)
		if quotas["destination_storage"].LimitSize != 1048576 || quotas["message_age"].LimitTime != 60 {
			t.Fatalf("quotas = %s", b)
		}
		e.expect("POST", ns+"/deduplication", `true`, 204, "")
		e.expect("POST", ns+"/replicatorDispatchRate", `{"dispatchThrottlingRateInMsg":100,"dispatchThrottlingRateInByte":-1,"ratePeriodInSecond":1}`, 204, "")
		e.expect("PUT", ns+"/schemaCompatibilityStrategy", `"FULL"`, 204, "")
		e.expect("PUT", ns+"/schemaCompatibilityStrategy", `"NOPE"`, 412, "Invalid schema compatibility strategy")
		e.expect("POST", ns+"/encryptionRequired", `"true"`, 204, "")
		e.expect("PUT", ns+"/properties", `{"key-1":"value-1"}`, 204, "")
		e.expect("POST", ns+"/permissions/subscription/sub", `["user"]`, 204, "")
		e.expect("DELETE", ns+"/permissions/sub/user", "", 204, "")
		e.expect("POST", ns+"/persistence/bookieAffinity", `{"bookkeeperAffinityGroupPrimary":"primary-group","bookkeeperAffinityGroupSecondary":"secondary-group"}`, 204, "")
		pol, _ := e.client.GetPolicies(ctx, "public/default")
		if pol.RetentionPolicies == nil || pol.RetentionPolicies.RetentionSizeInMB != 1024 || pol.DeduplicationEnabled == nil || !*pol.DeduplicationEnabled ||
			pol.ReplicatorDispatchRate["standalone"].DispatchThrottlingRateInMsg != 100 || pol.SchemaCompatibilityStrategy != "FULL" ||
			!pol.EncryptionRequired || pol.Properties["key-1"] != "value-1" || pol.BookieAffinityGroup == nil {
			t.Fatalf("policies = %+v", pol)
		}
		if b := e.expect("GET", ns+"/schemaCompatibilityStrategy", "", 200, ""); b != `"FULL"` {
			t.Fatalf("strategy = %s", b)
		}

		// Delete: non-empty refused, then force.
		e.expect("PUT", "/admin/v2/persistent/public/ns1/t1", "", 204, "")
		e.expect("DELETE", "/admin/v2/namespaces/public/ns1", "", 409, "Cannot delete non empty namespace")
		e.expect("DELETE", "/admin/v2/namespaces/public/ns1?force=true", "", 204, "")
		e.expect("GET", "/admin/v2/namespaces/public/ns1", "", 404, "Namespace does not exist")
	})
}

func TestTopics(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		e := newEnv(t, s)
		ctx := context.Background()
		base := "/admin/v2/persistent/public/default"
		// Bare integer body (the client test suite) and the pulsaradmin object body.
		e.expect("PUT", base+"/p1/partitions", `3`, 204, "")
		st, _, _ := e.call("PUT", base+"/p2/partitions", `{"partitions":2,"properties":{"a":"b"}}`, "Content-Type", "application/vnd.partitioned-topic-metadata+json")
		if st != 204 {
			t.Fatalf("create with object: %d", st)
		}
		e.expect("PUT", base+"/p1/partitions", `3`, 409, "This topic already exists")
		e.expect("PUT", base+"/p3/partitions", `0`, 412, "Number of partitions")
		e.expect("PUT", "/admin/v2/persistent/public/nope/p1/partitions", `3`, 404, "Namespace does not exist")
		if b := e.expect("GET", base+"/p1/partitions", "", 200, ""); b != `{"partitions":3}` {
			t.Fatalf("metadata = %s", b)
		}
		if b := e.expect("GET", base+"/unknown/partitions", "", 200, ""); b != `{"partitions":0}` {
			t.Fatalf("metadata = %s", b)
		}
		e.expect("POST", base+"/p1/partitions", `5`, 204, "")
		e.expect("POST", base+"/p1/partitions", `2`, 412, "only be increased")
		topics, _ := e.client.ListNamespaceTopics(ctx, "public/default")
		if len(topics) != 7 || topics[0] != "persistent://public/default/p1-partition-0" {
			t.Fatalf("topics = %v", topics)
		}
		parts, _ := e.client.ListPartitionedTopics(ctx, "public/default")
		if !slices.Equal(parts, []string{"persistent://public/default/p1", "persistent://public/default/p2"}) {
			t.Fatalf("partitioned = %v", parts)
		}
		props := map[string]string{}
		b := e.expect("GET", base+"/p2/properties", "", 200, "")
		_ = json.Unmarshal([]byte(b), &props)
		if props["a"] != "b" {
			t.Fatalf("properties = %s", b)
		}

		// Non-partitioned topic with properties; duplicates 409.
		e.expect("PUT", base+"/np", `{"key1":"value1"}`, 204, "")
		e.expect("PUT", base+"/np", ``, 409, "This topic already exists")
		e.expect("PUT", base+"/p1", ``, 409, "This topic already exists")
		e.expect("PUT", base+"/np/properties", `{"key2":"v2"}`, 204, "")
		e.expect("DELETE", base+"/np/properties?key=key1", "", 204, "")
		if b := e.expect("GET", base+"/np/properties", "", 200, ""); b != `{"key2":"v2"}` {
			t.Fatalf("properties = %s", b)
		}

		// Stats, internal stats, last id, aggregate over partitions.
		e.topics.addEntries("persistent://public/default/np", 5)
		stats, err := e.client.TopicStats(ctx, "persistent://public/default/np")
		if err != nil || stats.MsgInCounter != 5 || stats.Replication["west"].LastError == "" {
			t.Fatalf("stats = %+v %v", stats, err)
		}
		e.expect("PUT", base+"/np/subscription/s0", "", 204, "")
		e.expect("GET", base+"/np/stats", "", 200, `"consumersAfterMarkDeletePosition":{}`)
		e.expect("GET", base+"/np/stats", "", 200, `"subscriptionProperties":{}`)
		e.expect("DELETE", base+"/np/subscription/s0", "", 204, "")
		e.expect("GET", base+"/nope/stats", "", 404, "Topic not found")
		e.topics.addEntries("persistent://public/default/p1-partition-0", 2)
		e.topics.addEntries("persistent://public/default/p1-partition-4", 3)
		pst, err := e.client.PartitionedTopicStats(ctx, "persistent://public/default/p1", true)
		if err != nil || pst.MsgInCounter != 5 || len(pst.Partitions) != 5 || pst.Metadata.Partitions != 5 || pst.TopicCreationTimeStamp == 0 ||
			pst.Replication["west"].ReplicationBacklog != 15 {
			t.Fatalf("partitioned stats = %+v %v", pst, err)
		}
		id, err := e.client.LastMessageID(ctx, "persistent://public/default/np")
		if err != nil || id.EntryID != 4 {
			t.Fatalf("last id = %+v %v", id, err)
		}
		if _, err := e.client.InternalStats(ctx, "persistent://public/default/np"); err != nil {
			t.Fatal(err)
		}
		e.expect("GET", base+"/np/messageid/1700000000003", "", 200, `"entryId":3`)
		e.expect("PUT", base+"/p1/unload", "", 204, "")
		e.expect("POST", base+"/np/terminate", "", 200, `"entryId":4`)
		e.expect("POST", base+"/p1/terminate", "", 405, "partitioned")

		// Subscriptions.
		e.expect("PUT", base+"/np/subscription/s1", `{"ledgerId":-1,"entryId":-1,"partitionIndex":-1}`, 204, "")
		e.expect("PUT", base+"/np/subscription/s1", ``, 409, "Subscription already exists")
		subs, _ := e.client.ListSubscriptions(ctx, "persistent://public/default/np")
		if !slices.Equal(subs, []string{"s1"}) {
			t.Fatalf("subs = %v", subs)
		}
		m, err := e.client.PeekMessage(ctx, "persistent://public/default/np", "s1", 2)
		if err != nil || string(m.Payload) != "message-2" || m.Properties["k"] != "v" || m.PublishTime != 1700000000000 || m.ID.EntryID != 1 {
			t.Fatalf("peek = %+v %v", m, err)
		}
		_, _, hdr := e.call("GET", base+"/np/subscription/s1/position/1", "")
		if hdr.Get("X-Pulsar-Property-K") != "v" || hdr.Get("X-Pulsar-Message-Id") != "1:0:-1" {
			t.Fatalf("headers = %v", hdr)
		}
		e.expect("GET", base+"/np/subscription/s1/position/9", "", 404, "Message not found")
		e.expect("GET", base+"/np/subscription/s1/position/99999999", "", 412, "peek limit")
		e.expect("POST", base+"/np/subscription/s1/skip/2", "", 204, "")
		e.expect("POST", base+"/np/subscription/s1/resetcursor", `{"ledgerId":1,"entryId":1,"partitionIndex":-1}`, 204, "")
		e.expect("POST", base+"/np/subscription/s1/resetcursor/1700000000000", "", 204, "")
		e.expect("POST", base+"/np/subscription/s1/expireMessages/10", "", 204, "")
		e.expect("POST", base+"/np/subscription/s1/skip_all", "", 204, "")
		e.expect("POST", base+"/np/all_subscription/expireMessages/10", "", 204, "")
		e.expect("POST", base+"/np/subscription/nope/skip_all", "", 404, "Subscription not found")
		e.expect("GET", base+"/np/ledger/1/entry/0", "", 200, "")
		e.expect("PUT", base+"/p1/subscription/ps", ``, 204, "")
		subs, _ = e.client.ListSubscriptions(ctx, "persistent://public/default/p1")
		if !slices.Equal(subs, []string{"ps"}) {
			t.Fatalf("partitioned subs = %v", subs)
		}
		e.expect("DELETE", base+"/p1/subscription/ps", "", 204, "")
		e.expect("DELETE", base+"/np/subscription/s1", "", 204, "")

		// Lookup.
		lk, err := e.client.Lookup(ctx, "persistent://public/default/np")
		if err != nil || lk.BrokerURL != "pulsar://127.0.0.1:6650" || lk.HTTPURL != "http://127.0.0.1:8080" {
			t.Fatalf("lookup = %+v %v", lk, err)
		}

		// Delete.
		e.expect("DELETE", base+"/p1?force=true", "", 409, "partitioned topic")
		e.expect("DELETE", base+"/p1/partitions?force=true", "", 204, "")
		e.expect("DELETE", base+"/p1/partitions?force=true", "", 404, "")
		e.expect("DELETE", base+"/np?force=true", "", 204, "")
		e.expect("DELETE", base+"/np?force=true", "", 404, "Topic not found")
		if _, found := e.cat.TopicPolicies("persistent://public/default/np"); found {
			t.Fatal("topic policies of a deleted topic are left over")
		}
	})
}

func TestTopicPolicies(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		e := newEnv(t, s)
		base := "/admin/v2/persistent/public/default/tp"
		e.expect("PUT", base+"/partitions", `4`, 204, "")
		e.expect("GET", base+"/messageTTL", "", 204, "")
		e.expect("POST", base+"/messageTTL?messageTTL=600", "", 204, "")
		if b := e.expect("GET", base+"/messageTTL", "", 200, ""); b != "600" {
			t.Fatalf("ttl = %s", b)
		}
		e.expect("DELETE", base+"/messageTTL?messageTTL=0", "", 204, "")
		e.expect("GET", base+"/messageTTL", "", 204, "")
		// applied=true falls back to the namespace.
		e.expect("POST", "/admin/v2/namespaces/public/default/messageTTL", `77`, 204, "")
		if b := e.expect("GET", base+"/messageTTL?applied=true", "", 200, ""); b != "77" {
			t.Fatalf("applied ttl = %s", b)
		}
		e.expect("GET", base+"/retention", "", 204, "")
		e.expect("POST", base+"/retention", `{"retentionTimeInMinutes":1440,"retentionSizeInMB":20480}`, 204, "")
		e.expect("GET", base+"/retention", "", 200, `"retentionSizeInMB":20480`)
		e.expect("POST", base+"/replication", `["standalone"]`, 204, "")
		e.expect("POST", base+"/replication", `["mars"]`, 403, "Invalid cluster id: mars")
		if b := e.expect("GET", base+"/replication", "", 200, ""); b != `["standalone"]` {
			t.Fatalf("replication = %s", b)
		}
		got, _ := e.cat.ReplicationClusters("persistent://public/default/tp-partition-2")
		if !slices.Equal(got, []string{"standalone"}) {
			t.Fatalf("effective = %v", got)
		}
		e.expect("DELETE", base+"/replication", "", 204, "")
		e.expect("GET", base+"/replication", "", 204, "")
		e.expect("POST", base+"/delayedDelivery", `{"tickTime":1000,"active":true,"maxDelayInMillis":60000}`, 204, "")
		e.expect("GET", base+"/delayedDelivery", "", 200, `"maxDeliveryDelayInMillis":60000`)
		e.expect("POST", base+"/dispatchRate", `{"dispatchThrottlingRateInMsg":10,"dispatchThrottlingRateInByte":0,"ratePeriodInSecond":1,"relativeToPublishRate":false}`, 204, "")
		e.expect("POST", base+"/publishRate", `{"publishThrottlingRateInMsg":10,"publishThrottlingRateInByte":0}`, 204, "")
		e.expect("PUT", base+"/schemaCompatibilityStrategy", `"BACKWARD"`, 204, "")
		e.expect("POST", base+"/maxProducers", `-3`, 412, "")
		e.expect("POST", base+"/backlogQuota", `{"limitSize":100,"limitTime":-1,"policy":"producer_exception"}`, 204, "")
		e.expect("GET", base+"/backlogQuotaMap", "", 200, `"destination_storage"`)
		e.expect("POST", base+"/offloadPolicies", `{"managedLedgerOffloadDriver":"aws-s3","gcsManagedLedgerOffloadBucket":"b"}`, 204, "")
		e.expect("GET", base+"/offloadPolicies", "", 200, `"gcsManagedLedgerOffloadBucket":"b"`)
		e.expect("POST", "/admin/v2/persistent/public/default/missing/maxProducers", `3`, 404, "Topic not found")
		e.expect("POST", base+"/maxProducers", `{"x":1}`, 400, "")
	})
}

// TestPolicyChangeReachesWatchers: a policy written through the REST API reaches another catalog
// on the same store (a second broker, or the broker's own subscription) in well under a second.
func TestPolicyChangeReachesWatchers(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		e := newEnv(t, s)
		other, err := catalog.New(context.Background(), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		events, stop := other.Subscribe()
		defer stop()
		start := time.Now()
		e.expect("POST", "/admin/v2/namespaces/public/default/replication", `["standalone","west"]`, 204, "")
		timeout := time.After(5 * time.Second)
		for {
			select {
			case ev := <-events:
				if ev.Kind != catalog.EventNamespace || ev.Name != "public/default" {
					continue
				}
				if d := time.Since(start); d > time.Second {
					t.Fatalf("took %s", d)
				}
				got, _ := other.ReplicationClusters("persistent://public/default/x")
				if !slices.Equal(got, []string{"standalone", "west"}) {
					t.Fatalf("effective = %v", got)
				}
				return
			case <-timeout:
				t.Fatal("no event")
			}
		}
	})
}

func TestBrokersLookupMetrics(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	e.expect("GET", "/admin/v2/brokers/ready", "", 200, "")
	e.expect("GET", "/admin/v2/brokers/health", "", 200, "")
	if b := e.expect("GET", "/admin/v2/brokers", "", 200, ""); b != `["127.0.0.1:8080"]` {
		t.Fatalf("brokers = %s", b)
	}
	e.expect("GET", "/admin/v2/brokers/leaderBroker", "", 200, `"serviceUrl":"http://127.0.0.1:8080"`)
	e.expect("POST", "/admin/v2/brokers/configuration/allowAutoSubscriptionCreation/"+url.PathEscape(`{"key/123":"https://example.com/"}`), "", 200, "")
	e.expect("GET", "/admin/v2/brokers/configuration/values", "", 200, `"allowAutoSubscriptionCreation":"{\"key/123\":\"https://example.com/\"}"`)
	e.expect("GET", "/admin/v2/brokers/configuration", "", 200, "allowAutoSubscriptionCreation")
	e.expect("DELETE", "/admin/v2/brokers/configuration/allowAutoSubscriptionCreation", "", 204, "")
	e.expect("DELETE", "/admin/v2/brokers/configuration/allowAutoSubscriptionCreation", "", 404, "not set")
	e.expect("PUT", "/admin/v2/persistent/public/default/m", "", 204, "")
	e.topics.addEntries("persistent://public/default/m", 1)
	_, b, _ := e.call("GET", "/metrics", "")
	for _, want := range []string{
		`pulsar_rate_in{cluster="standalone",namespace="public/default",topic="persistent://public/default/m"} 10`,
		`pulsar_replication_backlog{cluster="standalone",namespace="public/default",remote_cluster="west",topic="persistent://public/default/m"} 3`,
		`pulsar_replication_connected_count{cluster="standalone",namespace="public/default",remote_cluster="west",topic="persistent://public/default/m"} 0`,
		`meridian_replication_error{cluster="standalone",namespace="public/default",remote_cluster="west",topic="persistent://public/default/m"} 1`,
		`meridian_configuration_store_following{cluster="standalone"} 1`,
	} {
		if !strings.Contains(b, want) {
			t.Fatalf("metrics lack %s:\n%s", want, b)
		}
	}
	lk := e.expect("GET", "/lookup/v2/topic/persistent/public/default/m", "", 200, "")
	if !bytes.Contains([]byte(lk), []byte(`"brokerUrl":"pulsar://127.0.0.1:6650"`)) {
		t.Fatalf("lookup = %s", lk)
	}
	e.expect("GET", "/lookup/v2/topic/persistent/public/nope/m", "", 404, "Namespace does not exist")
}

func TestNotReady(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	cat, err := catalog.New(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	h, err := admin.NewHandler(admin.Config{Cluster: "c", Catalog: cat, Ready: func(context.Context) error { return context.DeadlineExceeded }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/admin/v2/brokers/ready", nil))
	if rec.Code != 503 {
		t.Fatalf("ready = %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/admin/v2/persistent/public/default/x/stats", nil))
	if rec.Code != 404 { // namespace missing comes first
		t.Fatalf("stats = %d %s", rec.Code, rec.Body)
	}
}

// Topic local names may hold characters that need escaping in paths and in store keys.
func TestOddTopicNames(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	ctx := context.Background()
	for _, local := range []string{"a?b#c", "100%", "x:y=z", "é-ü", "dots.and_under"} {
		topic := "persistent://public/default/" + local
		if err := e.client.CreateTopic(ctx, topic, 2, map[string]string{"k": "v"}); err != nil {
			t.Fatalf("%q: %v", local, err)
		}
		m, err := e.client.GetPartitionedMetadata(ctx, topic)
		if err != nil || m.Partitions != 2 {
			t.Fatalf("%q: metadata %+v %v", local, m, err)
		}
		if err := e.client.SetTopicPolicy(ctx, "POST", topic, "maxProducers", nil, 3); err != nil {
			t.Fatalf("%q: policy %v", local, err)
		}
		var v int
		if set, err := e.client.GetTopicPolicy(ctx, topic, "maxProducers", nil, &v); err != nil || !set || v != 3 {
			t.Fatalf("%q: policy read %d %v %v", local, v, set, err)
		}
		if _, ok := e.cat.PartitionedTopic(topic); !ok {
			t.Fatalf("%q: not in the catalog", local)
		}
		if err := e.client.DeleteTopic(ctx, topic, true, true); err != nil {
			t.Fatalf("%q: delete %v", local, err)
		}
	}
	e.expect("PUT", "/admin/v2/persistent/public/default/a%2Fb/partitions", "2", 412, "Topic name is not valid")
	// White space in a topic name is a name error, not a topic that is not found.
	e.expect("PUT", "/admin/v2/persistent/public/default/a%20b/partitions", "2", 412, "Topic name is not valid")
	e.expect("GET", "/admin/v2/persistent/public/default/a%20b/stats", "", 412, "Topic name is not valid")
}

// failingTopics refuses to create the n-th topic, to check that partitioned creation rolls back.
type failingTopics struct {
	*fakeTopics
	mu     sync.Mutex
	calls  int
	failAt int
}

func (f *failingTopics) CreateTopic(ctx context.Context, topic string, props map[string]string) error {
	f.mu.Lock()
	f.calls++
	fail := f.calls == f.failAt
	f.mu.Unlock()
	if fail {
		return errors.New("disk full")
	}
	return f.fakeTopics.CreateTopic(ctx, topic, props)
}

func TestPartitionedCreationRollsBack(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	ft := &failingTopics{fakeTopics: e.topics, failAt: 3}
	h, err := admin.NewHandler(admin.Config{Cluster: "standalone", Catalog: e.cat, Topics: ft})
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		return rec.Code
	}
	base := "/admin/v2/persistent/public/default/rb"
	if code := call("PUT", base+"/partitions", "4"); code != 500 {
		t.Fatalf("create = %d", code)
	}
	if _, found := e.cat.PartitionedTopic("persistent://public/default/rb"); found {
		t.Fatal("metadata left after a failed creation")
	}
	if list, _ := e.topics.ListTopics(context.Background(), "public/default"); len(list) != 0 {
		t.Fatalf("partitions left after a failed creation: %v", list)
	}
	// Growing: the count goes back when a new partition cannot be created.
	ft.failAt = 0
	if code := call("PUT", base+"/partitions", "2"); code != 204 {
		t.Fatalf("create = %d", code)
	}
	ft.mu.Lock()
	ft.failAt = ft.calls + 2
	ft.mu.Unlock()
	if code := call("POST", base+"/partitions", "5"); code != 500 {
		t.Fatalf("update = %d", code)
	}
	if m, _ := e.cat.PartitionedTopic("persistent://public/default/rb"); m.Partitions != 2 {
		t.Fatalf("partitions after a failed update = %d, want 2", m.Partitions)
	}
	if list, _ := e.topics.ListTopics(context.Background(), "public/default"); len(list) != 2 {
		t.Fatalf("topics after a failed update: %v", list)
	}
}

// A replication change runs the ReplicationApplied hook before answering, with the policy already
// visible in the catalog, for the namespace and the topic-level endpoints alike.
func TestReplicationAppliedBeforeAnswer(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	ctx := context.Background()
	cat, err := catalog.New(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	for _, c := range []string{"standalone", "west"} {
		if err := cat.EnsureCluster(ctx, c, adminapi.ClusterData{ServiceURL: "http://127.0.0.1:8080", BrokerServiceURL: "pulsar://127.0.0.1:6650"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cat.EnsureTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"standalone", "west"}}); err != nil {
		t.Fatal(err)
	}
	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{"standalone"}
	if err := cat.EnsureNamespace(ctx, "public/default", p); err != nil {
		t.Fatal(err)
	}
	topics := newFakeTopics()
	var applied []string
	h, err := admin.NewHandler(admin.Config{Cluster: "standalone", Catalog: cat, Topics: topics,
		ReplicationApplied: func(_ context.Context, ns string) error {
			clusters, _ := cat.ReplicationClusters("persistent://" + ns + "/t")
			applied = append(applied, ns+"="+strings.Join(clusters, ","))
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/admin/v2/namespaces/public/default/replication", strings.NewReader(`["standalone","west"]`)))
	if rec.Code != 204 {
		t.Fatalf("set replication: %d %s", rec.Code, rec.Body)
	}
	if len(applied) != 1 || applied[0] != "public/default=standalone,west" {
		t.Fatalf("hook calls = %q; want one call seeing the new clusters", applied)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/admin/v2/namespaces/public/default/replication", strings.NewReader(`["nowhere"]`)))
	if rec.Code < 400 || len(applied) != 1 {
		t.Fatalf("refused change: status %d, hook calls %q", rec.Code, applied)
	}
}

// A topic's replication clusters, set and removed, reach the replicators (Config.ReplicationApplied)
// before the answer, seeing the new clusters; a refused change does not call it.
func TestTopicReplicationAppliedBeforeAnswer(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	var applied []string
	var e *env
	e = newEnvWith(t, s, func(cfg *admin.Config) {
		cfg.ReplicationApplied = func(_ context.Context, ns string) error {
			clusters, _ := e.cat.ReplicationClusters("persistent://public/default/t")
			applied = append(applied, ns+"="+strings.Join(clusters, ","))
			return nil
		}
	})
	e.expect("PUT", "/admin/v2/persistent/public/default/t", "", 204, "")
	e.expect("POST", "/admin/v2/persistent/public/default/t/replication", `["standalone","west"]`, 204, "")
	e.expect("POST", "/admin/v2/persistent/public/default/t/replication", `["nowhere"]`, 403, "Invalid cluster id")
	e.expect("POST", "/admin/v2/persistent/public/default/nope/replication", `["west"]`, 404, "Topic not found")
	e.expect("DELETE", "/admin/v2/persistent/public/default/t/replication", "", 204, "")
	want := []string{"public/default=standalone,west", "public/default=standalone"}
	if !slices.Equal(applied, want) {
		t.Fatalf("hook calls = %q, want %q", applied, want)
	}
}
