package mtypes

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Position identifies a stored entry of a topic's log: (ledger id, entry id), ordered by ledger
// then entry.
type Position struct{ LedgerID, EntryID int64 }

var (
	// Earliest as a cursor's initial position means "the first stored entry". It is also the
	// earliest sentinel as it arrives on the wire (uint64 reinterpreted as int64).
	Earliest = Position{-1, -1}
	// Latest as a cursor's initial position means "after the last stored entry"; the wire's
	// latest sentinel (2^63-1, 2^63-1).
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

// Next is the smallest position after p within its ledger; reading "from p.Next()" returns every
// entry after p, also when the log has rolled to a later ledger id.
func (p Position) Next() Position { return Position{p.LedgerID, p.EntryID + 1} }

// String formats the position as "ledgerId:entryId", Pulsar's convention (also for
// __MSG_PROP_REPL_SOURCE_POSITION).
func (p Position) String() string { return string(p.AppendTo(make([]byte, 0, 24))) }

// AppendTo appends String's form to b, allocating nothing beyond b's growth (the replicator's
// per-entry path uses it).
func (p Position) AppendTo(b []byte) []byte {
	b = strconv.AppendInt(b, p.LedgerID, 10)
	b = append(b, ':')
	return strconv.AppendInt(b, p.EntryID, 10)
}

// ParsePosition parses "ledgerId:entryId" with both ids at least 0.
func ParsePosition(s string) (Position, error) {
	return parsePosition(s, 0)
}

// ParseMarkDelete parses a stored mark-delete position: like ParsePosition, but entry id -1 (and
// ledger id -1) are allowed ("L:-1" is before the first entry of ledger L: a cursor created on an
// empty ledger).
func ParseMarkDelete(s string) (Position, error) {
	return parsePosition(s, -1)
}

func parsePosition(s string, least int64) (Position, error) {
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
	if lid < least || eid < least {
		return Position{}, fmt.Errorf("position %q: negative id", s)
	}
	return Position{lid, eid}, nil
}

// Entry is one stored entry as storage reads it.
type Entry struct {
	Position    Position
	PublishTime int64 // unix milliseconds, given at append
	// Data is the stored bytes: [magic+checksum] metadata size, metadata, payload. Read-only to
	// callers: it may be shared with storage's cache and with other entries of one read.
	Data []byte
	// Incarnation is the storage incarnation the entry's ledger belongs to (0: unknown, a ledger
	// from before incarnations); a replicator sends it with the entry as its source incarnation.
	Incarnation uint64
}
