package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/golang-jwt/jwt/v5"

	"github.com/meridian-mq/meridian/tests/internal/harness"
)

const tokenProvider = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"

// hsToken signs claims with HS256, as Pulsar's `tokens create --secret-key` does.
func hsToken(t *testing.T, key []byte, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// refusedClient asserts that a client built with modify cannot create a producer.
func refusedClient(t *testing.T, what, url, caFile string, modify func(*pulsar.ClientOptions)) {
	t.Helper()
	c, err := tlsClient(t, url, caFile, func(o *pulsar.ClientOptions) {
		o.OperationTimeout = 3 * time.Second
		if modify != nil {
			modify(o)
		}
	})
	if err == nil {
		_, err = c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/" + strings.ReplaceAll(t.Name(), "/", "-")})
	}
	if err == nil {
		t.Errorf("%s: producer created", what)
	}
}

// httpStatus is the status of GET url with an optional bearer token, over TLS trusting caFile.
func httpStatus(t *testing.T, b *tlsBroker, base, path, token string) int {
	t.Helper()
	hc := httpsClientFor(t, b)
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func httpsClientFor(t *testing.T, b *tlsBroker) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.ca.PEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// TestAuthTokenHS256 runs a broker with Pulsar's token provider and an HS256 secret key file:
// the real client with a token produces and consumes over pulsar+ssl:// and pulsar://; clients
// without a token, with an expired one or with one signed by another key are refused; pulsaradmin
// with the token is served over HTTPS and without it gets 401; the readiness endpoint and /metrics
// stay open; no token reaches the broker's log.
func TestAuthTokenHS256(t *testing.T) {
	secret := []byte("meridian-e2e-secret-key-32-bytes")
	secretFile := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	b := startTLSBroker(t, fmt.Sprintf("authenticationEnabled=true\nauthenticationProviders=%s\ntokenSecretKey=file://%s\n", tokenProvider, secretFile))
	good := hsToken(t, secret, jwt.MapClaims{"sub": "app-1"})
	expired := hsToken(t, secret, jwt.MapClaims{"sub": "app-1", "exp": time.Now().Add(-time.Minute).Unix()})
	forged := hsToken(t, []byte("some-other-secret-key-of-32-byte"), jwt.MapClaims{"sub": "admin"})

	withToken := func(tok string) func(*pulsar.ClientOptions) {
		return func(o *pulsar.ClientOptions) { o.Authentication = pulsar.NewAuthenticationToken(tok) }
	}
	c, err := tlsClient(t, b.tlsURL, b.caFile, withToken(good))
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, c, 10)
	plain, err := tlsClient(t, b.ServiceURL(), "", withToken(good))
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, plain, 2)

	refusedClient(t, "no token", b.tlsURL, b.caFile, nil)
	refusedClient(t, "expired token", b.tlsURL, b.caFile, withToken(expired))
	refusedClient(t, "token of another key", b.tlsURL, b.caFile, withToken(forged))
	refusedClient(t, "no token, plaintext", b.ServiceURL(), "", nil)

	adm, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: b.httpsURL, TLSTrustCertsFilePath: b.caFile, Token: good})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Tenants().List(); err != nil {
		t.Errorf("pulsaradmin with a token: %v", err)
	}
	if _, err := httpsAdmin(t, b.httpsURL, b.caFile).Tenants().List(); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("pulsaradmin without a token: %v, want a 401", err)
	}
	for path, want := range map[string]int{"/admin/v2/tenants": 401, "/lookup/v2/topic/persistent/public/default/x": 401, "/admin/v2/brokers/ready": 200, "/metrics": 200} {
		if got := httpStatus(t, b, b.httpsURL, path, ""); got != want {
			t.Errorf("GET %s without a token: %d, want %d", path, got, want)
		}
	}
	if got := httpStatus(t, b, b.httpsURL, "/admin/v2/tenants", expired); got != 401 {
		t.Errorf("GET with an expired token: %d, want 401", got)
	}
	logs := b.Logs()
	for _, tok := range []string{good, expired, forged} {
		if strings.Contains(logs, tok[strings.LastIndex(tok, ".")+1:]) {
			t.Fatal("a token's signature appears in the broker log")
		}
	}
	if !strings.Contains(logs, "authentication failed") {
		t.Error("no log line for the refused clients")
	}
}

// TestAuthTokenRS256PublicKey: tokens verified with an RSA public key (DER, as Pulsar's
// create-key-pair writes it) and the role in tokenAuthClaim; an HS256 token "signed" with the
// public key (algorithm confusion) is refused; authenticateMetricsEndpoint closes /metrics.
func TestAuthTokenRS256PublicKey(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubFile := filepath.Join(t.TempDir(), "public.key")
	if err := os.WriteFile(pubFile, der, 0o600); err != nil {
		t.Fatal(err)
	}
	b := startTLSBroker(t, fmt.Sprintf("authenticationEnabled=true\nauthenticationProviders=%s\ntokenPublicKey=%s\ntokenPublicAlg=RS256\ntokenAuthClaim=role\nauthenticateMetricsEndpoint=true\n", tokenProvider, pubFile))
	good, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"role": "svc"}).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tlsClient(t, b.tlsURL, b.caFile, func(o *pulsar.ClientOptions) { o.Authentication = pulsar.NewAuthenticationToken(good) })
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, c, 3)
	confused := hsToken(t, der, jwt.MapClaims{"role": "svc"})
	refusedClient(t, "HS256 token keyed with the public key", b.tlsURL, b.caFile, func(o *pulsar.ClientOptions) { o.Authentication = pulsar.NewAuthenticationToken(confused) })
	subOnly, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "svc"}).SignedString(key)
	refusedClient(t, "role only in sub", b.tlsURL, b.caFile, func(o *pulsar.ClientOptions) { o.Authentication = pulsar.NewAuthenticationToken(subOnly) })
	if got := httpStatus(t, b, b.httpsURL, "/metrics", ""); got != 401 {
		t.Errorf("/metrics without a token: %d, want 401", got)
	}
	if got := httpStatus(t, b, b.httpsURL, "/metrics", good); got != 200 {
		t.Errorf("/metrics with a token: %d, want 200", got)
	}
}

// TestAuthTLSClientCertificate: with the TLS provider a client authenticates by its certificate
// (role = common name, seen in the broker's debug log), over the binary protocol and HTTPS; a TLS
// client without a certificate is refused.
func TestAuthTLSClientCertificate(t *testing.T) {
	b := startTLSBrokerEnv(t, "authenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderTls\n",
		[]string{"MERIDIAN_LOG_LEVEL=debug"})
	dir := t.TempDir()
	certFile, keyFile := b.ca.Client(t, "worker-7").Write(t, dir, "worker-7")
	c, err := tlsClient(t, b.tlsURL, b.caFile, func(o *pulsar.ClientOptions) { o.Authentication = pulsar.NewAuthenticationTLS(certFile, keyFile) })
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, c, 3)
	if logs := b.Logs(); !strings.Contains(logs, "client authenticated") || !strings.Contains(logs, "role=worker-7") {
		t.Error("the broker did not log the certificate's role")
	}
	refusedClient(t, "no client certificate", b.tlsURL, b.caFile, nil)

	adm, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: b.httpsURL, TLSTrustCertsFilePath: b.caFile, TLSCertFile: certFile, TLSKeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Tenants().List(); err != nil {
		t.Errorf("pulsaradmin with a client certificate: %v", err)
	}
	if _, err := httpsAdmin(t, b.httpsURL, b.caFile).Tenants().List(); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("pulsaradmin without a client certificate: %v, want a 401", err)
	}
}

// TestAuthBasicHtpasswd: the basic provider with the pulsar-client-go suite's .htpasswd (admin /
// 123456, Apache MD5): the real client with NewAuthenticationBasic produces and consumes; a wrong
// password is refused; HTTP Basic credentials are checked the same way.
func TestAuthBasicHtpasswd(t *testing.T) {
	htpasswd := filepath.Join(t.TempDir(), ".htpasswd")
	if err := os.WriteFile(htpasswd, []byte("admin:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startTLSBroker(t, "authenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderBasic\nbasicAuthConf="+htpasswd+"\n")
	basic := func(user, password string) func(*pulsar.ClientOptions) {
		return func(o *pulsar.ClientOptions) {
			a, err := pulsar.NewAuthenticationBasic(user, password)
			if err != nil {
				t.Fatal(err)
			}
			o.Authentication = a
		}
	}
	c, err := tlsClient(t, b.tlsURL, b.caFile, basic("admin", "123456"))
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, c, 3)
	refusedClient(t, "wrong password", b.tlsURL, b.caFile, basic("admin", "hunter2"))
	refusedClient(t, "unknown user", b.tlsURL, b.caFile, basic("mallory", "123456"))

	hc := httpsClientFor(t, b)
	for creds, want := range map[string]int{"admin:123456": 200, "admin:hunter2": 401} {
		req, _ := http.NewRequest(http.MethodGet, b.httpsURL+"/admin/v2/tenants", nil)
		user, pw, _ := strings.Cut(creds, ":")
		req.SetBasicAuth(user, pw)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("HTTP Basic %s: %d, want %d", user, resp.StatusCode, want)
		}
	}
	if strings.Contains(b.Logs(), "hunter2") {
		t.Error("a password appears in the broker log")
	}
}

// TestAuthTokenRefreshDuringConnection: with authenticationRefreshCheckSeconds=1 and tokens that
// expire two seconds after they are made, the broker challenges the connections of the real client
// (AUTH_CHALLENGE) and the client answers with a fresh token from its supplier: a producer keeps
// publishing across several expiries on the same connection.
func TestAuthTokenRefreshDuringConnection(t *testing.T) {
	secret := []byte("meridian-e2e-secret-key-32-bytes")
	b := startTLSBrokerEnv(t, fmt.Sprintf("authenticationEnabled=true\nauthenticationProviders=%s\ntokenSecretKey=data:;base64,%s\nauthenticationRefreshCheckSeconds=1\n",
		tokenProvider, base64.StdEncoding.EncodeToString(secret)), []string{"MERIDIAN_LOG_LEVEL=debug"})
	fresh := func() (string, error) {
		return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "app-1", "exp": time.Now().Add(3 * time.Second).Unix()}).SignedString(secret)
	}
	c, err := tlsClient(t, b.tlsURL, b.caFile, func(o *pulsar.ClientOptions) { o.Authentication = pulsar.NewAuthenticationTokenFromSupplier(fresh) })
	if err != nil {
		t.Fatal(err)
	}
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: harness.Topic(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx := testCtx(t, 60*time.Second)
	sent := 0
	harness.Eventually(t, 30*time.Second, "three credential refreshes while publishing", func() error {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("m")}); err != nil {
			t.Fatalf("Send %d: %v", sent, err)
		}
		sent++
		if n := strings.Count(b.Logs(), "credentials refreshed"); n < 3 {
			return fmt.Errorf("%d refreshes so far", n)
		}
		return nil
	})
	if strings.Contains(b.Logs(), "credentials expired and were not refreshed") {
		t.Error("a connection of the refreshing client was closed")
	}
}
