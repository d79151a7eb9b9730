package broker

// autoSplitRanges assigns the Key_Shared hash space 0..65535 to the auto-split consumers of a
// subscription the way Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector does, so that the
// ownership of a key changes as little as possible when consumers come and go:
//
//   - the first consumer owns the whole space;
//   - a joining consumer splits the largest range (the first one on a tie) and takes its lower
//     half; only keys of that one range move, from one consumer to the newcomer (and the broker's
//     "recently joined" rule keeps their order);
//   - a leaving consumer's range goes to the consumer owning the next higher range, or, for the
//     highest range, to the one below; no other key moves, so the keys of the surviving consumers
//     never change hands (their pending messages stay the oldest of their keys).
//
// It is a small deterministic type: no locks, no I/O; the dispatcher drives it under the
// subscription's mutex.
type autoSplitRanges struct {
	// ends[i] is the inclusive upper end of range i; ranges are contiguous from 0 and the last one
	// ends at keyHashSpace-1. owners[i] owns range i.
	ends   []int32
	owners []*dconsumer
}

// keyHashSpace is the size of the Key_Shared hash space (hashes are 0..65535).
const keyHashSpace = 65536

// add gives c a range: the whole space if it is the first, else the lower half of the largest range.
func (a *autoSplitRanges) add(c *dconsumer) {
	if a.index(c) >= 0 {
		return
	}
	if len(a.ends) == 0 {
		a.ends = []int32{keyHashSpace - 1}
		a.owners = []*dconsumer{c}
		return
	}
	best, bestSize := 0, int32(-1)
	start := int32(0)
	for i, end := range a.ends {
		if size := end - start + 1; size > bestSize {
			best, bestSize = i, size
		}
		start = end + 1
	}
	if bestSize < 2 {
		// 65536 consumers already: nothing left to split; c gets no keys (as Pulsar refuses it).
		return
	}
	lo := int32(0)
	if best > 0 {
		lo = a.ends[best-1] + 1
	}
	mid := lo + bestSize/2 - 1
	a.ends = insertAt(a.ends, best, mid)
	a.owners = insertAt(a.owners, best, c)
}

// remove takes c's range away and merges it into a neighbour's.
func (a *autoSplitRanges) remove(c *dconsumer) {
	i := a.index(c)
	if i < 0 {
		return
	}
	last := len(a.ends) - 1
	switch {
	case last == 0:
		a.ends, a.owners = nil, nil
		return
	case i == last:
		// The highest range goes to the consumer below, which now ends at the top.
		a.ends = append(a.ends[:last-1], a.ends[last])
		a.owners = a.owners[:last]
	default:
		// The next higher range grows down over c's.
		a.ends = append(a.ends[:i], a.ends[i+1:]...)
		a.owners = append(a.owners[:i], a.owners[i+1:]...)
	}
}

// owner returns the consumer owning hash h, nil when there is none.
func (a *autoSplitRanges) owner(h uint32) *dconsumer {
	for i, end := range a.ends {
		if int32(h) <= end {
			return a.owners[i]
		}
	}
	return nil
}

// rangeOf returns c's inclusive range, ok false when c has none.
func (a *autoSplitRanges) rangeOf(c *dconsumer) (HashRange, bool) {
	i := a.index(c)
	if i < 0 {
		return HashRange{}, false
	}
	start := int32(0)
	if i > 0 {
		start = a.ends[i-1] + 1
	}
	return HashRange{Start: start, End: a.ends[i]}, true
}

func (a *autoSplitRanges) index(c *dconsumer) int {
	for i, o := range a.owners {
		if o == c {
			return i
		}
	}
	return -1
}

func insertAt[T any](s []T, i int, v T) []T {
	s = append(s, v)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
