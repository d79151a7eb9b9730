package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/tlsreload/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var secret = []byte("0123456789abcdef0123456789abcdef") // 32 bytes, as Pulsar's create-secret-key makes

func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func keySource(t *testing.T, v string) config.KeySource {
	t.Helper()
	ks, err := config.ParseKeySource(v)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func tokenAuth(t *testing.T, modify func(*config.Auth)) *Authenticator {
	t.Helper()
	a := config.DefaultAuth()
	a.AuthenticationEnabled = true
	a.Providers = []config.AuthProvider{config.AuthProviderToken}
	a.TokenSecretKey = keySource(t, "data:;base64,"+base64.StdEncoding.EncodeToString(secret))
	if modify != nil {
		modify(&a)
	}
	au, err := New(a)
	if err != nil {
		t.Fatal(err)
	}
	return au
}

func tokenCreds(tok string) Credentials { return Credentials{Method: MethodToken, Data: []byte(tok)} }

// TestTokenHS256: a token Pulsar's `tokens create --secret-key` makes ({"sub": role}, HS256, no
// exp) authenticates as its subject; expired, not-yet-valid, re-signed and malformed tokens are
// refused with a reason that does not repeat the token.
func TestTokenHS256(t *testing.T) {
	au := tokenAuth(t, nil)
	good := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "app-1"})
	id, err := au.Authenticate(tokenCreds(good))
	if err != nil || id.Role != "app-1" || id.Method != MethodToken || !id.ExpiresAt.IsZero() {
		t.Fatalf("good token: %+v, %v", id, err)
	}
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	id, err = au.Authenticate(tokenCreds(sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "app-2", "exp": exp.Unix()})))
	if err != nil || id.Role != "app-2" || !id.ExpiresAt.Equal(exp) {
		t.Fatalf("token with exp: %+v, %v", id, err)
	}
	for name, tc := range map[string]struct{ tok, want string }{
		"expired":       {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(-time.Minute).Unix()}), "expired"},
		"not yet valid": {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "nbf": time.Now().Add(time.Hour).Unix()}), "not valid yet"},
		"other secret":  {sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-32"), jwt.MapClaims{"sub": "a"}), "signature is invalid"},
		"HS512":         {sign(t, jwt.SigningMethodHS512, secret, jwt.MapClaims{"sub": "a"}), "signature is invalid"},
		"alg none":      {sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "a"}), "signature is invalid"},
		"malformed":     {"not.a.token", "malformed"},
		"no role":       {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"name": "a"}), `no string claim "sub"`},
		"numeric role":  {sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": 42}), `no string claim "sub"`},
		"empty":         {"", "no token"},
		"huge":          {strings.Repeat("a", MaxTokenBytes+1), "longer than"},
	} {
		_, err := au.Authenticate(tokenCreds(tc.tok))
		if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an authentication failure containing %q", name, err, tc.want)
			continue
		}
		if len(tc.tok) > 10 && strings.Contains(err.Error(), tc.tok[len(tc.tok)-10:]) {
			t.Errorf("%s: the error repeats the token: %v", name, err)
		}
	}
}

// TestTokenPublicKeys: RS256 and ES256 tokens verify with the public key in Pulsar's forms (DER in
// a file, PEM, data: URL); an HS256 token signed with the public key's bytes (algorithm confusion)
// and tokens of another algorithm are refused; tokenAuthClaim and tokenAudience apply.
func TestTokenPublicKeys(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rsaDER, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	rsaFile := filepath.Join(dir, "public.key")
	if err := os.WriteFile(rsaFile, rsaDER, 0o600); err != nil { // Pulsar's create-key-pair writes DER
		t.Fatal(err)
	}
	ecDER, _ := x509.MarshalPKIXPublicKey(&ecKey.PublicKey)
	ecPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecDER})

	rs := tokenAuth(t, func(a *config.Auth) {
		a.TokenSecretKey = config.KeySource{}
		a.TokenPublicKey = keySource(t, "file://"+rsaFile)
		a.TokenAuthClaim = "role"
		a.TokenAudience = "meridian"
	})
	good := sign(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"role": "svc", "aud": []string{"other", "meridian"}})
	if id, err := rs.Authenticate(tokenCreds(good)); err != nil || id.Role != "svc" {
		t.Fatalf("RS256: %+v, %v", id, err)
	}
	for name, tok := range map[string]string{
		"HS256 keyed with the public key": sign(t, jwt.SigningMethodHS256, rsaDER, jwt.MapClaims{"role": "svc", "aud": "meridian"}),
		"RS512":                           sign(t, jwt.SigningMethodRS512, rsaKey, jwt.MapClaims{"role": "svc", "aud": "meridian"}),
		"wrong audience":                  sign(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"role": "svc", "aud": "elsewhere"}),
		"role in sub only":                sign(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"sub": "svc", "aud": "meridian"}),
	} {
		if _, err := rs.Authenticate(tokenCreds(tok)); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}

	es := tokenAuth(t, func(a *config.Auth) {
		a.TokenPublicKey = keySource(t, "data:;base64,"+base64.StdEncoding.EncodeToString(ecPEM))
		a.TokenPublicAlg = "ES256"
	})
	if id, err := es.Authenticate(tokenCreds(sign(t, jwt.SigningMethodES256, ecKey, jwt.MapClaims{"sub": "ec-user"}))); err != nil || id.Role != "ec-user" {
		t.Fatalf("ES256: %+v, %v", id, err)
	}
	// The secret stays valid beside the public key.
	if _, err := es.Authenticate(tokenCreds(sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "x"}))); err != nil {
		t.Errorf("HS256 beside ES256: %v", err)
	}
	if _, err := es.Authenticate(tokenCreds(sign(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"sub": "x"}))); err == nil {
		t.Error("RS256 token accepted where ES256 is configured")
	}
}

// TestNewRefusesWhatItCannotDo: missing or unusable keys, a provider not implemented, a key that
// does not fit the algorithm; no error repeats a key.
func TestNewRefusesWhatItCannotDo(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsaDER, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	for name, tc := range map[string]struct {
		modify func(*config.Auth)
		want   string
	}{
		"no key":       {func(a *config.Auth) { a.TokenSecretKey = config.KeySource{} }, "needs tokenSecretKey or tokenPublicKey"},
		"short secret": {func(a *config.Auth) { a.TokenSecretKey = keySource(t, "data:;base64,c2hvcnQ=") }, "at least 32"},
		"missing file": {func(a *config.Auth) { a.TokenPublicKey = keySource(t, "file:///nonexistent/public.key") }, "/nonexistent/public.key"},
		"not a key":    {func(a *config.Auth) { a.TokenPublicKey = keySource(t, "data:;base64,bm90IGEga2V5") }, "not a public key"},
		"RSA for ES256": {func(a *config.Auth) {
			a.TokenPublicKey = keySource(t, "data:;base64,"+base64.StdEncoding.EncodeToString(rsaDER))
			a.TokenPublicAlg = "ES256"
		}, "does not verify ES256"},
		"basic":         {func(a *config.Auth) { a.Providers = append(a.Providers, config.AuthProviderBasic) }, "needs basicAuthConf"},
		"unknown class": {func(a *config.Auth) { a.Providers = append(a.Providers, "com.example.Custom") }, "not implemented"},
		"no providers":  {func(a *config.Auth) { a.Providers = nil }, "needs authenticationProviders"},
	} {
		a := config.DefaultAuth()
		a.AuthenticationEnabled = true
		a.Providers = []config.AuthProvider{config.AuthProviderToken}
		a.TokenSecretKey = keySource(t, "data:;base64,"+base64.StdEncoding.EncodeToString(secret))
		tc.modify(&a)
		_, err := New(a)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY") {
			t.Errorf("%s: the error repeats the secret", name)
		}
	}
}

// TestAnonymousAndMethods: no credentials get the anonymous role when one is configured and are
// refused otherwise; a method without a provider is refused.
func TestAnonymousAndMethods(t *testing.T) {
	au := tokenAuth(t, nil)
	if _, err := au.Authenticate(Credentials{}); !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "credentials are required") {
		t.Errorf("no credentials: %v", err)
	}
	if _, err := au.Authenticate(Credentials{Method: "basic", Data: []byte("user:pw")}); err == nil || !strings.Contains(err.Error(), `"basic" is not enabled`) {
		t.Errorf("basic: %v", err)
	}
	anon := tokenAuth(t, func(a *config.Auth) { a.AnonymousUserRole = "guest" })
	if id, err := anon.Authenticate(Credentials{Method: "none"}); err != nil || id.Role != "guest" || id.Method != MethodAnonymous {
		t.Errorf("anonymous: %+v, %v", id, err)
	}
	// Invalid credentials are not downgraded to anonymous.
	if _, err := anon.Authenticate(tokenCreds("bad.token.here")); err == nil {
		t.Error("an invalid token fell back to the anonymous role")
	}
}

// TestTLSProvider: the role is the common name of a verified client certificate; an unverified
// certificate, none, or a plaintext connection is refused.
func TestTLSProvider(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	cert := ca.Client(t, "worker-7").Cert
	p := TLSProvider{}
	if id, err := p.Authenticate(Credentials{Method: MethodTLS, TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert, ca.Cert}}}}); err != nil || id.Role != "worker-7" {
		t.Errorf("verified certificate: %+v, %v", id, err)
	}
	for name, c := range map[string]Credentials{
		"unverified": {TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}},
		"none":       {TLS: &tls.ConnectionState{}},
		"plaintext":  {},
	} {
		if _, err := p.Authenticate(c); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestMiddleware: missing or invalid credentials get 401 with a reason and nothing reaches the
// handler; a valid bearer token reaches it with the identity; public paths need nothing.
func TestMiddleware(t *testing.T) {
	au := tokenAuth(t, nil)
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	h := au.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := IdentityFrom(r.Context())
		io.WriteString(w, "role="+id.Role)
	}), func(r *http.Request) bool { return r.URL.Path == "/ready" }, log)
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path, authz string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	good := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "admin-1"})
	bad := sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-32"), jwt.MapClaims{"sub": "admin-1"})
	if code, body := get("/admin/v2/tenants", "Bearer "+good); code != 200 || body != "role=admin-1" {
		t.Errorf("valid token: %d %s", code, body)
	}
	for name, authz := range map[string]string{"none": "", "invalid": "Bearer " + bad, "basic": "Basic dXNlcjpwdw=="} {
		if code, body := get("/admin/v2/tenants", authz); code != http.StatusUnauthorized || !strings.Contains(body, `"reason"`) {
			t.Errorf("%s: %d %s, want 401 with a reason", name, code, body)
		}
	}
	if code, _ := get("/ready", ""); code != 200 {
		t.Errorf("public path: %d", code)
	}
	if strings.Contains(logs.String(), bad[len(bad)-20:]) || strings.Contains(logs.String(), "dXNlcjpwdw") {
		t.Errorf("credentials logged:\n%s", logs.String())
	}
}
