// Command machinelat measures the two latency floors of this machine that no broker can go below,
// so that a latency budget can be judged against them in the same run:
//
//   - wake-up lateness: a goroutine sleeps 1 ms (a Go client's batching delay) and measures how much
//     later it runs. Every hop of a message (client, broker, client again) is a goroutine waking up;
//     on a virtual machine whose vCPU the host deschedules, this has a tail of several milliseconds
//     with nothing else running. (1 ms, not less: the Go runtime rounds a shorter wait in its
//     network poller up to 1 ms, which would hide the machine behind the runtime.)
//   - fdatasync latency: 5 KiB appended to a file and fdatasync'd, 1 ms apart (a broker's group
//     commit at ~5,000 msg/s x 1 KiB), in a file first filled with zeros so that no metadata changes.
//     A receipt sent after the fsync can never be faster than this.
//
// The two run one after the other, not together. Exact nearest-rank percentiles.
//
// With --cpu-floor it measures instead the least CPU a Go server spends per group commit on this
// machine (cpufloor.go): a client sends a batch every millisecond, and a server on one goroutine
// reads it, writes it, fdatasyncs and replies; then the same without the fdatasync. A broker's CPU
// per message at a low rate can be judged against it.
//
// usage: machinelat [--duration 10s] [--dir /tmp] [--cpu-floor [--batch 6400]]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

func main() {
	dur := flag.Duration("duration", 10*time.Second, "how long each measurement runs")
	dir := flag.String("dir", os.TempDir(), "directory for the fsync file (put it on the broker's disk)")
	floor := flag.Bool("cpu-floor", false, "measure the CPU floor of a group commit instead of the latency floors")
	batch := flag.Int("batch", 6400, "bytes per batch of the CPU floor (about 6 x 1 KiB messages with their metadata)")
	floorServer := flag.Bool("cpu-floor-server", false, "internal: the CPU floor's server process")
	floorFsync := flag.Bool("floor-fsync", true, "internal: whether the CPU floor's server fdatasyncs")
	flag.Parse()
	if *floorServer {
		if err := cpuFloorServer(*dir, *floorFsync); err != nil {
			fmt.Fprintln(os.Stderr, "machinelat:", err)
			os.Exit(1)
		}
		return
	}
	if *floor {
		for _, fsync := range []bool{true, false} {
			line, err := cpuFloor(*dir, *batch, fsync, *dur)
			if err != nil {
				fmt.Fprintln(os.Stderr, "machinelat:", err)
				os.Exit(1)
			}
			fmt.Println(line)
		}
		return
	}

	fmt.Println(summary("wake-up lateness of a 1 ms sleep", wakeups(*dur)))
	lat, err := fsyncs(*dir, *dur)
	if err != nil {
		fmt.Fprintln(os.Stderr, "machinelat:", err)
		os.Exit(1)
	}
	fmt.Println(summary("5 KiB append + fdatasync, 1 ms apart", lat))
}

func wakeups(dur time.Duration) []time.Duration {
	const nap = time.Millisecond
	var late []time.Duration
	for end := time.Now().Add(dur); time.Now().Before(end); {
		t := time.Now()
		time.Sleep(nap)
		late = append(late, time.Since(t)-nap)
	}
	return late
}

func fsyncs(dir string, dur time.Duration) ([]time.Duration, error) {
	const (
		size     = 5 << 10
		fileSize = 64 << 20
	)
	f, err := zeroFilledFile(dir, fileSize)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, size)
	var lat []time.Duration
	var off int64
	for end := time.Now().Add(dur); time.Now().Before(end); {
		t := time.Now()
		if _, err := f.WriteAt(buf, off); err != nil {
			return nil, err
		}
		if err := fdatasync(f); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t))
		if off += size; off+size > fileSize {
			off = 0
		}
		time.Sleep(time.Millisecond)
	}
	return lat, nil
}

func summary(what string, d []time.Duration) string {
	if len(d) == 0 {
		return what + ": no samples"
	}
	slices.Sort(d)
	q := func(p float64) string {
		return fmt.Sprintf("%.2f", float64(d[int(p*float64(len(d)-1))])/float64(time.Millisecond))
	}
	over := 0
	for _, x := range d {
		if x > 5*time.Millisecond {
			over++
		}
	}
	return fmt.Sprintf("%s: n=%d p50 %s p90 %s p99 %s p99.9 %s max %s ms (>5 ms: %d)",
		what, len(d), q(.5), q(.9), q(.99), q(.999), q(1), over)
}

// zeroFilledFile creates a file of size zero bytes in dir, written and fsynced, so that appends
// inside it change no metadata (as in a broker's prefilled journal). It is unlinked at once: the
// open file keeps its blocks, and nothing is left behind however the process ends.
func zeroFilledFile(dir string, size int64) (*os.File, error) {
	f, err := os.CreateTemp(dir, "machinelat-*")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off); err != nil {
			f.Close()
			return nil, fmt.Errorf("fill %s: %w", filepath.Base(f.Name()), err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
