package node

import (
	"net/http"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/meridian-mq/meridian/internal/config"
)

// TestAuthenticatedNode: with token authentication the admin API answers 401 without a token and
// 200 with one; the readiness endpoint and /metrics stay open; a non-loopback plaintext listener
// needs no --insecure-allow-plaintext.
func TestAuthenticatedNode(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	o := testOptions(t, t.TempDir())
	o.Auth = config.DefaultAuth()
	o.Auth.AuthenticationEnabled = true
	o.Auth.Providers = []config.AuthProvider{config.AuthProviderToken}
	var err error
	if o.Auth.TokenSecretKey, err = config.ParseKeySource("data:," + string(secret)); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, o)
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "admin"}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	status := func(path, token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, n.WebURL()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/admin/v2/tenants", "", 401},
		{"/admin/v2/tenants", "not-a-token", 401},
		{"/admin/v2/tenants", token, 200},
		{"/lookup/v2/topic/persistent/public/default/t", "", 401},
		{"/admin/v2/brokers/ready", "", 200},
		{"/metrics", "", 200},
	} {
		if got := status(tc.path, tc.token); got != tc.want {
			t.Errorf("GET %s (token %v): %d, want %d", tc.path, tc.token != "", got, tc.want)
		}
	}
	http.DefaultClient.CloseIdleConnections()

	v := testOptions(t, t.TempDir())
	v.Auth = o.Auth
	v.BrokerAddr, v.AdvertisedAddress = "0.0.0.0:0", "broker.example.com"
	if err := v.Validate(); err != nil {
		t.Errorf("plaintext on every interface with authentication: %v", err)
	}
	v.Auth.Providers = append(v.Auth.Providers, config.AuthProviderTLS)
	if err := v.Validate(); err == nil || !strings.Contains(err.Error(), "AuthenticationProviderTls needs a TLS listener") {
		t.Errorf("TLS provider without a TLS listener: %v", err)
	}
}
