package replication

import (
	"context"
	"slices"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// How far a receiving topic's state markers are applied durably (docs/replication-design.md,
// "Durability"): the cursor AppliedStatesCursorName of a topic that received state markers has its
// mark-delete position before the oldest marker that is not applied and made durable yet. At topic
// load the loop reads the log after it and applies the markers it finds again, so a crash between
// storing a state and making it durable loses nothing. The cursor never holds back trimming by
// more than about two flush intervals: with nothing pending it follows the log's end as it was one
// flush earlier (a marker stored by then has long been handed to the loop).

// AppliedStatesCursorName is the receiving side's cursor of applied state markers.
const AppliedStatesCursorName = "meridian.repl-subs"

// maxRescanEntries bounds the entries read after the cursor at topic load (what is beyond is
// logged; the sources' next states carry everything again).
const maxRescanEntries = 200_000

// topicMarks is what the loop keeps per receiving topic (guarded by subSync.mu).
type topicMarks struct {
	cursor  Cursor // nil until the first marker of the topic is applied
	lt      LocalTopic
	applied mtypes.Position // the newest marker applied, not yet covered by the cursor
	lcPrev  mtypes.Position // the log's end at the previous flush
	pending map[subKey]mtypes.Position
}

// noteAppliedLocked records the outcome for the marker at pos of topic (pending: a state waiting
// for other origins or failed; pos is zero for a retry of a pending state); the caller holds s.mu.
func (s *subSync) noteAppliedLocked(k subKey, pos mtypes.Position, pending bool) {
	tm := s.marks[k.topic]
	if tm == nil {
		tm = &topicMarks{pending: map[subKey]mtypes.Position{}, lcPrev: mtypes.Earliest}
		s.marks[k.topic] = tm
	}
	if pending {
		if _, ok := tm.pending[k]; !ok && pos != (mtypes.Position{}) {
			tm.pending[k] = pos // the oldest marker of the subscription not applied yet
		}
		return
	}
	delete(tm.pending, k)
	if pos.Compare(tm.applied) > 0 {
		tm.applied = pos
	}
}

// forgetMarks drops what the loop keeps of an unloaded topic (the cursor closed with it).
func (s *subSync) forgetMarks(topic string) {
	s.mu.Lock()
	delete(s.marks, topic)
	s.mu.Unlock()
}

// advanceMarks moves each topic's cursor after the subscriptions were made durable.
func (s *subSync) advanceMarks(ctx context.Context) {
	type job struct {
		topic string
		tm    *topicMarks
		to    mtypes.Position
	}
	var jobs []job
	s.mu.Lock()
	busy := map[string]bool{}
	for _, q := range [][]storedMarker{s.queue, s.applying} {
		for _, mk := range q {
			busy[mk.topic] = true
		}
	}
	for topic, tm := range s.marks {
		to := tm.applied
		if len(tm.pending) > 0 {
			oldest := slices.MinFunc(slicesOf(tm.pending), func(a, b mtypes.Position) int { return a.Compare(b) })
			to = mtypes.Position{LedgerID: oldest.LedgerID, EntryID: oldest.EntryID - 1}
		} else if !busy[topic] && tm.lcPrev.Compare(to) > 0 {
			to = tm.lcPrev
		}
		jobs = append(jobs, job{topic, tm, to})
	}
	s.mu.Unlock()
	for _, j := range jobs {
		if j.tm.lt != nil && topicClosed(j.tm.lt) {
			s.forgetMarks(j.topic)
			continue
		}
		if j.tm.cursor == nil {
			lt, err := s.m.topics.OpenTopic(ctx, j.topic)
			if err != nil || lt == nil {
				continue
			}
			c, _, err := lt.OpenCursor(ctx, AppliedStatesCursorName, j.to.Next()) // the first entry not covered
			if err != nil {
				s.log.Warn("replicated subscriptions: applied-states cursor not opened", "topic", j.topic, "err", err)
				continue
			}
			s.mu.Lock()
			j.tm.cursor, j.tm.lt = c, lt
			s.mu.Unlock()
		}
		if j.to.EntryID >= 0 && j.to.Compare(j.tm.cursor.MarkDeletePosition()) > 0 {
			if err := j.tm.cursor.MarkDelete(ctx, j.to); err != nil && ctx.Err() == nil {
				s.log.Warn("replicated subscriptions: applied-states cursor not moved", "topic", j.topic, "err", err)
			}
		}
		lc := j.tm.lt.LastConfirmed()
		s.mu.Lock()
		j.tm.lcPrev = lc
		s.mu.Unlock()
	}
}

func slicesOf(m map[subKey]mtypes.Position) []mtypes.Position {
	out := make([]mtypes.Position, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	return out
}

// topicLoaded asks the loop to read again the markers a loaded topic stored after its cursor.
func (s *subSync) topicLoaded(topic string) {
	s.mu.Lock()
	s.rescans = append(s.rescans, topic)
	s.mu.Unlock()
	s.poke()
}

// rescan reads the state markers a topic stored after its applied-states cursor and queues them
// (at topic load; a topic without the cursor never received a state).
func (s *subSync) rescan(ctx context.Context, topic string) {
	lt, err := s.m.topics.OpenTopic(ctx, topic)
	if err != nil || lt == nil || !slices.Contains(lt.CursorNames(), AppliedStatesCursorName) {
		return
	}
	c, _, err := lt.OpenCursor(ctx, AppliedStatesCursorName, mtypes.Earliest)
	if err != nil {
		s.log.Warn("replicated subscriptions: applied-states cursor not opened", "topic", topic, "err", err)
		return
	}
	s.mu.Lock()
	tm := s.marks[topic]
	if tm == nil {
		tm = &topicMarks{pending: map[subKey]mtypes.Position{}, lcPrev: mtypes.Earliest}
		s.marks[topic] = tm
	}
	tm.cursor, tm.lt = c, lt
	s.mu.Unlock()
	from, read, found := c.MarkDeletePosition().Next(), 0, 0
	for read < maxRescanEntries {
		es, err := lt.Read(ctx, from, 500, 8<<20)
		if err != nil {
			s.log.Warn("replicated subscriptions: rescan stopped", "topic", topic, "err", err)
			return
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if _, from, ok, err := DecodeStateMarkerEntry(e.Data); ok && err == nil && from != "" {
				s.markerStored(topic, e.Position, e.Data)
				found++
			}
		}
		read += len(es)
		from = es[len(es)-1].Position.Next()
	}
	if read >= maxRescanEntries {
		s.log.Warn("replicated subscriptions: rescan at topic load stopped at its bound; later states are not read again",
			"topic", topic, "entries", read)
	}
	if found > 0 {
		s.log.Info("replicated subscriptions: states read again at topic load", "topic", topic, "states", found)
	}
}
