package harness

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/node"
)

// InProcess is a broker running inside the test process (internal/node, the same composition root
// cmd/meridian uses), on free loopback ports and a temporary data dir. The race detector and
// goleak cover it.
type InProcess struct {
	t       testing.TB
	opts    node.Options
	node    *node.Node
	logPath string
	logFile *lockedFile
}

// lockedFile serializes writes from the broker's goroutines to its log file.
type lockedFile struct {
	mu sync.Mutex
	f  *os.File
}

func (l *lockedFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

// StartInProcess starts an in-process broker. modify, if not nil, may change the options (they start
// as `meridian standalone`'s defaults with free loopback ports and a temporary data dir). The broker
// is closed in t.Cleanup (which fails the test if Close fails).
func StartInProcess(t testing.TB, modify func(*node.Options)) *InProcess {
	t.Helper()
	opts := node.DefaultOptions()
	opts.DataDir = filepath.Join(t.TempDir(), "data")
	opts.BrokerAddr = "127.0.0.1:0"
	opts.WebAddr = "127.0.0.1:0"
	if modify != nil {
		modify(&opts)
	}
	processSeq.Lock()
	processSeq.n++
	n := processSeq.n
	processSeq.Unlock()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("meridian-inprocess-%d.log", n))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("harness: create log file: %v", err)
	}
	b := &InProcess{t: t, opts: opts, logPath: logPath, logFile: &lockedFile{f: f}}
	t.Cleanup(b.cleanup)
	b.Start()
	return b
}

// Start starts the broker (again, after Close) with the same options; after a restart the ports are
// the ones the first start picked, so clients reconnect to the same URLs.
func (b *InProcess) Start() {
	b.t.Helper()
	if b.node != nil {
		b.t.Fatalf("harness: InProcess.Start: already running")
	}
	opts := b.opts
	level := slog.LevelInfo
	if os.Getenv("MERIDIAN_LOG_LEVEL") == "debug" {
		level = slog.LevelDebug
	}
	opts.Logger = slog.New(slog.NewTextHandler(b.logFile, &slog.HandlerOptions{Level: level}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nd, err := node.Start(ctx, opts)
	if err != nil {
		b.t.Fatalf("harness: start in-process broker: %v; log:\n%s", err, b.Logs())
	}
	b.node = nd
	// Pin the ports so that a restart comes back where the clients expect it.
	b.opts.BrokerAddr = nd.BrokerAddr().String()
	b.opts.WebAddr = nd.WebAddr().String()
}

// Close stops the broker gracefully (node.Close: clients are told, data flushed).
func (b *InProcess) Close() error {
	if b.node == nil {
		return nil
	}
	err := b.node.Close()
	b.node = nil
	return err
}

// Node is the running node (nil after Close).
func (b *InProcess) Node() *node.Node { return b.node }

// ServiceURL is the binary-protocol URL.
func (b *InProcess) ServiceURL() string { return "pulsar://" + b.opts.BrokerAddr }

// WebURL is the admin REST base URL.
func (b *InProcess) WebURL() string { return "http://" + b.opts.WebAddr }

// Cluster is the broker's cluster name.
func (b *InProcess) Cluster() string { return b.opts.Cluster }

// Logs returns what the broker logged so far.
func (b *InProcess) Logs() string {
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	return string(data)
}

func (b *InProcess) cleanup() {
	if err := b.Close(); err != nil {
		b.t.Errorf("harness: close in-process broker: %v", err)
	}
	if b.t.Failed() || os.Getenv("MERIDIAN_KEEP_LOGS") == "1" {
		lines := strings.Split(strings.TrimRight(b.Logs(), "\n"), "\n")
		if len(lines) > 200 {
			lines = lines[len(lines)-200:]
		}
		b.t.Logf("in-process broker log (%s):\n%s", b.logPath, strings.Join(lines, "\n"))
	}
	_ = b.logFile.f.Close()
}
