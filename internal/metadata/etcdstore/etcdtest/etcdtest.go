// Package etcdtest starts etcd servers for tests: embedded in-process (go.etcd.io/etcd/server/v3/embed)
// or, when an `etcd` binary is on PATH (Debian's etcd-server 3.4 in CI), as a real process. Both listen
// on free loopback ports with their data in a temporary directory. It also has a small TCP proxy that
// tests stop and restart to cut client connections.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running etcd.
type Server struct {
	dir        string
	clientURL  string
	peerURL    string
	embedded   *embed.Etcd
	proc       *exec.Cmd
	procDone   chan error
	mu         sync.Mutex
	stopped    bool
	logPath    string
	binVersion string
}

// Endpoints returns the client endpoints ("127.0.0.1:port").
func (s *Server) Endpoints() []string { return []string{strings.TrimPrefix(s.clientURL, "http://")} }

// URL returns a metadata store URL for this server with the given key prefix ("" for the default).
func (s *Server) URL(prefix string) string {
	return "etcd://" + strings.Join(s.Endpoints(), ",") + prefix
}

// Dir returns the server's data directory.
func (s *Server) Dir() string { return s.dir }

// Version returns the version reported by the etcd binary ("" for embedded servers).
func (s *Server) Version() string { return s.binVersion }

// Start starts an embedded etcd for tb; it is stopped when tb's test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := StartEmbedded(tb.TempDir())
	if err != nil {
		tb.Fatalf("starting embedded etcd: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartEmbedded starts an embedded etcd with its data in dir (created if needed).
func StartEmbedded(dir string) (*Server, error) {
	var lastErr error
	for range 3 { // a free port can be taken between choosing and binding it; retry
		cport, err1 := freePort()
		pport, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		s := &Server{
			dir:       dir,
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", cport),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", pport),
		}
		if lastErr = s.startEmbedded(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func (s *Server) startEmbedded() error {
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = filepath.Join(s.dir, "etcd")
	cu, _ := url.Parse(s.clientURL)
	pu, _ := url.Parse(s.peerURL)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(s.dir, "etcd.log")}
	s.logPath = cfg.LogOutputs[0]
	// Tests do not need etcd's own durability; fsync on a shared CI disk costs seconds.
	cfg.UnsafeNoFsync = true
	cfg.TickMs, cfg.ElectionMs = 10, 100
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("embedded etcd on %s: %w", s.clientURL, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("embedded etcd on %s failed: %w", s.clientURL, err)
	case <-time.After(30 * time.Second):
		e.Server.Stop()
		e.Close()
		return fmt.Errorf("embedded etcd on %s not ready after 30s (log %s)", s.clientURL, s.logPath)
	}
	s.mu.Lock()
	s.embedded, s.stopped = e, false
	s.mu.Unlock()
	return nil
}

// Stop stops the server (keeping its data). Safe to call more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if s.embedded != nil {
		s.embedded.Close()
		s.embedded = nil
	}
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
	if s.binVersion != "" {
		return s.startProcess()
	}
	return s.startEmbedded()
}

// BinaryPath returns the path of an `etcd` binary on PATH, or "" (tests that need one skip).
func BinaryPath() string {
	p, err := exec.LookPath("etcd")
	if err != nil {
		return ""
	}
	return p
}

// StartProcess starts the `etcd` binary found on PATH for tb, or skips tb when there is none. It is
// stopped when tb's test ends.
func StartProcess(tb testing.TB) *Server {
	tb.Helper()
	bin := BinaryPath()
	if bin == "" {
		tb.Skip("no etcd binary on PATH (Debian: apt-get install etcd-server)")
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		tb.Fatalf("%s --version: %v: %s", bin, err, out)
	}
	var lastErr error
	for range 3 {
		cport, err1 := freePort()
		pport, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			tb.Fatal(err)
		}
		s := &Server{
			dir:        tb.TempDir(),
			clientURL:  fmt.Sprintf("http://127.0.0.1:%d", cport),
			peerURL:    fmt.Sprintf("http://127.0.0.1:%d", pport),
			binVersion: firstLine(string(out)),
		}
		if lastErr = s.startProcess(); lastErr == nil {
			tb.Cleanup(s.Stop)
			return s
		}
	}
	tb.Fatalf("starting %s: %v", bin, lastErr)
	return nil
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
	cmd := exec.Command(BinaryPath(),
		"--name", "etcdtest",
		"--data-dir", filepath.Join(s.dir, "etcd"),
		"--listen-client-urls", s.clientURL,
		"--advertise-client-urls", s.clientURL,
		"--listen-peer-urls", s.peerURL,
		"--initial-advertise-peer-urls", s.peerURL,
		"--initial-cluster", "etcdtest="+s.peerURL,
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
		"--unsafe-no-fsync",
	)
	// Debian's etcd 3.4 reads ETCD_* variables too; keep the caller's environment out of it.
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
	// Ready when a linearizable read succeeds.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := ping(s.Endpoints()); err == nil {
			return nil
		}
		select {
		case err := <-done:
			s.mu.Lock()
			s.proc, s.stopped = nil, true
			s.mu.Unlock()
			log, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("etcd exited: %v; log tail: %s", err, tail(string(log), 1500))
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("etcd process on %s not ready after 30s (log %s)", s.clientURL, s.logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
