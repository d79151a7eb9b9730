package broker

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Producer deduplication, as Pulsar's MessageDeduplication: per producer name, the highest sequence
// id handed to storage ("pushed") and the highest one durable ("persisted"). A publish whose
// sequence id is <= pushed is a duplicate if it is also <= persisted (answered with the position
// (-1,-1)), and "unknown" otherwise (answered PersistenceError; the client reconnects and resends).
//
// Persistence: every DedupSnapshotInterval entries the persisted map is written into the properties
// of the cursor dedupCursorName (key = producer name prefixed with dedupPropPrefix, value = decimal
// sequence id), and that cursor's mark-delete position is moved to the last entry the snapshot
// covers. On topic load the snapshot is read and every entry after the mark-delete position is
// replayed (its metadata's producer_name, sequence_id and highest_sequence_id; replicated entries
// excepted, as on the live path), so the state after a crash is exactly the state of the durable
// log.

const (
	// dedupCursorName is the cursor holding dedup snapshots (Pulsar's name).
	dedupCursorName = "pulsar.dedup"
	// dedupPropPrefix prefixes producer names in the snapshot properties, leaving room for other keys.
	dedupPropPrefix = "p:"
	// dedupVersionKey holds the snapshot format version (dedupFormatVersion).
	dedupVersionKey    = "v"
	dedupFormatVersion = "1"
	// maxDedupProducers bounds the snapshot (Pulsar's maxNumberOfProducers default is 10000): with
	// names of at most wire.MaxNameBytes, a snapshot stays under 10,000 × 280 bytes (2.8 MB).
	maxDedupProducers = 10000
	// dedupInactivity is how long a producer name that published nothing is remembered (Pulsar's
	// brokerDeduplicationProducerInactivityTimeoutMinutes, 6 h), so that clients cycling through
	// names cannot grow the state without bound.
	dedupInactivity = 6 * time.Hour
)

// highestSequenceID is the sequence id an entry is recorded under: the SEND's (or metadata's)
// highest_sequence_id when set, else, for a batch of n messages, sequence_id + n - 1 — the Go client
// numbers the messages of a batch consecutively from sequence_id and never sets
// highest_sequence_id, so that is the id of the batch's last message (recording only the first
// would hand a reconnecting producer a last_sequence_id inside its last batch). For strictly
// increasing ids it never overestimates.
func highestSequenceID(seq, highest int64, n int) int64 {
	if highest > 0 {
		return max(seq, highest)
	}
	if n > 1 {
		return seq + int64(n) - 1
	}
	return seq
}

// dedupStatus is the outcome of a dedup check.
type dedupStatus int

const (
	dedupNew dedupStatus = iota
	dedupDuplicate
	dedupUnknown
)

// dedupState is the pure dedup bookkeeping of one topic. Not safe for concurrent use. Its maps are
// made on first write: a topic with deduplication on but no producer yet costs no maps.
type dedupState struct {
	pushed    map[string]int64
	persisted map[string]int64
	lastUsed  map[string]int64 // unix ms of the producer's last persisted entry (or of the load)
	now       func() int64     // unix ms
	// sinceSnapshot counts entries persisted since the last snapshot.
	sinceSnapshot int
}

func newDedupState(now func() int64) *dedupState {
	return &dedupState{now: now}
}

// writable makes the maps before a write.
func (d *dedupState) writable() {
	if d.pushed == nil {
		d.pushed = make(map[string]int64)
	}
	if d.persisted == nil {
		d.persisted = make(map[string]int64)
	}
	if d.lastUsed == nil {
		d.lastUsed = make(map[string]int64)
	}
}

// check decides a publish; for a new one it records highest as pushed.
func (d *dedupState) check(producer string, seq, highest int64) dedupStatus {
	if last, ok := d.pushed[producer]; ok && seq <= last {
		if p, ok := d.persisted[producer]; ok && seq <= p {
			return dedupDuplicate
		}
		return dedupUnknown
	}
	d.writable()
	d.pushed[producer] = highest
	return dedupNew
}

// checkChunk decides a chunk of a chunked message other than its last. The chunks share the
// message's sequence id, which check records with the last chunk only: a chunk of a message
// already persisted is a duplicate, one of a message pushed but not yet persisted is unknown, and
// anything else is new; nothing is recorded.
func (d *dedupState) checkChunk(producer string, seq int64) dedupStatus {
	if last, ok := d.pushed[producer]; ok && seq <= last {
		if p, ok := d.persisted[producer]; ok && seq <= p {
			return dedupDuplicate
		}
		return dedupUnknown
	}
	return dedupNew
}

// persistedEntry records that an entry of producer up to highest is durable.
func (d *dedupState) persistedEntry(producer string, highest int64) {
	d.writable()
	if p, ok := d.persisted[producer]; !ok || highest > p {
		d.persisted[producer] = highest
	}
	if p, ok := d.pushed[producer]; !ok || highest > p {
		d.pushed[producer] = highest
	}
	d.lastUsed[producer] = d.now()
	d.sinceSnapshot++
}

// failed forgets what was pushed but not persisted (after a storage failure), as Pulsar does.
func (d *dedupState) failed() {
	d.pushed = maps.Clone(d.persisted)
}

// lastSequenceID is PRODUCER_SUCCESS.last_sequence_id for a producer name: -1 when unknown.
func (d *dedupState) lastSequenceID(producer string) int64 {
	if p, ok := d.persisted[producer]; ok {
		return p
	}
	return -1
}

// dedupRecord is one producer's persisted state, as a snapshot copies it.
type dedupRecord struct {
	name     string
	seq      int64
	lastUsed int64 // unix ms
}

// records copies the persisted state: the only step of a snapshot that needs the dedup lock.
func (d *dedupState) records() []dedupRecord {
	out := make([]dedupRecord, 0, len(d.persisted))
	for name, seq := range d.persisted {
		out = append(out, dedupRecord{name: name, seq: seq, lastUsed: d.lastUsed[name]})
	}
	return out
}

// snapshotProps formats records as snapshot properties. Producers inactive for longer than
// dedupInactivity (before now, unix ms) are left out and returned, for forget. Of the others, at
// most maxDedupProducers are kept: the most recently used, ties broken by name, so which ones a
// full snapshot keeps never depends on map order. Names longer than a producer name can be are
// never kept (a snapshot record stays bounded).
func snapshotProps(recs []dedupRecord, now int64) (props map[string]string, inactive []string) {
	cutoff := now - dedupInactivity.Milliseconds()
	kept := recs[:0]
	for _, r := range recs {
		switch {
		case r.lastUsed < cutoff:
			inactive = append(inactive, r.name)
		case len(r.name) <= wire.MaxNameBytes:
			kept = append(kept, r)
		}
	}
	if len(kept) > maxDedupProducers {
		slices.SortFunc(kept, func(a, b dedupRecord) int {
			if c := cmp.Compare(b.lastUsed, a.lastUsed); c != 0 {
				return c
			}
			return strings.Compare(a.name, b.name)
		})
		kept = kept[:maxDedupProducers]
	}
	props = make(map[string]string, len(kept)+1)
	props[dedupVersionKey] = dedupFormatVersion
	for _, r := range kept {
		props[dedupPropPrefix+r.name] = strconv.FormatInt(r.seq, 10)
	}
	return props, inactive
}

// forget drops the named producers that are still inactive at cutoff (unix ms): one may have
// published since the snapshot copied its state.
func (d *dedupState) forget(names []string, cutoff int64) {
	for _, name := range names {
		if d.lastUsed[name] < cutoff {
			delete(d.lastUsed, name)
			delete(d.persisted, name)
			delete(d.pushed, name)
		}
	}
}

// snapshot builds the snapshot properties at once and forgets inactive producers (topic load and
// unload; publishes snapshot in the background, dedup_snapshot.go).
func (d *dedupState) snapshot() map[string]string {
	now := d.now()
	props, inactive := snapshotProps(d.records(), now)
	d.forget(inactive, now-dedupInactivity.Milliseconds())
	d.sinceSnapshot = 0
	return props
}

// restore loads a snapshot from cursor properties; malformed values are skipped.
func (d *dedupState) restore(props map[string]string) {
	for k, v := range props {
		name, ok := strings.CutPrefix(k, dedupPropPrefix)
		if !ok {
			continue
		}
		seq, err := strconv.ParseInt(v, 10, 64)
		if err != nil || len(name) > wire.MaxNameBytes {
			continue
		}
		d.writable()
		d.persisted[name] = seq
		d.pushed[name] = seq
		d.lastUsed[name] = d.now()
	}
}

// replay applies one stored entry's metadata (topic load). Replicated entries are skipped, as the
// live path skips replicator producers: they keep the origin's producer name and sequence ids, and
// are deduplicated by their origin position, never under a local producer's name.
func (d *dedupState) replay(md *pulsarpb.MessageMetadata) {
	if md.MarkerType != nil || md.ReplicatedFrom != nil {
		return
	}
	if md.NumChunksFromMsg != nil && md.GetChunkId() != md.GetNumChunksFromMsg()-1 {
		return // chunked messages count on their last chunk only
	}
	name := md.GetProducerName()
	if name == "" || len(name) > wire.MaxNameBytes {
		return // not a producer's name: producers are named with at most wire.MaxNameBytes
	}
	n := 1
	if md.NumMessagesInBatch != nil {
		n = int(md.GetNumMessagesInBatch())
	}
	d.persistedEntry(name, highestSequenceID(int64(md.GetSequenceId()), int64(md.GetHighestSequenceId()), n))
}
