package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/tlsreload"
	"github.com/meridian-mq/meridian/internal/tlsreload/tlstest"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func testToken(t *testing.T, key []byte, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tokenAuthenticator(t *testing.T, anonymous string) *auth.Authenticator {
	t.Helper()
	p, err := auth.NewTokenProvider(config.Auth{TokenSecretKey: mustKeySource(t, "data:,"+string(testSecret))})
	if err != nil {
		t.Fatal(err)
	}
	return auth.NewWith(anonymous, p, auth.TLSProvider{})
}

func mustKeySource(t *testing.T, v string) config.KeySource {
	t.Helper()
	ks, err := config.ParseKeySource(v)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func connectWith(c *rawClient, method string, data []byte) {
	c.send(&pulsarpb.CommandConnect{
		ClientVersion: proto.String("raw-test"), ProtocolVersion: proto.Int32(20),
		AuthMethodName: proto.String(method), AuthData: data,
	})
}

// TestConnectAuthentication: with an authenticator, CONNECT with a valid token is served; an
// invalid, expired or missing token gets ERROR AuthenticationError and the connection closes;
// the token never reaches the log.
func TestConnectAuthentication(t *testing.T) {
	var logs syncBuffer
	s := startServer(t, Options{Authenticator: tokenAuthenticator(t, ""), Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	good := dialRaw(t, s.addr)
	connectWith(good, "token", []byte(testToken(t, testSecret, jwt.MapClaims{"sub": "app"})))
	good.expect(pulsarpb.BaseCommand_CONNECTED)
	good.send(&pulsarpb.CommandPing{})
	good.expect(pulsarpb.BaseCommand_PONG)

	wrongKey := testToken(t, []byte("another-secret-another-secret-32"), jwt.MapClaims{"sub": "app"})
	expired := testToken(t, testSecret, jwt.MapClaims{"sub": "app", "exp": time.Now().Add(-time.Minute).Unix()})
	for name, tc := range map[string]struct {
		method string
		data   []byte
		reason string
	}{
		"wrong key":   {"token", []byte(wrongKey), "signature is invalid"},
		"expired":     {"token", []byte(expired), "expired"},
		"none":        {"", nil, "credentials are required"},
		"basic":       {"basic", []byte("user:pw"), "not enabled"},
		"tls offered": {"tls", nil, "not TLS"},
	} {
		c := dialRaw(t, s.addr)
		connectWith(c, tc.method, tc.data)
		e := c.expect(pulsarpb.BaseCommand_ERROR).Cmd.GetError()
		if e.GetError() != pulsarpb.ServerError_AuthenticationError || !strings.Contains(e.GetMessage(), tc.reason) {
			t.Errorf("%s: error %v %q, want AuthenticationError with %q", name, e.GetError(), e.GetMessage(), tc.reason)
		}
		c.expectClosed()
	}
	if got := s.Stats().AuthenticationFailures; got != 5 {
		t.Errorf("AuthenticationFailures = %d, want 5", got)
	}
	if l := logs.String(); strings.Contains(l, wrongKey[len(wrongKey)-16:]) || strings.Contains(l, expired[len(expired)-16:]) || strings.Contains(l, "user:pw") {
		t.Errorf("credentials logged:\n%s", l)
	}
	if !strings.Contains(logs.String(), "authentication failed") {
		t.Errorf("no log line for the refusals:\n%s", logs.String())
	}
}

// TestConnectAnonymousRole: with anonymousUserRole a client without credentials is served; one
// with bad credentials is still refused.
func TestConnectAnonymousRole(t *testing.T) {
	s := startServer(t, Options{Authenticator: tokenAuthenticator(t, "guest")})
	c := dialRaw(t, s.addr)
	c.connect()
	bad := dialRaw(t, s.addr)
	connectWith(bad, "token", []byte("x.y.z"))
	bad.expect(pulsarpb.BaseCommand_ERROR)
	bad.expectClosed()
}

// TestConnectTLSCertificateRole: on a TLS listener that verifies client certificates, CONNECT with
// auth_method_name "tls" authenticates by the certificate; without a certificate it is refused.
func TestConnectTLSCertificateRole(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "broker").Write(t, dir, "broker")
	caFile := ca.WriteCA(t, dir, "ca")
	r, err := tlsreload.New(tlsreload.Files{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}, tlsreload.Options{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	s := startServer(t, Options{Authenticator: tokenAuthenticator(t, ""), Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		served <- s.Serve(tls.NewListener(ln, r.ServerConfig(tlsreload.ServerPolicy{ClientAuth: tls.VerifyClientCertIfGiven})))
	}()
	t.Cleanup(func() {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		_ = s.Close(ctx)
		<-served
	})
	dial := func(withCert bool) *rawClient {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.PEM)
		cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
		if withCert {
			p := ca.Client(t, "worker-7")
			cert, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		nc, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		return &rawClient{t: t, nc: nc, r: wire.NewReader(nc, wire.DefaultMaxFrameSize)}
	}
	c := dial(true)
	connectWith(c, "tls", nil)
	c.expect(pulsarpb.BaseCommand_CONNECTED)
	poll.Until(t, 10*time.Second, "the role logged", func() bool { return strings.Contains(logs.String(), "role=worker-7") })

	n := dial(false)
	connectWith(n, "tls", nil)
	if e := n.expect(pulsarpb.BaseCommand_ERROR).Cmd.GetError(); e.GetError() != pulsarpb.ServerError_AuthenticationError {
		t.Errorf("no certificate: %v", e)
	}
	n.expectClosed()
}
