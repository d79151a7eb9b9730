package broker

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Acknowledgements that name no stored entry.
//
// A position names an entry only on the broker that stored it. A client moved to another cluster
// by a switchover still holds messages of its old cluster and acknowledges them on the new one
// (docs/geo-replication.md §7.3); a retention trim removes entries a client still holds; a hostile
// client names anything. Ledger ids start at random per data directory (internal/storage,
// firstledgerid.go), so a position of another cluster practically never names a ledger of this
// topic (an exact match, which would name an entry stored here, cannot be told apart from a local
// position). An acknowledgement of a position where no entry is stored is not applied: a
// cumulative one would otherwise acknowledge every entry before the position (a ledger id between
// two of the topic's ledgers, or an entry id past a ledger's end, sorts after all entries of the
// earlier ledger). It is counted (Broker.IgnoredAcks) and logged, at most once per
// ignoredAckLogInterval for the broker.

// ignoredAckLogInterval is the least time between two log lines about ignored acknowledgements.
const ignoredAckLogInterval = 10_000 // ms

// maxPositionsInMessage bounds how many positions a log line or an error names.
const maxPositionsInMessage = 4

// ignoredAcks counts and logs acknowledgements that were not applied.
type ignoredAcks struct {
	count atomic.Int64
	log   logThrottle
}

// checkAcks keeps the acknowledgements that name a stored entry of the topic. The others are
// counted and logged (throttled); an acknowledgement after the last stored entry is refused
// (acknowledging an entry before it exists would hide it from this subscription once written, and
// Pulsar refuses it too), the others are ignored. The error is ErrInvalidRequest when some were
// refused, nil otherwise.
func (s *subscriptionState) checkAcks(c *consumerState, acks []Ack) ([]Ack, error) {
	l := s.topic.ledger
	last := l.LastConfirmed()
	var refused, ignored []mtypes.Position
	kept := acks[:0:0]
	for _, a := range acks {
		switch {
		case a.Position.LedgerID < 0 || a.Position.Compare(last) > 0:
			refused = append(refused, a.Position)
		case !l.IsStored(a.Position):
			ignored = append(ignored, a.Position)
		default:
			kept = append(kept, a)
		}
	}
	if refused == nil && ignored == nil {
		return acks, nil
	}
	b := s.topic.b
	b.ignoredAcks.count.Add(int64(len(refused) + len(ignored)))
	if ok, held := b.ignoredAcks.log.allow(b.nowMs(), ignoredAckLogInterval); ok {
		b.log.Warn("acknowledgements of positions where the topic stores no entry not applied (positions of another cluster after a switchover, entries removed by retention, or not written yet)",
			slog.String("topic", s.topic.name.String()), slog.String("subscription", s.name), slog.String("consumer", c.name),
			slog.Int("afterLast", len(refused)), slog.String("afterLastPositions", positionList(refused)),
			slog.Int("noEntry", len(ignored)), slog.String("noEntryPositions", positionList(ignored)),
			slog.String("last", last.String()), slog.Int64("notLoggedBefore", held))
	}
	if refused != nil {
		return kept, fmt.Errorf("ack of %s after the last entry %s: %w", positionList(refused), last, ErrInvalidRequest)
	}
	return kept, nil
}

// positionList names up to maxPositionsInMessage positions and how many more there are.
func positionList(ps []mtypes.Position) string {
	if len(ps) <= maxPositionsInMessage {
		return fmt.Sprint(ps)
	}
	return fmt.Sprintf("%v and %d more", ps[:maxPositionsInMessage], len(ps)-maxPositionsInMessage)
}

// logThrottle lets one log line through per interval and counts the ones it holds back.
type logThrottle struct {
	mu   sync.Mutex
	next int64 // unix ms: the next line may go out at or after it (0: at once)
	held int64 // lines held back since the last one let through
}

// allow reports whether a line may be logged at nowMs, and how many were held back before it.
func (t *logThrottle) allow(nowMs, intervalMs int64) (bool, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next != 0 && nowMs < t.next {
		t.held++
		return false, 0
	}
	held := t.held
	t.next, t.held = nowMs+intervalMs, 0
	return true, held
}
