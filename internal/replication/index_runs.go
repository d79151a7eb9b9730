package replication

import (
	"sort"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// A run maps count consecutive origin entries (same ledger) to count consecutive local entries
// (same ledger).
type run struct {
	origin, local mtypes.Position
	count         int64
}

func (r run) originEnd() mtypes.Position {
	return mtypes.Position{LedgerID: r.origin.LedgerID, EntryID: r.origin.EntryID + r.count - 1}
}
func (r run) localEnd() mtypes.Position {
	return mtypes.Position{LedgerID: r.local.LedgerID, EntryID: r.local.EntryID + r.count - 1}
}

// clip returns the part of r whose origin positions are after lo and at or before hi, and whether
// there is one.
func (r run) clip(lo, hi mtypes.Position) (run, bool) {
	if r.originEnd().Compare(lo) <= 0 || r.origin.Compare(hi) > 0 {
		return run{}, false
	}
	if r.origin.LedgerID == lo.LedgerID && r.origin.EntryID <= lo.EntryID {
		cut := lo.EntryID + 1 - r.origin.EntryID
		r.origin.EntryID += cut
		r.local.EntryID += cut
		r.count -= cut
	}
	if end := r.originEnd(); end.Compare(hi) > 0 && end.LedgerID == hi.LedgerID {
		r.count -= end.EntryID - hi.EntryID
	}
	return r, true
}

// runBlockSize is the most runs one block of a runList holds (40 KiB). Blocks are the unit in
// which old runs are forgotten (folded into the floor: the oldest block goes as a whole, so
// recording stays O(1) amortised at the memory bound) and in which a snapshot shares runs with
// the index instead of copying them.
const runBlockSize = 1024

// runList is an origin key's runs, sorted by origin position, in blocks of at most runBlockSize
// runs. Only the last block is changed in place (appends, and the growth of its last run): any
// other block is replaced when a run is inserted into it, so a view shares every block but the
// last.
type runList struct {
	blocks [][]run
	n      int
}

func (l *runList) len() int { return l.n }

// last returns the last run (nil if none); the caller may grow its count.
func (l *runList) last() *run {
	if len(l.blocks) == 0 {
		return nil
	}
	b := l.blocks[len(l.blocks)-1]
	return &b[len(b)-1]
}

// append adds r after every run.
func (l *runList) append(r run) {
	if k := len(l.blocks); k > 0 && len(l.blocks[k-1]) < runBlockSize {
		l.blocks[k-1] = append(l.blocks[k-1], r)
	} else {
		// The first block grows as runs come (most origins have a few runs per ledger); later
		// ones are made whole.
		c := 1
		if k > 0 {
			c = runBlockSize
		}
		l.blocks = append(l.blocks, append(make([]run, 0, c), r))
	}
	l.n++
}

// insert adds r where it belongs in origin order (a run that arrived out of order: rare). The block
// it goes to is replaced by a new one (split in two when full).
func (l *runList) insert(r run) {
	if len(l.blocks) == 0 || l.last().origin.Compare(r.origin) < 0 {
		l.append(r)
		return
	}
	bi := sort.Search(len(l.blocks), func(i int) bool { return l.blocks[i][0].origin.Compare(r.origin) > 0 }) - 1
	bi = max(bi, 0)
	b := l.blocks[bi]
	i := sort.Search(len(b), func(i int) bool { return b[i].origin.Compare(r.origin) > 0 })
	merged := make([]run, 0, len(b)+1)
	merged = append(append(append(merged, b[:i]...), r), b[i:]...)
	if len(merged) <= runBlockSize {
		l.blocks[bi] = merged
	} else {
		half := len(merged) / 2
		lo := append(make([]run, 0, runBlockSize), merged[:half]...)
		hi := append(make([]run, 0, runBlockSize), merged[half:]...)
		l.blocks = append(l.blocks[:bi+1], l.blocks[bi:]...)
		l.blocks[bi], l.blocks[bi+1] = lo, hi
	}
	l.n++
}

// find returns the run holding origin position pos.
func (l *runList) find(pos mtypes.Position) (run, bool) {
	bi := sort.Search(len(l.blocks), func(i int) bool { return l.blocks[i][0].origin.Compare(pos) > 0 }) - 1
	if bi < 0 {
		return run{}, false
	}
	b := l.blocks[bi]
	i := sort.Search(len(b), func(i int) bool { return b[i].origin.Compare(pos) > 0 }) - 1
	r := b[i]
	if r.origin.LedgerID != pos.LedgerID || pos.EntryID >= r.origin.EntryID+r.count {
		return run{}, false
	}
	return r, true
}

// firstBlock returns the number of runs in the oldest block and the origin end of its last run.
func (l *runList) firstBlock() (n int, end mtypes.Position) {
	b := l.blocks[0]
	return len(b), b[len(b)-1].originEnd()
}

// dropFirstBlock forgets the oldest block.
func (l *runList) dropFirstBlock() {
	l.n -= len(l.blocks[0])
	l.blocks[0] = nil
	l.blocks = l.blocks[1:]
	if len(l.blocks) == 0 {
		l.blocks = nil
	}
}

// view returns the runs as they are now, for a snapshot taken outside the index's lock: the block
// list is copied, every block but the last is shared (never changed in place), the last is copied.
func (l *runList) view() runView {
	if len(l.blocks) == 0 {
		return runView{}
	}
	bs := make([][]run, len(l.blocks))
	copy(bs, l.blocks)
	k := len(bs) - 1
	bs[k] = append([]run(nil), bs[k]...)
	return runView{blocks: bs}
}

// runView is an immutable copy of a runList (see view).
type runView struct{ blocks [][]run }

// each calls fn for every run of v clipped to the origin positions after lo and at or before hi,
// in order, until fn returns false.
func (v runView) each(lo, hi mtypes.Position, fn func(run) bool) {
	bi := sort.Search(len(v.blocks), func(i int) bool { b := v.blocks[i]; return b[len(b)-1].originEnd().Compare(lo) > 0 })
	for ; bi < len(v.blocks); bi++ {
		b := v.blocks[bi]
		i := sort.Search(len(b), func(i int) bool { return b[i].originEnd().Compare(lo) > 0 })
		for ; i < len(b); i++ {
			if b[i].origin.Compare(hi) > 0 {
				return
			}
			if r, ok := b[i].clip(lo, hi); ok && !fn(r) {
				return
			}
		}
	}
}

// last returns the origin end of v's last run, or lo when v has none after lo.
func (v runView) lastEnd(lo mtypes.Position) mtypes.Position {
	if len(v.blocks) == 0 {
		return lo
	}
	b := v.blocks[len(v.blocks)-1]
	return maxPos(lo, b[len(b)-1].originEnd())
}

func maxPos(a, b mtypes.Position) mtypes.Position {
	if a.Compare(b) >= 0 {
		return a
	}
	return b
}
