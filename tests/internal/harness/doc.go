// Package harness starts and stops the brokers that Meridian's end-to-end tests run against:
// real `meridian standalone` processes (built once per test binary from the root module, started on
// free loopback ports with a temporary data dir, stopped with SIGTERM, killed with SIGKILL and
// restarted on the same ports and data dir), in-process brokers, and etcd servers (etcdtest processes).
//
// Every wait polls with a deadline; every process or server it starts is stopped in t.Cleanup.
//
// Environment:
//
//	MERIDIAN_BIN=path      use this meridian binary instead of building one
//	MERIDIAN_RACE=1        build the binary with -race (slower; a data race makes the test fail)
//	MERIDIAN_KEEP_LOGS=1   print every broker's log at the end of the test, not only on failure
package harness
