package main

import "strings"

// The Go runtime's monitor thread (sysmon) sleeps on a futex when every P is idle; the first system
// call after that wakes it, and it then polls every 20 µs until the process is idle again (backing
// off after about a millisecond). A broker under a light load goes idle between group commits, so
// without the setting below each group commit pays for that wake-up and for the polling through its
// fsync. With the runtime's schedtrace setting on, sysmon never takes that deep sleep and backs off
// to one wake-up every 10 ms. The setting is read once, at start, from GODEBUG, so
// `meridian standalone` re-executes itself with it (sysmon_linux.go). The figures and the costs:
// docs/design.md, "The process and the Go runtime".

// schedtraceSetting turns the deep sleep off. Its value is also how often, in milliseconds, the
// runtime writes one line of scheduler figures to stderr: the largest it takes, about 24.9 days.
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

// runsBroker reports whether the command line (without the program name) runs a broker, the only
// command worth a re-execution for a polling sysmon.
func runsBroker(args []string) bool {
	return len(args) > 0 && args[0] == "standalone"
}
