// Package etcdtest starts etcd servers for tests, each a real `etcd` process on free loopback ports
// with its data in a temporary directory:
//   - Start runs the etcd server of the version this module's client is built against. The server is
//     a test-only dependency, so it is not in this module's go.mod: the tests module (tests/) builds
//     it as a Go tool (tests/cmd/etcd, `go tool -n etcd`, kept in the build cache).
//   - StartInstalled runs the `etcd` binary on PATH (Debian's etcd-server 3.4 in CI), to prove the
//     client works with the server an operator installs; tests skip without one.
//
// It also has a small TCP proxy that tests stop and restart to cut client connections.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meridian-mq/meridian/internal/freeport"
)

// Server is a running etcd process.
type Server struct {
	bin       string
	dir       string
	clientURL string
	peerURL   string
	version   string
	mu        sync.Mutex
	proc      *exec.Cmd
	procDone  chan error
	stopped   bool
	logPath   string
}

// Endpoints returns the client endpoints ("127.0.0.1:port").
func (s *Server) Endpoints() []string { return []string{strings.TrimPrefix(s.clientURL, "http://")} }

// URL returns a metadata store URL for this server with the given key prefix ("" for the default).
func (s *Server) URL(prefix string) string {
	return "etcd://" + strings.Join(s.Endpoints(), ",") + prefix
}

// Dir returns the server's data directory.
func (s *Server) Dir() string { return s.dir }

// Version returns the first line of `etcd --version` ("etcd Version: 3.7.3").
func (s *Server) Version() string { return s.version }

// Start starts the etcd server of the client's version for tb; it is stopped when tb's test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := StartIn(tb.TempDir())
	if err != nil {
		tb.Fatalf("starting etcd: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartIn starts the etcd server of the client's version with its data in dir (created if needed),
// for a TestMain that shares one server between tests; the caller stops it.
func StartIn(dir string) (*Server, error) {
	bin, err := BuiltPath()
	if err != nil {
		return nil, err
	}
	return start(bin, dir)
}

var built struct {
	once sync.Once
	path string
	err  error
}

// BuiltPath returns the path of the etcd server built from the tests module (at the version its
// go.mod requires), building it on first use. The executable lives in the Go build cache, so later
// test runs reuse it.
func BuiltPath() (string, error) {
	built.once.Do(func() {
		_, self, _, ok := runtime.Caller(0)
		if !ok {
			built.err = errors.New("etcdtest: no source path to find the tests module from")
			return
		}
		// This file is internal/metadata/etcdstore/etcdtest/etcdtest.go in the root module.
		testsModule := filepath.Join(filepath.Dir(self), "..", "..", "..", "..", "tests")
		cmd := exec.Command("go", "tool", "-n", "etcd")
		cmd.Dir = testsModule
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			built.err = fmt.Errorf("etcdtest: building etcd in %s (go tool -n etcd): %v: %s", testsModule, err, stderr)
			return
		}
		built.path = strings.TrimSpace(string(out))
	})
	return built.path, built.err
}

// InstalledPath returns the path of an `etcd` binary on PATH, or "" (tests that need one skip).
func InstalledPath() string {
	p, err := exec.LookPath("etcd")
	if err != nil {
		return ""
	}
	return p
}

// StartInstalled starts the `etcd` binary found on PATH for tb, or skips tb when there is none. It
// is stopped when tb's test ends.
func StartInstalled(tb testing.TB) *Server {
	tb.Helper()
	bin := InstalledPath()
	if bin == "" {
		tb.Skip("no etcd binary on PATH (Debian: apt-get install etcd-server)")
	}
	s, err := start(bin, tb.TempDir())
	if err != nil {
		tb.Fatalf("starting %s: %v", bin, err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// start runs bin on free ports with its data in dir.
func start(bin, dir string) (*Server, error) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %v: %s", bin, err, out)
	}
	var lastErr error
	// Ports from below the kernel's ephemeral range (internal/freeport), where no outgoing
	// connection takes them before etcd binds them (Restart binds the same ports again); another
	// bind still can, so retry.
	for range 3 {
		cport, err1 := freeport.Find()
		pport, err2 := freeport.Find()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		s := &Server{
			bin:       bin,
			dir:       dir,
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", cport),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", pport),
			version:   firstLine(string(out)),
		}
		if lastErr = s.startProcess(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Stop stops the server (keeping its data). Safe to call more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if s.proc != nil {
		_ = s.proc.Process.Signal(os.Interrupt)
		select {
		case <-s.procDone:
		case <-time.After(10 * time.Second):
			_ = s.proc.Process.Kill()
			<-s.procDone
		}
		s.proc = nil
	}
}

// Restart stops the server and starts it again on the same ports with the same data.
func (s *Server) Restart() error {
	s.Stop()
	return s.startProcess()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

func (s *Server) startProcess() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.logPath = logf.Name()
	cmd := exec.Command(s.bin,
		"--name", "etcdtest",
		"--data-dir", filepath.Join(s.dir, "etcd"),
		"--listen-client-urls", s.clientURL,
		"--advertise-client-urls", s.clientURL,
		"--listen-peer-urls", s.peerURL,
		"--initial-advertise-peer-urls", s.peerURL,
		"--initial-cluster", "etcdtest="+s.peerURL,
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
		"--log-level", "error",
		// Tests do not need etcd's own durability; fsync on a shared CI disk costs seconds.
		"--unsafe-no-fsync",
	)
	// etcd reads ETCD_* variables too; keep the caller's environment out of it.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.dir}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	s.mu.Lock()
	s.proc, s.procDone, s.stopped = cmd, done, false
	s.mu.Unlock()
	// Ready when a linearizable read succeeds. The read is tried once the client port accepts
	// connections: a client that dials a closed port backs off for a second before it retries.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if listening(s.Endpoints()[0]) && ping(s.Endpoints()) == nil {
			return nil
		}
		select {
		case err := <-done:
			s.mu.Lock()
			s.proc, s.stopped = nil, true
			s.mu.Unlock()
			log, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("etcd exited: %v; log tail: %s", err, tail(string(log), 1500))
		case <-time.After(10 * time.Millisecond): // poll interval of a deadline-bounded wait
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("etcd process on %s not ready after 30s (log %s)", s.clientURL, s.logPath)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// listening reports whether addr accepts TCP connections.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func ping(endpoints []string) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = c.Get(ctx, "/etcdtest-ping")
	return err
}
