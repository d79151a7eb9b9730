package broker

import (
	"testing"
	"time"
)

// TestWriteStatsBucketsAndRates: entries land in Pulsar's buckets by latency and size (a bound
// belongs to its own bucket), and the ticker turns the counts into per-second rates over its interval.
func TestWriteStatsBucketsAndRates(t *testing.T) {
	var w writeStats
	t0 := time.Unix(1000, 0)
	w.startAt(t0)
	w.observe(500*time.Microsecond, 128) // le_0_5, le_128
	w.observe(3*time.Millisecond, 129)   // le_5, le_512
	w.observe(time.Second, 1<<20)        // le_1000, le_1_mb
	w.observe(2*time.Second, 1<<20+1)    // overflow, overflow
	w.sample(t0.Add(2 * time.Second))
	s := w.snapshot()
	wantLat := []float64{0.5, 0, 0.5, 0, 0, 0, 0, 0, 0.5, 0.5}
	wantSize := []float64{0.5, 0.5, 0, 0, 0, 0, 0, 0.5, 0.5}
	for i, v := range wantLat {
		if s.Latency[i] != v {
			t.Errorf("latency bucket %d: %v entries/s, want %v (all %v)", i, s.Latency[i], v, s.Latency)
		}
	}
	for i, v := range wantSize {
		if s.Size[i] != v {
			t.Errorf("size bucket %d: %v entries/s, want %v (all %v)", i, s.Size[i], v, s.Size)
		}
	}
	if want := (0.5 + 3 + 1000 + 2000) / 2.0; s.LatencySumMs != want {
		t.Errorf("latency sum %v ms/s, want %v", s.LatencySumMs, want)
	}
	if want := float64(128+129+1<<20+1<<20+1) / 2; s.SizeSum != want {
		t.Errorf("size sum %v B/s, want %v", s.SizeSum, want)
	}
	// No entries in the next interval: every rate drops to zero.
	w.sample(t0.Add(4 * time.Second))
	for i, v := range w.snapshot().Latency {
		if v != 0 {
			t.Errorf("latency bucket %d after an idle interval: %v", i, v)
		}
	}
}
