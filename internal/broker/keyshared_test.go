package broker

import (
	"fmt"
	"testing"
)

func ranges(a *autoSplitRanges, cs ...*dconsumer) string {
	s := ""
	for _, c := range cs {
		r, ok := a.rangeOf(c)
		if !ok {
			s += c.name + ":- "
			continue
		}
		s += fmt.Sprintf("%s:%d-%d ", c.name, r.Start, r.End)
	}
	return s
}

func TestAutoSplitRangesJoinAndLeave(t *testing.T) {
	a := &autoSplitRanges{}
	c1, c2, c3, c4 := newDConsumer(1, "c1", 0), newDConsumer(2, "c2", 0), newDConsumer(3, "c3", 0), newDConsumer(4, "c4", 0)
	steps := []struct {
		op   func()
		want string
	}{
		{func() { a.add(c1) }, "c1:0-65535 c2:- c3:- c4:- "},
		// The newcomer takes the lower half of the largest range.
		{func() { a.add(c2) }, "c1:32768-65535 c2:0-32767 c3:- c4:- "},
		// Tie: the first (lowest) largest range is split.
		{func() { a.add(c3) }, "c1:32768-65535 c2:16384-32767 c3:0-16383 c4:- "},
		{func() { a.add(c4) }, "c1:49152-65535 c2:16384-32767 c3:0-16383 c4:32768-49151 "},
		// Leaving: the next higher range grows over it; nobody else's keys move.
		{func() { a.remove(c2) }, "c1:49152-65535 c2:- c3:0-16383 c4:16384-49151 "},
		// The highest range goes to the one below.
		{func() { a.remove(c1) }, "c1:- c2:- c3:0-16383 c4:16384-65535 "},
		{func() { a.remove(c1) }, "c1:- c2:- c3:0-16383 c4:16384-65535 "},
		{func() { a.remove(c3) }, "c1:- c2:- c3:- c4:0-65535 "},
		{func() { a.remove(c4) }, "c1:- c2:- c3:- c4:- "},
	}
	for i, s := range steps {
		s.op()
		if got := ranges(a, c1, c2, c3, c4); got != s.want {
			t.Fatalf("step %d: %s, want %s", i, got, s.want)
		}
	}
	if a.owner(7) != nil {
		t.Fatal("owner with no consumers")
	}
}

// TestAutoSplitLeaveMovesOnlyTheLeaversKeys checks the property the ordering guarantee relies on,
// over many join/leave sequences: when a consumer leaves, every hash it did not own keeps its owner.
func TestAutoSplitLeaveMovesOnlyTheLeaversKeys(t *testing.T) {
	a := &autoSplitRanges{}
	var cs []*dconsumer
	for i := 0; i < 12; i++ {
		cs = append(cs, newDConsumer(uint64(i), fmt.Sprint(i), 0))
		a.add(cs[i])
	}
	for _, leave := range []int{5, 0, 11, 3, 7, 1, 2, 4, 6, 8, 9, 10} {
		before := make([]*dconsumer, keyHashSpace)
		for h := range before {
			before[h] = a.owner(uint32(h))
		}
		a.remove(cs[leave])
		for h := range before {
			now := a.owner(uint32(h))
			if before[h] != cs[leave] && now != before[h] {
				t.Fatalf("removing %d moved hash %d from %s to %s", leave, h, before[h].name, now.name)
			}
			if now == cs[leave] {
				t.Fatalf("hash %d still owned by the removed consumer", h)
			}
		}
		// Re-joining moves keys only to the newcomer.
		if leave%2 == 0 {
			for h := range before {
				before[h] = a.owner(uint32(h))
			}
			c := newDConsumer(uint64(100+leave), "new", 0)
			a.add(c)
			for h := range before {
				if now := a.owner(uint32(h)); now != before[h] && now != c {
					t.Fatalf("join moved hash %d between old consumers", h)
				}
			}
			a.remove(c)
		}
	}
}
