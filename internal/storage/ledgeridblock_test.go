package storage

import (
	"context"
	"sync"
	"testing"
)

// TestLedgerIDsFromOutside: with Options.LedgerIDBlock every ledger id comes from the blocks it
// hands out (the cluster's shared counter), also after a restart, and never goes backwards.
func TestLedgerIDsFromOutside(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	// Above where a new data directory's own counter starts (firstledgerid.go).
	next := int64(1 << 50)
	var floors []int64
	block := func(floor, size int64) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		floors = append(floors, floor)
		first := max(next, floor)
		next = first + size
		return first, nil
	}
	ctx := context.Background()
	open := func() *Engine {
		e, err := Open(ctx, Options{Dir: dir, LedgerIDBlock: block})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	l, err := e.OpenLedger(ctx, "persistent://public/default/a")
	if err != nil {
		t.Fatal(err)
	}
	p1, err := l.Append(ctx, []byte("x"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if p1.LedgerID < 1<<50 || p1.LedgerID >= 1<<50+ledgerIDBlock {
		t.Fatalf("first ledger id %d is not from the block", p1.LedgerID)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	next = 1 << 51 // other brokers drew blocks meanwhile
	e = open()
	defer e.Close()
	l, err = e.OpenLedger(ctx, "persistent://public/default/b")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := l.Append(ctx, []byte("y"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if p2.LedgerID < 1<<51 {
		t.Fatalf("after a restart the ledger id %d did not come from a new block", p2.LedgerID)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(floors) != 2 || floors[1] <= p1.LedgerID {
		t.Fatalf("floors asked: %v (first ledger %d)", floors, p1.LedgerID)
	}
}
