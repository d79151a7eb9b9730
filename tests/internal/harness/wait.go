package harness

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// PollInterval is how often WaitFor re-checks its condition.
const PollInterval = 20 * time.Millisecond

// WaitFor calls cond every PollInterval until it returns nil or ctx ends; it returns the last error
// of cond, wrapped with ctx's error, when the deadline passes.
func WaitFor(ctx context.Context, cond func(context.Context) error) error {
	ticker := time.NewTicker(PollInterval)
	defer ticker.Stop()
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-ticker.C:
		}
	}
}

// Eventually fails the test unless cond returns nil within timeout. what names the condition in the
// failure message.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := WaitFor(ctx, func(context.Context) error { return cond() }); err != nil {
		t.Fatalf("waiting %v for %s: %v", timeout, what, err)
	}
}

// handedOut holds every port FreePort returned in this test process: the kernel may give the
// same ephemeral port to two listeners in a row once the first is closed (seen in CI: a broker
// started with the same port for --broker-addr and --web-addr), so a port is never handed out twice.
var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{}
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and that no earlier call in
// this process returned. Another process may take it before it is used; the risk is accepted for
// tests on a loopback interface.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("harness: free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		handedOutMu.Lock()
		fresh := !handedOut[port]
		handedOut[port] = true
		handedOutMu.Unlock()
		if fresh {
			return port
		}
	}
	t.Fatalf("harness: no fresh free port in 100 tries")
	return 0
}

// FreeAddr returns "127.0.0.1:<free port>".
func FreeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}
