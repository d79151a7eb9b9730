package storage

import (
	"testing"
	"unsafe"
)

// TestLedgerStructSize guards the Ledger's size class: one per topic (README budget: 2 KiB per
// idle topic for the whole broker). A new field may need the others reordered, not a bigger class.
func TestLedgerStructSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	if got := unsafe.Sizeof(Ledger{}); got > 256 {
		t.Errorf("Ledger is %d B, over the 256 B size class", got)
	}
}
