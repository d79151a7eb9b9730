package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/tlsreload"
	"github.com/meridian-mq/meridian/internal/tlsreload/tlstest"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// tlsServer is a server with a plaintext and a TLS listener on loopback, and the CA of its
// certificate.
type tlsServer struct {
	*testServer
	tlsAddr string
	ca      *tlstest.CA
}

func startTLSServer(t *testing.T, opts Options) *tlsServer {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t, "broker").Write(t, dir, "broker")
	r, err := tlsreload.New(tlsreload.Files{CertFile: certFile, KeyFile: keyFile}, tlsreload.Options{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	opts.ServiceURL, opts.ServiceURLTLS = "pulsar://127.0.0.1:6650", "pulsar+ssl://127.0.0.1:6651"
	s := startServer(t, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(tls.NewListener(ln, r.ServerConfig(tlsreload.ServerPolicy{}))) }()
	t.Cleanup(func() { // runs before startServer's cleanup, which closes the server
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("server close: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve (TLS) returned %v", err)
		}
	})
	return &tlsServer{testServer: s, tlsAddr: ln.Addr().String(), ca: ca}
}

func (s *tlsServer) dialTLS(t *testing.T) *rawClient {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.PEM)
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", s.tlsAddr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawClient{t: t, nc: nc, r: wire.NewReader(nc, wire.DefaultMaxFrameSize)}
}

// TestTLSListenerServesTheProtocol: the same server serves pulsar:// and pulsar+ssl://, and LOOKUP
// names both URLs (a TLS client takes brokerServiceUrlTls), on either listener.
func TestTLSListenerServesTheProtocol(t *testing.T) {
	s := startTLSServer(t, Options{})
	for name, c := range map[string]*rawClient{"tls": s.dialTLS(t), "plaintext": dialRaw(t, s.addr)} {
		c.connect()
		c.send(&pulsarpb.CommandLookupTopic{Topic: proto.String("persistent://public/default/t"), RequestId: proto.Uint64(1)})
		r := c.expect(pulsarpb.BaseCommand_LOOKUP_RESPONSE).Cmd.GetLookupTopicResponse()
		if r.GetResponse() != pulsarpb.CommandLookupTopicResponse_Connect || !r.GetAuthoritative() ||
			r.GetBrokerServiceUrl() != "pulsar://127.0.0.1:6650" || r.GetBrokerServiceUrlTls() != "pulsar+ssl://127.0.0.1:6651" {
			t.Errorf("%s: lookup = %v", name, r)
		}
		c.send(&pulsarpb.CommandPing{})
		c.expect(pulsarpb.BaseCommand_PONG)
	}
}

// TestLookupWithoutPlaintextListener: a TLS-only broker answers only brokerServiceUrlTls.
func TestLookupWithoutPlaintextListener(t *testing.T) {
	s := startServer(t, Options{ServiceURLTLS: "pulsar+ssl://b:6651"})
	c := dialRaw(t, s.addr)
	c.connect()
	c.send(&pulsarpb.CommandLookupTopic{Topic: proto.String("t"), RequestId: proto.Uint64(1)})
	r := c.expect(pulsarpb.BaseCommand_LOOKUP_RESPONSE).Cmd.GetLookupTopicResponse()
	if r.BrokerServiceUrl != nil || r.GetBrokerServiceUrlTls() != "pulsar+ssl://b:6651" {
		t.Errorf("lookup = %v", r)
	}
	if _, err := New(Options{Broker: s.opts.Broker}); err == nil {
		t.Error("New without any service URL: no error")
	}
}

// TestTLSHandshakeFailures: a plaintext client on the TLS port and a client that never starts the
// handshake are closed and counted; the server keeps serving.
func TestTLSHandshakeFailures(t *testing.T) {
	s := startTLSServer(t, Options{KeepAliveInterval: 200 * time.Millisecond})
	plain := dialRaw(t, s.tlsAddr)
	plain.send(&pulsarpb.CommandConnect{ClientVersion: proto.String("plaintext"), ProtocolVersion: proto.Int32(20)})
	plain.expectClosed()
	silent := dialRaw(t, s.tlsAddr)
	silent.expectClosed()
	poll.Until(t, 10*time.Second, "two handshake failures counted", func() bool { return s.Stats().TLSHandshakeFailures == 2 })
	c := s.dialTLS(t)
	c.connect()
}

// recordWriter records each Write.
type recordWriter struct{ writes [][]byte }

func (w *recordWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, append([]byte(nil), p...))
	return len(p), nil
}

// TestCoalescerWritesFewLargeRecords: a burst of small frames reaches crypto/tls as writes of
// coalescerChunk bytes (the last one shorter), with every byte in order.
func TestCoalescerWritesFewLargeRecords(t *testing.T) {
	var bufs net.Buffers
	var want []byte
	for i := range 3000 {
		b := bytes.Repeat([]byte{byte(i)}, 1+i%97)
		bufs = append(bufs, b)
		want = append(want, b...)
	}
	bufs = append(bufs, bytes.Repeat([]byte{7}, 3*coalescerChunk)) // a large payload
	want = append(want, bytes.Repeat([]byte{7}, 3*coalescerChunk)...)
	var co coalescer
	var w recordWriter
	if err := co.write(&w, bufs); err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(w.writes, nil); !bytes.Equal(got, want) {
		t.Fatalf("coalesced bytes differ (%d vs %d bytes)", len(got), len(want))
	}
	if wantWrites := (len(want) + coalescerChunk - 1) / coalescerChunk; len(w.writes) != wantWrites {
		t.Errorf("%d writes for %d bytes, want %d", len(w.writes), len(want), wantWrites)
	}
	for _, wr := range w.writes[:len(w.writes)-1] {
		if len(wr) != coalescerChunk {
			t.Errorf("a write of %d bytes before the last, want %d", len(wr), coalescerChunk)
		}
	}
}
