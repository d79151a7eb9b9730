package storage

import (
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

func TestLatencyHistogramBuckets(t *testing.T) {
	var h LatencyRecorder
	for _, d := range []time.Duration{0, 250 * time.Microsecond, 251 * time.Microsecond, 3 * time.Millisecond, 2 * time.Second, time.Hour} {
		h.Observe(d)
	}
	s := h.Snapshot()
	if len(s.Counts) != len(LatencyBounds)+1 {
		t.Fatalf("%d buckets for %d bounds", len(s.Counts), len(LatencyBounds))
	}
	want := map[int]int64{0: 2, 1: 1, 4: 1, len(LatencyBounds) - 1: 1, len(LatencyBounds): 1} // 3 ms is bucket 4 (<= 3 ms)
	for i, c := range s.Counts {
		if c != want[i] {
			t.Errorf("bucket %d (<= %v): %d observations, want %d", i, bucketBound(i), c, want[i])
		}
	}
	if s.Count() != 6 || s.Sum != time.Hour+2*time.Second+3*time.Millisecond+501*time.Microsecond {
		t.Fatalf("count %d sum %v", s.Count(), s.Sum)
	}
}

func bucketBound(i int) any {
	if i < len(LatencyBounds) {
		return LatencyBounds[i]
	}
	return "+Inf"
}

// TestLatencyHistogramsFilled: every sync round and every group commit is observed once, on the
// inline and the pipelined path.
func TestLatencyHistogramsFilled(t *testing.T) {
	for _, depth := range []int{1, 2} {
		fs := vfs.NewMem()
		e, l := openDirect(t, fs, func(o *Options) { o.SyncPipelineDepth, o.AlwaysPipeline = depth, true }, "hist/l")
		for round := range 5 {
			if acked, failed := burst(l, round*20, 20); failed != 0 || len(acked) != 20 {
				t.Fatalf("burst: %d acknowledged, %d failed", len(acked), failed)
			}
		}
		m := e.Metrics()
		if n := m.SyncLatency.Count(); n == 0 || n != m.SyncRounds {
			t.Fatalf("depth %d: %d sync latencies for %d sync rounds", depth, n, m.SyncRounds)
		}
		if n := m.CommitLatency.Count(); n == 0 || n > m.SyncRounds {
			t.Fatalf("depth %d: %d commit latencies for %d sync rounds", depth, n, m.SyncRounds)
		}
		if m.SyncLatency.Sum <= 0 || m.CommitLatency.Sum < m.SyncLatency.Sum/time.Duration(m.SyncRounds) {
			t.Fatalf("depth %d: sums: sync %v, commit %v", depth, m.SyncLatency.Sum, m.CommitLatency.Sum)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLatencyBoundsFitTheCounters(t *testing.T) {
	var h LatencyRecorder
	if len(h.counts) != len(LatencyBounds)+1 {
		t.Fatalf("%d counters for %d bounds", len(h.counts), len(LatencyBounds))
	}
	for i := 1; i < len(LatencyBounds); i++ {
		if LatencyBounds[i] <= LatencyBounds[i-1] {
			t.Fatalf("bounds not increasing at %d", i)
		}
	}
}
