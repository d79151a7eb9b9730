package harness

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/poll"
)

// WaitFor calls cond until it returns nil or ctx ends (internal/poll.Wait): it returns the last
// error of cond, wrapped with ctx's error, when the deadline passes.
func WaitFor(ctx context.Context, cond func(context.Context) error) error {
	return poll.Wait(ctx, cond)
}

// Eventually fails the test unless cond returns nil within timeout (internal/poll.UntilNil). what
// names the condition in the failure message.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	poll.UntilNil(t, timeout, what, cond)
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
