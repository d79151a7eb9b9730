package node

import (
	"math"
	"time"
)

// Policy values are counts of seconds, minutes or MB. The admin API bounds them, but a document
// written by an older build, or straight into the metadata store, may hold any int64, and even the
// API's bound of math.MaxInt32 minutes is longer than a time.Duration. A product that does not fit
// is the bound of its type rather than a wrapped value: a wrapped TTL, retention or expiry age is
// tiny, negative or zero, and expires or trims the very data the policy was set to keep.

// durationOf returns n units as a Duration, saturated at the longest (for a negative n, the most
// negative) Duration.
func durationOf(n int64, unit time.Duration) time.Duration {
	switch {
	case n > math.MaxInt64/int64(unit):
		return math.MaxInt64
	case n < math.MinInt64/int64(unit):
		return math.MinInt64
	}
	return time.Duration(n) * unit
}

// bytesOfMB returns mb MB (MiB, as Pulsar counts them) in bytes, saturated at the int64 bounds.
func bytesOfMB(mb int64) int64 {
	switch {
	case mb > math.MaxInt64>>20:
		return math.MaxInt64
	case mb < math.MinInt64>>20:
		return math.MinInt64
	}
	return mb << 20
}
