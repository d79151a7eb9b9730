package client_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/meridian-mq/meridian/brokertest"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/node"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/tlsreload/tlstest"
	"github.com/meridian-mq/meridian/internal/wire"
)

// TestClientTLSAndToken: the client connects over pulsar+ssl://, verifies the broker's
// certificate and host name against the CA it is given, and authenticates with a token; a wrong
// CA, a host name the certificate does not name, a missing and an expired token are refused.
func TestClientTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test-ca")
	certFile, keyFile := ca.Server(t, "broker").Write(t, dir, "broker")
	secret := []byte("client-test-secret-of-32-bytes!!")
	key, err := config.ParseKeySource("data:," + string(secret))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, brokertest.WithNodeOptions(func(o *node.Options) {
		o.BrokerTLSAddr = "127.0.0.1:0"
		o.TLS = config.TLS{CertificateFile: certFile, KeyFile: keyFile}
		o.Auth = config.DefaultAuth()
		o.Auth.AuthenticationEnabled = true
		o.Auth.Providers = []config.AuthProvider{config.AuthProviderToken}
		o.Auth.TokenSecretKey = key
	}))
	url := b.Node().ServiceURLTLS()
	token := func(claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	newClient := func(url string, cfg *tls.Config, auth client.Credentials) *client.Client {
		c, err := client.New(client.Options{ServiceURL: url, TLS: cfg, Auth: auth, OperationTimeout: 5 * time.Second,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token(jwt.MapClaims{"sub": "app"})+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := newClient(url, &tls.Config{RootCAs: pool}, client.TokenFile(tokenFile))
	ctx := e2eCtx(t)
	p, err := good.CreateProducer(ctx, client.ProducerOptions{Topic: "persistent://public/default/tls-token"})
	if err != nil {
		t.Fatalf("producer over TLS with a token: %v", err)
	}
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	_ = p.Close(ctx)

	other := tlstest.NewCA(t, "other-ca")
	otherPool := x509.NewCertPool()
	otherPool.AddCert(other.Cert)
	host := strings.Replace(url, "127.0.0.1", "localhost", 1) // localhost is named by the certificate
	for name, tc := range map[string]struct {
		c    *client.Client
		want string
	}{
		"wrong CA":              {newClient(url, &tls.Config{RootCAs: otherPool}, client.Token(token(jwt.MapClaims{"sub": "app"}))), "certificate"},
		"host name not in cert": {newClient(url, &tls.Config{RootCAs: pool, ServerName: "elsewhere.example"}, client.Token(token(jwt.MapClaims{"sub": "app"}))), "certificate"},
		"no token":              {newClient(host, &tls.Config{RootCAs: pool}, nil), "authentication"},
		"expired token":         {newClient(url, &tls.Config{RootCAs: pool}, client.Token(token(jwt.MapClaims{"sub": "app", "exp": time.Now().Add(-time.Minute).Unix()}))), "expired"},
	} {
		_, err := tc.c.CreateProducer(ctx, client.ProducerOptions{Topic: "persistent://public/default/tls-token"})
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), tc.want) {
			t.Errorf("%s: %v, want an error about %q", name, err, tc.want)
		}
		if name == "no token" && !errors.Is(err, wire.ErrAuthentication) {
			t.Errorf("no token: %v is not wire.ErrAuthentication", err)
		}
	}
	if _, err := client.New(client.Options{ServiceURL: "pulsar://127.0.0.1:6650", TLS: &tls.Config{}}); err == nil {
		t.Error("TLS for a pulsar:// URL accepted")
	}
}

// TestClientAnswersAuthChallenge: when the broker finds the connection's token expired it sends
// AUTH_CHALLENGE; the client answers with the token its source holds now (a token file rewritten
// in place), and the connection and its producer carry on without reconnecting.
func TestClientAnswersAuthChallenge(t *testing.T) {
	secret := []byte("client-test-secret-of-32-bytes!!")
	key, err := config.ParseKeySource("data:," + string(secret))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, brokertest.WithNodeOptions(func(o *node.Options) {
		o.Auth = config.DefaultAuth()
		o.Auth.AuthenticationEnabled = true
		o.Auth.Providers = []config.AuthProvider{config.AuthProviderToken}
		o.Auth.TokenSecretKey = key
		o.Auth.RefreshCheckInterval = 100 * time.Millisecond
	}))
	token := func(exp time.Time) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "app", "exp": exp.Unix()}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	expiry := time.Now().Add(2 * time.Second)
	if err := os.WriteFile(tokenFile, []byte(token(expiry)), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Options{ServiceURL: b.ServiceURL, Auth: client.TokenFile(tokenFile), OperationTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := e2eCtx(t)
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: "persistent://public/default/challenged"})
	if err != nil {
		t.Fatal(err)
	}
	// The file now holds a token valid for an hour; the first token expires and is challenged.
	if err := os.WriteFile(tokenFile, []byte(token(time.Now().Add(time.Hour))), 0o600); err != nil {
		t.Fatal(err)
	}
	// Wait for the clock to pass the first token's expiry and several refresh checks.
	poll.Until(t, 10*time.Second, "the first token expired and was checked", func() bool { return time.Now().After(expiry.Add(time.Second)) })
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("after the challenge")}); err != nil {
		t.Fatalf("send after the token expired: %v", err)
	}
	if n := p.Reconnects(); n != 0 {
		t.Fatalf("the producer reconnected %d times (last error %v): the challenge was not answered", n, p.LastError())
	}
}
