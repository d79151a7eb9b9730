package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// tryAckBatch and trySetProperties go through the checks the Cursor methods apply before they
// change a state; they report whether the change was accepted.
func tryAckBatch(s *cursorState, p mtypes.Position, size int, indexes []int) bool {
	_, err := s.ackBatch(p, size, indexes)
	return err == nil
}

func trySetProperties(s *cursorState, props map[string]string) bool {
	return s.setProperties(props) == nil
}

// randomCursorOps applies n random operations to s: individual acks (enough to pass the
// persisted-range cap), mark-delete moves, batch acks with sizes up to twice the decoder's limit,
// property sets up to beyond the properties bound, resets.
func randomCursorOps(rng *rand.Rand, s *cursorState, n int) {
	pos := func() mtypes.Position {
		p := mtypes.Position{LedgerID: s.markDelete.LedgerID + rng.Int64N(3), EntryID: rng.Int64N(40_000)}
		if p.Compare(s.markDelete) <= 0 {
			p = mtypes.Position{LedgerID: s.markDelete.LedgerID, EntryID: s.markDelete.EntryID + 1 + rng.Int64N(1000)}
		}
		return p
	}
	for range n {
		switch op := rng.IntN(100); {
		case op < 55:
			// Mostly every other entry: each one a range of its own.
			p := pos()
			p.EntryID &^= 1
			s.ack(p)
		case op < 60:
			// A run of every other entry after the last range: many ranges at little cost.
			p := mtypes.Position{LedgerID: s.markDelete.LedgerID + 3, EntryID: 0}
			if n := len(s.acked); n > 0 {
				p = mtypes.Position{LedgerID: s.acked[n-1].ledger, EntryID: s.acked[n-1].to + 2}
			}
			for range rng.IntN(4000) {
				s.ack(p)
				p.EntryID += 2
			}
		case op < 62:
			s.setMarkDelete(pos())
		case op < 64:
			// A run of partially acknowledged batches: past the count or the bitset cap.
			size := []int{2, 64, 1 << 20}[rng.IntN(3)]
			p := mtypes.Position{LedgerID: s.markDelete.LedgerID + 4, EntryID: rng.Int64N(1000)}
			for range 1 + rng.IntN(min(12_000, 40<<20/size)) {
				tryAckBatch(s, p, size, []int{0})
				p.EntryID++
			}
		case op < 85:
			sizes := []int{1, 2, 63, 64, 65, 1000, 1 << 20, 1<<20 + 1, 1 << 21}
			size := sizes[rng.IntN(len(sizes))]
			idx := []int{rng.IntN(size), rng.IntN(size)}
			if rng.IntN(10) == 0 {
				idx = append(idx, -1, size, size+5) // out of range: ignored
			}
			tryAckBatch(s, pos(), size, idx)
		case op < 99:
			props := map[string]string{}
			for i := range rng.IntN(5) {
				props[fmt.Sprintf("k%d", i)] = strings.Repeat("v", rng.IntN(100))
			}
			if rng.IntN(20) == 0 {
				// Around the properties bound.
				props["big"] = strings.Repeat("b", 8<<20-64+rng.IntN(128))
			}
			trySetProperties(s, props)
		default:
			s.reset(pos())
		}
	}
}

// TestCursorStateRoundTrip: every state the cursor accepts encodes to a record the reader
// accepts (within maxRecordBody, as a journal record and as a cursor-log record) and decodes to
// the persisted part of the state: the same mark-delete position and properties, the first
// maxPersistedRanges ranges, and batches that are the state's own (a batch left out is
// redelivered whole after a restart, never skipped).
func TestCursorStateRoundTrip(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 5
	}
	var rangesCapped, batchesCapped bool
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := &cursorState{name: "sub", markDelete: mtypes.Position{LedgerID: 3, EntryID: -1}}
		for round := range 12 {
			randomCursorOps(rng, s, 1+rng.IntN(300))
			r, b := checkCursorStateRoundTrip(t, fmt.Sprintf("seed %d round %d", seed, round), s)
			rangesCapped = rangesCapped || r
			batchesCapped = batchesCapped || b
		}
	}
	if !rangesCapped || !batchesCapped {
		t.Fatalf("the random states never reached the persisted caps (ranges %v, batches %v)", rangesCapped, batchesCapped)
	}
}

// checkCursorStateRoundTrip checks one state; it reports whether the ranges and the batches were
// more than the encoder persists.
func checkCursorStateRoundTrip(t *testing.T, what string, s *cursorState) (rangesCapped, batchesCapped bool) {
	t.Helper()
	body := encodeCursorState([]byte{cState}, s)
	// The journal record adds its type and slot before the body.
	if n := len(body) + 1 + 4; n > maxRecordBody {
		t.Fatalf("%s: encoded state of %d bytes over the reader's record limit %d", what, n, maxRecordBody)
	}
	got, err := decodeCursorState(body[1:])
	if err != nil {
		t.Fatalf("%s: the state the cursor accepted does not decode: %v", what, err)
	}
	if got.name != s.name || got.markDelete != s.markDelete {
		t.Fatalf("%s: name/mark-delete %q %v, want %q %v", what, got.name, got.markDelete, s.name, s.markDelete)
	}
	want := s.acked[:min(len(s.acked), maxPersistedRanges)]
	if len(got.acked) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got.acked, want)) {
		t.Fatalf("%s: %d ranges decoded, want the first %d", what, len(got.acked), len(want))
	}
	for p, b := range got.batches {
		orig := s.batches[p]
		if orig == nil || orig.size != b.size || !reflect.DeepEqual(orig.acked, b.acked) {
			t.Fatalf("%s: batch %v decoded as %d/%v, the state has %+v", what, p, b.size, b.acked, orig)
		}
	}
	if len(got.props) != len(s.props) || (len(s.props) > 0 && !reflect.DeepEqual(got.props, s.props)) {
		t.Fatalf("%s: properties do not round-trip (%d decoded, %d set)", what, len(got.props), len(s.props))
	}
	return len(s.acked) > len(got.acked), len(s.batches) > len(got.batches)
}

// TestAckBatchSizeOverLimit is the review's F1 at the storage level: an acknowledgement claiming a
// batch of 2^31-1 messages is refused before anything is allocated for it, and one just over the
// decoder's limit (which would make the cursor's record unreadable at the next start) too; the
// cursor keeps its state across a restart.
func TestAckBatchSizeOverLimit(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	l, err := e.OpenLedger(ctx, "limits/batch")
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, l, 3)
	c, err := l.OpenCursor(ctx, "sub", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MarkDelete(ctx, ps[0]); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = c.AckBatchIndexes(ctx, ps[1], math.MaxInt32, []int{0})
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("an ack of a batch of 2^31-1 messages was accepted")
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("refusing the ack allocated %d bytes", n)
	}
	if err := c.AckBatchIndexes(ctx, ps[1], 1<<20+1, []int{0}); err == nil {
		t.Fatal("an ack of a batch over the decoder's limit was accepted")
	}
	if err := c.AckBatchIndexes(ctx, ps[2], 1<<20, []int{0, 5}); err != nil {
		t.Fatalf("an ack of a batch at the limit: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	l, err = e.OpenLedger(ctx, "limits/batch")
	if err != nil {
		t.Fatal(err)
	}
	c = l.Cursor("sub")
	if c == nil {
		t.Fatal("the cursor is gone after a restart")
	}
	if md := c.MarkDeletePosition(); md != ps[0] {
		t.Fatalf("mark-delete %v after a restart, want %v", md, ps[0])
	}
	if got := c.AckedBatchIndexes(ps[2]); len(got) != (1<<20)/64 || got[0] != 1|1<<5 {
		t.Fatalf("the batch at the limit lost its acks across a restart")
	}
}

// TestSetPropertiesOverLimit: properties over MaxCursorPropertiesBytes are refused with
// ErrCursorStateTooLarge; at the limit they persist across a restart.
func TestSetPropertiesOverLimit(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	l, err := e.OpenLedger(ctx, "limits/props")
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.OpenCursor(ctx, "pulsar.dedup", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	// The broker's largest dedup snapshot: 10,000 producers with 256-byte names.
	dedup := map[string]string{"version": "1"}
	for i := range 10_000 {
		dedup[fmt.Sprintf("seq.%0256d", i)] = "9223372036854775807"
	}
	if err := c.SetProperties(ctx, dedup); err != nil {
		t.Fatalf("the largest dedup snapshot: %v", err)
	}
	over := map[string]string{"big": strings.Repeat("x", 64<<20)}
	if err := c.SetProperties(ctx, over); err == nil {
		t.Fatal("64 MiB of properties accepted")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	l, err = e.OpenLedger(ctx, "limits/props")
	if err != nil {
		t.Fatal(err)
	}
	c = l.Cursor("pulsar.dedup")
	if c == nil {
		t.Fatal("the cursor is gone after a restart")
	}
	if got := c.Properties(); !reflect.DeepEqual(got, dedup) {
		t.Fatalf("properties after a restart: %d, want the %d set", len(got), len(dedup))
	}
}

// FuzzCursorStateRoundTrip is TestCursorStateRoundTrip with the fuzzer choosing the operations.
func FuzzCursorStateRoundTrip(f *testing.F) {
	f.Add(uint64(1), uint16(200))
	f.Add(uint64(99), uint16(2000))
	f.Fuzz(func(t *testing.T, seed uint64, n uint16) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := &cursorState{name: "sub", markDelete: mtypes.Position{LedgerID: 3, EntryID: -1}}
		randomCursorOps(rng, s, int(n)%500)
		checkCursorStateRoundTrip(t, fmt.Sprintf("seed %d", seed), s)
	})
}

// TestCursorStateBound: a state at every cap, with the longest varints, encodes within
// maxCursorStateBytes (which the compiler checks against maxRecordBody).
func TestCursorStateBound(t *testing.T) {
	const far = 1 << 62 // ledger and entry ids that take the longest varints
	s := &cursorState{name: strings.Repeat("n", MaxCursorNameBytes), markDelete: mtypes.Position{LedgerID: far, EntryID: far}}
	for i := range int64(maxPersistedRanges + 10) {
		s.acked = append(s.acked, ackRange{far + 1 + i, far, far + far/2})
	}
	s.batches = map[mtypes.Position]*batchAck{}
	for i := range int64(maxPersistedBatches + 10) {
		size := 64
		if i < 30 {
			size = MaxAckBatchSize
		}
		s.batches[mtypes.Position{LedgerID: far + 1 + i, EntryID: far}] = &batchAck{size: size, acked: make([]uint64, (size+63)/64)}
	}
	s.props = map[string]string{}
	for i := 0; PropertiesSize(s.props) < MaxCursorPropertiesBytes-300; i++ {
		s.props[fmt.Sprintf("%0200d", i)] = strings.Repeat("v", 80)
	}
	if err := checkProperties(s.props); err != nil {
		t.Fatal(err)
	}
	body := encodeCursorState(nil, s)
	if len(body) > maxCursorStateBytes {
		t.Fatalf("a state at the caps encodes to %d bytes, over maxCursorStateBytes %d", len(body), maxCursorStateBytes)
	}
	if _, err := decodeCursorState(body); err != nil {
		t.Fatalf("a state at the caps does not decode: %v", err)
	}
	t.Logf("a state at the caps: %d bytes (bound %d, reader's limit %d)", len(body), maxCursorStateBytes, maxRecordBody)
}

// TestNameAndEntryBounds: names and entry sizes that the reader would refuse are refused when
// written: a ledger name over MaxLedgerNameBytes (its NAME file would be unreadable), a cursor
// name over MaxCursorNameBytes, a MaxEntrySize whose records would exceed maxRecordBody.
func TestNameAndEntryBounds(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	defer e.Close()
	if _, err := e.OpenLedger(ctx, strings.Repeat("n", MaxLedgerNameBytes+1)); err == nil {
		t.Fatal("a ledger name over MaxLedgerNameBytes was accepted")
	}
	long := strings.Repeat("n", MaxLedgerNameBytes)
	l, err := e.OpenLedger(ctx, long)
	if err != nil {
		t.Fatalf("a ledger name at MaxLedgerNameBytes: %v", err)
	}
	if ok, err := e.LedgerExists(ctx, long); err != nil || !ok {
		t.Fatalf("LedgerExists of a name at the limit: %v %v", ok, err)
	}
	if _, err := l.OpenCursor(ctx, strings.Repeat("c", MaxCursorNameBytes+1), CursorOptions{Durable: true}); !errors.Is(err, ErrCursorStateTooLarge) {
		t.Fatalf("a cursor name over MaxCursorNameBytes: %v", err)
	}
	if _, err := Open(ctx, Options{Dir: "/other", FS: mem, Logger: testLogger(), MaxEntrySize: maxRecordBody}); err == nil {
		t.Fatal("a MaxEntrySize whose records the reader refuses was accepted")
	}
}
