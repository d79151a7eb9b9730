package broker

import (
	"sync"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// entryWaiters are the pending WaitForEntries callers of a topic.
type entryWaiters struct {
	mu   sync.Mutex
	list []entryWaiter
}

// entryWaiter is a WaitForEntries caller.
type entryWaiter struct {
	from mtypes.Position
	ch   chan struct{}
}

// waitForEntries implements Topic.WaitForEntries.
func (t *topicState) waitForEntries(from mtypes.Position) <-chan struct{} {
	ch := make(chan struct{})
	// Published before the check below: an append that the check misses finds the list
	// (releaseWaiters runs after the append is visible in the ledger).
	ws := t.entryWaiters.Load()
	if ws == nil {
		t.entryWaiters.CompareAndSwap(nil, &entryWaiters{})
		ws = t.entryWaiters.Load()
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if t.isClosed() || (!t.nonPersistent() && t.ledger.Entries() > 0 && t.ledger.LastConfirmed().Compare(from) >= 0) {
		close(ch)
		return ch
	}
	// A caller that gave up its wait cannot withdraw it: waits for one position share its
	// channel, so repeated waits on an idle topic (a replicator rewinding) add nothing.
	for _, w := range ws.list {
		if w.from == from {
			return w.ch
		}
	}
	ws.list = append(ws.list, entryWaiter{from: from, ch: ch})
	return ch
}

// releaseWaiters closes the WaitForEntries channels satisfied by an entry at pos (all of them when
// the topic closes: all=true).
func (t *topicState) releaseWaiters(pos mtypes.Position, all bool) {
	ws := t.entryWaiters.Load()
	if ws == nil {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.list) == 0 {
		return
	}
	kept := ws.list[:0]
	for _, w := range ws.list {
		if all || w.from.Compare(pos) <= 0 {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	clear(ws.list[len(kept):])
	ws.list = kept
}
