package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// nodeMountedRoutes are the table's entries for routes the node mounts beside the admin API
// (admin.Guard), not through Handler.handle.
var nodeMountedRoutes = []string{"/console/", "/console/api/"}

// TestEveryRouteHasAPermission fails for every route registered without an entry in the
// permission table, and for every entry no route uses.
func TestEveryRouteHasAPermission(t *testing.T) {
	e := newAuthzEnv(t)
	for _, p := range e.h.UnlistedRoutes() {
		key, _ := admin.RouteKey(p)
		t.Errorf("route %q is registered without an entry in routePermissions: add `%q: auth.Need...,` to internal/admin/routes_authz.go", p, key)
	}
	used := map[string]bool{}
	for _, p := range e.h.Patterns() {
		key, _ := admin.RouteKey(p)
		used[key] = true
	}
	var stale []string
	for key := range admin.PermissionTable() {
		if !used[key] && !slices.Contains(nodeMountedRoutes, key) {
			stale = append(stale, key)
		}
	}
	sort.Strings(stale)
	for _, key := range stale {
		t.Errorf("routePermissions has an entry for %q, which no route registers: remove it", key)
	}
	if len(e.h.Patterns()) < 100 {
		t.Fatalf("only %d routes registered", len(e.h.Patterns()))
	}
}

type authzEnv struct {
	t   *testing.T
	h   *admin.Handler
	cat *catalog.Catalog
	srv *httptest.Server
}

// newAuthzEnv serves the admin API behind authorization; the role of a request is its
// X-Test-Role header (an absent header: no identity, as on a public path). topics replaces the
// fake topic service.
func newAuthzEnv(t *testing.T, topics ...admin.TopicService) *authzEnv {
	t.Helper()
	ctx := context.Background()
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	cat, err := catalog.New(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cat.EnsureCluster(ctx, "standalone", adminapi.ClusterData{ServiceURL: "http://127.0.0.1:8080", BrokerServiceURL: "pulsar://127.0.0.1:6650"}))
	must(cat.EnsureTenant(ctx, "acme", adminapi.TenantInfo{AdminRoles: []string{"acme-admin"}, AllowedClusters: []string{"standalone"}}))
	must(cat.EnsureTenant(ctx, "other", adminapi.TenantInfo{AdminRoles: []string{"other-admin"}, AllowedClusters: []string{"standalone"}}))
	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{"standalone"}
	must(cat.EnsureNamespace(ctx, "acme/app", p))
	authz := auth.NewAuthorizer([]string{"root"}, admin.CatalogPolicies{Catalog: cat})
	var svc admin.TopicService = newFakeTopics()
	if len(topics) > 0 {
		svc = topics[0]
	}
	h, err := admin.NewHandler(admin.Config{Cluster: "standalone", Catalog: cat, Topics: svc, Registry: prometheus.NewRegistry(), Authorizer: authz})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if role := r.Header.Get("X-Test-Role"); role != "" {
			method := auth.MethodToken
			if role == "anonymous" {
				method = auth.MethodAnonymous
			}
			r = r.WithContext(auth.WithIdentity(r.Context(), auth.Identity{Role: role, Method: method}))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &authzEnv{t: t, h: h, cat: cat, srv: srv}
}

func (e *authzEnv) do(role, method, path, body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if role != "" {
		req.Header.Set("X-Test-Role", role)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

func (e *authzEnv) expect(role, method, path, body string, status int) string {
	e.t.Helper()
	got, b := e.do(role, method, path, body)
	if got != status {
		e.t.Fatalf("%s %s as %q: status %d, want %d (body %s)", method, path, role, got, status, b)
	}
	return b
}

func TestAuthorizationOfRoutes(t *testing.T) {
	e := newAuthzEnv(t)
	const ns = "/admin/v2/namespaces/acme/app"
	const topic = "/admin/v2/persistent/acme/app/orders"
	e.expect("root", http.MethodPut, topic, "", http.StatusNoContent)

	// Superuser-only routes.
	e.expect("root", http.MethodGet, "/admin/v2/tenants", "", http.StatusOK)
	e.expect("acme-admin", http.MethodGet, "/admin/v2/tenants", "", http.StatusForbidden)
	e.expect("acme-admin", http.MethodPut, "/admin/v2/clusters/evil", `{"serviceUrl":"http://x:1"}`, http.StatusForbidden)
	e.expect("acme-admin", http.MethodPost, "/admin/v2/brokers/configuration/x/y", "", http.StatusForbidden)
	// Any authenticated role; no identity at all is 401, the anonymous role too.
	e.expect("stranger", http.MethodGet, "/admin/v2/clusters", "", http.StatusOK)
	e.expect("", http.MethodGet, "/admin/v2/clusters", "", http.StatusUnauthorized)
	e.expect("anonymous", http.MethodGet, "/admin/v2/tenants", "", http.StatusUnauthorized)
	// Readiness and /metrics are open (the HTTP middleware decides /metrics' credentials).
	e.expect("", http.MethodGet, "/admin/v2/brokers/ready", "", http.StatusOK)
	e.expect("", http.MethodGet, "/metrics", "", http.StatusOK)

	// Tenant admins: their tenant only.
	e.expect("acme-admin", http.MethodGet, "/admin/v2/tenants/acme", "", http.StatusOK)
	e.expect("other-admin", http.MethodGet, "/admin/v2/tenants/acme", "", http.StatusForbidden)
	e.expect("acme-admin", http.MethodGet, ns+"/permissions", "", http.StatusOK)
	e.expect("other-admin", http.MethodGet, ns+"/permissions", "", http.StatusForbidden)
	e.expect("other-admin", http.MethodPost, ns+"/permissions/other-admin", `["produce"]`, http.StatusForbidden)

	// Grants: namespace-wide produce, topic-level consume, a subscription with its roles.
	e.expect("acme-admin", http.MethodPost, ns+"/permissions/writer", `["produce"]`, http.StatusNoContent)
	e.expect("acme-admin", http.MethodPost, topic+"/permissions/reader", `["consume"]`, http.StatusNoContent)
	e.expect("acme-admin", http.MethodPost, topic+"/permissions/auditor", `["consume"]`, http.StatusNoContent)
	e.expect("acme-admin", http.MethodPost, ns+"/permissions/subscription/billing", `["reader"]`, http.StatusNoContent)
	e.expect("acme-admin", http.MethodPost, topic+"/permissions/x", `["teleport"]`, http.StatusBadRequest)

	var perms map[string][]string
	if err := json.Unmarshal([]byte(e.expect("acme-admin", http.MethodGet, topic+"/permissions", "", http.StatusOK)), &perms); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"writer": {"produce"}, "reader": {"consume"}, "auditor": {"consume"}}
	for role, actions := range want {
		if !slices.Equal(perms[role], actions) {
			t.Fatalf("topic permissions %v, want %v", perms, want)
		}
	}

	// Lookup: produce or consume on the topic.
	for _, role := range []string{"writer", "reader", "acme-admin", "root"} {
		e.expect(role, http.MethodGet, "/lookup/v2/topic/persistent/acme/app/orders", "", http.StatusOK)
		e.expect(role, http.MethodGet, topic+"/stats", "", http.StatusOK)
	}
	e.expect("stranger", http.MethodGet, "/lookup/v2/topic/persistent/acme/app/orders", "", http.StatusForbidden)
	e.expect("reader", http.MethodGet, "/lookup/v2/topic/persistent/acme/app/elsewhere", "", http.StatusForbidden)
	e.expect("", http.MethodGet, "/lookup/v2/topic/persistent/acme/app/orders", "", http.StatusUnauthorized)
	// Listing a namespace's topics: a namespace-wide grant.
	e.expect("writer", http.MethodGet, "/admin/v2/persistent/acme/app", "", http.StatusOK)
	e.expect("reader", http.MethodGet, "/admin/v2/persistent/acme/app", "", http.StatusForbidden)

	// Subscription operations: consume, and the subscription's roles when it has some.
	e.expect("reader", http.MethodPut, topic+"/subscription/billing", "", http.StatusNoContent)
	e.expect("auditor", http.MethodPost, topic+"/subscription/billing/skip_all", "", http.StatusForbidden)
	e.expect("reader", http.MethodPost, topic+"/subscription/billing/skip_all", "", http.StatusNoContent)
	e.expect("writer", http.MethodPost, topic+"/subscription/billing/skip_all", "", http.StatusForbidden)
	// Topic administration: the tenant's admins.
	e.expect("reader", http.MethodDelete, topic, "", http.StatusForbidden)
	e.expect("writer", http.MethodPost, topic+"/permissions/writer", `["consume"]`, http.StatusForbidden)

	// Revoking: 412 for a role without a topic-level grant, as Pulsar answers.
	e.expect("acme-admin", http.MethodDelete, topic+"/permissions/writer", "", http.StatusPreconditionFailed)
	e.expect("acme-admin", http.MethodDelete, topic+"/permissions/reader", "", http.StatusNoContent)
	e.expect("reader", http.MethodGet, "/lookup/v2/topic/persistent/acme/app/orders", "", http.StatusForbidden)
	e.expect("acme-admin", http.MethodDelete, ns+"/permissions/writer", "", http.StatusNoContent)
	e.expect("writer", http.MethodGet, "/lookup/v2/topic/persistent/acme/app/orders", "", http.StatusForbidden)
}

// TestGuardRefusesUnlistedRoute: a route mounted beside the API without a table entry is an error.
func TestGuardRefusesUnlistedRoute(t *testing.T) {
	if _, err := admin.Guard(nil, "GET /nowhere", http.NotFoundHandler(), nil); err == nil || !strings.Contains(err.Error(), `"GET /nowhere"`) {
		t.Fatalf("Guard of an unlisted route: %v", err)
	}
	if _, err := admin.Guard(nil, "/console/", http.NotFoundHandler(), nil); err != nil {
		t.Fatal(err)
	}
}

// TestReplicatorRolesEndpoint: only a superuser reads or sets a cluster's replicator roles; an
// update of the cluster that does not name them keeps them.
func TestReplicatorRolesEndpoint(t *testing.T) {
	e := newAuthzEnv(t)
	const path = "/admin/v2/clusters/standalone/replicatorRoles"
	e.expect("acme-admin", http.MethodPost, path, `["acme-admin"]`, http.StatusForbidden)
	e.expect("root", http.MethodPost, path, `["west-link","west-link","east-link"]`, http.StatusNoContent)
	if got := e.expect("root", http.MethodGet, path, "", http.StatusOK); strings.TrimSpace(got) != `["east-link","west-link"]` {
		t.Fatalf("replicator roles %s", got)
	}
	e.expect("acme-admin", http.MethodGet, path, "", http.StatusForbidden)
	e.expect("root", http.MethodPost, "/admin/v2/clusters/standalone", `{"serviceUrl":"http://127.0.0.1:8081"}`, http.StatusNoContent)
	if d, _ := e.cat.Cluster("standalone"); !slices.Equal(d.ReplicatorRoles, []string{"east-link", "west-link"}) || d.ServiceURL != "http://127.0.0.1:8081" {
		t.Fatalf("after an update: %+v", d)
	}
	e.expect("root", http.MethodPost, path, `[]`, http.StatusNoContent)
	if got := e.expect("root", http.MethodGet, path, "", http.StatusOK); strings.TrimSpace(got) != `[]` {
		t.Fatalf("replicator roles after clearing %s", got)
	}
	e.expect("root", http.MethodGet, "/admin/v2/clusters/nowhere/replicatorRoles", "", http.StatusNotFound)
}
