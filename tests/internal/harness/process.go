package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Options configures a `meridian standalone` process. Zero values mean the harness's defaults:
// free loopback ports, a fresh temporary data dir, the broker's own defaults for everything else.
type Options struct {
	Cluster           string   // --cluster; empty: the broker's default ("standalone")
	DataDir           string   // --data-dir; empty: a new t.TempDir()
	BrokerAddr        string   // --broker-addr; empty: 127.0.0.1:<free port>
	WebAddr           string   // --web-addr; empty: 127.0.0.1:<free port>
	MaxMessageSize    int      // --max-message-size; 0: broker default
	Dedup             bool     // --dedup
	FsyncInterval     bool     // --fsync interval instead of always
	NoAutoTopicCreate bool     // --auto-topic-creation=false
	ConfigStore       string   // --config-store URL (e.g. a test etcd's)
	ExtraArgs         []string // appended after the flags above
	Env               []string // extra environment (KEY=VALUE) for the process

	// ReadyTimeout bounds the wait for GET /admin/v2/brokers/ready after every start; 0 means 30 s.
	ReadyTimeout time.Duration
	// StopTimeout bounds a graceful SIGTERM shutdown; 0 means 5 s (docs/operations.md). A slower or failed
	// shutdown fails the test.
	StopTimeout time.Duration
}

// Process is one `meridian standalone` OS process that can be stopped, killed and restarted on the
// same ports and data dir. It is not safe for concurrent use by several goroutines.
type Process struct {
	t       testing.TB
	bin     string
	opts    Options
	logPath string
	logFile *os.File

	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current process has exited
	waitErr error         // cmd.Wait's result, valid after exited is closed
	starts  int

	// signalled is set before the harness signals the process, so that an exit without it is a crash.
	signalled atomic.Bool
	crashOnce sync.Once
	crashed   chan struct{} // closed when the process exits without having been signalled
	crashErr  error
	abandoned bool // StartStandalone gave up this process before it was ready: cleanup skips it
}

var processSeq struct {
	sync.Mutex
	n int
}

// StartStandalone builds (once) and starts `meridian standalone`, waits until it is ready and
// registers a Cleanup that stops it gracefully and fails the test if it crashed, panicked, raced or
// did not shut down within StopTimeout.
//
// Addresses the harness chose are below the ephemeral range, yet another test process (go test
// runs packages in parallel) may pick the same port between the check and the bind: a first start
// that fails with "address already in use" on such an address is retried with other ports.
func StartStandalone(t testing.TB, opts Options) *Process {
	t.Helper()
	ownAddrs := opts.BrokerAddr == "" && opts.WebAddr == ""
	for attempt := 1; ; attempt++ {
		p := NewStandalone(t, opts)
		if hookBeforeStandaloneStart != nil {
			hookBeforeStandaloneStart(attempt, p.opts)
		}
		err := p.StartE()
		if err == nil {
			return p
		}
		if !ownAddrs || attempt == 3 || p.Running() || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("harness: %v", err)
		}
		t.Logf("harness: start %d lost its port to another process, trying other ports: %v", attempt, err)
		p.abandon()
	}
}

// NewStandalone prepares a standalone process without starting it (call Start).
func NewStandalone(t testing.TB, opts Options) *Process {
	t.Helper()
	bin := MeridianBinary(t)
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(t.TempDir(), "data")
	}
	if opts.BrokerAddr == "" {
		opts.BrokerAddr = FreeAddr(t)
	}
	if opts.WebAddr == "" {
		opts.WebAddr = FreeAddr(t)
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 30 * time.Second
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 5 * time.Second
	}
	processSeq.Lock()
	processSeq.n++
	n := processSeq.n
	processSeq.Unlock()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("meridian-%d.log", n))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("harness: create log file: %v", err)
	}
	p := &Process{t: t, bin: bin, opts: opts, logPath: logPath, logFile: f, crashed: make(chan struct{})}
	t.Cleanup(p.cleanup)
	return p
}

// Args returns the command line (without the binary) the process is started with.
func (p *Process) Args() []string {
	o := p.opts
	args := []string{"standalone",
		"--data-dir", o.DataDir,
		"--broker-addr", o.BrokerAddr,
		"--web-addr", o.WebAddr,
	}
	if o.Cluster != "" {
		args = append(args, "--cluster", o.Cluster)
	}
	if o.MaxMessageSize > 0 {
		args = append(args, "--max-message-size", strconv.Itoa(o.MaxMessageSize))
	}
	if o.Dedup {
		args = append(args, "--dedup")
	}
	if o.FsyncInterval {
		args = append(args, "--fsync", "interval")
	}
	if o.NoAutoTopicCreate {
		args = append(args, "--auto-topic-creation=false")
	}
	if o.ConfigStore != "" {
		args = append(args, "--config-store", o.ConfigStore)
	}
	return append(args, o.ExtraArgs...)
}

// ServiceURL is the binary-protocol URL, pulsar://host:port.
func (p *Process) ServiceURL() string { return "pulsar://" + p.opts.BrokerAddr }

// WebURL is the admin REST base URL, http://host:port.
func (p *Process) WebURL() string { return "http://" + p.opts.WebAddr }

// DataDir is the process's data directory (kept across restarts).
func (p *Process) DataDir() string { return p.opts.DataDir }

// Cluster is the cluster name the process runs (the broker default when not set).
func (p *Process) Cluster() string {
	if p.opts.Cluster == "" {
		return "standalone"
	}
	return p.opts.Cluster
}

// Running reports whether the process has been started and has not exited.
func (p *Process) Running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Start starts the process (again, after Stop or Kill, on the same ports and data dir) and waits for
// readiness; it fails the test if the process exits or is not ready within ReadyTimeout.
func (p *Process) Start() {
	p.t.Helper()
	if err := p.StartE(); err != nil {
		p.t.Fatalf("harness: %v", err)
	}
}

// StartE is Start returning the error instead of failing the test, for use from goroutines other
// than the test's own.
func (p *Process) StartE() error {
	if p.Running() {
		return errors.New("Start: process already running")
	}
	p.starts++
	fmt.Fprintf(p.logFile, "==== harness: start #%d: %s %s\n", p.starts, p.bin, strings.Join(p.Args(), " "))
	cmd := exec.Command(p.bin, p.Args()...)
	cmd.Stdout = p.logFile
	cmd.Stderr = p.logFile
	cmd.Env = append(os.Environ(), p.opts.Env...)
	// If the test binary dies, the kernel kills the broker too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start meridian: %w", err)
	}
	p.cmd = cmd
	p.signalled.Store(false)
	exited := make(chan struct{})
	p.exited = exited
	go func() { // owned by p; ends when the process exits, which cleanup guarantees
		err := cmd.Wait()
		p.waitErr = err
		if !p.signalled.Load() {
			p.crashOnce.Do(func() {
				p.crashErr = fmt.Errorf("meridian exited on its own (%v)", err)
				close(p.crashed)
			})
		}
		close(exited)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.ReadyTimeout)
	defer cancel()
	// A process that exits before it is ready ends the wait at once, not at ReadyTimeout.
	go func() { // ends with the wait (cancel) or when the process exits
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := WaitFor(ctx, func(ctx context.Context) error {
		select {
		case <-exited:
			return errProcessExited
		default:
		}
		return checkReady(ctx, p.WebURL())
	})
	if err != nil {
		select {
		case <-exited:
			return fmt.Errorf("meridian exited before it was ready (%v); log:\n%s", p.waitErr, p.tail(60))
		default:
		}
		return fmt.Errorf("meridian not ready within %v: %v; log:\n%s", p.opts.ReadyTimeout, err, p.tail(60))
	}
	return nil
}

var errProcessExited = errors.New("process exited")

func checkReady(ctx context.Context, webURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, webURL+"/admin/v2/brokers/ready", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ready: HTTP %d", resp.StatusCode)
	}
	return nil
}

// Stop sends SIGTERM and waits up to StopTimeout for a clean exit (status 0). It returns an error
// (after killing the process) if the process exits with another status or does not exit in time.
func (p *Process) Stop() error {
	if !p.Running() {
		return nil
	}
	start := time.Now()
	p.signalled.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		fmt.Fprintf(p.logFile, "==== harness: SIGTERM exit after %v: %v\n", time.Since(start).Round(time.Millisecond), p.waitErr)
		if p.waitErr != nil {
			return fmt.Errorf("meridian exited with %v after SIGTERM", p.waitErr)
		}
		return nil
	case <-time.After(p.opts.StopTimeout):
		p.Kill()
		return fmt.Errorf("meridian did not exit within %v of SIGTERM (killed)", p.opts.StopTimeout)
	}
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Process) Kill() {
	if !p.Running() {
		return
	}
	p.signalled.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	fmt.Fprintf(p.logFile, "==== harness: SIGKILL\n")
}

// Crashed is closed when the process exits without the harness having stopped or killed it (a crash,
// a fatal error, an os.Exit). Tests that wait on clients, which retry forever while the broker is
// gone, select on it or use CrashContext to fail fast.
func (p *Process) Crashed() <-chan struct{} { return p.crashed }

// CrashContext returns a context that ends when parent ends or the process crashes
// (context.Cause(ctx) then says why). Call cancel when done.
func (p *Process) CrashContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() { // ends when ctx ends (the caller's cancel) or on a crash
		select {
		case <-p.crashed:
			cancel(p.crashErr)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// CrashErr is the reason the process crashed, or nil.
func (p *Process) CrashErr() error {
	select {
	case <-p.crashed:
		return p.crashErr
	default:
		return nil
	}
}

// Restart kills the process with SIGKILL and starts it again on the same ports and data dir.
func (p *Process) Restart() {
	p.t.Helper()
	if err := p.RestartE(); err != nil {
		p.t.Fatalf("harness: restart: %v", err)
	}
}

// RestartE is Restart returning the error instead of failing the test.
func (p *Process) RestartE() error {
	p.Kill()
	return p.StartE()
}

// Logs returns everything the process (all its starts) wrote so far.
func (p *Process) Logs() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	return string(b)
}

func (p *Process) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Logs(), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines omitted)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// logProblems lists lines showing that the broker panicked, crashed or raced.
func (p *Process) logProblems() []string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		for _, marker := range []string{"panic:", "fatal error:", "WARNING: DATA RACE"} {
			if strings.HasPrefix(strings.TrimSpace(line), marker) {
				found = append(found, line)
			}
		}
	}
	return found
}

// hookBeforeStandaloneStart, when set (by this package's tests), runs before each start attempt of
// StartStandalone.
var hookBeforeStandaloneStart func(attempt int, opts Options)

// abandon marks a process that exited before it was ready and is replaced by another.
func (p *Process) abandon() {
	p.abandoned = true
	_ = p.logFile.Close()
}

func (p *Process) cleanup() {
	if p.abandoned {
		return
	}
	if err := p.CrashErr(); err != nil {
		p.t.Errorf("harness: %v", err)
	}
	if err := p.Stop(); err != nil {
		p.t.Errorf("harness: %v", err)
	}
	if problems := p.logProblems(); len(problems) > 0 {
		p.t.Errorf("harness: the broker log shows a crash or race: %s", strings.Join(problems, "; "))
	}
	if p.t.Failed() || os.Getenv("MERIDIAN_KEEP_LOGS") == "1" {
		p.t.Logf("meridian log (%s):\n%s", p.logPath, p.tail(200))
	}
	_ = p.logFile.Close()
}

// PID is the operating-system process id of the running process (0 when it is not running).
func (p *Process) PID() int {
	if !p.Running() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Memory is the resident memory of the running process from /proc/PID/status: RSS now (VmRSS) and
// its peak since the process started (VmHWM), in bytes.
func (p *Process) Memory() (rss, peak int64, err error) {
	pid := p.PID()
	if pid == 0 {
		return 0, 0, errors.New("harness: process not running")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		fields := strings.Fields(value) // "123456 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, 0, fmt.Errorf("harness: unexpected %s line %q", name, line)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("harness: %s line %q: %w", name, line, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		return 0, 0, fmt.Errorf("harness: no VmRSS/VmHWM in /proc/%d/status", pid)
	}
	return rss, peak, nil
}
