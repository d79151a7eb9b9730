package node

import (
	"math"
	"testing"
	"time"
)

// TestPolicyUnitConversionsSaturate: a count of seconds, minutes or MB converts exactly while the
// result fits an int64, and to the int64 bound beyond it, never to a wrapped value.
func TestPolicyUnitConversionsSaturate(t *testing.T) {
	const longest, mostNegative = time.Duration(math.MaxInt64), time.Duration(math.MinInt64)
	for _, c := range []struct {
		n    int64
		unit time.Duration
		want time.Duration
	}{
		{0, time.Second, 0},
		{3600, time.Second, time.Hour},
		{math.MaxInt32, time.Second, math.MaxInt32 * time.Second},
		{math.MaxInt32, time.Minute, longest}, // the admin API's bound for minutes is longer than a Duration
		{153722867, time.Minute, 153722867 * time.Minute},
		{153722868, time.Minute, longest},
		{9223372036, time.Second, 9223372036 * time.Second}, // the largest that fits
		{9223372037, time.Second, longest},                  // wrapped negative
		{18446744074, time.Second, longest},                 // wrapped to 290 ms
		{307445734562, time.Minute, longest},                // wrapped to 10.4 s
		{math.MaxInt64, time.Second, longest},
		{-1, time.Minute, -time.Minute},
		{-9223372036, time.Second, -9223372036 * time.Second},
		{-9223372037, time.Second, mostNegative},
		{math.MinInt64, time.Minute, mostNegative},
	} {
		if got := durationOf(c.n, c.unit); got != c.want {
			t.Errorf("durationOf(%d, %v) = %v, want %v", c.n, c.unit, got, c.want)
		}
	}
	for _, c := range []struct{ mb, want int64 }{
		{0, 0},
		{1, 1 << 20},
		{math.MaxInt64 >> 20, math.MaxInt64 >> 20 << 20}, // the largest that fits
		{math.MaxInt64>>20 + 1, math.MaxInt64},
		{17592186044416, math.MaxInt64}, // wrapped to 0 bytes
		{math.MaxInt64, math.MaxInt64},
		{-1, -1 << 20},
		{math.MinInt64 >> 20, math.MinInt64},
		{math.MinInt64>>20 - 1, math.MinInt64},
		{math.MinInt64, math.MinInt64},
	} {
		if got := bytesOfMB(c.mb); got != c.want {
			t.Errorf("bytesOfMB(%d) = %d, want %d", c.mb, got, c.want)
		}
	}
}
