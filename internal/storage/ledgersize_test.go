package storage

import (
	"context"
	"testing"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// TestLedgerBytesDoesNotOpen: the size of a closed ledger comes from its files, without opening it
// (which would start a new segment); an open one reports its entry bytes; a missing one 0.
func TestLedgerBytesDoesNotOpen(t *testing.T) {
	e := openMem(t, vfs.NewMem(), nil)
	defer e.Close()
	ctx := context.Background()
	l, err := e.OpenLedger(ctx, "t/size")
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := l.Append(ctx, make([]byte, 1000), 1); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.LedgerBytes(ctx, "t/size"); err != nil || n != l.Bytes() || n < 10_000 {
		t.Fatalf("open ledger: %d, %v (Bytes %d)", n, err, l.Bytes())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	before := e.Metrics().OpenLedgers
	if n, err := e.LedgerBytes(ctx, "t/size"); err != nil || n < 10_000 {
		t.Fatalf("closed ledger: %d, %v", n, err)
	}
	if e.Metrics().OpenLedgers != before {
		t.Fatal("LedgerBytes opened the ledger")
	}
	if n, err := e.LedgerBytes(ctx, "t/none"); err != nil || n != 0 {
		t.Fatalf("missing ledger: %d, %v", n, err)
	}
}
