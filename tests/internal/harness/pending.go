package harness

import (
	"os"
	"testing"
)

// Pending marks a test that drives a broker feature not working yet. It is skipped unless
// MERIDIAN_E2E_PENDING=1, so CI on main stays green while the test exists and compiles; run
// `MERIDIAN_E2E_PENDING=1 go test ./e2e/...` to see where the broker stands. Remove the call when
// the test passes.
func Pending(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("MERIDIAN_E2E_PENDING") != "1" {
		t.Skipf("pending (%s); run with MERIDIAN_E2E_PENDING=1", reason)
	}
}
