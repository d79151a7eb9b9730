package node

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log sink the node's goroutines may write to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startShouldFail(t *testing.T, o Options) (logs string, err error) {
	t.Helper()
	var buf lockedBuffer
	o.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, o)
	if err == nil {
		_ = n.Close()
		t.Fatal("start succeeded")
	}
	return buf.String(), err
}

func assertAbsent(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left behind (stat: %v)", p, err)
		}
	}
}

// A first start that fails (a port in use, storage that cannot open) leaves no LOCK and no
// cluster.json: the data dir is not bound to a cluster that never ran, and a data dir the start
// created is removed again. The log says the start failed and why, not "stopped err=<nil>".
func TestFailedFirstStartLeavesTheDataDirUnbound(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	for _, which := range []string{"broker", "web"} {
		t.Run("port in use: "+which, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			o := testOptions(t, dir)
			if which == "broker" {
				o.BrokerAddr = busy.Addr().String()
			} else {
				o.WebAddr = busy.Addr().String()
			}
			logs, err := startShouldFail(t, o)
			if !strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("start error = %v", err)
			}
			assertAbsent(t, dir)
			if strings.Contains(logs, "err=<nil>") || !strings.Contains(logs, "address already in use") {
				t.Errorf("logs of the failed start:\n%s", logs)
			}
		})
	}

	t.Run("storage cannot open", func(t *testing.T) {
		dir := t.TempDir()
		// A file where the storage engine's directory goes: recovery fails after the dir is bound.
		if err := os.WriteFile(filepath.Join(dir, "storage"), []byte("not a dir"), 0o644); err != nil {
			t.Fatal(err)
		}
		logs, err := startShouldFail(t, testOptions(t, dir))
		assertAbsent(t, filepath.Join(dir, lockFileName), filepath.Join(dir, clusterFileName))
		if strings.Contains(logs, "err=<nil>") || !strings.Contains(logs, err.Error()) {
			t.Errorf("logs of the failed start (error %v):\n%s", err, logs)
		}
	})

	t.Run("a bound data dir stays bound", func(t *testing.T) {
		dir := t.TempDir()
		n := startNode(t, testOptions(t, dir))
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		o := testOptions(t, dir)
		o.BrokerAddr = busy.Addr().String()
		startShouldFail(t, o)
		if _, err := os.Stat(filepath.Join(dir, clusterFileName)); err != nil {
			t.Errorf("cluster.json of a data dir that ran before: %v", err)
		}
	})
}
