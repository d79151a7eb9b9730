package tlsreload

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/internal/tlsreload/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a real TLS listener on loopback: every connection that completes its handshake gets
// "ok" and is closed.
type server struct {
	ln net.Listener
	wg sync.WaitGroup
}

func serve(t *testing.T, cfg *tls.Config) *server {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: tls.NewListener(tcp, cfg)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if err := c.(*tls.Conn).Handshake(); err == nil {
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = s.ln.Close()
		s.wg.Wait()
	})
	return s
}

// dial connects with cfg and returns the server's leaf certificate once the server has accepted
// the handshake (with TLS 1.3 the client finishes first, so it waits for the server's "ok").
func (s *server) dial(cfg *tls.Config) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", s.ln.Addr().String(), cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, err
	}
	if string(buf) != "ok" {
		return nil, errors.New("server did not accept")
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

// describe names a certificate in failure messages.
func describe(c *x509.Certificate) string {
	if c == nil {
		return "no certificate"
	}
	return fmt.Sprintf("%s (serial %v)", c.Subject.CommonName, c.SerialNumber)
}

func clientConfig(ca *tlstest.CA, cert *tlstest.Pair) *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	if cert != nil {
		c, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
		if err != nil {
			panic(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

// logBuffer collects log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newLogger(l *logBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// TestServerPresentsRenewedCertificate: the certificate and key files are replaced while the
// listener runs; the next handshake presents the new certificate, without a restart.
func TestServerPresentsRenewedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "broker-v1")
	certFile, keyFile := first.Write(t, dir, "broker")
	var logs logBuffer
	r, err := New(Files{CertFile: certFile, KeyFile: keyFile}, Options{Logger: newLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, r.ServerConfig(ServerPolicy{}))

	got, err := s.dial(clientConfig(ca, nil))
	if err != nil || got.SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("first handshake: %v, %s; want serial %v", err, describe(got), first.Cert.SerialNumber)
	}
	second := ca.Server(t, "broker-v2")
	second.Write(t, dir, "broker")
	got, err = s.dial(clientConfig(ca, nil))
	if err != nil || got.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 || got.Subject.CommonName != "broker-v2" {
		t.Fatalf("handshake after the files changed: %v, %s; want the renewed certificate (broker-v2, serial %v)", err, describe(got), second.Cert.SerialNumber)
	}
	if !strings.Contains(logs.String(), "TLS certificate reloaded") || !strings.Contains(logs.String(), "broker-v2") {
		t.Errorf("no reload logged: %s", logs.String())
	}
}

// TestRefreshIntervalBoundsReads: within the refresh interval the files are not read again.
func TestRefreshIntervalBoundsReads(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "v1")
	certFile, keyFile := first.Write(t, dir, "broker")
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r, err := New(Files{CertFile: certFile, KeyFile: keyFile}, Options{RefreshInterval: time.Minute, Now: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	second := ca.Server(t, "v2")
	second.Write(t, dir, "broker")
	if got := r.Current().Certificate.Leaf.Subject.CommonName; got != "v1" {
		t.Fatalf("within the interval: %s, want v1", got)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if got := r.Current().Certificate.Leaf.Subject.CommonName; got != "v2" {
		t.Fatalf("after the interval: %s, want v2", got)
	}
}

// TestHalfWrittenChangeKeepsThePreviousIdentity: a certificate replaced before its key (they no
// longer match) does not take the listener down: the previous identity stays until the key
// arrives, and the failure is logged once.
func TestHalfWrittenChangeKeepsThePreviousIdentity(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "v1")
	certFile, keyFile := first.Write(t, dir, "broker")
	var logs logBuffer
	r, err := New(Files{CertFile: certFile, KeyFile: keyFile}, Options{Logger: newLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, r.ServerConfig(ServerPolicy{}))
	second := ca.Server(t, "v2")
	if err := os.WriteFile(certFile, second.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		got, err := s.dial(clientConfig(ca, nil))
		if err != nil || got.Subject.CommonName != "v1" {
			t.Fatalf("with a mismatched key: %v, %s; want the previous certificate", err, describe(got))
		}
	}
	if n := strings.Count(logs.String(), "do not load"); n != 1 {
		t.Errorf("failed reload logged %d times, want once:\n%s", n, logs.String())
	}
	if err := os.WriteFile(keyFile, second.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := s.dial(clientConfig(ca, nil)); err != nil || got.Subject.CommonName != "v2" {
		t.Fatalf("once the key matches: %v, %s; want v2", err, describe(got))
	}
}

// TestClientCertificates: RequireAndVerifyClientCert refuses clients without a certificate or with
// one from another CA; the CA file is re-read like the certificate (a new CA takes over).
func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	other := tlstest.NewCA(t, "other")
	certFile, keyFile := ca.Server(t, "broker").Write(t, dir, "broker")
	caFile := ca.WriteCA(t, dir, "trust")
	r, err := New(Files{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, r.ServerConfig(ServerPolicy{ClientAuth: tls.RequireAndVerifyClientCert}))
	good := ca.Client(t, "alice")
	stranger := other.Client(t, "mallory")
	if _, err := s.dial(clientConfig(ca, &good)); err != nil {
		t.Fatalf("client with a certificate of the trusted CA: %v", err)
	}
	if _, err := s.dial(clientConfig(ca, nil)); err == nil {
		t.Fatal("client without a certificate accepted")
	}
	if _, err := s.dial(clientConfig(ca, &stranger)); err == nil {
		t.Fatal("client with a certificate of another CA accepted")
	}
	other.WriteCA(t, dir, "trust") // the trust file now names the other CA
	if _, err := s.dial(clientConfig(ca, &stranger)); err != nil {
		t.Fatalf("after the CA file changed, its client: %v", err)
	}
	if _, err := s.dial(clientConfig(ca, &good)); err == nil {
		t.Fatal("after the CA file changed, the old CA's client is still accepted")
	}
}

// TestTLS12IsTheMinimum: a client offering only TLS 1.1 is refused even if the policy asks for less.
func TestTLS12IsTheMinimum(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "broker").Write(t, dir, "broker")
	r, err := New(Files{CertFile: certFile, KeyFile: keyFile}, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, r.ServerConfig(ServerPolicy{MinVersion: tls.VersionTLS10}))
	old := clientConfig(ca, nil)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := s.dial(old); err == nil {
		t.Fatal("TLS 1.1 client accepted")
	}
	only12 := clientConfig(ca, nil)
	only12.MaxVersion = tls.VersionTLS12
	if _, err := s.dial(only12); err != nil {
		t.Fatalf("TLS 1.2 client: %v", err)
	}
}

func TestNewNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "broker").Write(t, dir, "broker")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		files Files
		want  string
	}{
		{Files{CertFile: filepath.Join(dir, "missing.pem"), KeyFile: keyFile}, "missing.pem"},
		{Files{CertFile: certFile, KeyFile: garbage}, "garbage.pem"},
		{Files{CertFile: certFile, KeyFile: keyFile, CAFile: garbage}, "garbage.pem holds no PEM certificate"},
		{Files{CertFile: certFile}, "a certificate file and a key file are required"},
	} {
		if _, err := New(tc.files, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %q", tc.files, err, tc.want)
		}
	}
}

func TestClientConfig(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	caFile := ca.WriteCA(t, dir, "ca")
	certFile, keyFile := ca.Client(t, "alice").Write(t, dir, "alice")
	cfg, err := ClientConfig(Files{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}, false)
	if err != nil || cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.InsecureSkipVerify || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("ClientConfig = %+v, %v", cfg, err)
	}
	if _, err := ClientConfig(Files{CertFile: certFile}, false); err == nil {
		t.Error("a certificate without a key accepted")
	}
	if _, err := ClientConfig(Files{CAFile: filepath.Join(dir, "nope.pem")}, false); err == nil || !strings.Contains(err.Error(), "nope.pem") {
		t.Errorf("missing CA file: %v", err)
	}
}
