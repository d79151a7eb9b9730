package replication

import "github.com/meridian-mq/meridian/internal/mtypes"

// PositionMapping is a position of another cluster mapped to this cluster (Manager.TranslateFrom).
type PositionMapping struct {
	// Local is this cluster's position.
	Local mtypes.Position
	// Origin is the origin position that was mapped: the one asked for when Exact, else the
	// greatest one below it that arrived here.
	Origin mtypes.Position
	Exact  bool
}

// TranslateFrom maps position pos of cluster (an origin cluster of topic) to this cluster through
// the topic's inbound index (docs/replication-design.md, "Position translation"). When pos itself
// was replicated here the answer is exact. With atOrBefore, a position that was not (a
// subscription's mark-delete position, an entry not replicated) maps to the greatest position of
// cluster below it that was. ok is false when the topic is not loaded here, has no index, or
// holds no mapping that answers.
func (m *Manager) TranslateFrom(topic, cluster string, pos mtypes.Position, atOrBefore bool) (t PositionMapping, ok bool) {
	m.mu.Lock()
	x := m.indexes[topic]
	m.mu.Unlock()
	if x == nil {
		return PositionMapping{}, false
	}
	if local, found := x.LocalOf(cluster, pos); found {
		return PositionMapping{Local: local, Origin: pos, Exact: true}, true
	}
	if !atOrBefore {
		return PositionMapping{}, false
	}
	origin, local, found := x.LocalAtOrBefore(cluster, pos)
	if !found {
		return PositionMapping{}, false
	}
	return PositionMapping{Local: local, Origin: origin}, true
}
