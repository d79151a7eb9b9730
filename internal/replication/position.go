package replication

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Position identifies a stored entry of a topic's log: (ledger id, entry id), ordered by ledger then
// entry. It mirrors storage.Position without importing storage (docs/design.md, "Dependency rules"); internal/node
// converts between the two.
type Position struct{ LedgerID, EntryID int64 }

// Special positions for opening a cursor.
var (
	// Earliest: the first stored entry.
	Earliest = Position{-1, -1}
	// Latest: after the last stored entry.
	Latest = Position{math.MaxInt64, math.MaxInt64}
)

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	switch {
	case p.LedgerID < q.LedgerID:
		return -1
	case p.LedgerID > q.LedgerID:
		return 1
	case p.EntryID < q.EntryID:
		return -1
	case p.EntryID > q.EntryID:
		return 1
	}
	return 0
}

// Next is the smallest position after p within its ledger; reading "from p.Next()" returns every entry
// after p, also when the log has rolled to a later ledger id.
func (p Position) Next() Position { return Position{p.LedgerID, p.EntryID + 1} }

// String formats the position as "ledgerId:entryId", Pulsar's convention for
// __MSG_PROP_REPL_SOURCE_POSITION.
func (p Position) String() string { return string(p.appendTo(make([]byte, 0, 24))) }

// appendTo appends String's form to b (no allocation beyond b's growth; the hot path uses it).
func (p Position) appendTo(b []byte) []byte {
	b = strconv.AppendInt(b, p.LedgerID, 10)
	b = append(b, ':')
	return strconv.AppendInt(b, p.EntryID, 10)
}

// parseMarkDelete parses a stored mark-delete position: like ParsePosition, but entry id -1 is
// allowed ("L:-1" is before the first entry of ledger L: a cursor created on an empty ledger).
func parseMarkDelete(s string) (Position, error) {
	l, e, ok := strings.Cut(s, ":")
	if !ok {
		return Position{}, fmt.Errorf("position %q: want <ledgerId>:<entryId>", s)
	}
	lid, err := strconv.ParseInt(l, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("position %q: ledger id: %w", s, err)
	}
	eid, err := strconv.ParseInt(e, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("position %q: entry id: %w", s, err)
	}
	if lid < -1 || eid < -1 {
		return Position{}, fmt.Errorf("position %q: negative id", s)
	}
	return Position{lid, eid}, nil
}

// ParsePosition parses "ledgerId:entryId".
func ParsePosition(s string) (Position, error) {
	l, e, ok := strings.Cut(s, ":")
	if !ok {
		return Position{}, fmt.Errorf("position %q: want <ledgerId>:<entryId>", s)
	}
	lid, err := strconv.ParseInt(l, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("position %q: ledger id: %w", s, err)
	}
	eid, err := strconv.ParseInt(e, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("position %q: entry id: %w", s, err)
	}
	if lid < 0 || eid < 0 {
		return Position{}, fmt.Errorf("position %q: negative id", s)
	}
	return Position{lid, eid}, nil
}

// Entry is one stored entry as the local topic returns it.
type Entry struct {
	Position    Position
	PublishTime int64  // unix milliseconds, as stored
	Data        []byte // the stored bytes: [magic+checksum] metadata size, metadata, payload; read-only
	// Incarnation is the storage incarnation the entry's ledger belongs to (0: unknown, a ledger
	// from before incarnations); it travels with the entry as SourceIncarnationProperty.
	Incarnation uint64
}

// StartAt says where a new replicator starts on a topic that already has data
// (--replication-start-at and the namespace policy).
type StartAt string

const (
	// StartLatest: only entries written after the replicator was created (the default, as Pulsar).
	StartLatest StartAt = "latest"
	// StartEarliest: every entry still stored.
	StartEarliest StartAt = "earliest"
)

// ParseStartAt parses "earliest" or "latest" (case-insensitive); "" is StartLatest.
func ParseStartAt(s string) (StartAt, error) {
	switch strings.ToLower(s) {
	case "", "latest":
		return StartLatest, nil
	case "earliest":
		return StartEarliest, nil
	}
	return "", fmt.Errorf("replication start position %q: want earliest or latest", s)
}

// Position returns the cursor position a new replicator cursor is opened at.
func (s StartAt) Position() Position {
	if s == StartEarliest {
		return Earliest
	}
	return Latest
}

// parsePositionBytes is ParsePosition for bytes (the hot path of the inbound index: no allocation
// unless the input is malformed).
func parsePositionBytes(b []byte) (Position, error) {
	var p Position
	field, digits := &p.LedgerID, 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9' && *field <= (math.MaxInt64-9)/10:
			*field = *field*10 + int64(c-'0')
			digits++
			continue
		case c == ':' && field == &p.LedgerID && digits > 0:
			field, digits = &p.EntryID, 0
			continue
		}
		return ParsePosition(string(b)) // malformed or out of range: its error says why
	}
	if field != &p.EntryID || digits == 0 {
		return ParsePosition(string(b))
	}
	return p, nil
}
