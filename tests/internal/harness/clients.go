package harness

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/auth"
	"github.com/prometheus/client_golang/prometheus"
)

// Broker is anything a Pulsar client can talk to: a real process (Process) or an in-process broker.
type Broker interface {
	// ServiceURL is the binary-protocol URL, pulsar://host:port.
	ServiceURL() string
	// WebURL is the admin REST base URL, http://host:port.
	WebURL() string
}

// ClientLogger is the logger given to every pulsar-client-go client the harness creates: slog on
// stderr at the level in $MERIDIAN_CLIENT_LOG (debug, info, warn, error; default warn).
func ClientLogger() pulsarlog.Logger {
	return pulsarlog.NewLoggerWithSlog(slog.New(stderrClientHandler()))
}

func stderrClientHandler() slog.Handler {
	level := slog.LevelWarn
	switch strings.ToLower(os.Getenv("MERIDIAN_CLIENT_LOG")) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "error":
		level = slog.LevelError
	}
	return slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})
}

// clientLogForTest is ClientLogger that also keeps the tail of the client's info-level lines
// (connects, reconnects, the broker closing a producer or consumer: what a hung test needs and
// stderr at warn does not show) and prints it when t fails.
func clientLogForTest(t testing.TB) pulsarlog.Logger {
	tail := &logTail{max: clientLogTailBytes}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pulsar-client-go log, info and above (the last %d KiB):\n%s", clientLogTailBytes/1024, tail.String())
		}
	})
	kept := slog.NewTextHandler(tail, &slog.HandlerOptions{Level: slog.LevelInfo})
	return pulsarlog.NewLoggerWithSlog(slog.New(slog.NewMultiHandler(stderrClientHandler(), kept)))
}

const clientLogTailBytes = 64 << 10

// logTail is an io.Writer keeping the last max bytes written, whole lines where it can.
type logTail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - l.max; over > 0 {
		cut := over
		if nl := bytes.IndexByte(l.buf[over:], '\n'); nl >= 0 {
			cut += nl + 1
		}
		l.buf = append(l.buf[:0], l.buf[cut:]...)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// NewClient creates a pulsar-client-go client for b, closed in t.Cleanup. modify, if not nil, may
// change the options before the client is created.
func NewClient(t testing.TB, b Broker, modify func(*pulsar.ClientOptions)) pulsar.Client {
	t.Helper()
	opts := pulsar.ClientOptions{
		URL:               b.ServiceURL(),
		ConnectionTimeout: 10 * time.Second,
		OperationTimeout:  20 * time.Second,
		Logger:            clientLogForTest(t),
		// A registry per client: tests never see each other's client metrics.
		MetricsRegisterer: prometheus.NewRegistry(),
	}
	if modify != nil {
		modify(&opts)
	}
	c, err := pulsar.NewClient(opts)
	if err != nil {
		t.Fatalf("pulsar.NewClient(%s): %v", opts.URL, err)
	}
	t.Cleanup(c.Close)
	return c
}

// NewAdmin creates a pulsaradmin client for b's admin REST API. Its idle HTTP connections are closed
// in t.Cleanup (before the broker's own cleanup, which runs later because the broker was started
// first), so a broker's graceful shutdown never waits for them.
func NewAdmin(t testing.TB, b Broker) pulsaradmin.Client {
	t.Helper()
	cfg := &pulsaradmin.Config{WebServiceURL: b.WebURL()}
	transport, err := auth.NewDefaultTransport(cfg)
	if err != nil {
		t.Fatalf("pulsaradmin transport: %v", err)
	}
	if tr, ok := transport.(*http.Transport); ok {
		t.Cleanup(tr.CloseIdleConnections)
	}
	a, err := admin.NewPulsarClientWithAuthProvider(cfg, auth.NewDefaultProvider(transport))
	if err != nil {
		t.Fatalf("pulsaradmin client for %s: %v", b.WebURL(), err)
	}
	return a
}

var topicSeq atomic.Int64

var unsafeTopicChars = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// Topic returns a topic name unique to this test process and test:
// persistent://public/default/<test name>-<n>-<nanos>.
func Topic(t testing.TB) string {
	return TopicIn(t, "public/default")
}

// TopicIn is Topic in the given tenant/namespace.
func TopicIn(t testing.TB, namespace string) string {
	name := unsafeTopicChars.ReplaceAllString(t.Name(), "-")
	name = strings.Trim(strings.ToLower(name), "-")
	if len(name) > 80 {
		name = name[len(name)-80:]
	}
	return fmt.Sprintf("persistent://%s/%s-%d-%d", namespace, name, topicSeq.Add(1), time.Now().UnixNano()%1_000_000_000)
}
