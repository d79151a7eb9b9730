package storage

import "github.com/meridian-mq/meridian/internal/mtypes"

// Trimming by persisted positions.
//
// A durable cursor's in-memory mark-delete position runs up to a flush interval (plus a group
// commit) ahead of the one persisted. After a crash the cursor is back at the persisted one, so a
// trim by the in-memory position can remove entries after where the cursor comes back. For a
// subscription those entries were acknowledged anyway; but a cursor whose properties describe the
// entries up to its position (the broker's dedup snapshot, the replication index) would come back
// with a snapshot that does not cover the trimmed entries, and those entries gone. Trim therefore
// uses, per durable cursor, the older of its in-memory position and the position of its newest
// durable state (a ResetTo may have moved the in-memory one back).

// persistedMarks tracks a durable cursor's persisted mark-delete position (under the cursor's mu).
type persistedMarks struct {
	md       mtypes.Position // the mark-delete position of the newest durable state
	inFlight []versionMark   // states handed to the journal and not durable yet, oldest first
}

type versionMark struct {
	v  uint64
	md mtypes.Position
}

// queued notes that the state of version v, at mark-delete position md, was handed to the journal.
func (m *persistedMarks) queued(v uint64, md mtypes.Position) {
	m.inFlight = append(m.inFlight, versionMark{v, md})
}

// durable notes that the state of version v is durable (states become durable in order).
func (m *persistedMarks) durable(v uint64) {
	i := 0
	for ; i < len(m.inFlight) && m.inFlight[i].v <= v; i++ {
		m.md = m.inFlight[i].md
	}
	m.inFlight = m.inFlight[i:]
}

// failed forgets the states in flight (a failed flush: none of them is known to be durable).
func (m *persistedMarks) failed() { m.inFlight = nil }

// trimPosition is the position up to which this cursor lets Trim remove entries.
func (c *Cursor) trimPosition() mtypes.Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.persisted.md.Compare(c.st.markDelete) < 0 {
		return c.persisted.md
	}
	return c.st.markDelete
}
