package engine

import (
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/metadata"
)

func put(rev int64, key string, size int) metadata.Event {
	return metadata.Event{Type: metadata.EventPut, Revision: rev, KV: metadata.KV{Key: key, Value: []byte(strings.Repeat("x", size)), ModRevision: rev}}
}

func TestHistoryBounds(t *testing.T) {
	h := newHistory(1, 5, 1<<20)
	for r := int64(2); r <= 20; r++ {
		h.append(put(r, "/k", 1))
	}
	if len(h.events) != 5 || h.compactRev != 15 || h.events[0].Revision != 16 {
		t.Fatalf("count bound: %d events from %d, compactRev %d", len(h.events), h.events[0].Revision, h.compactRev)
	}
	if _, _, compacted, _ := h.since(14, "", 10, 20); !compacted {
		t.Fatal("revision 15 was dropped; a watch after 14 must be told")
	}
	evs, scanned, compacted, wait := h.since(15, "", 10, 20)
	if compacted || len(evs) != 5 || scanned != 20 || wait == nil {
		t.Fatalf("since(15) = %d events, scanned %d, compacted %v, wait %v", len(evs), scanned, compacted, wait != nil)
	}

	b := newHistory(1, 1000, 3*(1000+64))
	for r := int64(2); r <= 10; r++ {
		b.append(put(r, "/k", 1000-len("/k")))
	}
	if len(b.events) != 3 || b.compactRev != 7 {
		t.Fatalf("byte bound: %d events, compactRev %d", len(b.events), b.compactRev)
	}
	// A single event larger than the byte bound is still kept (the newest change is always available).
	b.append(put(11, "/big", 10000))
	if len(b.events) != 1 || b.events[0].Revision != 11 {
		t.Fatalf("oversized event: %d events", len(b.events))
	}
}

func TestHistorySinceFiltersAndLimits(t *testing.T) {
	h := newHistory(1, 100, 1<<20)
	for r := int64(2); r <= 11; r++ {
		key := "/a/x"
		if r%2 == 0 {
			key = "/b/x"
		}
		h.append(put(r, key, 1))
	}
	evs, scanned, _, wait := h.since(1, "/a/", 2, 11)
	if len(evs) != 2 || evs[0].Revision != 3 || evs[1].Revision != 5 || scanned != 5 || wait != nil {
		t.Fatalf("limited since: %v, scanned %d, wait %v", evs, scanned, wait != nil)
	}
	evs, scanned, _, wait = h.since(scanned, "/a/", 100, 11)
	if len(evs) != 3 || scanned != 11 || wait == nil {
		t.Fatalf("rest: %d events, scanned %d", len(evs), scanned)
	}
}
