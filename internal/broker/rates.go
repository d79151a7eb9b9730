package broker

import (
	"math"
	"sync/atomic"
	"time"
)

// rate turns a monotonically increasing counter into a per-second rate, recomputed by the broker's
// stats ticker (Config.StatsInterval) — as Pulsar's stats interval does.
type rate struct {
	last     int64 // counter at the last sample; only touched by the ticker
	lastTime time.Time
	bits     atomic.Uint64 // float64 value
}

// sample records the counter's value at now and updates the rate.
func (r *rate) sample(count int64, now time.Time) {
	if !r.lastTime.IsZero() {
		if el := now.Sub(r.lastTime).Seconds(); el > 0 {
			r.bits.Store(math.Float64bits(float64(count-r.last) / el))
		}
	}
	r.last, r.lastTime = count, now
}

// value is the last computed rate per second.
func (r *rate) value() float64 { return math.Float64frombits(r.bits.Load()) }
