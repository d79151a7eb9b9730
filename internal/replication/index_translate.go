package replication

import (
	"slices"
	"sort"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Translation between origin and local positions, for replicated subscriptions
// (docs/replication-design.md, "Source and receiver").

// LocalRuns calls fn for every stored run of origin key whose origin positions lie in [from, to],
// clipped to it, with the local range that holds those entries, in origin order. fn returning
// false stops. It reports the highest origin position the key has mapped (Earliest if none), so a
// caller can tell whether the whole range has arrived.
func (x *Index) LocalRuns(key OriginKey, from, to mtypes.Position, fn func(localFrom, localTo mtypes.Position) bool) (last mtypes.Position) {
	x.mu.Lock()
	o := x.existing(key)
	if o == nil {
		x.mu.Unlock()
		return mtypes.Earliest
	}
	v := o.runs.view()
	last = v.lastEnd(o.floor)
	x.mu.Unlock()
	lo := mtypes.Earliest
	if from != mtypes.Earliest {
		lo = mtypes.Position{LedgerID: from.LedgerID, EntryID: from.EntryID - 1}
	}
	v.each(lo, to, func(r run) bool { return fn(r.local, r.localEnd()) })
	return last
}

// LastMapped returns the highest origin position of key that is stored here (Earliest if none).
func (x *Index) LastMapped(key OriginKey) mtypes.Position {
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.existing(key)
	if o == nil {
		return mtypes.Earliest
	}
	return o.runs.view().lastEnd(o.floor)
}

// OriginThrough returns, per origin key, the highest origin position p such that every entry of
// that key at or before p is stored here at a local position at or before local (what a
// subscription whose mark-delete position is local has consumed of that origin), starting after
// from[key] (a position the caller already knows to be covered; Earliest when absent). Keys of
// cluster skip (this cluster's own name) are left out. Keys with nothing covered are left out.
func (x *Index) OriginThrough(local mtypes.Position, skip string, from map[OriginKey]mtypes.Position) map[OriginKey]mtypes.Position {
	x.mu.Lock()
	type keyView struct {
		key   OriginKey
		floor mtypes.Position
		runs  runView
	}
	var views []keyView
	for _, c := range x.clusters {
		if c.name == skip {
			continue
		}
		for _, o := range c.keys {
			views = append(views, keyView{o.key, o.floor, o.runs.view()})
		}
	}
	x.mu.Unlock()
	out := map[OriginKey]mtypes.Position{}
	for _, kv := range views {
		through, known := from[kv.key]
		if !known {
			through = mtypes.Earliest
			// Entries at or below the floor are no longer mapped; they are older than every run.
			if kv.floor.LedgerID >= 0 && kv.floor.EntryID >= 0 {
				if first, ok := kv.runs.first(); !ok || first.local.Compare(local) <= 0 {
					through = kv.floor
				}
			}
		}
		// Runs in origin order: stop at the first one not wholly consumed (local order follows
		// origin order within a key; where it does not, stopping early only syncs less).
		kv.runs.each(through, mtypes.Latest, func(r run) bool {
			if r.localEnd().Compare(local) <= 0 {
				through = r.originEnd()
				return true
			}
			if r.local.Compare(local) <= 0 && r.local.LedgerID == local.LedgerID {
				through = mtypes.Position{LedgerID: r.origin.LedgerID, EntryID: r.origin.EntryID + (local.EntryID - r.local.EntryID)}
			}
			return false
		})
		if through != mtypes.Earliest {
			out[kv.key] = through
		}
	}
	return out
}

// ReplicatedLocal returns the local ranges within [from, to] that hold replicated entries (of any
// origin), sorted and merged: what a receiver must leave out when it translates a state naming its
// own entries by identity.
func (x *Index) ReplicatedLocal(from, to mtypes.Position) []mtypes.PositionRange {
	x.mu.Lock()
	var views []runView
	for _, c := range x.clusters {
		for _, o := range c.keys {
			views = append(views, o.runs.view())
		}
	}
	x.mu.Unlock()
	var out []mtypes.PositionRange
	for _, v := range views {
		v.each(mtypes.Earliest, mtypes.Latest, func(r run) bool {
			if r.localEnd().Compare(from) >= 0 && r.local.Compare(to) <= 0 {
				out = append(out, mtypes.PositionRange{From: r.local, To: r.localEnd()})
			}
			return true
		})
	}
	slices.SortFunc(out, func(a, b mtypes.PositionRange) int { return a.From.Compare(b.From) })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && r.From.LedgerID == merged[n-1].To.LedgerID && r.From.EntryID <= merged[n-1].To.EntryID+1 {
			if r.To.Compare(merged[n-1].To) > 0 {
				merged[n-1].To = r.To
			}
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// first returns v's first run.
func (v runView) first() (run, bool) {
	if len(v.blocks) == 0 || len(v.blocks[0]) == 0 {
		return run{}, false
	}
	return v.blocks[0][0], true
}

// OriginAcksAbove expresses acknowledged local ranges and partial batches that lie above a
// subscription's mark-delete position in the origin coordinates of the replicated entries they
// hold: per origin key (other than cluster skip), the origin ranges of the runs that overlap the
// local ranges, clipped to them, and the partial batches at local positions those runs hold. from
// says, per key, the origin position below which every run is consumed (OriginThrough's answer):
// only the runs after it are walked. local must be sorted and disjoint; batches sorted by position.
func (x *Index) OriginAcksAbove(local []mtypes.PositionRange, batches []mtypes.BatchAck, skip string, from map[OriginKey]mtypes.Position) map[OriginKey]*OriginAcks {
	if len(local) == 0 && len(batches) == 0 {
		return nil
	}
	x.mu.Lock()
	type keyView struct {
		key  OriginKey
		runs runView
	}
	var views []keyView
	for _, c := range x.clusters {
		if c.name == skip {
			continue
		}
		for _, o := range c.keys {
			views = append(views, keyView{o.key, o.runs.view()})
		}
	}
	x.mu.Unlock()
	out := map[OriginKey]*OriginAcks{}
	for _, kv := range views {
		lo, ok := from[kv.key]
		if !ok {
			lo = mtypes.Earliest
		}
		var acks OriginAcks
		kv.runs.each(lo, mtypes.Latest, func(r run) bool {
			lf, lt := r.local, r.localEnd()
			// The local ranges overlapping the run.
			i := sort.Search(len(local), func(i int) bool { return local[i].To.Compare(lf) >= 0 })
			for ; i < len(local) && local[i].From.Compare(lt) <= 0; i++ {
				// A run lies within one ledger: the clipped bounds are in it.
				a, b := maxPos(lf, local[i].From), minPos(lt, local[i].To)
				of := mtypes.Position{LedgerID: r.origin.LedgerID, EntryID: r.origin.EntryID + (a.EntryID - lf.EntryID)}
				ot := mtypes.Position{LedgerID: r.origin.LedgerID, EntryID: r.origin.EntryID + (b.EntryID - lf.EntryID)}
				if n := len(acks.Ranges); n > 0 && acks.Ranges[n-1].To.LedgerID == of.LedgerID && acks.Ranges[n-1].To.EntryID+1 >= of.EntryID {
					acks.Ranges[n-1].To = maxPos(acks.Ranges[n-1].To, ot)
				} else {
					acks.Ranges = append(acks.Ranges, mtypes.PositionRange{From: of, To: ot})
				}
			}
			j := sort.Search(len(batches), func(j int) bool { return batches[j].Position.Compare(lf) >= 0 })
			for ; j < len(batches) && batches[j].Position.Compare(lt) <= 0; j++ {
				b := batches[j]
				b.Position = mtypes.Position{LedgerID: r.origin.LedgerID, EntryID: r.origin.EntryID + (b.Position.EntryID - lf.EntryID)}
				acks.Batches = append(acks.Batches, b)
			}
			return true
		})
		if len(acks.Ranges) > 0 || len(acks.Batches) > 0 {
			acks.Key = kv.key
			out[kv.key] = &acks
		}
	}
	return out
}

func minPos(a, b mtypes.Position) mtypes.Position {
	if a.Compare(b) <= 0 {
		return a
	}
	return b
}
