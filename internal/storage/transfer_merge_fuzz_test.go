package storage

import (
	"reflect"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// fuzzMergeSegments makes the two sides' segments from b. With the low bit of b[0] clear, pairs
// of bytes give ascending ids (steps of 1 to 16, from 1), the side (high bit) and the entries
// (0 to 11): disjoint, valid sets. With it set, triples give side, id and entries as signed
// bytes: anything, duplicates and negatives included.
func fuzzMergeSegments(b []byte) (a, bs []ExportedSegment) {
	if len(b) == 0 {
		return nil, nil
	}
	raw := b[0]&1 == 1
	b = b[1:]
	if raw {
		for ; len(b) >= 3; b = b[3:] {
			s := ExportedSegment{ID: int64(int8(b[1])), Entries: int64(int8(b[2]))}
			if b[0]&1 == 0 {
				a = append(a, s)
			} else {
				bs = append(bs, s)
			}
		}
		return a, bs
	}
	id := int64(0)
	for ; len(b) >= 2; b = b[2:] {
		id += 1 + int64(b[0]&0x0f)
		s := ExportedSegment{ID: id, Entries: int64(b[1] % 12)}
		if b[0]&0x80 == 0 {
			a = append(a, s)
		} else {
			bs = append(bs, s)
		}
	}
	return a, bs
}

// mergeRuleAcked says whether the merge rules acknowledge entry p of side own for cursor name,
// entry by entry.
func mergeRuleAcked(name string, p mtypes.Position, own *mergeSide) bool {
	if st := own.states[name]; st != nil {
		return st.isAcked(p)
	}
	return false
}

// FuzzMergeCursorRecords: garbage records or segments are refused with an error, never a panic;
// valid inputs give records that validateImportedCursors accepts, whose states acknowledge
// exactly the entries the rules do (checked entry by entry), with the batches of the side owning
// each unacknowledged entry and the union of the properties, b's winning.
func FuzzMergeCursorRecords(f *testing.F) {
	rec := func(name string, c mergeCursorSpec) []byte { return c.record(f, name) }
	// Layout seeds: ordered mode; a: 1(5) 2(3), b: 5(4), a: 9(4).
	layout := []byte{0, 0x00, 5, 0x00, 3, 0x82, 4, 0x03, 4}
	f.Add(joinFuzzRecords(rec("sub", mergeCursorSpec{md: pos(1, 4), acks: []mtypes.Position{pos(2, 1), pos(9, 2)}, props: map[string]string{"k": "a"}})),
		joinFuzzRecords(rec("sub", mergeCursorSpec{md: pos(5, 1), batches: map[mtypes.Position][]int{pos(5, 2): {1}}, props: map[string]string{"k": "b"}})),
		layout)
	f.Add(joinFuzzRecords(rec("only-a", mergeCursorSpec{md: pos(9, 0)})),
		joinFuzzRecords(rec("only-b", mergeCursorSpec{md: pos(5, 3)})),
		layout)
	f.Add(joinFuzzRecords(rec("sub", mergeCursorSpec{md: pos(0, 9)})), []byte{}, []byte{})
	f.Add(joinFuzzRecords([]byte{cState, 1, 0xff}), joinFuzzRecords(rec("x", mergeCursorSpec{})), layout)
	f.Add([]byte{}, []byte{}, []byte{1, 0, 5, 3, 1, 5, 2})
	f.Fuzz(func(t *testing.T, aRecs, bRecs, segSpec []byte) {
		aSegs, bSegs := fuzzMergeSegments(segSpec)
		a := CursorSide{Records: splitFuzzRecords(aRecs), Segments: aSegs}
		b := CursorSide{Records: splitFuzzRecords(bRecs), Segments: bSegs}
		out, err := MergeCursorRecords(a, b)
		if err != nil {
			return
		}
		if err := validateImportedCursors(out); err != nil {
			t.Fatalf("merged records invalid: %v", err)
		}
		sa, err := decodeMergeSide(a)
		if err != nil {
			t.Fatalf("a accepted by the merge, refused alone: %v", err)
		}
		sb, err := decodeMergeSide(b)
		if err != nil {
			t.Fatalf("b accepted by the merge, refused alone: %v", err)
		}
		var merged []mergedSegment
		for _, s := range []*mergeSide{sa, sb} {
			for id, n := range s.segs {
				merged = append(merged, mergedSegment{id: id, entries: n, side: s})
			}
		}
		got := map[string]*cursorState{}
		for _, r := range out {
			st, err := decodeCursorState(r[1:])
			if err != nil {
				t.Fatal(err)
			}
			got[st.name] = st
		}
		for name := range sa.states {
			if got[name] == nil {
				t.Fatalf("cursor %q of a missing", name)
			}
		}
		for name := range sb.states {
			if got[name] == nil {
				t.Fatalf("cursor %q of b missing", name)
			}
		}
		if len(got) != len(out) {
			t.Fatalf("%d records for %d cursors", len(out), len(got))
		}
		segOf := map[int64]mergedSegment{}
		for _, s := range merged {
			segOf[s.id] = s
		}
		for name, st := range got {
			for _, r := range st.acked {
				if s, ok := segOf[r.ledger]; !ok || r.to >= s.entries {
					t.Fatalf("%s: range %v outside the merged segments", name, r)
				}
			}
			if len(merged) > 0 {
				if s, ok := segOf[st.markDelete.LedgerID]; !ok || st.markDelete.EntryID < -1 || st.markDelete.EntryID >= s.entries {
					t.Fatalf("%s: mark-delete %v outside the merged segments", name, st.markDelete)
				}
			}
			for _, s := range merged {
				for e := int64(0); e < s.entries; e++ {
					p := pos(s.id, e)
					if want := mergeRuleAcked(name, p, s.side); st.isAcked(p) != want {
						t.Fatalf("%s: %v acknowledged %v, the rules say %v (md %v, ranges %v)", name, p, st.isAcked(p), want, st.markDelete, st.acked)
					}
				}
			}
			want := map[mtypes.Position]*batchAck{}
			for _, s := range []*mergeSide{sa, sb} {
				if src := s.states[name]; src != nil {
					for p, ba := range src.batches {
						if n, ok := s.segs[p.LedgerID]; ok && p.EntryID >= 0 && p.EntryID < n && !src.isAcked(p) {
							want[p] = ba
						}
					}
				}
			}
			if len(st.batches)+len(want) > 0 && !reflect.DeepEqual(st.batches, want) {
				t.Fatalf("%s: batches %v, want %v", name, st.batches, want)
			}
			props := map[string]string{}
			for _, s := range []*mergeSide{sa, sb} {
				if src := s.states[name]; src != nil {
					for k, v := range src.props {
						props[k] = v
					}
				}
			}
			if len(st.props)+len(props) > 0 && !reflect.DeepEqual(st.props, props) {
				t.Fatalf("%s: properties %v, want %v", name, st.props, props)
			}
		}
	})
}
