// Package poll is how tests wait for something to happen: they poll a condition with a deadline and
// never sleep for a fixed time and hope. It is imported by tests only (it imports testing, as
// net/http/httptest does).
package poll

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Interval is how often a condition is checked again.
const Interval = 5 * time.Millisecond

// Wait calls cond every Interval until it returns nil or ctx ends. When ctx ends first it returns
// ctx's error together with cond's last error.
func Wait(ctx context.Context, cond func(context.Context) error) error {
	ticker := time.NewTicker(Interval)
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

// UntilNil fails t unless cond returns nil within timeout; what names the condition, and the
// failure shows cond's last error.
func UntilNil(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Wait(ctx, func(context.Context) error { return cond() }); err != nil {
		t.Fatalf("waiting %v for %s: %v", timeout, what, err)
	}
}

// errNotYet is what Until's condition reports while it is false.
var errNotYet = fmt.Errorf("not yet")

// Until fails t unless cond returns true within timeout; what names the condition.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	UntilNil(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}
