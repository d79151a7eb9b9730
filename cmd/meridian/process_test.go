package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/freeport"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// The process tests build the real binary and drive it as an operator would: start, readiness,
// SIGTERM, SIGKILL and an immediate restart on the same ports and data dir.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func meridianBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "meridian-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "meridian")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// freePort returns a loopback address for one of the process's listeners (internal/freeport).
func freePort(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t)
}

// process is one running `meridian standalone`.
type process struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	return startProcessEnv(t, nil, args...)
}

// startProcessEnv starts `meridian standalone args` with env (nil: the test's own environment).
func startProcessEnv(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	p := &process{out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(meridianBinary(t), append([]string{"standalone"}, args...)...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("meridian output:\n%s", p.out.String())
		}
	})
	return p
}

// waitReady polls the readiness endpoint until it answers 200.
func (p *process) waitReady(t *testing.T, webAddr string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := poll.Wait(ctx, func(context.Context) error {
		select {
		case <-p.exited:
			t.Fatalf("meridian exited before it was ready: %v\n%s", p.err, p.out.String())
		default:
		}
		resp, err := client.Get("http://" + webAddr + "/admin/v2/brokers/ready")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("ready: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("not ready after 30 s: %v\n%s", err, p.out.String())
	}
}

// waitOutput polls the process's output for s until d passes; it reports whether s appeared.
func (p *process) waitOutput(s string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return poll.Wait(ctx, func(context.Context) error {
		if !strings.Contains(p.out.String(), s) {
			return fmt.Errorf("no %q in the output", s)
		}
		return nil
	}) == nil
}

func (p *process) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(d):
		t.Fatalf("meridian did not exit within %v", d)
		return nil
	}
}

func TestProcessStartReadySigtermSigkillRestart(t *testing.T) {
	dir := t.TempDir()
	brokerAddr, webAddr := freePort(t), freePort(t)
	args := []string{"--data-dir", dir, "--broker-addr", brokerAddr, "--web-addr", webAddr, "--max-message-size", "1048576"}

	p := startProcess(t, args...)
	p.waitReady(t, webAddr)
	// The line reaches p.out through os/exec's copying goroutine, which may run after readiness
	// answered: poll.
	if !p.waitOutput("broker ready", 10*time.Second) {
		t.Errorf("no 'broker ready' log line:\n%s", p.out.String())
	}
	// The binary protocol answers: CONNECT gets CONNECTED with our max message size.
	checkConnect(t, brokerAddr, 1048576)

	// SIGTERM: graceful, exit code 0, well within 5 s.
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.out.String())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("SIGTERM shutdown took %v", took)
	}

	// Same ports, same data dir; then SIGKILL and an immediate restart.
	p = startProcess(t, args...)
	p.waitReady(t, webAddr)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.wait(t, 10*time.Second)
	p = startProcess(t, args...)
	p.waitReady(t, webAddr)
	checkConnect(t, brokerAddr, 1048576)

	// Another cluster name on this data dir is refused.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = p.wait(t, 10*time.Second)
	q := startProcess(t, append(args, "--cluster", "other")...)
	if err := q.wait(t, 30*time.Second); err == nil || !strings.Contains(q.out.String(), "another cluster") {
		t.Errorf("foreign data dir: exit %v, output:\n%s", err, q.out.String())
	}
}

func TestProcessRefusesBadFlagsWithExitCode(t *testing.T) {
	p := startProcess(t, "--fsync", "never")
	err := p.wait(t, 30*time.Second)
	if err == nil || !strings.Contains(p.out.String(), "--fsync") {
		t.Errorf("exit %v, output:\n%s", err, p.out.String())
	}
}

// connectOnce performs the handshake on a fresh connection and returns the advertised max message size.
func connectOnce(ctx context.Context, addr string) (int32, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	frame, err := wire.EncodeFrame(wire.Command(&pulsarpb.CommandConnect{
		ClientVersion:   proto.String("process-test"),
		ProtocolVersion: proto.Int32(wire.ProtocolVersion),
	}))
	if err != nil {
		return 0, err
	}
	if _, err := nc.Write(frame); err != nil {
		return 0, err
	}
	f, err := wire.NewReader(nc, 0).ReadFrame()
	if err != nil {
		return 0, err
	}
	if f.Type() != pulsarpb.BaseCommand_CONNECTED {
		return 0, fmt.Errorf("got %s, want CONNECTED", f.Type())
	}
	return f.Cmd.GetConnected().GetMaxMessageSize(), nil
}

// checkConnect opens a raw connection, sends CONNECT and expects CONNECTED advertising maxMsg.
func checkConnect(t *testing.T, addr string, maxMsg int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := connectOnce(ctx, addr)
	if err != nil {
		t.Fatalf("CONNECT to %s: %v", addr, err)
	}
	if got != maxMsg {
		t.Errorf("CONNECTED max_message_size = %d, want %d", got, maxMsg)
	}
}
