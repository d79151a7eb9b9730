package admin_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// FuzzWrites sends arbitrary bodies to write endpoints: never a 5xx or a panic, and a refused write
// leaves the namespace policies exactly as they were.
func FuzzWrites(f *testing.F) {
	endpoints := []struct{ method, path string }{
		{"PUT", "/admin/v2/namespaces/public/fuzz"},
		{"POST", "/admin/v2/namespaces/public/default/replication"},
		{"POST", "/admin/v2/namespaces/public/default/retention"},
		{"POST", "/admin/v2/namespaces/public/default/backlogQuota"},
		{"POST", "/admin/v2/namespaces/public/default/autoTopicCreation"},
		{"POST", "/admin/v2/namespaces/public/default/messageTTL"},
		{"PUT", "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"},
		{"POST", "/admin/v2/namespaces/public/default/replicatorDispatchRate"},
		{"POST", "/admin/v2/namespaces/public/default/offloadPolicies"},
		{"PUT", "/admin/v2/persistent/public/default/fz/partitions"},
		{"PUT", "/admin/v2/clusters/fz"},
		{"PUT", "/admin/v2/tenants/fz"},
	}
	for i := range endpoints {
		for _, body := range []string{"", "null", "3", "-1", `"x"`, `["standalone"]`, `{}`, `{"partitions":2}`, pulsaradminPolicies,
			`{"retentionTimeInMinutes":1,"retentionSizeInMB":1}`, `{"limit":"9","policy":"producer_exception"}`, `{"allowedClusters":["standalone"]}`} {
			f.Add(uint8(i), []byte(body))
		}
	}
	s := memstore.New()
	f.Cleanup(func() { s.Close() })
	ctx := context.Background()
	cat, err := catalog.New(ctx, s, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cat.Close() })
	if err := cat.EnsureCluster(ctx, "standalone", adminapi.ClusterData{ServiceURL: "http://127.0.0.1:8080"}); err != nil {
		f.Fatal(err)
	}
	if err := cat.EnsureTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"standalone"}}); err != nil {
		f.Fatal(err)
	}
	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{"standalone"}
	if err := cat.EnsureNamespace(ctx, "public/default", p); err != nil {
		f.Fatal(err)
	}
	h, err := admin.NewHandler(admin.Config{Cluster: "standalone", Catalog: cat, Topics: newFakeTopics(), MaxBodyBytes: 16 << 10})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		ep := endpoints[int(which)%len(endpoints)]
		before, _ := cat.Namespace("public/default")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(ep.method, ep.path, strings.NewReader(string(body))))
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", ep.method, ep.path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			var r struct{ Reason string }
			if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil || r.Reason == "" {
				t.Fatalf("error answer without a reason: %d %q", rec.Code, rec.Body)
			}
			after, _ := cat.Namespace("public/default")
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("refused %s %s %q changed the policies", ep.method, ep.path, body)
			}
		}
		// Undo successful creations so the next input starts from the same state.
		switch {
		case strings.HasSuffix(ep.path, "/fuzz"):
			_ = cat.DeleteNamespace(ctx, "public/fuzz")
		case strings.HasSuffix(ep.path, "/partitions"):
			_ = cat.DeletePartitionedTopic(ctx, "persistent://public/default/fz")
		case strings.HasSuffix(ep.path, "/tenants/fz"):
			_ = cat.DeleteTenant(ctx, "fz")
		case strings.HasSuffix(ep.path, "/clusters/fz"):
			_ = cat.DeleteCluster(ctx, "fz")
		}
	})
}
