package broker

import (
	"fmt"
	"strings"
	"testing"
)

// TestDedupSnapshotKeepsTheMostRecentProducers: above maxDedupProducers producers, a snapshot
// keeps the ones that published last (ties by name), the same ones every time, never a subset
// chosen by map order. Names longer than a producer name can be (from replayed metadata) are not
// kept either.
func TestDedupSnapshotKeepsTheMostRecentProducers(t *testing.T) {
	const extra = 5
	build := func() map[string]string {
		now := int64(1_000_000)
		d := newDedupState(func() int64 { return now })
		for i := 0; i < maxDedupProducers+extra; i++ {
			now++ // producer i published at time now: the first `extra` are the oldest
			d.persistedEntry(fmt.Sprintf("p%05d", i), int64(i))
		}
		d.persistedEntry(strings.Repeat("n", 100_000), 1) // the most recent of all, but no producer name
		return d.snapshot()
	}
	props := build()
	if got := len(props) - 1; got != maxDedupProducers {
		t.Fatalf("snapshot keeps %d producers, want %d", got, maxDedupProducers)
	}
	for i := 0; i < maxDedupProducers+extra; i++ {
		_, kept := props[dedupPropPrefix+fmt.Sprintf("p%05d", i)]
		if kept != (i >= extra) {
			t.Fatalf("producer p%05d kept=%v; want the %d most recent", i, kept, maxDedupProducers)
		}
	}
	for k := range props {
		if len(k) > 300 {
			t.Fatalf("snapshot keeps a %d-byte name", len(k))
		}
	}
	for range 3 {
		again := build()
		for k := range props {
			if _, ok := again[k]; !ok {
				t.Fatalf("a second snapshot of the same state differs (%q missing)", k)
			}
		}
	}
}
