package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

var ctlSecret = []byte("meridianctl-test-secret-32-bytes")

// secureServer serves the admin API over HTTPS behind token authentication and authorization
// (superuser "root"); it returns the URL and the PEM file of the CA that verifies it.
func secureServer(t *testing.T) (url, caFile string) {
	t.Helper()
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	cat, err := catalog.New(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	if err := cat.EnsureCluster(ctx, "east", adminapi.ClusterData{ServiceURL: "http://127.0.0.1:8080"}); err != nil {
		t.Fatal(err)
	}
	if err := cat.EnsureTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"east"}}); err != nil {
		t.Fatal(err)
	}
	pol := adminapi.NewPolicies()
	pol.ReplicationClusters = []string{"east"}
	if err := cat.EnsureNamespace(ctx, "public/default", pol); err != nil {
		t.Fatal(err)
	}
	h, err := admin.NewHandler(admin.Config{Cluster: "east", Catalog: cat, Authorizer: auth.NewAuthorizer([]string{"root"}, admin.CatalogPolicies{Catalog: cat})})
	if err != nil {
		t.Fatal(err)
	}
	key, err := config.ParseKeySource("data:," + string(ctlSecret))
	if err != nil {
		t.Fatal(err)
	}
	p, err := auth.NewTokenProvider(config.Auth{TokenSecretKey: key})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(auth.NewWith("", p).Middleware(h, nil, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL, caFile
}

func ctlToken(t *testing.T, role string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": role}).SignedString(ctlSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctlEnv(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return result{code, out.String(), errOut.String()}
}

// TestPermissionVerbsWithTokenAndTLS: meridianctl's permission verbs against an HTTPS admin API
// with authorization, authenticating with --auth-token-file (or MERIDIAN_AUTH_TOKEN) and
// verifying the server with --tls-trust-certs.
func TestPermissionVerbsWithTokenAndTLS(t *testing.T) {
	url, caFile := secureServer(t)
	tokenFile := filepath.Join(t.TempDir(), "root.token")
	if err := os.WriteFile(tokenFile, []byte(ctlToken(t, "root")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := []string{"--admin-url", url, "--tls-trust-certs", caFile, "--auth-token-file", tokenFile}
	must := func(args ...string) string {
		t.Helper()
		r := ctlEnv(t, nil, append(append([]string{}, root...), args...)...)
		if r.code != 0 {
			t.Fatalf("meridianctl %v: exit %d: %s%s", args, r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	must("namespaces", "grant-permission", "public/default", "--role", "app", "--actions", "produce,consume")
	must("topics", "grant-permission", "persistent://public/default/orders", "--role", "reader", "--actions", "consume")
	must("namespaces", "grant-subscription-permission", "public/default", "--subscription", "billing", "--roles", "reader")
	if out := must("namespaces", "permissions", "public/default"); !strings.Contains(out, "app") || !strings.Contains(out, "consume,produce") {
		t.Errorf("namespace permissions:\n%s", out)
	}
	if out := must("topics", "permissions", "persistent://public/default/orders", "-o", "json"); !strings.Contains(out, `"reader"`) || !strings.Contains(out, `"app"`) {
		t.Errorf("topic permissions:\n%s", out)
	}
	must("topics", "revoke-permission", "persistent://public/default/orders", "--role", "reader")
	must("namespaces", "revoke-subscription-permission", "public/default", "--subscription", "billing", "--role", "reader")
	must("namespaces", "revoke-permission", "public/default", "--role", "app")
	if out := must("namespaces", "permissions", "public/default", "-o", "json"); strings.TrimSpace(out) != "{}" {
		t.Errorf("permissions after revoking: %s", out)
	}

	// The token from the environment; a role without permission gets the 403.
	r := ctlEnv(t, map[string]string{"MERIDIAN_ADMIN_URL": url, "MERIDIAN_TLS_TRUST_CERTS": caFile, "MERIDIAN_AUTH_TOKEN": ctlToken(t, "stranger")},
		"namespaces", "grant-permission", "public/default", "--role", "stranger", "--actions", "produce")
	if r.code == 0 || !strings.Contains(r.stderr, "403") {
		t.Errorf("a stranger granting: exit %d, %s", r.code, r.stderr)
	}
	// No token: 401. Not trusting the server's CA: a certificate error.
	if r := ctlEnv(t, nil, "--admin-url", url, "--tls-trust-certs", caFile, "tenants", "list"); r.code == 0 || !strings.Contains(r.stderr, "401") {
		t.Errorf("without a token: exit %d, %s", r.code, r.stderr)
	}
	if r := ctlEnv(t, nil, "--admin-url", url, "--auth-token-file", tokenFile, "tenants", "list"); r.code == 0 || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("without the CA: exit %d, %s", r.code, r.stderr)
	}
}
