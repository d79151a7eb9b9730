package cluster

import "sync"

// recordAt is a bundle record as the store holds it: the ownership (Broker "" when released), the
// key's version for compare-and-swap, and the revision it was written at.
type recordAt struct {
	own         Ownership
	version     int64
	modRevision int64
}

// view is the coordinator's picture of the cluster: live brokers and bundle records. The watch
// goroutine (coordinator.go) writes it from the store's events; the coordinator's own successful
// writes are applied too, so a lookup does not wait for its echo. Lookups read it. Every change
// closes changed, waking lookups that hold.
type view struct {
	mu      sync.Mutex
	brokers map[string]BrokerInfo
	records map[Bundle]recordAt
	changed chan struct{}
}

func newView() *view {
	return &view{brokers: map[string]BrokerInfo{}, records: map[Bundle]recordAt{}, changed: make(chan struct{})}
}

// notifyLocked wakes every waiter (mu held).
func (v *view) notifyLocked() {
	close(v.changed)
	v.changed = make(chan struct{})
}

func (v *view) putBroker(b BrokerInfo) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.brokers[b.ID] = b
	v.notifyLocked()
}

func (v *view) deleteBroker(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.brokers, id)
	v.notifyLocked()
}

// putRecord applies a record unless the view already holds a newer one (the watch may echo a
// write the coordinator applied first). It returns the record it replaced and whether it applied r.
func (v *view) putRecord(b Bundle, r recordAt) (recordAt, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	cur, ok := v.records[b]
	if ok && cur.modRevision >= r.modRevision {
		return cur, false
	}
	v.records[b] = r
	v.notifyLocked()
	return cur, true
}

func (v *view) deleteRecord(b Bundle, modRevision int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.records[b]; ok && cur.modRevision >= modRevision {
		return
	}
	delete(v.records, b)
	v.notifyLocked()
}

// snapshot is what a lookup of bundle b decides on, the record's version for a compare-and-swap
// (0: no key), and the channel closed at the next change.
func (v *view) snapshot(self string, b Bundle) (View, recordAt, bool, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	owned := make(map[string]int, len(v.brokers))
	for _, r := range v.records {
		if r.own.Broker != "" {
			owned[r.own.Broker]++
		}
	}
	live := make(map[string]BrokerInfo, len(v.brokers))
	for id, info := range v.brokers {
		info.OwnedBundles = owned[id]
		live[id] = info
	}
	out := View{Self: self, Bundle: b.String(), Live: live}
	rec, exists := v.records[b]
	if exists && rec.own.Broker != "" {
		own := rec.own
		out.Record = &own
	}
	return out, rec, exists, v.changed
}

func (v *view) owner(b Bundle) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.records[b].own.Broker
}

func (v *view) record(b Bundle) (recordAt, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.records[b]
	return r, ok
}

// ownedBy lists the bundles whose record names broker id.
func (v *view) ownedBy(id string) []Bundle {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []Bundle
	for b, r := range v.records {
		if r.own.Broker == id {
			out = append(out, b)
		}
	}
	return out
}

func (v *view) liveBrokers() []BrokerInfo {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]BrokerInfo, 0, len(v.brokers))
	for _, b := range v.brokers {
		out = append(out, b)
	}
	return out
}

func (v *view) broker(id string) (BrokerInfo, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	b, ok := v.brokers[id]
	return b, ok
}
