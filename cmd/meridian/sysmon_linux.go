package main

import (
	"fmt"
	"os"
	"syscall"
)

// reexecForPollingSysmon replaces the process with the same binary, arguments and environment,
// plus the GODEBUG setting that keeps sysmon out of its deep sleep (sysmon.go), when args run a
// broker and the setting is not there yet. The process keeps its PID (a supervisor sees nothing).
// It returns only if there was nothing to do or the re-execution failed; then the broker runs with
// the runtime's default, which works, at more CPU per group commit under a light load.
func reexecForPollingSysmon(args []string) {
	if !reexecs(args) {
		return
	}
	env, changed := sysmonPollingEnv(os.Environ())
	if !changed {
		return
	}
	// /proc/self/exe is this very binary, even if its file was replaced or removed since.
	err := syscall.Exec("/proc/self/exe", os.Args, env)
	fmt.Fprintf(os.Stderr, "meridian: running without a polling sysmon (docs/operations.md, \"Lifecycle\"): re-execution failed: %v\n", err)
}
