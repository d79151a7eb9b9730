package replication

import (
	"slices"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Lookups by origin cluster, for position translation (docs/replication-design.md, "Position
// translation"). An operator names a position of cluster A without knowing A's incarnations, so
// these try every incarnation of A the index holds, the most recently used first.

// keysOf returns the origin states of cluster, most recently used first. Called with x.mu held.
func (x *Index) keysOf(cluster string) []*originState {
	c := x.clusters[cluster]
	if c == nil {
		return nil
	}
	keys := make([]*originState, 0, len(c.keys))
	for _, o := range c.keys {
		keys = append(keys, o)
	}
	slices.SortFunc(keys, func(a, b *originState) int {
		switch {
		case a.lastUse > b.lastUse:
			return -1
		case a.lastUse < b.lastUse:
			return 1
		}
		return 0
	})
	return keys
}

// LocalOf returns the local position holding cluster's entry at origin position pos, under any of
// the cluster's incarnations; ok is false when no mapping for it is kept here.
func (x *Index) LocalOf(cluster string, pos mtypes.Position) (local mtypes.Position, ok bool) {
	x.mu.Lock()
	keys := x.keysOf(cluster)
	x.mu.Unlock()
	for _, o := range keys {
		if local, ok := x.Lookup(o.key, pos); ok {
			return local, true
		}
	}
	return mtypes.Position{}, false
}

// LocalAtOrBefore returns the greatest origin position at or before pos of cluster that is mapped
// here, and the local position holding it, searching the cluster's incarnations most recently used
// first; ok is false when none is mapped. It translates a position that need not have been
// replicated itself, such as a subscription's mark-delete position on the origin.
func (x *Index) LocalAtOrBefore(cluster string, pos mtypes.Position) (origin, local mtypes.Position, ok bool) {
	x.mu.Lock()
	keys := x.keysOf(cluster)
	views := make([]runView, len(keys))
	for i, o := range keys {
		views[i] = o.runs.view()
	}
	x.mu.Unlock()
	for _, v := range views {
		found := false
		v.each(mtypes.Earliest, pos, func(r run) bool {
			origin, local, found = r.originEnd(), r.localEnd(), true
			return true
		})
		if found {
			return origin, local, true
		}
	}
	return mtypes.Position{}, mtypes.Position{}, false
}
