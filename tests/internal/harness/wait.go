package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/freeport"
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

// FreePort returns a loopback TCP port that is free now and that no earlier call in this process
// returned, from below the kernel's ephemeral range (internal/freeport): no outgoing connection
// takes it before the server binds it.
func FreePort(t testing.TB) int {
	t.Helper()
	return freeport.Port(t)
}

// FreeAddr returns "127.0.0.1:<free port>".
func FreeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}
