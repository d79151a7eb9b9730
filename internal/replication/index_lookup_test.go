package replication

import (
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// TestLocalOfAndAtOrBefore: positions of an origin cluster translate to local ones without naming
// its incarnation; a position that was not replicated itself translates to the greatest one below it.
func TestLocalOfAndAtOrBefore(t *testing.T) {
	x := NewIndex(IndexOptions{})
	store := func(src mtypes.Position, local mtypes.Position) {
		t.Helper()
		_, _, _, commit, err := x.Admit(replicated(t, "a", src, "m"))
		if err != nil || commit == nil {
			t.Fatalf("admit %v: %v", src, err)
		}
		commit(local.LedgerID, local.EntryID, nil)
	}
	// a's entries 5:0..5:2 and 5:10 stored here at 20:0..20:3 (5:3..5:9 were never replicated).
	store(mtypes.Position{LedgerID: 5, EntryID: 0}, mtypes.Position{LedgerID: 20, EntryID: 0})
	store(mtypes.Position{LedgerID: 5, EntryID: 1}, mtypes.Position{LedgerID: 20, EntryID: 1})
	store(mtypes.Position{LedgerID: 5, EntryID: 2}, mtypes.Position{LedgerID: 20, EntryID: 2})
	store(mtypes.Position{LedgerID: 5, EntryID: 10}, mtypes.Position{LedgerID: 20, EntryID: 3})

	if local, ok := x.LocalOf("a", mtypes.Position{LedgerID: 5, EntryID: 1}); !ok || local != (mtypes.Position{LedgerID: 20, EntryID: 1}) {
		t.Fatalf("LocalOf 5:1 = %v %v, want 20:1", local, ok)
	}
	if _, ok := x.LocalOf("a", mtypes.Position{LedgerID: 5, EntryID: 5}); ok {
		t.Fatal("LocalOf a position never replicated")
	}
	if _, ok := x.LocalOf("b", mtypes.Position{LedgerID: 5, EntryID: 1}); ok {
		t.Fatal("LocalOf another cluster's position")
	}
	origin, local, ok := x.LocalAtOrBefore("a", mtypes.Position{LedgerID: 5, EntryID: 7})
	if !ok || origin != (mtypes.Position{LedgerID: 5, EntryID: 2}) || local != (mtypes.Position{LedgerID: 20, EntryID: 2}) {
		t.Fatalf("LocalAtOrBefore 5:7 = %v -> %v %v, want 5:2 -> 20:2", origin, local, ok)
	}
	if origin, local, ok = x.LocalAtOrBefore("a", mtypes.Position{LedgerID: 6, EntryID: 0}); !ok || origin != (mtypes.Position{LedgerID: 5, EntryID: 10}) || local != (mtypes.Position{LedgerID: 20, EntryID: 3}) {
		t.Fatalf("LocalAtOrBefore 6:0 = %v -> %v %v, want 5:10 -> 20:3", origin, local, ok)
	}
	if _, _, ok = x.LocalAtOrBefore("a", mtypes.Position{LedgerID: 4, EntryID: 0}); ok {
		t.Fatal("LocalAtOrBefore a position before everything replicated")
	}
}
