package etcdstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/etcdstore"
	"github.com/meridian-mq/meridian/internal/metadata/etcdstore/etcdtest"
	"github.com/meridian-mq/meridian/internal/metadata/storetest"
	"github.com/meridian-mq/meridian/internal/poll"
)

// shared is one etcd (the client's version, etcdtest.StartIn) for the package; each test store gets its own key prefix.
var shared *etcdtest.Server

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "etcdstore-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, err = etcdtest.StartIn(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting etcd:", err)
		os.Exit(1)
	}
	code := m.Run()
	shared.Stop()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Goroutines that the etcd and gRPC libraries start once per process and never stop.
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
	goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
	goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
}

var prefixSeq atomic.Int64

func newPrefix() string { return fmt.Sprintf("/test%d", prefixSeq.Add(1)) }

func open(t *testing.T, endpoints []string, prefix string) *etcdstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: endpoints, Prefix: prefix, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConformance runs the suite against the etcd server of the client's version.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) metadata.Store { return open(t, shared.Endpoints(), newPrefix()) })
}

// TestConformanceInstalledEtcd runs the suite against the `etcd` binary on PATH (Debian's etcd-server
// 3.4 in CI), proving the 3.7 client and our use of it work with that server.
func TestConformanceInstalledEtcd(t *testing.T) {
	if testing.Short() && etcdtest.InstalledPath() == "" {
		t.Skip("no etcd binary on PATH")
	}
	srv := etcdtest.StartInstalled(t)
	t.Logf("etcd binary: %s", srv.Version())
	storetest.Run(t, func(t *testing.T) metadata.Store { return open(t, srv.Endpoints(), newPrefix()) })
	t.Run("WatchResumesAfterRestart", func(t *testing.T) { testWatchResumesAfterRestart(t, srv) })
}

func TestPrefixesAreIsolated(t *testing.T) {
	pa := newPrefix()
	pb := pa + "lated" // pa is a string prefix of pb
	a := open(t, shared.Endpoints(), pa)
	b := open(t, shared.Endpoints(), pb)
	ctx := context.Background()
	if _, err := b.Put(ctx, "/k", []byte("b"), 0); err != nil {
		t.Fatal(err)
	}
	kvs, _, err := a.List(ctx, "")
	if err != nil || len(kvs) != 0 {
		t.Fatalf("store %s sees %v (err %v) from store %s", pa, kvs, err, pb)
	}
	if _, err := a.Get(ctx, "/k"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("Get across prefixes: %v", err)
	}
	raw, err := b.Client().Get(ctx, pb+"/k")
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("key not stored under the prefix: %v %v", raw, err)
	}
}

// The connection to etcd is cut mid-watch (the proxy drops every connection and refuses new ones)
// while another client keeps writing; after the connection comes back the watch delivers every
// change, in order, none skipped or repeated. Health reports the outage and the recovery.
func TestWatchResumesAfterConnectionCut(t *testing.T) {
	proxy, err := etcdtest.NewProxy(shared.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	prefix := newPrefix()
	watched := open(t, []string{proxy.Addr()}, prefix)
	writer := open(t, shared.Endpoints(), prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	_, rev, err := watched.List(ctx, "/w/")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := watched.Watch(ctx, "/w/", rev)
	if err != nil {
		t.Fatal(err)
	}
	var want []metadata.KV
	write := func(i int) {
		kv, err := writer.Put(ctx, fmt.Sprintf("/w/k%d", i%4), []byte(fmt.Sprint(i)), metadata.AnyVersion)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, kv)
	}
	got := 0
	receive := func(n int) {
		t.Helper()
		for ; got < n; got++ {
			select {
			case ev, ok := <-ch:
				if !ok || ev.Err != nil {
					t.Fatalf("watch ended: %v %v", ok, ev.Err)
				}
				w := want[got]
				if ev.Type != metadata.EventPut || ev.KV.Key != w.Key || ev.Revision != w.ModRevision || string(ev.KV.Value) != string(w.Value) {
					t.Fatalf("event %d = %s %s=%s@%d, want %s=%s@%d", got, ev.Type, ev.KV.Key, ev.KV.Value, ev.Revision, w.Key, w.Value, w.ModRevision)
				}
			case <-ctx.Done():
				t.Fatalf("received %d of %d events before the deadline", got, n)
			}
		}
	}
	for i := range 10 {
		write(i)
	}
	receive(10)

	proxy.Cut()
	for i := 10; i < 40; i++ {
		write(i)
	}
	// Health notices the outage (the linearizable read cannot reach etcd).
	hctx, hcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	herr := watched.Health(hctx)
	hcancel()
	if !errors.Is(herr, metadata.ErrUnavailable) {
		t.Fatalf("Health during the outage = %v, want ErrUnavailable", herr)
	}
	// Nothing arrives while cut... (the events are not lost, just delayed)
	select {
	case ev := <-ch:
		t.Fatalf("event %+v arrived through a cut connection", ev)
	default:
	}
	if err := proxy.Resume(); err != nil {
		t.Fatal(err)
	}
	receive(40)
	for i := 40; i < 45; i++ {
		write(i)
	}
	receive(45)
	poll.UntilNil(t, 30*time.Second, "Health after the connection came back", func() error { return watched.Health(ctx) })
}

// The server restarts (same data) mid-watch; writes after the restart arrive, nothing is repeated.
func testWatchResumesAfterRestart(t *testing.T, srv *etcdtest.Server) {
	prefix := newPrefix()
	s, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: srv.Endpoints(), Prefix: prefix, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := s.Put(ctx, "/r/a", []byte("1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, "/r/", first.ModRevision-1)
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Revision != first.ModRevision {
		t.Fatalf("first event %+v", ev)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var second metadata.KV
	poll.UntilNil(t, 30*time.Second, "a put after the restart", func() error {
		second, err = s.Put(ctx, "/r/a", []byte("2"), first.Version)
		if errors.Is(err, metadata.ErrBadVersion) {
			t.Fatalf("put after restart: %v", err)
		}
		return err
	})
	select {
	case ev := <-ch:
		if ev.Err != nil || ev.Revision != second.ModRevision || string(ev.KV.Value) != "2" {
			t.Fatalf("after restart got %+v, want the put at %d", ev, second.ModRevision)
		}
	case <-ctx.Done():
		t.Fatal("no event after the restart")
	}
}

func TestWatchResumesAfterRestart(t *testing.T) {
	srv := etcdtest.Start(t)
	testWatchResumesAfterRestart(t, srv)
}

func TestWatchFromCompactedRevision(t *testing.T) {
	s := open(t, shared.Endpoints(), newPrefix())
	ctx := context.Background()
	first, _ := s.Put(ctx, "/c", []byte("1"), metadata.AnyVersion)
	last, _ := s.Put(ctx, "/c", []byte("2"), metadata.AnyVersion)
	if _, err := s.Client().Compact(ctx, last.ModRevision); err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, "/", first.ModRevision-1)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if !errors.Is(ev.Err, metadata.ErrCompacted) {
			t.Fatalf("got %+v, want ErrCompacted", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no compaction error")
	}
	if _, ok := <-ch; ok {
		t.Fatal("channel not closed after the error event")
	}
}

// A session whose lease is revoked behind its back (what expiry looks like from the client) ends:
// Done closes, its keys are gone, PutEphemeral says ErrSessionExpired.
func TestSessionExpiry(t *testing.T) {
	s := open(t, shared.Endpoints(), newPrefix())
	ctx := context.Background()
	sess, err := s.NewSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.PutEphemeral(ctx, "/owner", []byte("me")); err != nil {
		t.Fatal(err)
	}
	lease := sess.(interface{ LeaseID() clientv3.LeaseID }).LeaseID()
	if _, err := s.Client().Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("Done not closed after the lease expired")
	}
	if _, err := s.Get(ctx, "/owner"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("ephemeral key after expiry: %v", err)
	}
	if _, err := sess.PutEphemeral(ctx, "/owner", nil); !errors.Is(err, metadata.ErrSessionExpired) {
		t.Fatalf("PutEphemeral after expiry: %v", err)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("Close after expiry: %v", err)
	}
}

// A session whose client loses etcd for longer than the TTL expires on the server (another client
// sees the key vanish) and on the client (Done closes).
func TestSessionExpiresWhenConnectionLost(t *testing.T) {
	proxy, err := etcdtest.NewProxy(shared.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	prefix := newPrefix()
	s := open(t, []string{proxy.Addr()}, prefix)
	observer := open(t, shared.Endpoints(), prefix)
	ctx := context.Background()
	sess, err := s.NewSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := sess.PutEphemeral(ctx, "/owner", []byte("me"))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := observer.Watch(ctx, "/", kv.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	select {
	case ev := <-ch:
		if ev.Type != metadata.EventDelete || ev.KV.Key != "/owner" {
			t.Fatalf("observer saw %+v, want the delete of /owner", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ephemeral key not deleted after the owner lost etcd")
	}
	// The owner's side ended first: by the time anyone else can see the key gone, the owner has
	// stopped acting on it.
	select {
	case <-sess.Done():
	default:
		t.Fatal("session Done not closed when etcd expired the lease: the owner would go on acting on it")
	}
}

// With etcd gone, operations fail with ErrUnavailable within their deadline and Health says so.
func TestUnavailable(t *testing.T) {
	srv := etcdtest.Start(t)
	s := open(t, srv.Endpoints(), newPrefix())
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := s.Health(ctx); !errors.Is(err, metadata.ErrUnavailable) {
		t.Fatalf("Health with etcd stopped = %v", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	if _, err := s.Put(ctx2, "/x", nil, metadata.AnyVersion); !errors.Is(err, metadata.ErrUnavailable) {
		t.Fatalf("Put with etcd stopped = %v", err)
	}
	// Opening a store against a dead etcd fails with a clear error instead of hanging.
	octx, ocancel := context.WithTimeout(context.Background(), time.Second)
	defer ocancel()
	if _, err := etcdstore.Open(octx, etcdstore.Config{Endpoints: srv.Endpoints()}); !errors.Is(err, metadata.ErrUnavailable) {
		t.Fatalf("Open against a stopped etcd = %v", err)
	}
}

// BenchmarkStore runs against the shared etcd of the client's version (which runs with fsync off, so this measures
// the client, gRPC and etcd's request path, not the disk) and, when the `etcd` binary is on PATH,
// against that process (also fsync off).
func BenchmarkStore(b *testing.B) {
	b.Run("built", func(b *testing.B) {
		storetest.Bench(b, func(b *testing.B) metadata.Store { return openB(b, shared.Endpoints()) })
	})
	if etcdtest.InstalledPath() != "" {
		b.Run("installed", func(b *testing.B) {
			srv := etcdtest.StartInstalled(b)
			storetest.Bench(b, func(b *testing.B) metadata.Store { return openB(b, srv.Endpoints()) })
		})
	}
}

func openB(b *testing.B, endpoints []string) metadata.Store {
	s, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: endpoints, Prefix: newPrefix()})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// Several brokers (separate clients) incrementing one counter by CAS never lose an update, and a
// watcher on yet another client sees every increment in order.
func TestCASAcrossClients(t *testing.T) {
	prefix := newPrefix()
	stores := []*etcdstore.Store{
		open(t, shared.Endpoints(), prefix), open(t, shared.Endpoints(), prefix), open(t, shared.Endpoints(), prefix),
	}
	watcher := open(t, shared.Endpoints(), prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := stores[0].Put(ctx, "/n", []byte("0"), 0)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := watcher.Watch(ctx, "/", first.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	const perClient = 15
	errc := make(chan error, len(stores))
	for _, s := range stores {
		go func() {
			for range perClient {
				for {
					kv, err := s.Get(ctx, "/n")
					if err != nil {
						errc <- err
						return
					}
					var v int
					fmt.Sscan(string(kv.Value), &v)
					_, err = s.Put(ctx, "/n", []byte(fmt.Sprint(v+1)), kv.Version)
					if err == nil {
						break
					}
					if !errors.Is(err, metadata.ErrBadVersion) {
						errc <- err
						return
					}
				}
			}
			errc <- nil
		}()
	}
	for range stores {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	total := perClient * len(stores)
	for i := 1; i <= total; i++ {
		select {
		case ev := <-ch:
			if ev.Err != nil || string(ev.KV.Value) != fmt.Sprint(i) || ev.KV.Version != int64(i+1) {
				t.Fatalf("event %d: %+v", i, ev)
			}
		case <-ctx.Done():
			t.Fatalf("only %d of %d increments seen", i-1, total)
		}
	}
}

// lockedLog is a log sink the etcd client's goroutines may write to while the test reads it.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The etcd client's own warnings (here: a request retried against a stopped etcd) go to the
// store's logger, tagged component=etcd-client, instead of being discarded.
func TestEtcdClientLogsReachTheStoreLogger(t *testing.T) {
	var logs lockedLog
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := etcdtest.Start(t)
	s, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: srv.Endpoints(), Prefix: newPrefix(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := s.Get(ctx, "/x"); err == nil {
		t.Fatal("Get against a stopped etcd succeeded")
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "component=etcd-client") || !strings.Contains(out, "retrying of unary invoker failed") {
		t.Errorf("etcd client warnings not in the store's log:\n%s", out)
	}
}
