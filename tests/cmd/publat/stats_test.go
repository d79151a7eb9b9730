package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// One slow message among 50,000 (10 s at 5,000 msg/s) moves the max only: the case pulsar-perf's
// estimator reports as its p99.
func TestExactQuantilesOneSlowMessage(t *testing.T) {
	v := make([]time.Duration, 50_000)
	for i := range v {
		v[i] = time.Millisecond + time.Duration(i%1000)*time.Microsecond // 1.000-1.999 ms
	}
	v[25_000] = 30 * time.Millisecond
	q := exactQuantiles(v)
	if q.max != 30*time.Millisecond {
		t.Fatalf("max %v, want 30ms", q.max)
	}
	if q.p99 >= 2*time.Millisecond || q.p999 >= 2*time.Millisecond {
		t.Fatalf("p99 %v p99.9 %v: one slow message of 50,000 must not move them", q.p99, q.p999)
	}
	if q.over5ms != 1 || q.over10ms != 1 || q.over1ms != 49_951 {
		t.Fatalf("counts >1ms %d >5ms %d >10ms %d", q.over1ms, q.over5ms, q.over10ms)
	}
}

func TestExactQuantilesNearestRank(t *testing.T) {
	var v []time.Duration
	for i := 1; i <= 100; i++ {
		v = append(v, time.Duration(i))
	}
	q := exactQuantiles(v)
	if q.p50 != 50 || q.p95 != 95 || q.p99 != 99 || q.p999 != 100 || q.max != 100 {
		t.Fatalf("got %+v", q)
	}
	if q := exactQuantiles(nil); q.n != 0 || q.max != 0 {
		t.Fatalf("empty: %+v", q)
	}
}

func TestSlowEpisodes(t *testing.T) {
	ms := int64(time.Millisecond)
	mk := func(start, total int64) sample {
		return sample{start: start, waited: start, queued: start, done: start + total}
	}
	samples := []sample{
		mk(0, 1*ms),
		mk(10*ms, 8*ms), // episode 1
		mk(40*ms, 20*ms),
		mk(80*ms, 6*ms),
		mk(200*ms, 1*ms),
		mk(300*ms, 7*ms),  // episode 2
		{start: 310 * ms}, // no receipt: ignored
	}
	eps := slowEpisodes(samples, 5*time.Millisecond)
	if len(eps) != 2 {
		t.Fatalf("episodes %d, want 2: %+v", len(eps), eps)
	}
	if eps[0].count != 3 || eps[0].first != 10*ms || eps[0].last != 80*ms || eps[0].worst.total() != 20*time.Millisecond {
		t.Fatalf("episode 1: %+v", eps[0])
	}
	if eps[1].count != 1 || eps[1].first != 300*ms {
		t.Fatalf("episode 2: %+v", eps[1])
	}
	sortEpisodesByWorst(eps)
	if eps[0].worst.total() != 20*time.Millisecond {
		t.Fatalf("not sorted by worst: %+v", eps)
	}
}

func TestBreakdownSkipsWarmupAndPending(t *testing.T) {
	samples := []sample{
		{start: 0, waited: 1, queued: 2, done: 100},
		{start: 1000, waited: 1100, queued: 1150, done: 3000},
		{start: 2000, waited: 2000, queued: 2001}, // pending
	}
	b := breakdownOf(samples, 500)
	if b.total.n != 1 || b.total.max != 2000 || b.limiter.max != 100 || b.enqueue.max != 50 || b.receipt.max != 1850 {
		t.Fatalf("breakdown %+v", b)
	}
	if n := countBefore(samples, 1500); n != 2 {
		t.Fatalf("countBefore %d", n)
	}
}
