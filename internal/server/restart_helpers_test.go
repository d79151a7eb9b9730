package server

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/storage"
)

// restartable is a server, broker core and storage engine on one data directory that a test can
// stop and start again, as a restarted broker process would find its files.
type restartable struct {
	t      testing.TB
	dir    string
	cfg    broker.Config
	engine *storage.Engine
	b      *broker.Broker
	s      *Server
	served chan error
	addr   string
}

func newRestartable(t testing.TB, cfg broker.Config) *restartable {
	t.Helper()
	r := &restartable{t: t, dir: t.TempDir(), cfg: cfg}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) start() {
	r.t.Helper()
	engine, err := storage.Open(r.t.Context(), storage.Options{Dir: r.dir, Logger: testLogger()})
	if err != nil {
		r.t.Fatalf("storage.Open: %v", err)
	}
	b, err := broker.New(r.cfg, broker.Deps{Storage: engine, Logger: testLogger()})
	if err != nil {
		_ = engine.Close()
		r.t.Fatal(err)
	}
	s, err := New(Options{Broker: b, ServiceURL: "pulsar://127.0.0.1:6650", Logger: testLogger()})
	if err != nil {
		r.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	r.served = make(chan error, 1)
	go func() { r.served <- s.Serve(ln) }()
	r.engine, r.b, r.s, r.addr = engine, b, s, ln.Addr().String()
}

// stop closes the server, the broker and the engine (a clean shutdown: cursors are flushed).
func (r *restartable) stop() {
	if r.s == nil {
		return
	}
	ctx, cancel := contextWithTimeout(10 * time.Second)
	defer cancel()
	if err := r.s.Close(ctx); err != nil {
		r.t.Errorf("server close: %v", err)
	}
	if err := <-r.served; !errors.Is(err, ErrServerClosed) {
		r.t.Errorf("Serve returned %v", err)
	}
	if err := r.b.Close(ctx); err != nil {
		r.t.Errorf("broker close: %v", err)
	}
	if err := r.engine.Close(); err != nil {
		r.t.Errorf("engine close: %v", err)
	}
	r.s, r.b, r.engine = nil, nil, nil
}

func (r *restartable) restart() {
	r.t.Helper()
	r.stop()
	r.start()
}
