package storage

import (
	"fmt"
	"maps"
	"sort"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Merging the cursors of two copies of one ledger.
//
// A topic's ledger can exist on two engines with disjoint segments: a broker served the topic,
// died, another broker served it with fresh segments (higher ids: the ids come from one counter),
// and the first one is back. The ledger that joins both (ImportLedgerReplacing with the segments
// of both sides in id order) needs one state per cursor. MergeCursorRecords computes it from the
// two exports' cursor records and the segments each side describes, entry by entry in meaning but
// range by range in work: a segment's acknowledged entries are at most one prefix plus the
// side's ranges in it.
//
// Whether an entry of side X's segments is acknowledged is X's word alone: X's mark-delete
// position and ranges speak only for X's own segments (a mark-delete of the other side that
// compares higher does not acknowledge X's entries). A cursor X does not have acknowledges none of
// X's entries: X cannot tell a subscription that did not exist yet from one that lived elsewhere
// meanwhile (across several takeovers, or after trimming, no layout rule can), and delivering an
// entry again is recoverable where skipping it is not.

// CursorSide is one side of a merge: the durable cursor records of an export
// (LedgerExport.Cursors) and the segments they describe (LedgerExport.Segments).
type CursorSide struct {
	Records  [][]byte
	Segments []ExportedSegment
}

// mergeSide is one side, decoded.
type mergeSide struct {
	states map[string]*cursorState
	segs   map[int64]int64 // id -> entries (non-empty segments)
}

// mergedSegment is one segment of the merged layout and the side it comes from.
type mergedSegment struct {
	id, entries int64
	side        *mergeSide
}

// MergeCursorRecords returns the cursor records of the ledger whose segments are the union of
// a's and b's (sorted by id), one per cursor of either side, by name:
//   - an entry is acknowledged iff the side owning its segment has the cursor and acknowledges it
//     (its mark-delete position or ranges, read for its own segments only);
//   - the mark-delete position is the last entry before the first unacknowledged one (before the
//     first entry, {first segment, -1}, when that one is unacknowledged, as a new cursor's), the
//     ranges the acknowledged entries after it; past maxPersistedRanges the highest ranges are
//     dropped (those entries are delivered again: the cursor moves back, never forward);
//   - a partially acknowledged batch is kept from the side owning its entry, if the entry is not
//     acknowledged; past the persisted bounds the highest batches are dropped;
//   - properties are the union, b's value where both have a key (b is the current owner's side);
//     a's keys that would take them past MaxCursorPropertiesBytes are dropped, b's never.
//
// A cursor whose merged ledger has no entries keeps b's mark-delete position (a's if b lacks the
// cursor); the load moves it to the ledger's first position. Records that validateImportedCursors
// refuses fail with ErrCorrupt; segments with a negative id or count, an id twice on one side or
// on both sides fail too. The result passes validateImportedCursors.
func MergeCursorRecords(a, b CursorSide) ([][]byte, error) {
	sa, err := decodeMergeSide(a)
	if err != nil {
		return nil, fmt.Errorf("storage: merge cursors, side a: %w", err)
	}
	sb, err := decodeMergeSide(b)
	if err != nil {
		return nil, fmt.Errorf("storage: merge cursors, side b: %w", err)
	}
	layout := make([]mergedSegment, 0, len(sa.segs)+len(sb.segs))
	for _, s := range []*mergeSide{sa, sb} {
		for id, n := range s.segs {
			layout = append(layout, mergedSegment{id: id, entries: n, side: s})
		}
	}
	for id := range sa.segs {
		if _, both := sb.segs[id]; both {
			return nil, fmt.Errorf("storage: merge cursors: segment %d is on both sides", id)
		}
	}
	sort.Slice(layout, func(i, j int) bool { return layout[i].id < layout[j].id })

	names := make([]string, 0, len(sa.states)+len(sb.states))
	for n := range sa.states {
		names = append(names, n)
	}
	for n := range sb.states {
		if _, dup := sa.states[n]; !dup {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([][]byte, 0, len(names))
	for _, n := range names {
		st := mergeCursor(n, sa, sb, layout)
		out = append(out, encodeCursorState([]byte{cState}, st))
	}
	if err := validateImportedCursors(out); err != nil {
		// Not reachable with inputs that validated: a bug here must not reach a ledger.
		return nil, fmt.Errorf("storage: merge cursors: merged records invalid: %w", err)
	}
	return out, nil
}

// decodeMergeSide checks and decodes one side.
func decodeMergeSide(side CursorSide) (*mergeSide, error) {
	if err := validateImportedCursors(side.Records); err != nil {
		return nil, err
	}
	s := &mergeSide{states: make(map[string]*cursorState, len(side.Records)), segs: make(map[int64]int64, len(side.Segments))}
	for _, r := range side.Records {
		st, err := decodeCursorState(r[1:])
		if err != nil {
			return nil, err
		}
		s.states[st.name] = st
	}
	for _, seg := range side.Segments {
		switch {
		case seg.ID < 0 || seg.Entries < 0:
			return nil, fmt.Errorf("segment %d with %d entries", seg.ID, seg.Entries)
		case seg.Entries == 0:
			continue // holds no entry (the import writes no file for it)
		}
		if _, dup := s.segs[seg.ID]; dup {
			return nil, fmt.Errorf("segment %d appears twice", seg.ID)
		}
		s.segs[seg.ID] = seg.Entries
	}
	return s, nil
}

// entryRun is a run of entries from..to (inclusive) of one segment.
type entryRun struct{ from, to int64 }

// ackedRuns returns the acknowledged entries of segment seg for cursor name, by the state of the
// side it comes from, as sorted, disjoint, non-adjacent runs.
func ackedRuns(name string, seg mergedSegment) []entryRun {
	st := seg.side.states[name]
	if st == nil {
		return nil // the other side has the cursor: nothing of this side is acknowledged
	}
	var runs []entryRun
	add := func(from, to int64) {
		from, to = max(from, 0), min(to, seg.entries-1)
		if from > to {
			return
		}
		if k := len(runs) - 1; k >= 0 && from <= runs[k].to+1 {
			runs[k].to = max(runs[k].to, to)
			return
		}
		runs = append(runs, entryRun{from, to})
	}
	switch md := st.markDelete; {
	case md.LedgerID > seg.id:
		add(0, seg.entries-1)
	case md.LedgerID == seg.id:
		add(0, md.EntryID)
	}
	i := sort.Search(len(st.acked), func(i int) bool { return st.acked[i].ledger >= seg.id })
	for ; i < len(st.acked) && st.acked[i].ledger == seg.id; i++ {
		add(st.acked[i].from, st.acked[i].to)
	}
	return runs
}

// mergeCursor computes cursor name's merged state over layout.
func mergeCursor(name string, sa, sb *mergeSide, layout []mergedSegment) *cursorState {
	owner := sb.states[name]
	if owner == nil {
		owner = sa.states[name]
	}
	st := &cursorState{name: name, props: mergeProperties(sa.states[name], sb.states[name])}
	if len(layout) == 0 {
		st.markDelete = owner.markDelete
		return st
	}
	// As a new cursor: nothing acknowledged, the mark-delete position just before the first entry.
	st.markDelete = mtypes.Position{LedgerID: layout[0].id, EntryID: -1}
	prefix := true // every entry so far is acknowledged
	for _, seg := range layout {
		runs := ackedRuns(name, seg)
		if prefix {
			if len(runs) > 0 && runs[0].from == 0 {
				st.markDelete = mtypes.Position{LedgerID: seg.id, EntryID: runs[0].to}
				prefix = runs[0].to == seg.entries-1
				runs = runs[1:]
			} else {
				prefix = false
			}
		}
		for _, r := range runs {
			if len(st.acked) == maxPersistedRanges {
				break // the rest is delivered again
			}
			st.acked = append(st.acked, ackRange{ledger: seg.id, from: r.from, to: r.to})
			st.ackedCount += r.to - r.from + 1
		}
	}
	for _, side := range []*mergeSide{sa, sb} {
		src := side.states[name]
		if src == nil {
			continue
		}
		for p, ba := range src.batches {
			n, ok := side.segs[p.LedgerID]
			if !ok || p.EntryID < 0 || p.EntryID >= n || src.isAcked(p) {
				continue // not an entry of this side's segments, or acknowledged whole
			}
			if st.batches == nil {
				st.batches = map[mtypes.Position]*batchAck{}
			}
			st.batches[p] = &batchAck{size: ba.size, acked: append([]uint64(nil), ba.acked...)}
		}
	}
	// encodeCursorState persists the lowest batches within maxPersistedBatches and
	// maxPersistedBatchWords; the rest is delivered again.
	return st
}

// mergeProperties is the union of a's and b's properties (either may be nil), b's value where
// both have a key; a's other keys in name order while they fit MaxCursorPropertiesBytes.
func mergeProperties(a, b *cursorState) map[string]string {
	var out map[string]string
	if b != nil && len(b.props) > 0 {
		out = maps.Clone(b.props)
	}
	if a == nil || len(a.props) == 0 {
		return out
	}
	if out == nil {
		return maps.Clone(a.props)
	}
	size := PropertiesSize(out)
	keys := make([]string, 0, len(a.props))
	for k := range a.props {
		if _, taken := out[k]; !taken {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		n := len(k) + len(a.props[k]) + PropertyOverheadBytes
		if size+n > MaxCursorPropertiesBytes {
			continue
		}
		out[k] = a.props[k]
		size += n
	}
	return out
}
