package broker

import (
	"maps"
	"slices"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

func TestSubStateRoundTripAndOlderCursors(t *testing.T) {
	// A cursor written before subscriptions kept state (no properties): nothing, no problem.
	if st, problems := decodeSubState(nil); !st.empty() || len(problems) != 0 {
		t.Fatalf("older cursor: %+v %v", st, problems)
	}
	st := subState{
		props:        map[string]string{"a": "1", "meridian.v": "user key that looks reserved", "": "empty key"},
		replicated:   true,
		redeliveries: []redeliveryCount{{mtypes.Position{LedgerID: 3, EntryID: 7}, 9}, {mtypes.Position{LedgerID: 4, EntryID: 0}, 1}},
	}
	got, problems := decodeSubState(encodeSubState(st))
	if len(problems) != 0 || !maps.Equal(got.props, st.props) || !got.replicated || !slices.Equal(got.redeliveries, st.redeliveries) {
		t.Fatalf("round trip: %+v %v", got, problems)
	}
	// A malformed count is skipped and reported; the rest is kept.
	props := encodeSubState(st)
	props[redeliveriesKey] = "3:7:9,garbage,4:0:1"
	if got, problems := decodeSubState(props); len(problems) != 1 || len(got.redeliveries) != 2 {
		t.Fatalf("malformed count: %+v %v", got, problems)
	}
	// A later format version is not read as this one.
	props[subStateVersionKey] = "2"
	if got, problems := decodeSubState(props); !got.empty() || len(problems) != 1 {
		t.Fatalf("later version: %+v %v", got, problems)
	}
}

// TestPersistedRedeliveriesAreTheLargest: above the bound, the counts kept are the largest (the
// messages closest to a dead-letter threshold), ties broken by the older entry.
func TestPersistedRedeliveriesAreTheLargest(t *testing.T) {
	m := map[mtypes.Position]uint32{}
	for i := range maxPersistedRedeliveries + 500 {
		m[mtypes.Position{LedgerID: 1, EntryID: int64(i)}] = uint32(i%700) + 1
	}
	got := largestRedeliveries(m, maxPersistedRedeliveries)
	if len(got) != maxPersistedRedeliveries {
		t.Fatalf("kept %d counts", len(got))
	}
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if a.count < b.count || (a.count == b.count && a.pos.Compare(b.pos) > 0) {
			t.Fatalf("not largest first: %v before %v", a, b)
		}
	}
	// 1500 entries with counts 1..700 repeating: the smallest kept count leaves out only smaller ones.
	floor := got[len(got)-1].count
	for p, n := range m {
		if n > floor && !slices.ContainsFunc(got, func(r redeliveryCount) bool { return r.pos == p }) {
			t.Fatalf("count %d of %v dropped while %d kept", n, p, floor)
		}
	}
	if n := len(encodeSubState(subState{redeliveries: got})[redeliveriesKey]); n > 61*maxPersistedRedeliveries {
		t.Fatalf("persisted counts take %d bytes", n)
	}
}
