package storage

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

func pos(l, e int64) mtypes.Position { return mtypes.Position{LedgerID: l, EntryID: e} }

// mergeCursorSpec builds a cursor state for merge tests: mark-delete md, then individual acks,
// batches and properties.
type mergeCursorSpec struct {
	md      mtypes.Position
	acks    []mtypes.Position
	batches map[mtypes.Position][]int // acknowledged indexes of a batch of 8
	props   map[string]string
}

func (c mergeCursorSpec) record(t testing.TB, name string) []byte {
	t.Helper()
	st := &cursorState{name: name, markDelete: c.md, props: c.props}
	for _, p := range c.acks {
		st.ack(p)
	}
	for p, idx := range c.batches {
		if _, err := st.ackBatch(p, 8, idx); err != nil {
			t.Fatal(err)
		}
	}
	return encodeCursorState([]byte{cState}, st)
}

// segs makes exported segments from id:entries pairs.
func segs(idEntries ...int64) []ExportedSegment {
	var out []ExportedSegment
	for i := 0; i+1 < len(idEntries); i += 2 {
		out = append(out, ExportedSegment{ID: idEntries[i], Entries: idEntries[i+1]})
	}
	return out
}

func side(t testing.TB, sg []ExportedSegment, cursors map[string]mergeCursorSpec) CursorSide {
	t.Helper()
	names := make([]string, 0, len(cursors))
	for n := range cursors {
		names = append(names, n)
	}
	sort.Strings(names)
	s := CursorSide{Segments: sg}
	for _, n := range names {
		s.Records = append(s.Records, cursors[n].record(t, n))
	}
	return s
}

// wantState is the expected merged state of one cursor.
type wantState struct {
	md      mtypes.Position
	ranges  []ackRange
	batches []mtypes.Position
	props   map[string]string
}

func rng(l, from, to int64) ackRange { return ackRange{ledger: l, from: from, to: to} }

// TestMergeCursorRecordsRules: the merge rules, case by case (MergeCursorRecords' doc comment).
func TestMergeCursorRecordsRules(t *testing.T) {
	// A is the returning broker's old ledger (low ids, and in the interleaved cases also ids above
	// B's), B the ledger the other broker served meanwhile.
	aSegs := segs(10, 5, 11, 3)
	bSegs := segs(20, 4)
	inter := segs(10, 5, 30, 4) // A-old < B < A-new
	for _, tc := range []struct {
		name string
		a, b CursorSide
		want map[string]wantState
	}{
		{
			name: "both sides",
			a:    side(t, aSegs, map[string]mergeCursorSpec{"sub": {md: pos(10, 4), acks: []mtypes.Position{pos(11, 1)}}}),
			b:    side(t, bSegs, map[string]mergeCursorSpec{"sub": {md: pos(20, 1), acks: []mtypes.Position{pos(20, 3)}}}),
			want: map[string]wantState{"sub": {md: pos(10, 4), ranges: []ackRange{rng(11, 1, 1), rng(20, 0, 1), rng(20, 3, 3)}}},
		},
		{
			name: "both sides, all acknowledged",
			a:    side(t, aSegs, map[string]mergeCursorSpec{"sub": {md: pos(11, 2)}}),
			b:    side(t, bSegs, map[string]mergeCursorSpec{"sub": {md: pos(20, 3)}}),
			want: map[string]wantState{"sub": {md: pos(20, 3)}},
		},
		{
			name: "only a: b's later segments are delivered",
			a:    side(t, aSegs, map[string]mergeCursorSpec{"sub": {md: pos(11, 2)}}),
			b:    side(t, bSegs, nil),
			want: map[string]wantState{"sub": {md: pos(11, 2)}},
		},
		{
			name: "only b: a's segments are delivered too (again rather than never)",
			a:    side(t, aSegs, nil),
			b:    side(t, bSegs, map[string]mergeCursorSpec{"sub": {md: pos(20, 1)}}),
			want: map[string]wantState{"sub": {md: pos(10, -1), ranges: []ackRange{rng(20, 0, 1)}}},
		},
		{
			name: "only b, nothing acknowledged on b",
			a:    side(t, aSegs, nil),
			b:    side(t, bSegs, map[string]mergeCursorSpec{"sub": {md: pos(20, -1), acks: []mtypes.Position{pos(20, 2)}}}),
			want: map[string]wantState{"sub": {md: pos(10, -1), ranges: []ackRange{rng(20, 2, 2)}}},
		},
		{
			name: "interleaved, only b: a-old and a-new delivered",
			a:    side(t, inter, nil),
			b:    side(t, bSegs, map[string]mergeCursorSpec{"sub": {md: pos(20, 3)}}),
			want: map[string]wantState{"sub": {md: pos(10, -1), ranges: []ackRange{rng(20, 0, 3)}}},
		},
		{
			name: "interleaved, only a: b's segments are after a's first, delivered",
			a:    side(t, inter, map[string]mergeCursorSpec{"sub": {md: pos(30, 1)}}),
			b:    side(t, bSegs, nil),
			want: map[string]wantState{"sub": {md: pos(10, 4), ranges: []ackRange{rng(30, 0, 1)}}},
		},
		{
			name: "interleaved, both: b's mark-delete does not acknowledge a's lower entries",
			a:    side(t, inter, map[string]mergeCursorSpec{"sub": {md: pos(10, 2), acks: []mtypes.Position{pos(30, 0)}}}),
			b:    side(t, bSegs, map[string]mergeCursorSpec{"sub": {md: pos(20, 3)}}),
			want: map[string]wantState{"sub": {md: pos(10, 2), ranges: []ackRange{rng(20, 0, 3), rng(30, 0, 0)}}},
		},
		{
			name: "interleaved, both: a's mark-delete past b's ids does not acknowledge b's entries",
			a:    side(t, inter, map[string]mergeCursorSpec{"sub": {md: pos(30, 3)}}),
			b:    side(t, bSegs, map[string]mergeCursorSpec{"sub": {md: pos(20, -1), acks: []mtypes.Position{pos(20, 1)}}}),
			want: map[string]wantState{"sub": {md: pos(10, 4), ranges: []ackRange{rng(20, 1, 1), rng(30, 0, 3)}}},
		},
		{
			name: "mark-deletes before the first segments",
			a:    side(t, aSegs, map[string]mergeCursorSpec{"sub": {md: pos(3, 9)}}),
			b:    side(t, bSegs, map[string]mergeCursorSpec{"sub": {md: pos(15, 0)}, "other": {md: pos(19, 99)}}),
			want: map[string]wantState{
				"sub":   {md: pos(10, -1)},
				"other": {md: pos(10, -1)}, // only b has it, acknowledging none of b's: nothing acknowledged
			},
		},
		{
			name: "batches kept from the side owning the entry",
			a: side(t, aSegs, map[string]mergeCursorSpec{"sub": {md: pos(10, 2), batches: map[mtypes.Position][]int{
				pos(10, 3): {0, 1}, // kept
				pos(20, 2): {1},    // not a's segment: dropped
				pos(12, 0): {1},    // no segment: dropped
			}}}),
			b: side(t, bSegs, map[string]mergeCursorSpec{"sub": {md: pos(20, 0), acks: []mtypes.Position{pos(20, 2)}, batches: map[mtypes.Position][]int{
				pos(20, 1):  {3}, // kept
				pos(11, 0):  {3}, // a's segment: dropped
				pos(20, 99): {3}, // past the segment's entries: dropped
			}}}),
			want: map[string]wantState{"sub": {md: pos(10, 2), ranges: []ackRange{rng(20, 0, 0), rng(20, 2, 2)},
				batches: []mtypes.Position{pos(10, 3), pos(20, 1)}}},
		},
		{
			name: "properties: union, b wins",
			a:    side(t, aSegs, map[string]mergeCursorSpec{"sub": {md: pos(11, 2), props: map[string]string{"k": "a", "x": "1"}}}),
			b:    side(t, bSegs, map[string]mergeCursorSpec{"sub": {md: pos(20, 3), props: map[string]string{"k": "b", "y": "2"}}}),
			want: map[string]wantState{"sub": {md: pos(20, 3), props: map[string]string{"k": "b", "x": "1", "y": "2"}}},
		},
		{
			name: "properties of one side",
			a:    side(t, aSegs, map[string]mergeCursorSpec{"sub": {md: pos(11, 2), props: map[string]string{"x": "1"}}}),
			b:    side(t, bSegs, nil),
			want: map[string]wantState{"sub": {md: pos(11, 2), props: map[string]string{"x": "1"}}},
		},
		{
			name: "empty sides",
			a:    CursorSide{},
			b:    CursorSide{},
			want: map[string]wantState{},
		},
		{
			name: "no segments on either side: b's mark-delete kept",
			a:    side(t, nil, map[string]mergeCursorSpec{"sub": {md: pos(7, 3)}, "a-only": {md: pos(6, 1)}}),
			b:    side(t, nil, map[string]mergeCursorSpec{"sub": {md: pos(9, 0)}}),
			want: map[string]wantState{"sub": {md: pos(9, 0)}, "a-only": {md: pos(6, 1)}},
		},
		{
			name: "the side with the cursor has no segments: the other's are all delivered",
			a:    side(t, aSegs, nil),
			b:    side(t, nil, map[string]mergeCursorSpec{"sub": {md: pos(50, 3)}}),
			want: map[string]wantState{"sub": {md: pos(10, -1)}},
		},
		{
			name: "empty segments are no segments",
			a:    side(t, segs(5, 0, 10, 5, 11, 3), nil),
			b:    side(t, segs(20, 4, 21, 0), map[string]mergeCursorSpec{"sub": {md: pos(21, -1)}}),
			want: map[string]wantState{"sub": {md: pos(10, -1), ranges: []ackRange{rng(20, 0, 3)}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := MergeCursorRecords(tc.a, tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if err := validateImportedCursors(out); err != nil {
				t.Fatalf("merged records invalid: %v", err)
			}
			got := decodedCursors(t, out)
			if len(got) != len(tc.want) {
				t.Fatalf("%d cursors, want %d", len(got), len(tc.want))
			}
			for n, w := range tc.want {
				g := got[n]
				if g == nil {
					t.Fatalf("cursor %q missing", n)
				}
				if g.markDelete != w.md {
					t.Errorf("%s: mark-delete %v, want %v", n, g.markDelete, w.md)
				}
				if fmt.Sprint(g.acked) != fmt.Sprint(w.ranges) {
					t.Errorf("%s: ranges %v, want %v", n, g.acked, w.ranges)
				}
				var bs []mtypes.Position
				for p := range g.batches {
					bs = append(bs, p)
				}
				sort.Slice(bs, func(i, j int) bool { return bs[i].Compare(bs[j]) < 0 })
				if fmt.Sprint(bs) != fmt.Sprint(w.batches) {
					t.Errorf("%s: batches at %v, want %v", n, bs, w.batches)
				}
				if len(g.props)+len(w.props) > 0 && !reflect.DeepEqual(g.props, w.props) {
					t.Errorf("%s: properties %v, want %v", n, g.props, w.props)
				}
			}
		})
	}
}

// TestMergeCursorRecordsBounds: past maxPersistedRanges the highest ranges are dropped (the cursor
// moves back, never forward); batches past the persisted bounds likewise; properties of a that do
// not fit beside b's are dropped, b's kept.
func TestMergeCursorRecordsBounds(t *testing.T) {
	many := func(ledger int64) *cursorState {
		st := &cursorState{name: "sub", markDelete: pos(ledger, -1)}
		for i := int64(0); i < maxPersistedRanges; i++ {
			st.ack(pos(ledger, 2*i+1))
		}
		return st
	}
	a := CursorSide{Segments: segs(10, 2*maxPersistedRanges+1), Records: [][]byte{encodeCursorState([]byte{cState}, many(10))}}
	bst := many(20)
	_, _ = bst.ackBatch(pos(20, 2*maxPersistedRanges-2), 8, []int{1})
	b := CursorSide{Segments: segs(20, 2*maxPersistedRanges+1), Records: [][]byte{encodeCursorState([]byte{cState}, bst)}}
	out, err := MergeCursorRecords(a, b)
	if err != nil {
		t.Fatal(err)
	}
	st := decodedCursors(t, out)["sub"]
	if st.markDelete != pos(10, -1) || len(st.acked) != maxPersistedRanges {
		t.Fatalf("mark-delete %v, %d ranges; want %v, %d", st.markDelete, len(st.acked), pos(10, -1), maxPersistedRanges)
	}
	if last := st.acked[len(st.acked)-1]; last != rng(10, 2*maxPersistedRanges-1, 2*maxPersistedRanges-1) {
		t.Fatalf("last range %v: the lowest ranges must be kept", last)
	}
	if len(st.batches) != 1 {
		t.Fatalf("batches %v, want b's one", st.batches)
	}

	// Batches: each side within the bounds, together over them.
	batchSide := func(ledger int64) CursorSide {
		st := &cursorState{name: "sub", markDelete: pos(ledger, -1)}
		for i := int64(0); i < maxPersistedBatches; i++ {
			_, _ = st.ackBatch(pos(ledger, i), 8, []int{0})
		}
		return CursorSide{Segments: segs(ledger, maxPersistedBatches), Records: [][]byte{encodeCursorState([]byte{cState}, st)}}
	}
	out, err = MergeCursorRecords(batchSide(10), batchSide(20))
	if err != nil {
		t.Fatal(err)
	}
	st = decodedCursors(t, out)["sub"]
	if len(st.batches) != maxPersistedBatches {
		t.Fatalf("%d batches, want %d", len(st.batches), maxPersistedBatches)
	}
	for p := range st.batches {
		if p.LedgerID != 10 {
			t.Fatalf("batch at %v kept: the lowest must be", p)
		}
	}

	// Properties: b's fill the bound; a's extra key is dropped.
	big := strings.Repeat("v", MaxCursorPropertiesBytes-PropertyOverheadBytes-1)
	pa := CursorSide{Records: [][]byte{mergeCursorSpec{md: pos(1, 0), props: map[string]string{"a": "1", "k": "x"}}.record(t, "sub")}}
	pb := CursorSide{Records: [][]byte{mergeCursorSpec{md: pos(1, 0), props: map[string]string{"k": big}}.record(t, "sub")}}
	out, err = MergeCursorRecords(pa, pb)
	if err != nil {
		t.Fatal(err)
	}
	if got := decodedCursors(t, out)["sub"].props; len(got) != 1 || got["k"] != big {
		t.Fatalf("properties: %d keys, want b's one", len(got))
	}
}

// TestMergeCursorRecordsRefuses: damaged records are ErrCorrupt; segments on both sides, twice on
// one, or negative, are errors; never a panic.
func TestMergeCursorRecordsRefuses(t *testing.T) {
	good := side(t, segs(10, 5), map[string]mergeCursorSpec{"sub": {md: pos(10, 1)}})
	for _, tc := range []struct {
		name    string
		a, b    CursorSide
		corrupt bool
	}{
		{"garbage record", CursorSide{Records: [][]byte{{cState, 1, 0xff}}}, good, true},
		{"not a state record", good, CursorSide{Records: [][]byte{{cDelete, 's'}}}, true},
		{"cursor twice", CursorSide{Records: [][]byte{good.Records[0], good.Records[0]}}, CursorSide{}, true},
		{"segment on both sides", good, CursorSide{Segments: segs(10, 2)}, false},
		{"segment twice", CursorSide{Segments: segs(10, 2, 10, 3)}, CursorSide{}, false},
		{"negative id", CursorSide{Segments: segs(-1, 2)}, CursorSide{}, false},
		{"negative entries", CursorSide{Segments: segs(3, -2)}, CursorSide{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := MergeCursorRecords(tc.a, tc.b)
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.corrupt != errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v: ErrCorrupt %v, want %v", err, errors.Is(err, ErrCorrupt), tc.corrupt)
			}
		})
	}
}
