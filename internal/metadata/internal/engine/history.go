package engine

import (
	"sort"
	"strings"

	"github.com/meridian-mq/meridian/internal/metadata"
)

// history is the bounded log of recent changes that watches read from. Every change has its own
// revision, one more than the previous, so "no gap" is the same as "no missing revision".
// It is guarded by the engine's lock.
type history struct {
	events     []metadata.Event // ascending Revision, all > compactRev
	bytes      int
	maxEvents  int
	maxBytes   int
	compactRev int64         // revisions <= compactRev are no longer available
	notify     chan struct{} // closed (and replaced) on every append
}

func newHistory(compactRev int64, maxEvents, maxBytes int) *history {
	return &history{compactRev: compactRev, maxEvents: maxEvents, maxBytes: maxBytes, notify: make(chan struct{})}
}

func eventSize(ev metadata.Event) int { return len(ev.KV.Key) + len(ev.KV.Value) + 64 }

// append records ev and wakes every waiting watcher.
func (h *history) append(ev metadata.Event) {
	h.events = append(h.events, ev)
	h.bytes += eventSize(ev)
	drop := 0
	for len(h.events)-drop > 1 && (len(h.events)-drop > h.maxEvents || h.bytes > h.maxBytes) {
		h.bytes -= eventSize(h.events[drop])
		h.compactRev = h.events[drop].Revision
		drop++
	}
	if drop > 0 {
		// Copy once the dead head is as large as the live part, so trimming stays amortised O(1).
		if drop >= len(h.events)/2 {
			h.events = append([]metadata.Event(nil), h.events[drop:]...)
		} else {
			h.events = h.events[drop:]
		}
	}
	close(h.notify)
	h.notify = make(chan struct{})
}

// since returns up to limit events under prefix with Revision > after, the highest revision it
// looked at (so the caller can move past non-matching changes), whether after is already compacted,
// and a channel closed at the next append (valid when the caller has read everything).
func (h *history) since(after int64, prefix string, limit int, currentRev int64) (evs []metadata.Event, scannedTo int64, compacted bool, wait <-chan struct{}) {
	if after < h.compactRev {
		return nil, after, true, nil
	}
	i := sort.Search(len(h.events), func(i int) bool { return h.events[i].Revision > after })
	scannedTo = after
	for ; i < len(h.events) && len(evs) < limit; i++ {
		ev := h.events[i]
		scannedTo = ev.Revision
		if strings.HasPrefix(ev.KV.Key, prefix) {
			evs = append(evs, ev)
		}
	}
	if i == len(h.events) {
		if currentRev > scannedTo {
			scannedTo = currentRev
		}
		wait = h.notify
	}
	return evs, scannedTo, false, wait
}
