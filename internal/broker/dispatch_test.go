package broker

import (
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// The dispatch state machine's behaviour is specified by the transcripts in testdata/dispatch
// (TestDispatchTranscripts); FuzzDispatchState checks its invariants on random transcripts. This
// file has the helpers other tests share and the table of unackedSet.

func pos(l, e int64) mtypes.Position { return mtypes.Position{LedgerID: l, EntryID: e} }

func entries(l int64, from, to int64, msgs int) []entryInfo {
	var out []entryInfo
	for e := from; e <= to; e++ {
		out = append(out, entryInfo{pos: pos(l, e), numMessages: msgs})
	}
	return out
}

// deliveredTo groups delivered entry ids by consumer name.
func deliveredTo(res assignResult) map[string][]int64 {
	out := map[string][]int64{}
	for _, d := range res.deliveries {
		out[d.to.name] = append(out[d.to.name], d.d.Position.EntryID)
	}
	return out
}

func TestUnackedSet(t *testing.T) {
	set, left := unackedSet([]uint64{0b1011}, 5)
	if left != 2 || set[0] != 0b10100 {
		t.Fatalf("set %b left %d", set[0], left)
	}
	set, left = unackedSet(nil, 70)
	if left != 70 || len(set) != 2 || set[1] != 0b111111 {
		t.Fatalf("set %v left %d", set, left)
	}
}
