package main

import (
	"fmt"
	"os"
	"syscall"
)

// reexecForPollingSysmon replaces the process with the same binary, arguments and environment,
// plus the GODEBUG setting that keeps sysmon out of its deep sleep (sysmon.go), when args run a
// broker and the setting is not there yet. The process keeps its PID, and its name: the kernel
// names a process after the file it executes, so the binary is executed by its own path, not as
// /proc/self/exe (which would rename it "exe" in ps, top and /proc/PID/comm). /proc/self/exe is
// the fallback for a binary whose file was removed since it started. It returns only if there was
// nothing to do or the re-execution failed; then the broker runs with the runtime's default, which
// works, at more CPU per group commit under a light load.
func reexecForPollingSysmon(args []string) {
	if !runsBroker(args) {
		return
	}
	env, changed := sysmonPollingEnv(os.Environ())
	if !changed {
		return
	}
	if self, err := os.Executable(); err == nil {
		_ = syscall.Exec(self, os.Args, env) // it returns only if it failed: the fallback follows
	}
	err := syscall.Exec("/proc/self/exe", os.Args, env)
	// Logging is not set up yet: one plain line, as for a bad flag.
	fmt.Fprintf(os.Stderr, "meridian: running with the Go runtime's default sysmon (docs/operations.md, \"Lifecycle\"): re-execution failed: %v\n", err)
}
