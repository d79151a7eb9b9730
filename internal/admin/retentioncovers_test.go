package admin

import (
	"math"
	"testing"

	"github.com/meridian-mq/meridian/adminapi"
)

// TestRetentionCoversComparesWithoutOverflow: the backlog quota check compares a retention size in
// MB with a quota in bytes; a retention size whose bytes do not fit an int64 (one stored by an older
// build) still covers every quota, and the comparison is exact at a MB's edge.
func TestRetentionCoversComparesWithoutOverflow(t *testing.T) {
	for _, c := range []struct {
		retentionMB, limitBytes int64
		want                    bool
	}{
		{-1, math.MaxInt64, true},
		{1, 0, true},
		{1, 1 << 20, true},
		{1, 1<<20 + 1, false},
		{2, 1<<20 + 1, true},
		{0, 1, false},
		{math.MaxInt64 >> 20, math.MaxInt64 - (1<<20 - 1), true},
		{math.MaxInt64 >> 20, math.MaxInt64, false},
		{1 << 43, 1 << 30, true}, // 1<<43 MB is 1<<63 bytes, which wraps to a negative int64
		{17592186044416, 1 << 30, true},
		{math.MaxInt64, math.MaxInt64, true},
	} {
		ret := adminapi.RetentionPolicies{RetentionTimeInMinutes: -1, RetentionSizeInMB: c.retentionMB}
		q := adminapi.BacklogQuota{LimitSize: c.limitBytes}
		if got := retentionCovers(ret, q); got != c.want {
			t.Errorf("retentionCovers(%d MB, quota %d bytes) = %v, want %v", c.retentionMB, c.limitBytes, got, c.want)
		}
	}
}
