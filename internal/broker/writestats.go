package broker

import (
	"sync/atomic"
	"time"
)

// Per-topic storage write figures in Pulsar's buckets, for its pulsar_storage_write_latency_le_*
// and pulsar_entry_size_le_* metrics: Pulsar reports, per topic, how many entries per second fell
// into each bucket over the last stats interval, and dashboards built for Pulsar plot exactly that.

// WriteLatencyBounds are the upper bounds of Pulsar's storage write latency buckets (0.5 ms ...
// 1 s); an overflow bucket follows.
var WriteLatencyBounds = []time.Duration{
	500 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, time.Second,
}

// EntrySizeBounds are the upper bounds (bytes) of Pulsar's entry size buckets (128 B ... 1 MiB);
// an overflow bucket follows.
var EntrySizeBounds = []int64{128, 512, 1 << 10, 2 << 10, 4 << 10, 16 << 10, 100 << 10, 1 << 20}

const (
	writeLatencyBuckets = 10 // len(WriteLatencyBounds) + 1
	entrySizeBuckets    = 9  // len(EntrySizeBounds) + 1
)

// WriteStats is a topic's stored entries per second over the broker's last stats interval, by
// bucket: Latency[i] entries took at most WriteLatencyBounds[i] (and more than the bound before)
// from the broker taking the publish until storage acknowledged the append; the last element counts
// the slower ones. Sizes likewise by EntrySizeBounds. The sums are per second too: LatencySumMs is
// milliseconds of write latency per second, SizeSum bytes per second.
type WriteStats struct {
	Latency      []float64
	LatencySumMs float64
	Size         []float64
	SizeSum      float64
}

// writeStats counts a topic's stored entries by bucket; rates are recomputed by the stats ticker.
type writeStats struct {
	latency      [writeLatencyBuckets]atomic.Int64
	latencySumUs atomic.Int64
	size         [entrySizeBuckets]atomic.Int64
	sizeSum      atomic.Int64

	latencyRate      [writeLatencyBuckets]rate
	latencySumUsRate rate
	sizeRate         [entrySizeBuckets]rate
	sizeSumRate      rate
}

// observe counts one stored entry of the given size whose append took latency.
func (w *writeStats) observe(latency time.Duration, bytes int64) {
	i := 0
	for i < len(WriteLatencyBounds) && latency > WriteLatencyBounds[i] {
		i++
	}
	w.latency[i].Add(1)
	w.latencySumUs.Add(latency.Microseconds())
	j := 0
	for j < len(EntrySizeBounds) && bytes > EntrySizeBounds[j] {
		j++
	}
	w.size[j].Add(1)
	w.sizeSum.Add(bytes)
}

// rates lists every rate with the counter it follows.
func (w *writeStats) rates(visit func(r *rate, counter *atomic.Int64)) {
	for i := range w.latency {
		visit(&w.latencyRate[i], &w.latency[i])
	}
	visit(&w.latencySumUsRate, &w.latencySumUs)
	for i := range w.size {
		visit(&w.sizeRate[i], &w.size[i])
	}
	visit(&w.sizeSumRate, &w.sizeSum)
}

// startAt makes the rates start as if sampled at at (see topicState.counters).
func (w *writeStats) startAt(at time.Time) {
	w.rates(func(r *rate, _ *atomic.Int64) { r.lastTime = at })
}

// sample recomputes the rates (the stats ticker).
func (w *writeStats) sample(now time.Time) {
	w.rates(func(r *rate, c *atomic.Int64) { r.sample(c.Load(), now) })
}

func (w *writeStats) snapshot() WriteStats {
	s := WriteStats{
		Latency:      make([]float64, writeLatencyBuckets),
		LatencySumMs: w.latencySumUsRate.value() / 1000,
		Size:         make([]float64, entrySizeBuckets),
		SizeSum:      w.sizeSumRate.value(),
	}
	for i := range w.latencyRate {
		s.Latency[i] = w.latencyRate[i].value()
	}
	for i := range w.sizeRate {
		s.Size[i] = w.sizeRate[i].value()
	}
	return s
}

// WriteStats returns the topic's storage write figures (all zero before its first stored entry).
func (t *Topic) WriteStats() WriteStats {
	if tr := t.t.traffic.Load(); tr != nil {
		return tr.writes.snapshot()
	}
	var none writeStats
	return none.snapshot()
}
