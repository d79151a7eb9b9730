package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestSysmonPollingEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []string
		want    []string
		changed bool
	}{
		{"no GODEBUG", []string{"A=1"}, []string{"A=1", "GODEBUG=" + schedtraceSetting}, true},
		{"empty GODEBUG", []string{"GODEBUG=", "A=1"}, []string{"GODEBUG=" + schedtraceSetting, "A=1"}, true},
		{"other settings kept", []string{"GODEBUG=gctrace=1"}, []string{"GODEBUG=gctrace=1," + schedtraceSetting}, true},
		{"the operator's schedtrace wins", []string{"GODEBUG=schedtrace=0"}, []string{"GODEBUG=schedtrace=0"}, false},
		{"among others", []string{"GODEBUG=gctrace=1,schedtrace=1000"}, []string{"GODEBUG=gctrace=1,schedtrace=1000"}, false},
		{"after the re-execution", []string{"GODEBUG=" + schedtraceSetting}, []string{"GODEBUG=" + schedtraceSetting}, false},
		{"only the first GODEBUG counts", []string{"GODEBUG=x=1", "GODEBUG=schedtrace=0"}, []string{"GODEBUG=x=1," + schedtraceSetting, "GODEBUG=schedtrace=0"}, true},
		{"a prefix is not the key", []string{"GODEBUG=noschedtrace=1"}, []string{"GODEBUG=noschedtrace=1," + schedtraceSetting}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got, changed := sysmonPollingEnv(in)
			if changed != tc.changed || !slices.Equal(got, tc.want) {
				t.Errorf("sysmonPollingEnv(%q) = %q, %v; want %q, %v", tc.in, got, changed, tc.want, tc.changed)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("the input was modified: %q", in)
			}
		})
	}
}

func TestOnlyTheBrokerReexecutes(t *testing.T) {
	for args, want := range map[string]bool{"standalone --data-dir x": true, "version": false, "repair x": false, "": false} {
		if got := runsBroker(strings.Fields(args)); got != want {
			t.Errorf("runsBroker(%q) = %v", args, got)
		}
	}
}

// TestProcessRunsWithPollingSysmon: the started process (same PID, same name) runs with the GODEBUG
// setting in its environment, unless the operator set schedtrace; either way it serves.
func TestProcessRunsWithPollingSysmon(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the re-execution is Linux only")
	}
	for _, tc := range []struct {
		name    string
		godebug string // "" for none
		want    string
	}{
		{"default", "", "GODEBUG=" + schedtraceSetting},
		{"kept with other settings", "GODEBUG=madvdontneed=1", "GODEBUG=madvdontneed=1," + schedtraceSetting},
		{"the operator's choice", "GODEBUG=schedtrace=0", "GODEBUG=schedtrace=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GODEBUG=") })
			if tc.godebug != "" {
				env = append(env, tc.godebug)
			}
			webAddr := freePort(t)
			p := startProcessEnv(t, env, "--data-dir", t.TempDir(), "--broker-addr", freePort(t), "--web-addr", webAddr)
			p.waitReady(t, webAddr)
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			var godebug []string
			for kv := range bytes.SplitSeq(raw, []byte{0}) {
				if bytes.HasPrefix(kv, []byte("GODEBUG=")) {
					godebug = append(godebug, string(kv))
				}
			}
			if len(godebug) != 1 || godebug[0] != tc.want {
				t.Errorf("the broker runs with %q, want [%q]", godebug, tc.want)
			}
			// The kernel names a process after the file it executes: the binary's own path keeps
			// its name in ps, top and pgrep.
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if name := strings.TrimSpace(string(comm)); name != "meridian" {
				t.Errorf("the broker's process is named %q, want meridian", name)
			}
			if strings.Contains(p.out.String(), "re-execution failed") {
				t.Errorf("output:\n%s", p.out.String())
			}
		})
	}
}
