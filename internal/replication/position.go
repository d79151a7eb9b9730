package replication

import (
	"fmt"
	"math"
	"strings"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

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
func (s StartAt) Position() mtypes.Position {
	if s == StartEarliest {
		return mtypes.Earliest
	}
	return mtypes.Latest
}

// parsePositionBytes is ParsePosition for bytes (the hot path of the inbound index: no allocation
// unless the input is malformed).
func parsePositionBytes(b []byte) (mtypes.Position, error) {
	var p mtypes.Position
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
		return mtypes.ParsePosition(string(b)) // malformed or out of range: its error says why
	}
	if field != &p.EntryID || digits == 0 {
		return mtypes.ParsePosition(string(b))
	}
	return p, nil
}
