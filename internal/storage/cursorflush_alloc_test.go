package storage

import (
	"context"
	"testing"
)

// TestPeriodicFlushOfALedgerWithoutCursorsAllocatesNothing: the once-a-second cursor flush runs
// over every open ledger; one with no cursors (an idle topic without subscriptions) must cost no
// allocation (ten thousand of them made three allocations each a second).
func TestPeriodicFlushOfALedgerWithoutCursorsAllocatesNothing(t *testing.T) {
	e, err := Open(context.Background(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, err := e.OpenLedger(context.Background(), "persistent://public/default/no-cursors")
	if err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() { l.flushCursors(nil, nil) }); allocs != 0 {
		t.Fatalf("flushing a ledger without cursors allocates %.0f times", allocs)
	}
}
