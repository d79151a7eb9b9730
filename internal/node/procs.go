package node

import "runtime"

// A goroutine in a system call keeps its P (the Go scheduler's right to run Go code) until the
// runtime's monitor notices and hands the P to another thread, which here takes 40-640 µs. A
// broker's disk system calls wait for the device that long: a segment read or write that bypasses
// the page cache, an fdatasync. With one P per CPU, each such wait leaves a CPU idle while
// runnable goroutines queue for a P: an execution trace of a replication catch-up on two CPUs
// shows the Ps held in system calls 37% of the time and the machine 20% idle. One P more than
// the CPUs lets another goroutine run meanwhile (docs/design.md, "The process and the Go runtime").

// SpareDiskWaitProc raises GOMAXPROCS by one over the runtime's choice and returns a function that
// restores it, unless the operator set GOMAXPROCS (then it changes nothing). The runtime no longer
// follows a change of the process's CPU limit afterwards: the broker reads it once, at start.
func SpareDiskWaitProc(getenv func(string) string) (restore func()) {
	if getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	before := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(before + 1)
	return func() { runtime.GOMAXPROCS(before) }
}
