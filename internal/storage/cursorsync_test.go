package storage

import (
	"context"
	"math"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// TestCursorAckStateAndDeleteRange: AckState copies the mark-delete position, the acknowledged
// ranges and partial batches (within limits, Truncated beyond); DeleteRange acknowledges a range
// across a ledger roll, moves the mark-delete position when the range starts right after it, and
// stops at its limit.
func TestCursorAckStateAndDeleteRange(t *testing.T) {
	ctx := context.Background()
	e := openMem(t, vfs.NewMem(), nil)
	defer e.Close()
	l, err := e.OpenLedger(ctx, "public/default/persistent/sync")
	if err != nil {
		t.Fatal(err)
	}
	// The cursor exists before the roll: a ledger no cursor needs is trimmed at once.
	c, err := l.OpenCursor(ctx, "s", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	var ps []mtypes.Position
	for i := 0; i < 20; i++ {
		if i == 10 {
			if err := l.Roll(ctx); err != nil {
				t.Fatal(err)
			}
		}
		p, err := l.Append(ctx, payload(i), int64(1000+i))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if ps[9].LedgerID == ps[10].LedgerID {
		t.Fatalf("no ledger roll between %v and %v", ps[9], ps[10])
	}
	v0 := c.Version()
	if err := c.Delete(ctx, ps[0], ps[2], ps[3], ps[5]); err != nil {
		t.Fatal(err)
	}
	if err := c.AckBatchIndexes(ctx, ps[7], 4, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	st := c.AckState(10, 10)
	if st.MarkDelete != ps[0] || len(st.Ranges) != 2 || st.Ranges[0] != (mtypes.AckRange{LedgerID: ps[2].LedgerID, From: ps[2].EntryID, To: ps[3].EntryID}) ||
		st.Ranges[1] != (mtypes.AckRange{LedgerID: ps[5].LedgerID, From: ps[5].EntryID, To: ps[5].EntryID}) || st.Truncated || st.Version == v0 {
		t.Fatalf("ack state %+v", st)
	}
	if len(st.Batches) != 1 || st.Batches[0].Position != ps[7] || st.Batches[0].Size != 4 || st.Batches[0].Acked[0] != 0b110 {
		t.Fatalf("batches %+v", st.Batches)
	}
	if lim := c.AckState(1, 0); len(lim.Ranges) != 1 || len(lim.Batches) != 0 || !lim.Truncated {
		t.Fatalf("limited ack state %+v", lim)
	}

	// A range that does not touch the mark-delete position: entry by entry, across the roll.
	n, trunc, err := c.DeleteRange(ctx, ps[8], ps[12], 100)
	if err != nil || n != 5 || trunc {
		t.Fatalf("DeleteRange 8..12: %d %v %v", n, trunc, err)
	}
	for i := 8; i <= 12; i++ {
		if !c.IsAcknowledged(ps[i]) {
			t.Fatalf("entry %d not acknowledged", i)
		}
	}
	if c.IsAcknowledged(ps[13]) || c.IsAcknowledged(ps[6]) {
		t.Fatal("acknowledged beyond the range")
	}
	// The limit.
	n, trunc, err = c.DeleteRange(ctx, ps[14], ps[19], 2)
	if err != nil || n != 2 || !trunc || !c.IsAcknowledged(ps[15]) || c.IsAcknowledged(ps[16]) {
		t.Fatalf("DeleteRange with limit 2: %d %v %v", n, trunc, err)
	}
	// From the first entry after the mark-delete position: the mark-delete position moves, and
	// the count excludes what was acknowledged already.
	n, trunc, err = c.DeleteRange(ctx, mtypes.Earliest, ps[16], 1)
	if err != nil || trunc || c.MarkDeletePosition() != ps[16] {
		t.Fatalf("DeleteRange from the first entry: %d %v %v, mark-delete %v", n, trunc, err, c.MarkDeletePosition())
	}
	if want := int64(16 - 0 - 3 - 5 - 2); n != want { // 1..16 minus acked 2,3,5,8..12,14,15
		t.Fatalf("newly acknowledged %d, want %d", n, want)
	}
	if n, _, _ := c.DeleteRange(ctx, ps[3], ps[10], 100); n != 0 {
		t.Fatalf("a range behind the mark-delete position acknowledged %d", n)
	}
}

// TestIncarnationsBetween: the incarnations that own a span of ledger ids, in order, each once.
func TestIncarnationsBetween(t *testing.T) {
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	inc1 := e.Incarnation()
	first := appendIDs(t, e, "span/a", 3)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	inc2 := e.Incarnation()
	second := appendIDs(t, e, "span/b", 3)
	if got := e.IncarnationsBetween(first[0], second[0]); len(got) != 2 || got[0] != inc1 || got[1] != inc2 {
		t.Fatalf("IncarnationsBetween(%d, %d) = %x, want [%x %x]", first[0], second[0], got, inc1, inc2)
	}
	if got := e.IncarnationsBetween(second[0], second[0]); len(got) != 1 || got[0] != inc2 {
		t.Fatalf("IncarnationsBetween within the second open = %x", got)
	}
	if got := e.IncarnationsBetween(first[0], first[0]); len(got) != 1 || got[0] != inc1 {
		t.Fatalf("IncarnationsBetween within the first open = %x", got)
	}
}

// TestDeleteRangeEndingBetweenLedgers: a range that ends "before ledger L" (entry id MaxInt64 of
// an earlier id) moves the mark-delete position to the last stored entry before L, never to a
// position that names no entry.
func TestDeleteRangeEndingBetweenLedgers(t *testing.T) {
	ctx := context.Background()
	e := openMem(t, vfs.NewMem(), nil)
	defer e.Close()
	l, err := e.OpenLedger(ctx, "public/default/persistent/between")
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.OpenCursor(ctx, "s", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	var ps []mtypes.Position
	for i := 0; i < 6; i++ {
		if i == 3 {
			if err := l.Roll(ctx); err != nil {
				t.Fatal(err)
			}
		}
		p, err := l.Append(ctx, payload(i), int64(1000+i))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	n, _, err := c.DeleteRange(ctx, mtypes.Earliest, mtypes.Position{LedgerID: ps[3].LedgerID - 1, EntryID: math.MaxInt64}, 100)
	if err != nil || n != 3 || c.MarkDeletePosition() != ps[2] {
		t.Fatalf("DeleteRange to before ledger %d: %d %v, mark-delete %v, want %v", ps[3].LedgerID, n, err, c.MarkDeletePosition(), ps[2])
	}
}
