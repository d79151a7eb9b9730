package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// sample is one message's timeline (unix nanoseconds). start is taken before the rate limiter, as
// pulsar-perf does; waited after it; queued when SendAsync returned; done in the send callback
// (0 while the receipt is outstanding).
type sample struct {
	start, waited, queued, done int64
}

func (s sample) total() time.Duration   { return time.Duration(s.done - s.start) }
func (s sample) limiter() time.Duration { return time.Duration(s.waited - s.start) }
func (s sample) enqueue() time.Duration { return time.Duration(s.queued - s.waited) }
func (s sample) receipt() time.Duration { return time.Duration(s.done - s.queued) }

// quantiles holds exact nearest-rank quantiles of a set of durations.
type quantiles struct {
	n                          int
	p50, p95, p99, p999, max   time.Duration
	over1ms, over5ms, over10ms int
}

// exactQuantiles sorts v in place and returns its nearest-rank quantiles: the p-quantile is the
// smallest value with at least p*n values at or below it. No estimation, so a single slow message
// moves the max, not the p99 of 50,000.
func exactQuantiles(v []time.Duration) quantiles {
	q := quantiles{n: len(v)}
	if len(v) == 0 {
		return q
	}
	slices.Sort(v)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return v[max(i, 0)]
	}
	q.p50, q.p95, q.p99, q.p999, q.max = rank(0.50), rank(0.95), rank(0.99), rank(0.999), v[len(v)-1]
	for _, d := range v {
		switch {
		case d > 10*time.Millisecond:
			q.over10ms++
			fallthrough
		case d > 5*time.Millisecond:
			q.over5ms++
			fallthrough
		case d > time.Millisecond:
			q.over1ms++
		}
	}
	return q
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (q quantiles) String() string {
	return fmt.Sprintf("n=%d p50 %.2f p95 %.2f p99 %.2f p99.9 %.2f max %.2f ms (>5 ms: %d, >10 ms: %d)",
		q.n, ms(q.p50), ms(q.p95), ms(q.p99), ms(q.p999), ms(q.max), q.over5ms, q.over10ms)
}

// episode is a run of slow messages whose starts lie less than episodeGap apart.
type episode struct {
	first, last int64 // start times of the first and last slow message
	count       int
	worst       sample
}

const episodeGap = 50 * time.Millisecond

// slowEpisodes groups the completed samples slower than threshold (in start order, as recorded)
// into episodes, so periodic causes (a timer, a GC, a disk flush) show as a rhythm of start times.
func slowEpisodes(samples []sample, threshold time.Duration) []episode {
	var eps []episode
	for _, s := range samples {
		if s.done == 0 || s.total() <= threshold {
			continue
		}
		if n := len(eps); n > 0 && s.start-eps[n-1].last < int64(episodeGap) {
			e := &eps[n-1]
			e.last = s.start
			e.count++
			if s.total() > e.worst.total() {
				e.worst = s
			}
			continue
		}
		eps = append(eps, episode{first: s.start, last: s.start, count: 1, worst: s})
	}
	return eps
}

// breakdown is where the time of a set of samples went.
type breakdown struct {
	total, limiter, enqueue, receipt quantiles
}

// breakdownOf summarises the completed samples that started at or after from.
func breakdownOf(samples []sample, from int64) breakdown {
	var tot, lim, enq, rec []time.Duration
	for _, s := range samples {
		if s.done == 0 || s.start < from {
			continue
		}
		tot = append(tot, s.total())
		lim = append(lim, s.limiter())
		enq = append(enq, s.enqueue())
		rec = append(rec, s.receipt())
	}
	return breakdown{exactQuantiles(tot), exactQuantiles(lim), exactQuantiles(enq), exactQuantiles(rec)}
}
