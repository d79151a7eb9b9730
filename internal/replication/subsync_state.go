package replication

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// The decisions of replicated subscriptions, without I/O: expressing a subscription's local
// acknowledgement state in origin coordinates (source) and translating a state back to local
// positions (receiver). docs/replication-design.md, "Source and receiver".

// ExportInput is what ExportState needs besides the state.
type ExportInput struct {
	Local string // this cluster
	// IncarnationOf names the storage incarnation of a local ledger; IncarnationsThrough the
	// incarnations of the topic's stored ledgers up to and including ledger, in order.
	IncarnationOf       func(ledger int64) uint64
	IncarnationsThrough func(ledger int64) []uint64
	// Index is the topic's inbound index (nil: the topic has no replicated entries).
	Index *Index
	// Through are the origin positions of other clusters' entries known covered by an earlier
	// export of this subscription (ExportState's second result); nil at first.
	Through map[OriginKey]mtypes.Position
}

// beforeLedger is the position just before every entry of ledger l (l > 0), as a range end.
func beforeLedger(l int64) mtypes.Position {
	return mtypes.Position{LedgerID: l - 1, EntryID: math.MaxInt64}
}

// ExportState expresses st in origin coordinates: this cluster's own entries under its name and the
// incarnation of their ledger ([first .. mark-delete] and every acknowledged range above it, with
// the partial batches), entries received from other clusters under their origin key
// ([first .. the origin position through which the mark-delete position covers them], and the
// origin ranges and partial batches of the acknowledged ranges and batches above it). It keeps
// the lowest ranges and batches within the marker's bounds (what is left out is delivered again
// after a move, never skipped). The second result is the per-origin coverage to pass as Through
// next time.
func ExportState(st mtypes.SubscriptionAckState, in ExportInput) ([]OriginAcks, map[OriginKey]mtypes.Position) {
	byKey := map[OriginKey]*OriginAcks{}
	var order []OriginKey
	get := func(k OriginKey) *OriginAcks {
		o := byKey[k]
		if o == nil {
			o = &OriginAcks{Key: k}
			byKey[k] = o
			order = append(order, k)
		}
		return o
	}
	md := st.MarkDelete
	prefixEnd, hasPrefix := md, md.LedgerID >= 0 && md.EntryID >= 0
	if md.LedgerID > 0 && md.EntryID < 0 {
		prefixEnd, hasPrefix = beforeLedger(md.LedgerID), true
	}
	if hasPrefix {
		for _, inc := range in.IncarnationsThrough(md.LedgerID) {
			o := get(OriginKey{in.Local, inc})
			o.Ranges = append(o.Ranges, mtypes.PositionRange{From: mtypes.Earliest, To: prefixEnd})
		}
	}
	budget := maxStateRanges - len(order)
	for _, r := range st.Ranges {
		if budget <= 0 {
			break
		}
		o := get(OriginKey{in.Local, in.IncarnationOf(r.LedgerID)})
		rr := mtypes.PositionRange{From: mtypes.Position{LedgerID: r.LedgerID, EntryID: r.From}, To: mtypes.Position{LedgerID: r.LedgerID, EntryID: r.To}}
		if n := len(o.Ranges); n > 0 && o.Ranges[n-1].To.Compare(rr.From) >= 0 {
			continue // overlaps the prefix (not expected: ranges lie above the mark-delete position)
		}
		o.Ranges = append(o.Ranges, rr)
		budget--
	}
	for i, b := range st.Batches {
		if i == maxStateBatches {
			break
		}
		o := get(OriginKey{in.Local, in.IncarnationOf(b.Position.LedgerID)})
		o.Batches = append(o.Batches, b)
	}
	var through map[OriginKey]mtypes.Position
	if in.Index != nil {
		if hasPrefix {
			through = in.Index.OriginThrough(prefixEnd, in.Local, in.Through)
		}
		keys := make([]OriginKey, 0, len(through))
		for k := range through {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareKeys)
		above := make([]mtypes.PositionRange, len(st.Ranges))
		for i, r := range st.Ranges {
			above[i] = mtypes.PositionRange{From: mtypes.Position{LedgerID: r.LedgerID, EntryID: r.From}, To: mtypes.Position{LedgerID: r.LedgerID, EntryID: r.To}}
		}
		extra := in.Index.OriginAcksAbove(above, st.Batches, in.Local, through)
		for k := range extra {
			if _, ok := through[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, compareKeys)
		batchBudget := maxStateBatches - min(len(st.Batches), maxStateBatches)
		for _, k := range keys {
			if _, known := byKey[k]; !known && len(order) >= maxStateOrigins {
				break
			}
			if t, ok := through[k]; ok && budget > 0 {
				get(k).Ranges = append(get(k).Ranges, mtypes.PositionRange{From: mtypes.Earliest, To: t})
				budget--
			}
			if e := extra[k]; e != nil {
				n := min(len(e.Ranges), max(budget, 0))
				if n > 0 {
					get(k).Ranges = append(get(k).Ranges, e.Ranges[:n]...)
					budget -= n
				}
				nb := min(len(e.Batches), max(batchBudget, 0))
				if nb > 0 {
					get(k).Batches = append(get(k).Batches, e.Batches[:nb]...)
					batchBudget -= nb
				}
			}
		}
	}
	out := make([]OriginAcks, 0, len(order))
	for _, k := range order {
		if len(out) == maxStateOrigins {
			break
		}
		out = append(out, *byKey[k])
	}
	return out, through
}

func compareKeys(a, b OriginKey) int {
	return cmp.Or(strings.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Incarnation, b.Incarnation))
}

// Translation is a state translated to local positions.
type Translation struct {
	Ranges  []mtypes.PositionRange // local ranges to acknowledge, sorted by their start
	Batches []mtypes.BatchAck      // local batch-index acknowledgements
	// Waiting names the origin clusters whose entries the state names but that have not all
	// arrived here yet: the state is applied again once they have.
	Waiting []string
	// Untranslated counts batches whose origin entry is not (or no longer) mapped here.
	Untranslated int
	// Through is, per origin key, the end of the state's range from the first entry (what the
	// subscription has consumed of that origin from its start), for pins and the sync record.
	Through map[OriginKey]mtypes.Position
}

// TranslateInput is what TranslateState needs besides the state.
type TranslateInput struct {
	Local string // this cluster
	Index *Index // this topic's inbound index (nil: nothing was replicated here)
	// Applied are, per origin key, origin positions through which an earlier application of a
	// state from the first entry on is complete: runs at or before them are not walked again.
	Applied map[OriginKey]mtypes.Position
}

// TranslateState translates st's origin ranges into this topic's local positions through the
// inbound index. The receiver's own entries (named under its own name) translate by identity,
// minus the local positions that hold replicated entries. An origin range whose entries have not
// all arrived is translated as far as they have, and its cluster is named in Waiting (the source's
// own entries always have: they travel on the same link before the state).
func TranslateState(st SubscriptionState, in TranslateInput) Translation {
	var tr Translation
	waiting := map[string]bool{}
	for _, o := range st.Origins {
		for _, r := range o.Ranges {
			if r.From == mtypes.Earliest {
				if tr.Through == nil {
					tr.Through = map[OriginKey]mtypes.Position{}
				}
				tr.Through[o.Key] = r.To
			}
			if o.Key.Cluster == in.Local {
				tr.Ranges = append(tr.Ranges, identityRanges(in.Index, r)...)
				continue
			}
			if in.Index == nil {
				if o.Key.Cluster != st.Source {
					waiting[o.Key.Cluster] = true
				}
				continue
			}
			from := r.From
			if a, ok := in.Applied[o.Key]; ok && r.From == mtypes.Earliest && a.Compare(mtypes.Earliest) > 0 {
				if a.Compare(r.To) >= 0 {
					continue
				}
				from = mtypes.Position{LedgerID: a.LedgerID, EntryID: a.EntryID + 1}
			}
			last := in.Index.LocalRuns(o.Key, from, r.To, func(lf, lt mtypes.Position) bool {
				tr.Ranges = append(tr.Ranges, mtypes.PositionRange{From: lf, To: lt})
				return true
			})
			if last.Compare(r.To) < 0 && o.Key.Cluster != st.Source {
				waiting[o.Key.Cluster] = true
			}
		}
		for _, b := range o.Batches {
			var local mtypes.Position
			ok := false
			if o.Key.Cluster == in.Local {
				local, ok = b.Position, true
			} else if in.Index != nil {
				local, ok = in.Index.Lookup(o.Key, b.Position)
			}
			if !ok {
				tr.Untranslated++
				continue
			}
			tr.Batches = append(tr.Batches, mtypes.BatchAck{Position: local, Size: b.Size, Acked: b.Acked})
		}
	}
	slices.SortFunc(tr.Ranges, func(a, b mtypes.PositionRange) int { return a.From.Compare(b.From) })
	tr.Ranges = mergeLocal(tr.Ranges)
	for c := range waiting {
		tr.Waiting = append(tr.Waiting, c)
	}
	slices.Sort(tr.Waiting)
	return tr
}

// identityRanges is r (this cluster's own positions) minus the local positions holding replicated
// entries.
func identityRanges(x *Index, r mtypes.PositionRange) []mtypes.PositionRange {
	if x == nil {
		return []mtypes.PositionRange{r}
	}
	var out []mtypes.PositionRange
	cur := r.From
	for _, rep := range x.ReplicatedLocal(r.From, r.To) {
		if rep.From.Compare(cur) > 0 {
			end := mtypes.Position{LedgerID: rep.From.LedgerID, EntryID: rep.From.EntryID - 1}
			if rep.From.EntryID == 0 {
				end = beforeLedger(rep.From.LedgerID)
			}
			if cur.Compare(end) <= 0 {
				out = append(out, mtypes.PositionRange{From: cur, To: end})
			}
		}
		if next := (mtypes.Position{LedgerID: rep.To.LedgerID, EntryID: rep.To.EntryID + 1}); next.Compare(cur) > 0 {
			cur = next
		}
	}
	if cur.Compare(r.To) <= 0 {
		out = append(out, mtypes.PositionRange{From: cur, To: r.To})
	}
	return out
}

// mergeLocal merges sorted ranges that touch within a ledger or overlap.
func mergeLocal(rs []mtypes.PositionRange) []mtypes.PositionRange {
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 {
			p := &out[n-1]
			if r.From.Compare(p.To) <= 0 || (r.From.LedgerID == p.To.LedgerID && r.From.EntryID == p.To.EntryID+1) {
				if r.To.Compare(p.To) > 0 {
					p.To = r.To
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}
