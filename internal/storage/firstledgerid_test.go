package storage

import (
	"testing"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// TestNewDataDirsStartLedgerIDsApart: every new data directory starts its ledger ids at its own
// random multiple of ledgerIDBlock in [firstLedgerIDMin, firstLedgerIDMax), so a position of one
// cluster names no entry of another (firstledgerid.go). A restart, clean or after a crash, goes on
// from the recorded counter instead of drawing again.
func TestNewDataDirsStartLedgerIDsApart(t *testing.T) {
	seen := map[int64]bool{}
	for i := range 4 {
		mem := vfs.NewMem()
		e := openMem(t, mem, nil)
		first := appendIDs(t, e, "public/default/persistent/orders", 1)[0]
		if first < firstLedgerIDMin || first >= firstLedgerIDMax || first%ledgerIDBlock != 0 {
			t.Fatalf("data dir %d: first ledger id %d, want a multiple of %d in [%d, %d)", i, first, ledgerIDBlock, int64(firstLedgerIDMin), int64(firstLedgerIDMax))
		}
		if seen[first] {
			t.Fatalf("data dir %d: first ledger id %d again", i, first)
		}
		seen[first] = true
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		// Each open reserves a new block of ids (engine.go newLedgerID); it never draws again.
		e = openMem(t, mem, nil)
		if got := appendIDs(t, e, "public/default/persistent/other", 1)[0]; got != first+ledgerIDBlock {
			t.Fatalf("data dir %d: after a restart the next ledger id is %d, want %d", i, got, first+ledgerIDBlock)
		}
		crashed := mem.Crash(nil)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = openMem(t, crashed, nil)
		if got := appendIDs(t, e, "public/default/persistent/third", 1)[0]; got != first+2*ledgerIDBlock {
			t.Fatalf("data dir %d: after a crash the next ledger id is %d, want %d", i, got, first+2*ledgerIDBlock)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNewDataDirCrashBeforeItsFirstID: a new data directory that crashes during its first open
// (before its state file is durable) draws its start again on the next open; no id was handed
// out before, and the incarnation recorded by the lost open stays ordered.
func TestNewDataDirCrashBeforeItsFirstID(t *testing.T) {
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	// Keep the incarnation record but lose the state file, as a crash between the two writes does.
	crashed := mem.Crash(nil)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := crashed.Remove("/data/" + stateFile); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, crashed, nil)
	defer e.Close()
	first := appendIDs(t, e, "public/default/persistent/orders", 1)[0]
	if first < firstLedgerIDMin || first >= firstLedgerIDMax {
		t.Fatalf("first ledger id %d, want one in [%d, %d)", first, int64(firstLedgerIDMin), int64(firstLedgerIDMax))
	}
	if got := e.IncarnationOf(first); got != e.Incarnation() {
		t.Fatalf("IncarnationOf(%d) = %x, want this open's %x", first, got, e.Incarnation())
	}
}

// TestExistingDataDirKeepsItsLedgerIDs: a data directory made before ids started at random keeps
// counting from its own limit, read from a version-1 state file (before incarnations) and from
// the current one.
func TestExistingDataDirKeepsItsLedgerIDs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state []byte
	}{
		{"version 1", encodeEngineStateV1(engineState{ledgerIDLimit: 1 + ledgerIDBlock, firstJournal: 1})},
		{"current", encodeEngineState(engineState{ledgerIDLimit: 1 + 2*ledgerIDBlock, firstJournal: 1})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			if err := mem.MkdirAll("/data"); err != nil {
				t.Fatal(err)
			}
			writeFileForTest(t, mem, "/data/"+stateFile, tc.state)
			st, err := decodeEngineState(tc.state)
			if err != nil {
				t.Fatal(err)
			}
			e := openMem(t, mem, nil)
			defer e.Close()
			if got := appendIDs(t, e, "public/default/persistent/orders", 1)[0]; got != int64(st.ledgerIDLimit) {
				t.Fatalf("first ledger id %d, want %d from the state file", got, st.ledgerIDLimit)
			}
		})
	}
}
