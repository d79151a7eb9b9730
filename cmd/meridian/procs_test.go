package main

import (
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestProcessRunsWithASpareProc: the broker runs with one P more than the runtime would give it
// (internal/node/procs.go), unless the operator set GOMAXPROCS.
func TestProcessRunsWithASpareProc(t *testing.T) {
	runtimeChoice := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" {
		runtimeChoice = runtime.NumCPU() // an approximation the cases below do not rely on
	}
	for _, tc := range []struct {
		name       string
		gomaxprocs string // "" for none
		want       int
	}{
		{"default", "", runtimeChoice + 1},
		{"the operator's choice", "GOMAXPROCS=5", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") })
			if tc.gomaxprocs != "" {
				env = append(env, tc.gomaxprocs)
			} else if os.Getenv("GOMAXPROCS") != "" {
				t.Skip("the test runs under an operator's GOMAXPROCS: the runtime's own choice is unknown")
			}
			webAddr := freePort(t)
			p := startProcessEnv(t, env, "--data-dir", t.TempDir(), "--broker-addr", freePort(t), "--web-addr", webAddr)
			p.waitReady(t, webAddr)
			resp, err := http.Get("http://" + webAddr + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			parser := expfmt.NewTextParser(model.UTF8Validation)
			families, err := parser.TextToMetricFamilies(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			f := families["go_sched_gomaxprocs_threads"]
			if f == nil || len(f.GetMetric()) != 1 {
				t.Fatalf("no go_sched_gomaxprocs_threads in /metrics")
			}
			if got := int(f.GetMetric()[0].GetGauge().GetValue()); got != tc.want {
				t.Errorf("GOMAXPROCS %d, want %d", got, tc.want)
			}
		})
	}
}
