package broker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
)

// A durable subscription keeps what must outlive the broker process in its cursor's properties,
// under keys no subscription property can take:
//
//	meridian.v             "1", the format version
//	sp:<key>               the subscription property <key> (wire limits: 64 properties, 16 KiB)
//	meridian.replicated    "1" for a replicated subscription (PIP-33), so that expiry keeps it
//	meridian.redeliveries  "<ledger>:<entry>:<count>,..." redelivery counts of unacknowledged entries
//	meridian.type          the subscription type (Pulsar's SubType number) of a replicated
//	                       subscription, so one created by the sync shows its source's type
//	meridian.sync          the replication sync's record of a replicated subscription (opaque here;
//	                       internal/replication writes and reads it)
//
// A cursor without these keys (an older version's) is a subscription without properties, not
// replicated, with no redelivery counts. Keys of a later format version are ignored.
//
// Redelivery counts are bounded and written at a bounded rate: at most maxPersistedRedeliveries
// of them (the largest counts, ties broken by the older entry: the messages closest to a client's
// dead-letter threshold), at most once per redeliveryPersistInterval while they change (the cursor
// writes its whole state on its next flush, so a write per redelivery would cost a cursor record
// per message), and when the last consumer leaves. After a crash, counts are at most that interval
// (plus the cursor's flush interval) behind: a dead-letter decision is delayed, never skipped.

const (
	subStateVersionKey = "meridian.v"
	subStateVersion    = "1"
	subPropPrefix      = "sp:"
	replicatedKey      = "meridian.replicated"
	redeliveriesKey    = "meridian.redeliveries"
	subTypeKey         = "meridian.type"
	syncRecordKey      = "meridian.sync"
	// maxSyncRecordBytes bounds the sync record (the writer, internal/replication, keeps it far
	// smaller: a few dozen bytes per origin).
	maxSyncRecordBytes = 16 << 10

	// maxPersistedRedeliveries bounds the redelivery counts a subscription persists (each at most
	// 61 bytes: 61 KB at most).
	maxPersistedRedeliveries = 1000
	// redeliveryPersistInterval is the least time between two writes of changed counts.
	redeliveryPersistInterval = time.Second
)

// redeliveryCount is one persisted redelivery count.
type redeliveryCount struct {
	pos   mtypes.Position
	count uint32
}

// subState is the persisted part of a subscription, as a value.
type subState struct {
	props        map[string]string
	replicated   bool
	redeliveries []redeliveryCount
	subType      *mtypes.SubType // recorded for replicated subscriptions
	syncRecord   string
}

// empty reports whether there is nothing to persist.
func (st subState) empty() bool {
	return len(st.props) == 0 && !st.replicated && len(st.redeliveries) == 0 && st.subType == nil && st.syncRecord == ""
}

// largestRedeliveries returns at most max counts of m: the largest, ties broken by the older entry.
func largestRedeliveries(m map[mtypes.Position]uint32, max int) []redeliveryCount {
	out := make([]redeliveryCount, 0, len(m))
	for p, n := range m {
		if n > 0 {
			out = append(out, redeliveryCount{p, n})
		}
	}
	slices.SortFunc(out, func(a, b redeliveryCount) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return a.pos.Compare(b.pos)
	})
	if len(out) > max {
		out = out[:max]
	}
	return out
}

// encodeSubState turns the state into cursor properties.
func encodeSubState(st subState) map[string]string {
	out := make(map[string]string, len(st.props)+3)
	out[subStateVersionKey] = subStateVersion
	for k, v := range st.props {
		out[subPropPrefix+k] = v
	}
	if st.replicated {
		out[replicatedKey] = "1"
	}
	if st.subType != nil {
		out[subTypeKey] = strconv.Itoa(int(*st.subType))
	}
	if st.syncRecord != "" {
		out[syncRecordKey] = st.syncRecord
	}
	if len(st.redeliveries) > 0 {
		var b strings.Builder
		for i, r := range st.redeliveries {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d:%d:%d", r.pos.LedgerID, r.pos.EntryID, r.count)
		}
		out[redeliveriesKey] = b.String()
	}
	return out
}

// decodeSubState reads the state from cursor properties. A malformed redelivery count is
// skipped and reported (the message is then redelivered with a lower count, never lost); what
// exceeds the limits a writer enforces is not taken.
func decodeSubState(props map[string]string) (st subState, problems []string) {
	if v, ok := props[subStateVersionKey]; ok && v != subStateVersion {
		return subState{}, []string{fmt.Sprintf("subscription state version %q is not %q; ignored", v, subStateVersion)}
	}
	for k, v := range props {
		if name, ok := strings.CutPrefix(k, subPropPrefix); ok {
			if st.props == nil {
				st.props = make(map[string]string)
			}
			st.props[name] = v
		}
	}
	if err := wire.CheckProperties("subscription", st.props); err != nil {
		problems = append(problems, err.Error())
		st.props = nil
	}
	st.replicated = props[replicatedKey] == "1"
	if v, ok := props[subTypeKey]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= int(mtypes.SubExclusive) && n <= int(mtypes.SubKeyShared) {
			t := mtypes.SubType(n)
			st.subType = &t
		} else {
			problems = append(problems, fmt.Sprintf("malformed subscription type %q", v))
		}
	}
	if v := props[syncRecordKey]; len(v) > maxSyncRecordBytes {
		problems = append(problems, fmt.Sprintf("sync record of %d bytes, above the limit of %d; ignored", len(v), maxSyncRecordBytes))
	} else {
		st.syncRecord = v
	}
	if v := props[redeliveriesKey]; v != "" {
		for _, item := range strings.Split(v, ",") {
			if len(st.redeliveries) == maxPersistedRedeliveries {
				problems = append(problems, "more redelivery counts than the limit; the rest ignored")
				break
			}
			r, ok := parseRedeliveryCount(item)
			if !ok {
				problems = append(problems, fmt.Sprintf("malformed redelivery count %q", item))
				continue
			}
			st.redeliveries = append(st.redeliveries, r)
		}
	}
	return st, problems
}

func parseRedeliveryCount(s string) (redeliveryCount, bool) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return redeliveryCount{}, false
	}
	l, err1 := strconv.ParseInt(parts[0], 10, 64)
	e, err2 := strconv.ParseInt(parts[1], 10, 64)
	n, err3 := strconv.ParseUint(parts[2], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return redeliveryCount{}, false
	}
	return redeliveryCount{mtypes.Position{LedgerID: l, EntryID: e}, uint32(n)}, true
}

// restoreState loads the persisted state of a durable subscription found in storage (before it is
// published: no lock needed). Counts of entries acknowledged meanwhile are dropped.
func (s *subscriptionState) restoreState() {
	st, problems := decodeSubState(s.cursor.Properties())
	for _, p := range problems {
		s.topic.b.log.Warn("subscription state", slog.String("topic", s.topic.name.String()),
			slog.String("subscription", s.name), slog.String("problem", p))
	}
	s.props = st.props
	if st.replicated {
		s.replicated.Store(true)
	}
	if st.subType != nil {
		s.d.subType = *st.subType
	}
	s.syncRecord = st.syncRecord
	for _, r := range st.redeliveries {
		if !s.cursor.IsAcknowledged(r.pos) {
			s.d.redeliveries[r.pos] = r.count
		}
	}
}

// markReplicated marks the subscription replicated (reporting whether it was not); the change is
// persisted with saveState.
func (s *subscriptionState) markReplicated() bool {
	if s.replicated.CompareAndSwap(false, true) {
		s.mu.Lock()
		s.stateChanged = true
		s.mu.Unlock()
		return true
	}
	return false
}

// properties returns a copy of the subscription properties.
func (s *subscriptionState) properties() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.props)
}

// setProperties replaces the subscription properties and persists them.
func (s *subscriptionState) setProperties(ctx context.Context, props map[string]string) error {
	if err := wire.CheckProperties("subscription", props); err != nil {
		return limitErr(err)
	}
	s.mu.Lock()
	s.props = maps.Clone(props)
	s.stateChanged = true
	s.mu.Unlock()
	return s.persistState(ctx, true)
}

// saveState persists the state if properties or the replicated flag changed (waiting until it is
// durable: these change rarely, and a client that was answered expects them kept).
func (s *subscriptionState) saveState(ctx context.Context) error {
	s.mu.Lock()
	changed := s.stateChanged
	s.mu.Unlock()
	if !changed {
		return nil
	}
	return s.persistState(ctx, true)
}

// persistState writes the subscription's state into its cursor's properties (durable
// subscriptions only); with flush it waits until the cursor is durable. Writers are serialised
// and each writes the state as it is when it writes, so the last write holds the latest state.
func (s *subscriptionState) persistState(ctx context.Context, flush bool) error {
	if s.cursor == nil || !s.durable {
		return nil
	}
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	replicated := s.isReplicated()
	s.mu.Lock()
	st := subState{props: maps.Clone(s.props), replicated: s.replicated.Load(), syncRecord: s.syncRecord}
	if replicated {
		t := s.d.subType
		st.subType = &t
	}
	counts := maps.Clone(s.d.redeliveries)
	s.stateChanged, s.d.redeliveriesChanged = false, false
	s.mu.Unlock()
	st.redeliveries = largestRedeliveries(counts, maxPersistedRedeliveries)
	s.lastStateWrite.Store(s.topic.b.nowMs())
	if st.empty() && len(s.cursor.Properties()) == 0 {
		return nil
	}
	err := s.cursor.SetProperties(ctx, encodeSubState(st))
	if err == nil && flush {
		err = s.cursor.Flush(ctx)
	}
	if err != nil {
		s.mu.Lock()
		s.stateChanged, s.d.redeliveriesChanged = true, true // written again by the next trigger
		s.mu.Unlock()
		return fmt.Errorf("persisting the state of subscription %q: %w: %w", s.name, ErrPersistence, err)
	}
	return nil
}

// redeliveriesDue reports, for the dispatcher (s.mu held), whether changed redelivery counts are
// to be written now, or else when (unix ms; 0: nothing to write).
func (s *subscriptionState) redeliveriesDueLocked(now int64) (writeNow bool, at int64) {
	if !s.d.redeliveriesChanged || !s.durable {
		return false, 0
	}
	at = s.lastStateWrite.Load() + redeliveryPersistInterval.Milliseconds()
	return now >= at, at
}

// persistRedeliveriesIfChanged writes the redelivery counts if they changed (the last consumer
// left, or a seek cleared them: no dispatcher runs to write them).
func (s *subscriptionState) persistRedeliveriesIfChanged() {
	s.mu.Lock()
	changed := s.d.redeliveriesChanged
	s.mu.Unlock()
	if changed {
		s.persistRedeliveries()
	}
}

// persistRedeliveries writes the subscription's state for changed redelivery counts; a failure is
// logged: the counts are written again with their next change.
func (s *subscriptionState) persistRedeliveries() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.persistState(ctx, false); err != nil {
		s.topic.b.log.Warn("persisting redelivery counts failed", slog.String("topic", s.topic.name.String()),
			slog.String("subscription", s.name), slog.Any("err", err))
	}
}

// created records the state a new subscription was created with (before it is published).
func (s *subscriptionState) created(props map[string]string) {
	s.props = maps.Clone(props)
	s.stateChanged = len(props) > 0 && s.durable
}

// attached is the end of a subscribe: the state the subscription was created with (or a replicated
// flag the consumer set) is persisted before the consumer is answered; a failure is logged, and the
// state stays to be written with the next change.
func (s *subscriptionState) attached(ctx context.Context, c *consumerState) (*Consumer, error) {
	if err := s.saveState(ctx); err != nil {
		s.topic.b.log.Warn("subscription state not persisted", slog.String("topic", s.topic.name.String()),
			slog.String("subscription", s.name), slog.Any("err", err))
	}
	return &Consumer{c: c}, nil
}

// adminCreated applies what the admin API created a subscription with: its properties (when
// given) and the replicated flag, persisted before it answers.
func (s *subscriptionState) adminCreated(ctx context.Context, props map[string]string, replicated bool) error {
	if replicated && s.markReplicated() {
		defer s.topic.b.syncChanged(s, true)
	}
	if len(props) > 0 {
		return s.setProperties(ctx, props)
	}
	return s.saveState(ctx)
}
