package storage

import (
	"context"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// TestTrimWaitsForPersistedMarkDelete: a trim removes only what every durable cursor's persisted
// mark-delete position covers. The in-memory position runs up to a flush interval ahead, and a
// cursor whose properties describe the entries up to its position (the broker's dedup snapshot,
// the replication index) would otherwise come back after a crash at its persisted position with
// the entries after it trimmed.
func TestTrimWaitsForPersistedMarkDelete(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, func(o *Options) { o.SegmentMaxEntries = 10 })
	l, err := e.OpenLedger(ctx, "trim/persisted")
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, l, 25) // segments of 10, 10, 5
	c := openCursorT(t, l, "dedup")
	if err := c.MarkDelete(ctx, ps[19]); err != nil {
		t.Fatal(err)
	}
	if err := l.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	if got := l.FirstPosition(); got != ps[0] {
		t.Fatalf("trimmed to %v before the cursor's position was persisted", got)
	}
	crashed := mem.Crash(nil)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	if got := l.FirstPosition(); got != ps[20] {
		t.Fatalf("first position %v after the flush and trim, want %v", got, ps[20])
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// The crash before the flush: the cursor is back at its persisted position, and the entries
	// after it are all there.
	e = openMem(t, crashed, nil)
	defer e.Close()
	l, err = e.OpenLedger(ctx, "trim/persisted")
	if err != nil {
		t.Fatal(err)
	}
	md := l.Cursor("dedup").MarkDeletePosition()
	if next := (mtypes.Position{LedgerID: md.LedgerID, EntryID: md.EntryID + 1}); next.Compare(l.FirstPosition()) < 0 && md.Compare(mtypes.Position{LedgerID: l.FirstPosition().LedgerID, EntryID: l.FirstPosition().EntryID - 1}) != 0 {
		t.Fatalf("cursor at %v, first stored entry %v: entries after the cursor were trimmed", md, l.FirstPosition())
	}
	if l.Entries() != 25 {
		t.Fatalf("%d entries after the crash, want 25", l.Entries())
	}
}
