package main

import "strings"

// The Go runtime's monitor thread (sysmon) sleeps on a futex when every P is idle, and the first
// system call after that wakes it and sets it polling every 20 µs for as long as anything runs. A
// broker under a light load goes idle between group commits, so each group commit paid for that
// wake-up and for the polling through its fsync: about half the CPU of a bare Go loop that reads,
// writes, fdatasyncs and replies. With the runtime's schedtrace setting on, sysmon never takes that
// deep sleep; it backs off to one wake-up every 10 ms instead. The setting is read once, at start,
// from GODEBUG, so `meridian standalone` re-executes itself with it (sysmon_linux.go). The figures
// and the costs: docs/design.md, "The process and the Go runtime".

// schedtraceSetting turns the deep sleep off. Its value is also how often, in milliseconds, the
// runtime writes one line of scheduler figures to stderr: the largest it takes, about 24.8 days.
const schedtraceSetting = "schedtrace=2147483647"

// sysmonPollingEnv returns environ with schedtraceSetting added to GODEBUG, and true; or environ
// unchanged and false when GODEBUG already has a schedtrace setting (the operator's, or this
// process's own after the re-execution): `GODEBUG=schedtrace=0` keeps the runtime's default. Like
// the runtime, it reads the first GODEBUG entry only.
func sysmonPollingEnv(environ []string) ([]string, bool) {
	for i, kv := range environ {
		value, isGodebug := strings.CutPrefix(kv, "GODEBUG=")
		if !isGodebug {
			continue
		}
		for _, field := range strings.Split(value, ",") {
			if strings.HasPrefix(field, "schedtrace=") {
				return environ, false
			}
		}
		out := append([]string(nil), environ...)
		if value == "" {
			out[i] = "GODEBUG=" + schedtraceSetting
		} else {
			out[i] = kv + "," + schedtraceSetting
		}
		return out, true
	}
	return append(append([]string(nil), environ...), "GODEBUG="+schedtraceSetting), true
}

// reexecs reports whether the command line is one that runs a broker, and so is worth a
// re-execution for a polling sysmon (args without the program name).
func reexecs(args []string) bool {
	return len(args) > 0 && args[0] == "standalone"
}
