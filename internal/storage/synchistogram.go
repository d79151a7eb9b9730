package storage

import (
	"sync/atomic"
	"time"
)

// Latency histograms of the write path, for operators and benchmarks: on a virtual disk the
// fdatasync tail, not the broker, often sets the publish latency tail, and these show which one
// it is in the same run (docs/operations.md, "Storage latency").

// LatencyBounds are the upper bounds of the histogram buckets (a last, unbounded bucket follows).
// From 250 µs (a quiet SSD's fdatasync) to 2 s (a stalled virtual disk), fine around the 5 ms
// publish-latency budget.
var LatencyBounds = []time.Duration{
	250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond,
	3 * time.Millisecond, 4 * time.Millisecond, 5 * time.Millisecond, 6 * time.Millisecond,
	8 * time.Millisecond, 10 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond,
	30 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2 * time.Second,
}

// LatencyHistogram is a snapshot: Counts[i] observations were <= LatencyBounds[i] and above the
// previous bound; Counts[len(LatencyBounds)] were above the last bound. Not cumulative.
type LatencyHistogram struct {
	Counts []int64
	Sum    time.Duration
}

// Count is the number of observations.
func (h LatencyHistogram) Count() int64 {
	var n int64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// LatencyRecorder records durations into LatencyBounds' buckets without locks; any goroutine may
// observe. The zero value is ready. The broker core records its publish latency with it too, so that
// every latency histogram of a broker has the same buckets.
type LatencyRecorder struct {
	counts [20]atomic.Int64 // len(LatencyBounds) + 1
	sum    atomic.Int64
}

// Observe records one duration.
func (h *LatencyRecorder) Observe(d time.Duration) {
	i := 0
	for i < len(LatencyBounds) && d > LatencyBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// Snapshot returns the counts so far.
func (h *LatencyRecorder) Snapshot() LatencyHistogram {
	s := LatencyHistogram{Counts: make([]int64, len(h.counts)), Sum: time.Duration(h.sum.Load())}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	return s
}

// recordSync counts one finished journal sync round of duration d (any of the three sync paths:
// inline, pipelined, background).
func (e *Engine) recordSync(d time.Duration) {
	e.m.fsyncs.Add(1)
	e.m.syncRounds.Add(1)
	e.m.fsyncNanos.Add(int64(d))
	if int64(d) > e.m.fsyncMaxNanos.Load() {
		e.m.fsyncMaxNanos.Store(int64(d))
	}
	e.m.syncLatency.Observe(d)
	e.logSlowSync(d)
}

// Slow journal syncs are logged so that a latency tail can be lined up with the disk (and with
// checkpoints, logged at debug level too): one sync of 300 ms holds 1,500 messages at 5,000 msg/s
// yet is a single round among thousands in the histogram.
const (
	slowSyncWarn  = time.Second
	slowSyncDebug = 10 * time.Millisecond
)

func (e *Engine) logSlowSync(d time.Duration) {
	switch {
	case d >= slowSyncWarn:
		e.log.Warn("slow journal fsync", "took", d)
	case d >= slowSyncDebug:
		e.log.Debug("slow journal fsync", "took", d)
	}
}
