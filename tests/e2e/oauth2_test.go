package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/golang-jwt/jwt/v5"
)

// oauth2Issuer is an OAuth2 authorization server for one client (client-credentials grant): it
// hands out RS256 access tokens whose audience is the one requested.
func oauth2Issuer(t *testing.T, key *rsa.PrivateKey, clientID, clientSecret string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	var srv *httptest.Server
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": srv.URL, "token_endpoint": srv.URL + "/oauth/token"})
	})
	mux.HandleFunc("/oauth/token", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" ||
			r.PostForm.Get("client_id") != clientID || r.PostForm.Get("client_secret") != clientSecret {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
			"iss": srv.URL, "sub": clientID + "@clients", "aud": r.PostForm.Get("audience"),
			"exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString(key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestAuthOAuth2ClientCredentials: the real client's OAuth2 authentication (client-credentials flow
// against an authorization server) sends the access token with method "token"; the broker's token
// provider validates it as a JWT with the issuer's public key and tokenAudience, as Pulsar's broker
// does. A client asking for another audience gets a token the broker refuses.
func TestAuthOAuth2ClientCredentials(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pubFile := filepath.Join(dir, "issuer-public.key")
	if err := os.WriteFile(pubFile, der, 0o600); err != nil {
		t.Fatal(err)
	}
	issuer := oauth2Issuer(t, key, "meridian-app", "client-secret-value")
	b := startTLSBroker(t, fmt.Sprintf("authenticationEnabled=true\nauthenticationProviders=%s\ntokenPublicKey=file://%s\ntokenAudience=urn:meridian\n", tokenProvider, pubFile))

	keyFile := filepath.Join(dir, "credentials.json")
	creds := fmt.Sprintf(`{"type":"client_credentials","client_id":"meridian-app","client_secret":"client-secret-value","issuer_url":%q}`, issuer.URL)
	if err := os.WriteFile(keyFile, []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	oauth := func(audience string) func(*pulsar.ClientOptions) {
		return func(o *pulsar.ClientOptions) {
			o.Authentication = pulsar.NewAuthenticationOAuth2(map[string]string{
				"type": "client_credentials", "issuerUrl": issuer.URL, "audience": audience, "privateKey": keyFile,
			})
		}
	}
	c, err := tlsClient(t, b.tlsURL, b.caFile, oauth("urn:meridian"))
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, c, 3)
	refusedClient(t, "access token for another audience", b.tlsURL, b.caFile, oauth("urn:elsewhere"))
}
