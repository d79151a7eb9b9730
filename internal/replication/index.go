package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
)

// The inbound index of a local topic maps the origin of every replicated entry stored in it to the
// local position that holds it. The origin is (cluster, incarnation, ledger, entry): the cluster
// that wrote the entry, the storage incarnation there in which the entry's ledger was created (a
// random number a data dir gets each time it is opened, so a source cluster restored from an
// older copy of its data dir, or rebuilt empty, never reuses an origin position it had used
// before), and the entry's position in its origin topic. Entries without an incarnation (from
// Pulsar, or written before incarnations existed) count as incarnation 0. The index serves two
// purposes:
//
//   - deduplication, always on and independent of producer deduplication: a replicated entry whose
//     origin is already stored is not stored again (the broker answers the replicator with the
//     earlier copy's position), so restarts and reconnects on either side never duplicate;
//   - position translation: Lookup answers "which local position holds origin position X", the base
//     for replicated subscriptions and consumer failover, which Pin the mappings they still need.
//
// The partition is implied: each partition is its own local topic with its own index, and a
// replicator always sends partition i to partition i.
//
// Durability: the index needs no writes of its own on the data path. Every replicated entry carries
// replicated_from, SourcePositionProperty and (from Meridian sources) SourceIncarnationProperty in
// its stored metadata, so the index can be rebuilt by reading the log. To bound the work at topic
// load, the index saves a snapshot every IndexOptions.SnapshotInterval (index_store.go, format in
// index_format.go): a small head record in the properties of the cursor IndexCursorName, and
// sealed chunks of runs, each written once into a cursor of its own. On load it reads only the
// entries after the snapshot. The head cursor's mark-delete position follows the snapshots, so it
// never holds back trimming by more than two snapshot intervals.
//
// The cursor is created lazily (README budget: 2 KiB per idle topic; a cursor costs ~500 B): before
// the first replicated entry is admitted, so it holds back trimming of every replicated entry until
// a snapshot covers it, or by the first snapshot of a log that has entries. An empty topic that never
// receives a replicated entry has no index cursor. A topic without the cursor is rebuilt on load by
// scanning its whole log, which holds every replicated entry it ever stored (the cursor, created at
// Earliest before the first one, kept them from being trimmed).
//
// Memory is bounded per origin cluster: beyond IndexOptions.MaxRuns runs, the oldest runs (of the
// incarnation used least recently first) are folded into their key's floor, block by block:
// deduplication stays exact (an origin position at or below the floor counts as stored), only
// Lookup of such old positions answers "unknown". Pinned mappings are kept beyond MaxRuns, up to
// MaxPinnedRuns.

// IndexCursorName is the cursor whose properties hold the index snapshot's head.
const IndexCursorName = "meridian.repl-index"

// IndexOptions configure an Index.
type IndexOptions struct {
	// SnapshotInterval is how often a changed index is saved. Default 5 s.
	SnapshotInterval time.Duration
	// MaxRuns bounds the runs kept in memory per origin cluster (older runs are folded into the
	// floor). Default 65,536 (2.5 MiB).
	MaxRuns int
	// MaxPinnedRuns is the hard bound: pinned runs are kept beyond MaxRuns up to it. Default
	// 262,144 (10 MiB); at most 1,048,576.
	MaxPinnedRuns int
	// SealBytes: an origin key's newest runs are sealed into a chunk of their own once they encode
	// to this many bytes (before compression); until then they travel in the head record.
	// Default 16 KiB.
	SealBytes int
	// ScanBatch bounds one read while rebuilding. Default 500 entries.
	ScanBatch int
	Logger    *slog.Logger
	Now       func() time.Time
}

func (o *IndexOptions) withDefaults() {
	if o.SnapshotInterval <= 0 {
		o.SnapshotInterval = 5 * time.Second
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = 1 << 16
	}
	if o.MaxPinnedRuns <= 0 {
		o.MaxPinnedRuns = 1 << 18
	}
	o.MaxPinnedRuns = min(maxPinnedRunsLimit, max(o.MaxPinnedRuns, o.MaxRuns+runBlockSize))
	o.MaxRuns = min(o.MaxRuns, o.MaxPinnedRuns-runBlockSize)
	if o.SealBytes <= 0 {
		o.SealBytes = 16 << 10
	}
	if o.ScanBatch <= 0 {
		o.ScanBatch = 500
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// maxPinnedRunsLimit caps MaxPinnedRuns: a chunk of that many runs stays well below what a
// snapshot reader accepts (maxUnpacked).
const maxPinnedRunsLimit = 1 << 20

// ErrIndexPending: an entry with the same origin position is being appended right now; its fate is
// not known yet. The broker answers SEND_ERROR (PersistenceError) and the replicator retries, as with
// Pulsar's deduplication "unknown" status.
var ErrIndexPending = errors.New("replication: replicated entry with this source position is being stored")

// ErrIndexOutOfOrder: an entry from an origin arrived after an earlier entry of that origin failed
// to append; it is refused (retriable) so the replicator resends in order.
var ErrIndexOutOfOrder = errors.New("replication: replicated entry out of order")

// Index is the inbound index of one local topic. It is safe for concurrent use.
type Index struct {
	opts  IndexOptions
	topic LocalTopic

	mu        sync.Mutex
	clusters  map[string]*clusterState // nil until the first replicated entry
	adm       *admissions              // nil until the first admission: an idle topic's index stays small
	lastLocal mtypes.Position          // highest local position recorded
	dirty     bool
	closed    bool
	hasCursor atomic.Bool // the snapshot cursor exists: Admit's check without a lock
	onClose   func()      // set by Manager.OpenIndex

	saveMu       sync.Mutex      // serialises Save (Maintain and Close may race) and creating the cursor
	store        *indexStore     // nil until the snapshot cursor exists (guarded by saveMu; set under mu)
	lastSave     int64           // opts.Now() of the last save, Unix nanoseconds (guarded by mu)
	savedCovered mtypes.Position // the local position the last saved snapshot covers (guarded by mu)
}

// NewIndex returns an empty, in-memory index (no snapshots); used by tests and by LoadIndex.
func NewIndex(opts IndexOptions) *Index {
	opts.withDefaults()
	// Maps are made on first use: most topics never receive replicated traffic, and an idle topic
	// should cost little memory (README budget: 2 KiB per idle topic).
	return &Index{opts: opts}
}

// Observe records a stored entry (used while rebuilding; harmless for entries that are not
// replicated or already recorded).
func (x *Index) Observe(local mtypes.Position, data []byte) {
	src, ok, err := replicatedSource(data)
	if !ok || err != nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.originOf(src.cluster, src.incarnation)
	if _, found := o.runs.find(src.pos); found || src.pos.Compare(o.floor) <= 0 {
		return
	}
	x.record(o, src.pos, local)
}

func (x *Index) topicName() string {
	if x.topic == nil {
		return ""
	}
	return x.topic.Name()
}

// Admit is AdmitTicket with the commit as a function (tests and callers that do not mind its
// allocation). For an entry not seen before it returns a commit function that must be called
// exactly once with the local position (or the append error); for a duplicate it returns dup=true
// and the local position of the stored copy (-1:-1 if no longer mapped). Entries without
// replicated_from or without a source position are not indexed (commit is nil, dup false).
func (x *Index) Admit(data []byte) (dup bool, dupLedger, dupEntry int64, commit func(ledger, entry int64, err error), err error) {
	dup, dupLedger, dupEntry, ticket, err := x.AdmitTicket(data)
	if err != nil || dup || ticket == 0 {
		return dup, dupLedger, dupEntry, nil, err
	}
	return false, 0, 0, func(ledger, entry int64, err error) { x.Commit(ticket, ledger, entry, err) }, nil
}

// AdmitTicket is called by the broker, before appending, for every entry published by a replicator
// producer (producer name "pulsar.repl.*"), under the lock that orders the topic's appends. For an
// entry not seen before it returns a ticket (> 0) the broker must pass to Commit exactly once with
// the local position (or the append error). For a duplicate it returns dup=true and the local
// position of the stored copy (-1:-1 if no longer mapped); the broker answers SEND_RECEIPT without
// storing. Entries without replicated_from or without a source position are not indexed (ticket 0,
// dup false). err wraps ErrIndexPending when the same origin position is being appended, or reports
// unparseable metadata.
//
// A ticket instead of a commit closure: this runs for every replicated SEND, and the closure with
// its captured state was three allocations per entry (see docs/replication-design.md).
func (x *Index) AdmitTicket(data []byte) (dup bool, dupLedger, dupEntry int64, ticket uint64, err error) {
	src, indexed, err := replicatedSource(data)
	if err != nil || !indexed {
		return false, 0, 0, 0, err
	}
	return x.admit(src, int64(len(data)))
}

// AdmitOriginTicket is AdmitTicket for an entry whose metadata the caller has scanned already
// (wire.ScanPublishMetadataOrigin, in the server's own scan of the SEND): the same result without
// a second scan of every replicated entry.
func (x *Index) AdmitOriginTicket(data []byte, o wire.ReplicatedOrigin) (dup bool, dupLedger, dupEntry int64, ticket uint64, err error) {
	src, indexed, err := originSource(o)
	if err != nil || !indexed {
		return false, 0, 0, 0, err
	}
	return x.admit(src, int64(len(data)))
}

// admit is AdmitTicket once the entry's origin is known.
func (x *Index) admit(src entrySource, size int64) (dup bool, dupLedger, dupEntry int64, ticket uint64, err error) {
	if err := x.ensureCursor(); err != nil {
		return false, 0, 0, 0, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	q := x.adm
	if q == nil {
		q = &admissions{firstTicket: 1, nextTicket: 1}
		x.adm = q
	}
	o := q.last
	if o == nil || o.key.Incarnation != src.incarnation || o.key.Cluster != string(src.cluster) {
		o = x.originOf(src.cluster, src.incarnation)
		q.last = o
	}
	pos, c := src.pos, o.cluster
	if r, found := o.runs.find(pos); found {
		c.dups++
		return true, r.local.LedgerID, r.local.EntryID + (pos.EntryID - r.origin.EntryID), 0, nil
	}
	if pos.Compare(o.floor) <= 0 {
		c.dups++
		return true, -1, -1, 0, nil
	}
	if err := x.checkFailed(o, pos); err != nil {
		return false, 0, 0, 0, err
	}
	if o.npending > 0 && pos.Compare(o.pendingMax) <= 0 && q.isPending(o, pos) {
		return false, 0, 0, 0, fmt.Errorf("%w: %s %s", ErrIndexPending, c.name, pos)
	}
	if o.npending == 0 || pos.Compare(o.pendingMax) > 0 {
		o.pendingMax = pos
	}
	o.npending++
	q.npending++
	ticket = q.nextTicket
	q.nextTicket++
	if q.head == len(q.inflight) {
		q.firstTicket = ticket
	}
	if len(q.inflight) == cap(q.inflight) && q.head > 0 && q.head >= len(q.inflight)/2 {
		n := copy(q.inflight, q.inflight[q.head:])
		clear(q.inflight[n:])
		q.inflight, q.head = q.inflight[:n], 0
	}
	q.inflight = append(q.inflight, admission{origin: o, pos: pos, msgs: src.msgs, size: size})
	return false, 0, 0, ticket, nil
}

// checkFailed keeps a cluster's order after a failed append (x.mu held): until the failed entry is
// resent, entries after it (of its incarnation) are refused. The replicator resends from its
// oldest unacknowledged entry, which is that one (everything before it is stored), so an entry of
// another incarnation is refused too, but only for failedAppendHold: a source that no longer has
// the failed entry (restored from an older copy, rebuilt) never sends it again.
func (x *Index) checkFailed(o *originState, pos mtypes.Position) error {
	f := o.cluster.failed
	if f == nil {
		return nil
	}
	switch {
	case f.key == o && pos.Compare(f.pos) <= 0:
		o.cluster.failed = nil
	case f.key == o || x.opts.Now().Sub(f.at) < failedAppendHold:
		return fmt.Errorf("%w: %s %s arrived before %s, whose append failed", ErrIndexOutOfOrder, o.cluster.name, pos, f.pos)
	default:
		x.opts.Logger.Warn("inbound replication: the entry whose append failed was not sent again; accepting the origin's later entries",
			"topic", x.topicName(), "origin", o.cluster.name, "failed", f.pos.String(), "incarnation", f.key.key.Incarnation)
		o.cluster.failed = nil
	}
	return nil
}

// Commit ends the admission of ticket (from AdmitTicket): with err == nil the entry is recorded at
// local position ledger:entry; with an error its origin refuses later entries until the replicator
// resends from this one. A ticket acts once; 0, unknown or repeated tickets are ignored. It runs
// on the storage's completion path and does O(1) amortised work.
func (x *Index) Commit(ticket uint64, ledger, entry int64, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	q := x.adm
	if q == nil || ticket < q.firstTicket || ticket-q.firstTicket >= uint64(len(q.inflight)-q.head) {
		return
	}
	a := &q.inflight[q.head+int(ticket-q.firstTicket)]
	if a.done {
		return
	}
	a.done = true
	o, pos := a.origin, a.pos
	o.npending--
	q.npending--
	if err != nil {
		if f := o.cluster.failed; f == nil || (f.key == o && pos.Compare(f.pos) < 0) {
			o.cluster.failed = &failedAppend{key: o, pos: pos, at: x.opts.Now()}
		}
	} else {
		x.record(o, pos, mtypes.Position{LedgerID: ledger, EntryID: entry})
		o.cluster.msgIn += a.msgs
		o.cluster.bytesIn += a.size
	}
	// Pop what is done at the head.
	for q.head < len(q.inflight) && q.inflight[q.head].done {
		q.inflight[q.head] = admission{}
		q.head++
		q.firstTicket++
	}
	if q.head == len(q.inflight) {
		q.inflight, q.head = q.inflight[:0], 0
	}
}

// isPending reports whether origin o's entry at pos is being appended (Index.mu held).
func (q *admissions) isPending(o *originState, pos mtypes.Position) bool {
	for i := q.head; i < len(q.inflight); i++ {
		if a := &q.inflight[i]; !a.done && a.origin == o && a.pos == pos {
			return true
		}
	}
	return false
}

// admissions are the entries between AdmitTicket and Commit (guarded by Index.mu).
type admissions struct {
	last *originState // the origin key of the last admitted entry: one map lookup less per entry
	// inflight[head:] are the admitted entries whose append is in progress, in admission order:
	// ticket firstTicket is inflight[head] (see AdmitTicket). Commits normally arrive in the same
	// order (storage completes appends in order), so a commit pops the head; an entry committed
	// early is marked done and popped when it reaches the head. The backing array is reused: the
	// live part moves to its start when appending would otherwise grow it.
	inflight    []admission
	head        int
	firstTicket uint64
	nextTicket  uint64
	npending    int // entries of inflight not yet committed
}

// pending reports whether some admitted entry is being appended (x.mu held).
func (x *Index) pending() bool { return x.adm != nil && x.adm.npending > 0 }

// admission is an entry between AdmitTicket and Commit.
type admission struct {
	origin     *originState
	pos        mtypes.Position
	msgs, size int64
	done       bool
}

// Lookup returns the local position holding origin's entry at pos. ok is false if that entry was
// never stored here or its mapping is no longer kept (see the floor in the package doc).
func (x *Index) Lookup(origin OriginKey, pos mtypes.Position) (local mtypes.Position, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.existing(origin)
	if o == nil {
		return mtypes.Position{}, false
	}
	r, ok := o.runs.find(pos)
	if !ok {
		return mtypes.Position{}, false
	}
	return mtypes.Position{LedgerID: r.local.LedgerID, EntryID: r.local.EntryID + (pos.EntryID - r.origin.EntryID)}, true
}

// Contains reports whether origin's entry at pos is stored here (mapped, or at or below the floor).
func (x *Index) Contains(origin OriginKey, pos mtypes.Position) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.existing(origin)
	if o == nil {
		return false
	}
	_, ok := o.runs.find(pos)
	return ok || pos.Compare(o.floor) <= 0
}

// InboundStats is the receiving side of replication from one origin cluster (all its
// incarnations together).
type InboundStats struct {
	Origin            string
	MsgInCount        int64
	BytesInCount      int64
	MsgRateIn         float64
	MsgThroughputIn   float64
	DuplicatesDropped int64
	Runs              int             // mapping runs kept in memory
	Incarnations      int             // origin keys (storage incarnations of the origin) known
	LastOrigin        mtypes.Position // highest origin position mapped of the incarnation used last
	PinnedRunsDropped int64           // pinned runs forgotten at the hard memory bound
}

// hasInbound reports whether the index has recorded entries from any cluster (Inbound is not
// empty).
func (x *Index) hasInbound() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.clusters) > 0
}

// Inbound returns per-origin-cluster inbound stats, sorted by origin.
func (x *Index) Inbound() []InboundStats {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]InboundStats, 0, len(x.clusters))
	for name, c := range x.clusters {
		s := InboundStats{Origin: name, MsgInCount: c.msgIn, BytesInCount: c.bytesIn, DuplicatesDropped: c.dups, Runs: c.nruns,
			Incarnations: len(c.keys), PinnedRunsDropped: c.pinnedDropped}
		var newest *originState
		for _, o := range c.keys {
			if newest == nil || o.lastUse > newest.lastUse {
				newest = o
			}
		}
		if newest != nil {
			s.LastOrigin = newest.floor
			if last := newest.runs.last(); last != nil {
				s.LastOrigin = last.originEnd()
			}
		}
		s.MsgRateIn, s.MsgThroughputIn = c.window.rates()
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b InboundStats) int { return strings.Compare(a.Origin, b.Origin) })
	return out
}

// Tick samples rates (called about once a second).
func (x *Index) Tick(now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tickLocked(now)
}

func (x *Index) tickLocked(now time.Time) {
	for _, c := range x.clusters {
		c.window.add(now, c.msgIn, c.bytesIn)
	}
}

// maintainSaveTimeout bounds one snapshot save of Maintain.
const maintainSaveTimeout = 5 * time.Second

// Maintain is called about once a second by the index's owner (Manager): it samples rates and saves
// a snapshot every SnapshotInterval, within maintainSaveTimeout. There is no goroutine per index, so
// ten thousand topics cost ten thousand small structs, not ten thousand tickers; and an index with
// no save due costs no allocation (no context or timer is made for it).
func (x *Index) Maintain(ctx context.Context, now time.Time) {
	if x.tickSaveDue(now) {
		x.saveDue(ctx)
	}
}

// tickSaveDue is Maintain's first part, cheap enough to run for every index on the owner's own
// goroutine: it samples the rates and reports whether a snapshot save is due (then the caller
// calls saveDue, which may wait for a group commit).
func (x *Index) tickSaveDue(now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tickLocked(now)
	due := now.UnixNano()-x.lastSave >= int64(x.opts.SnapshotInterval)
	if due {
		x.lastSave = now.UnixNano()
	}
	return due
}

// saveDue saves the snapshot tickSaveDue found due, its writes within maintainSaveTimeout.
func (x *Index) saveDue(ctx context.Context) {
	if err := x.save(ctx, maintainSaveTimeout); err != nil {
		x.opts.Logger.Warn("save inbound replication index snapshot", "topic", x.topicName(), "err", err)
	}
}

// Close saves a last snapshot; the index must not be used afterwards.
func (x *Index) Close(ctx context.Context) error {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return nil
	}
	x.closed = true
	x.mu.Unlock()
	if x.onClose != nil {
		x.onClose()
	}
	if err := x.Save(ctx); err != nil {
		return err
	}
	x.saveMu.Lock()
	defer x.saveMu.Unlock()
	return x.catchUpMarkDelete(ctx)
}
