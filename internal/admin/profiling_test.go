package admin_test

import (
	"bytes"
	"net/http"
	"testing"
)

// TestProfilingIsForSuperusers: /debug/pprof/ on the admin listener serves Go's profiles to
// superusers; any other role gets 403 and no credentials 401.
func TestProfilingIsForSuperusers(t *testing.T) {
	e := newAuthzEnv(t)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine", "/debug/pprof/cmdline"} {
		e.expect("acme-admin", http.MethodGet, path, "", http.StatusForbidden)
		e.expect("", http.MethodGet, path, "", http.StatusUnauthorized)
	}
	e.expect("acme-admin", http.MethodGet, "/debug/pprof/profile?seconds=1", "", http.StatusForbidden)
	heap := e.expect("root", http.MethodGet, "/debug/pprof/heap", "", http.StatusOK)
	if !bytes.HasPrefix([]byte(heap), []byte{0x1f, 0x8b}) { // a gzipped profile.proto
		t.Fatalf("heap profile does not look like a gzipped profile: %q", heap[:min(len(heap), 40)])
	}
	if index := e.expect("root", http.MethodGet, "/debug/pprof/", "", http.StatusOK); !bytes.Contains([]byte(index), []byte("goroutine")) {
		t.Fatalf("pprof index: %.200s", index)
	}
	cpu := e.expect("root", http.MethodGet, "/debug/pprof/profile?seconds=1", "", http.StatusOK)
	if !bytes.HasPrefix([]byte(cpu), []byte{0x1f, 0x8b}) {
		t.Fatalf("CPU profile does not look like a gzipped profile: %q", cpu[:min(len(cpu), 40)])
	}
}
