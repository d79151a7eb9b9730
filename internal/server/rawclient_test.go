package server

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// testServer is a Server on a loopback port.
type testServer struct {
	*Server
	addr string
}

// startServer starts a server with the given options (Broker defaults to a broker without
// storage, enough for connection-level tests).
func startServer(t testing.TB, opts Options) *testServer {
	t.Helper()
	if opts.Broker == nil {
		opts.Broker = newTestBroker(t)
	}
	if opts.ServiceURL == "" && opts.ServiceURLTLS == "" {
		opts.ServiceURL = "pulsar://127.0.0.1:6650"
	}
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("server close: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return &testServer{Server: s, addr: ln.Addr().String()}
}

// newTestBroker builds a broker core on a storage engine in a temporary directory.
func newTestBroker(t testing.TB) *broker.Broker {
	t.Helper()
	return newTestBrokerWith(t, broker.Config{Cluster: "test", AutoTopicCreation: true})
}

// newTestBrokerWith builds a broker core with cfg on a storage engine in a temporary directory.
func newTestBrokerWith(t testing.TB, cfg broker.Config) *broker.Broker {
	t.Helper()
	b, _ := newTestBrokerOn(t, cfg, storage.Options{})
	return b
}

// newTestBrokerOn builds a broker core with cfg on a storage engine with opts in a temporary
// directory, and returns both.
func newTestBrokerOn(t testing.TB, cfg broker.Config, opts storage.Options) (*broker.Broker, *storage.Engine) {
	t.Helper()
	opts.Dir, opts.Logger = t.TempDir(), testLogger()
	engine, err := storage.Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(cfg, broker.Deps{Storage: engine, Logger: testLogger()})
	if err != nil {
		_ = engine.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		_ = b.Close(ctx)
		_ = engine.Close()
	})
	return b, engine
}

func testLogger() *slog.Logger {
	if os.Getenv("SERVER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// rawClient speaks the protocol frame by frame with wire's codec, so tests control every byte.
type rawClient struct {
	t  testing.TB
	nc net.Conn
	r  *wire.Reader
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawClient{t: t, nc: nc, r: wire.NewReader(nc, wire.DefaultMaxFrameSize)}
}

// connect performs the handshake and returns CONNECTED.
func (c *rawClient) connect() *pulsarpb.CommandConnected {
	c.t.Helper()
	c.send(&pulsarpb.CommandConnect{
		ClientVersion:   proto.String("raw-test"),
		ProtocolVersion: proto.Int32(20),
		FeatureFlags:    &pulsarpb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true), SupportsBrokerEntryMetadata: proto.Bool(true)},
	})
	f := c.expect(pulsarpb.BaseCommand_CONNECTED)
	return f.Cmd.GetConnected()
}

func (c *rawClient) send(body proto.Message, payload ...[]byte) {
	c.t.Helper()
	frame, err := wire.EncodeFrame(wire.Command(body), payload...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.writeRaw(frame)
}

func (c *rawClient) writeRaw(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read returns the next frame, failing the test after a deadline.
func (c *rawClient) read() (wire.Frame, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	return c.r.ReadFrame()
}

// expect reads frames, skipping PINGs, until one arrives; it must be of type want.
func (c *rawClient) expect(want pulsarpb.BaseCommand_Type) wire.Frame {
	c.t.Helper()
	for {
		f, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", want, err)
		}
		if f.Type() == pulsarpb.BaseCommand_PING && want != pulsarpb.BaseCommand_PING {
			continue
		}
		if f.Type() != want {
			c.t.Fatalf("got %s (%v), want %s", f.Type(), f.Cmd, want)
		}
		return f
	}
}

// expectClosed reads until the server closes the connection; it fails on any non-PING frame.
func (c *rawClient) expectClosed() {
	c.t.Helper()
	for {
		f, err := c.read()
		if err == nil {
			if f.Type() == pulsarpb.BaseCommand_PING {
				continue
			}
			c.t.Fatalf("expected the connection to close, got %s", f.Type())
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("connection still open: %v", err)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, wire.ErrTruncated) || isConnReset(err) {
			return
		}
		c.t.Fatalf("unexpected read error: %v", err)
	}
}

func isConnReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// frameHeader builds [totalSize][cmdSize] for hand-made frames.
func frameHeader(total, cmdSize uint32) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b, total)
	binary.BigEndian.PutUint32(b[4:], cmdSize)
	return b
}
