package harness

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { Main(m) }

func TestWaitFor(t *testing.T) {
	n := 0
	err := WaitFor(context.Background(), func(context.Context) error {
		n++
		if n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("WaitFor = %v after %d calls", err, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = WaitFor(ctx, func(context.Context) error { return errors.New("never") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor past deadline = %v", err)
	}
}

func TestFreePortsDiffer(t *testing.T) {
	a, b := FreePort(t), FreePort(t)
	if a == 0 || b == 0 {
		t.Fatalf("ports %d %d", a, b)
	}
}

func TestEtcd(t *testing.T) {
	e := StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.ClientURL()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/meridian/test", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "/meridian/test")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get: %v %v", resp, err)
	}
	if got := e.ConfigStoreURL("p"); got != "etcd://"+e.Endpoint()+"/p" {
		t.Fatalf("ConfigStoreURL = %q", got)
	}
}

func TestTopicNames(t *testing.T) {
	a, b := Topic(t), Topic(t)
	if a == b {
		t.Fatalf("Topic not unique: %s", a)
	}
	if want := "persistent://public/default/testtopicnames-"; len(a) < len(want) || a[:len(want)] != want {
		t.Fatalf("Topic = %s", a)
	}
}

func TestStandaloneLifecycle(t *testing.T) {
	p := StartStandalone(t, Options{})
	if err := checkReady(context.Background(), p.WebURL()); err != nil {
		t.Fatalf("not ready after Start: %v", err)
	}
	p.Restart() // SIGKILL, then the same ports and data dir
	if err := p.Stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if p.Running() {
		t.Fatal("still running after Stop")
	}
	p.Start()
}

func TestOwnLeaks(t *testing.T) {
	report := `found unexpected goroutines:
[Goroutine 1 in state select, with github.com/apache/pulsar-client-go/pulsar.(*negativeAcksTracker).track on top of the stack:
github.com/apache/pulsar-client-go/pulsar.(*negativeAcksTracker).track(0xc001eb79d0)
	/x/negative_acks_tracker.go:151 +0x10c
 Goroutine 2 in state chan receive, with github.com/meridian-mq/meridian/internal/broker.(*x).loop on top of the stack:
github.com/meridian-mq/meridian/internal/broker.(*x).loop()
	/x/broker.go:1 +0x1
]`
	leaks := ownLeaks(report)
	if len(leaks) != 1 || !strings.Contains(leaks[0], "internal/broker") {
		t.Fatalf("ownLeaks = %q", leaks)
	}
	if l := ownLeaks("something else"); len(l) != 1 {
		t.Fatalf("unparsable report must count: %q", l)
	}
}

// TestStandaloneRetriesAPortTakenByAnotherProcess: another process binds the web port the harness
// chose before the broker does (as another test package's server can); StartStandalone starts the
// broker on other ports instead of failing the test.
func TestStandaloneRetriesAPortTakenByAnotherProcess(t *testing.T) {
	var taken string
	hookBeforeStandaloneStart = func(attempt int, opts Options) {
		if attempt == 1 {
			ln, err := net.Listen("tcp", opts.WebAddr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			taken = opts.WebAddr
		}
	}
	defer func() { hookBeforeStandaloneStart = nil }()
	p := StartStandalone(t, Options{})
	if taken == "" || p.WebURL() == "http://"+taken {
		t.Fatalf("the broker's web address %s, the taken one %q", p.WebURL(), taken)
	}
}
