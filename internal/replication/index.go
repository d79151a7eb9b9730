package replication

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/wire"
)

// The inbound index of a local topic maps the origin of every replicated entry stored in it
// (origin cluster, origin ledger, origin entry) to the local position that holds it. It serves two
// purposes:
//
//   - deduplication, always on and independent of producer deduplication: a replicated entry whose
//     origin position is already stored is not stored again (the broker answers the replicator with
//     the earlier copy's position), so restarts and reconnects on either side never duplicate;
//   - position translation: Lookup answers "which local position holds origin position X", the base
//     for replicated subscriptions and consumer failover.
//
// The partition is implied: each partition is its own local topic with its own index, and a
// replicator always sends partition i to partition i.
//
// Durability: the index needs no writes of its own on the data path. Every replicated entry carries
// replicated_from and SourcePositionProperty in its stored metadata, so the index can be rebuilt
// by reading the log. To bound the work at topic load, the index saves a snapshot every
// IndexOptions.SnapshotInterval into the properties of the cursor IndexCursorName and, on load, reads
// only the entries after the snapshot. The cursor's mark-delete position follows the snapshot, so it
// never holds back trimming by more than one snapshot interval.
//
// The cursor is created lazily (README budget: 2 KiB per idle topic; a cursor costs ~500 B): before
// the first replicated entry is admitted, so it holds back trimming of every replicated entry until
// a snapshot covers it, or by the first snapshot of a log that has entries. An empty topic that never
// receives a replicated entry has no index cursor. A topic without the cursor is rebuilt on load by
// scanning its whole log, which holds every replicated entry it ever stored (the cursor, created at
// Earliest before the first one, kept them from being trimmed).
//
// Snapshot format, version 1, in the cursor's properties:
//
//	"index.version"  "1"
//	"index.scanFrom" "<ledgerId>:<entryId>": every replicated entry before it is in the snapshot
//	"index.data"     base64 (std, padded) of:
//	    uvarint  number of origins
//	    per origin:
//	        uvarint  len(cluster), cluster bytes
//	        varint   floor ledger, varint floor entry   (origin positions <= floor are duplicates
//	                                                     whose mapping was dropped; -1:-1 if none)
//	        uvarint  number of runs
//	        per run: varint originLedger, varint originEntry, varint localLedger, varint localEntry,
//	                 uvarint count
//	  A run maps count consecutive origin entries (same ledger) to count consecutive local entries
//	  (same ledger). Runs are sorted by origin position.
//
// When the encoded data would exceed IndexOptions.MaxSnapshotBytes, the oldest runs of the largest
// origins are dropped from the snapshot and their origins' floors raised: deduplication stays exact
// (a dropped origin position still counts as stored), only Lookup of such old positions answers
// "unknown". MaxRuns bounds the runs kept in memory per origin the same way.

// IndexCursorName is the cursor whose properties hold the index snapshot.
const IndexCursorName = "meridian.repl-index"

// IndexOptions configure an Index.
type IndexOptions struct {
	// SnapshotInterval is how often a changed index is saved. Default 5 s.
	SnapshotInterval time.Duration
	// MaxSnapshotBytes bounds the encoded snapshot. Default 256 KiB.
	MaxSnapshotBytes int
	// MaxRuns bounds the runs kept in memory per origin (older runs are folded into the floor).
	// Default 1,000,000.
	MaxRuns int
	// ScanBatch bounds one read while rebuilding. Default 500 entries.
	ScanBatch int
	Logger    *slog.Logger
	Now       func() time.Time
}

func (o *IndexOptions) withDefaults() {
	if o.SnapshotInterval <= 0 {
		o.SnapshotInterval = 5 * time.Second
	}
	if o.MaxSnapshotBytes <= 0 {
		o.MaxSnapshotBytes = 256 << 10
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = 1_000_000
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

// ErrIndexPending: an entry with the same origin position is being appended right now; its fate is
// not known yet. The broker answers SEND_ERROR (PersistenceError) and the replicator retries, as with
// Pulsar's deduplication "unknown" status.
var ErrIndexPending = errors.New("replication: replicated entry with this source position is being stored")

// ErrIndexOutOfOrder: an entry from an origin arrived after an earlier entry of that origin failed
// to append; it is refused (retriable) so the replicator resends in order.
var ErrIndexOutOfOrder = errors.New("replication: replicated entry out of order")

type run struct {
	origin, local Position
	count         int64
}

func (r run) originEnd() Position { return Position{r.origin.LedgerID, r.origin.EntryID + r.count - 1} }
func (r run) localEnd() Position  { return Position{r.local.LedgerID, r.local.EntryID + r.count - 1} }

type originState struct {
	name  string
	runs  []run
	floor Position // origin positions <= floor are stored but no longer mapped
	// failedAt is set when the append of an entry from this origin failed: later entries of the
	// origin are refused until the replicator resends from that entry, so the origin's order is kept.
	failedAt *Position
	// npending counts this origin's admitted entries whose append is in progress; pendingMax is
	// the highest of their positions (meaningful while npending > 0). An entry above pendingMax
	// cannot be pending, which spares the scan of the admissions in the usual, ascending case.
	npending   int
	pendingMax Position

	msgIn, bytesIn, dups int64
	window               rateWindow
}

// Index is the inbound index of one local topic. It is safe for concurrent use.
type Index struct {
	opts  IndexOptions
	topic LocalTopic

	mu        sync.Mutex
	origins   map[string]*originState
	adm       *admissions // nil until the first admission: an idle topic's index stays small
	lastLocal Position    // highest local position recorded
	dirty     bool
	cursor    Cursor      // nil until created (see the package doc: created lazily); guarded by mu
	hasCursor atomic.Bool // cursor != nil: Admit's check without mu (it runs for every replicated entry)
	closed    bool
	onClose   func() // set by Manager.OpenIndex

	saveMu       sync.Mutex // serialises Save (Maintain and Close may race) and creating cursor
	lastSave     int64      // opts.Now() of the last save, Unix nanoseconds (guarded by mu)
	savedCovered Position   // the local position the last saved snapshot covers
}

// NewIndex returns an empty, in-memory index (no snapshots); used by tests and by LoadIndex.
func NewIndex(opts IndexOptions) *Index {
	opts.withDefaults()
	// Maps are made on first use: most topics never receive replicated traffic, and an idle topic
	// should cost little memory (README budget: 2 KiB per idle topic).
	return &Index{opts: opts}
}

// LoadIndex opens the index of topic: it loads the snapshot from the cursor IndexCursorName if the
// topic has that cursor, and reads the entries written after the snapshot (the whole log without
// one). It does not create the cursor (see the package doc). It must complete before the topic
// accepts replicated entries. The owner calls Maintain about once a second (snapshots, rates) and
// Close when the topic unloads.
func LoadIndex(ctx context.Context, topic LocalTopic, opts IndexOptions) (*Index, error) {
	x := NewIndex(opts)
	x.topic = topic
	scanFrom := Earliest
	if slices.Contains(topic.CursorNames(), IndexCursorName) {
		cur, _, err := topic.OpenCursor(ctx, IndexCursorName, Earliest)
		if err != nil {
			return nil, fmt.Errorf("replication: open index cursor of %s: %w", topic.Name(), err)
		}
		x.cursor = cur
		x.hasCursor.Store(true)
		props := cur.Properties()
		if props["index.version"] != "" {
			if p, err := x.decodeSnapshot(props); err != nil {
				// A damaged snapshot costs time, never correctness: rebuild from the whole log.
				x.opts.Logger.Warn("inbound replication index snapshot unreadable; rebuilding from the log", "topic", topic.Name(), "err", err)
				x.origins = nil
			} else {
				scanFrom = p
			}
		}
	}
	n, err := x.scan(ctx, scanFrom)
	if err != nil {
		return nil, fmt.Errorf("replication: rebuild index of %s: %w", topic.Name(), err)
	}
	x.opts.Logger.Debug("inbound replication index loaded", "topic", topic.Name(), "scanFrom", scanFrom.String(), "scanned", n, "origins", len(x.origins))
	if n > 0 || x.cursor == nil {
		// Without a cursor the first snapshot (once the log has entries) creates it.
		x.dirty = true
	}
	x.lastSave = x.opts.Now().UnixNano()
	return x, nil
}

// snapshotCursor returns the snapshot cursor, creating it (at Earliest, so it holds back trimming
// until a snapshot covers the log) when create is set. Without a topic (NewIndex) there is none.
func (x *Index) snapshotCursor(ctx context.Context, create bool) (Cursor, error) {
	x.mu.Lock()
	cur := x.cursor
	x.mu.Unlock()
	if cur != nil || !create || x.topic == nil {
		return cur, nil
	}
	cur, _, err := x.topic.OpenCursor(ctx, IndexCursorName, Earliest)
	if err != nil {
		return nil, fmt.Errorf("replication: create index cursor of %s: %w", x.topic.Name(), err)
	}
	x.mu.Lock()
	x.cursor = cur
	x.mu.Unlock()
	x.hasCursor.Store(true)
	return cur, nil
}

// ensureCursor creates the snapshot cursor before the first replicated entry is stored.
func (x *Index) ensureCursor() error {
	if x.hasCursor.Load() || x.topic == nil {
		return nil
	}
	// saveMu: a concurrent Save may be creating it. Neither lock is needed by storage completions.
	x.saveMu.Lock()
	defer x.saveMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cursorCreateTimeout)
	defer cancel()
	_, err := x.snapshotCursor(ctx, true)
	return err
}

// cursorCreateTimeout bounds creating the index cursor on the publish path of the first replicated
// entry (one durable journal record); the replicator retries a refused entry.
const cursorCreateTimeout = 10 * time.Second

func (x *Index) scan(ctx context.Context, from Position) (int, error) {
	n := 0
	if from == Earliest {
		from = Position{0, 0}
	}
	for {
		es, err := x.topic.Read(ctx, from, x.opts.ScanBatch, 8<<20)
		if err != nil {
			return n, err
		}
		if len(es) == 0 {
			return n, nil
		}
		for _, e := range es {
			x.Observe(e.Position, e.Data)
			from = e.Position.Next()
			n++
		}
	}
}

// Observe records a stored entry (used while rebuilding; harmless for entries that are not
// replicated or already recorded).
func (x *Index) Observe(local Position, data []byte) {
	origin, pos, _, ok, err := replicatedSource(data)
	if !ok || err != nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.originOf(origin)
	if _, found := o.lookup(pos); found || pos.Compare(o.floor) <= 0 {
		return
	}
	x.record(o, pos, local)
}

func (x *Index) topicName() string {
	if x.topic == nil {
		return ""
	}
	return x.topic.Name()
}

// originOf is origin for a name given as bytes; it allocates the name only for a new origin.
func (x *Index) originOf(name []byte) *originState {
	if o := x.origins[string(name)]; o != nil {
		return o
	}
	return x.origin(string(name))
}

func (x *Index) origin(name string) *originState {
	o := x.origins[name]
	if o == nil {
		if x.origins == nil {
			x.origins = map[string]*originState{}
		}
		o = &originState{name: name, floor: Position{-1, -1}}
		// A zero sample at creation: traffic of the origin's first second shows as a rate at the
		// first tick instead of being absorbed into the window's first sample.
		o.window.add(x.opts.Now(), 0, 0)
		x.origins[name] = o
	}
	return o
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
	originBytes, pos, msgs, indexed, err := replicatedSource(data)
	if err != nil || !indexed {
		return false, 0, 0, 0, err
	}
	return x.admit(originBytes, pos, msgs, int64(len(data)))
}

// AdmitOriginTicket is AdmitTicket for an entry whose metadata the caller has scanned already
// (wire.ScanPublishMetadataOrigin, in the server's own scan of the SEND): the same result without
// a second scan of every replicated entry.
func (x *Index) AdmitOriginTicket(data []byte, o wire.ReplicatedOrigin) (dup bool, dupLedger, dupEntry int64, ticket uint64, err error) {
	originBytes, pos, msgs, indexed, err := originSource(o)
	if err != nil || !indexed {
		return false, 0, 0, 0, err
	}
	return x.admit(originBytes, pos, msgs, int64(len(data)))
}

// admit is AdmitTicket once the entry's origin is known.
func (x *Index) admit(originBytes []byte, pos Position, msgs, size int64) (dup bool, dupLedger, dupEntry int64, ticket uint64, err error) {
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
	if o == nil || o.name != string(originBytes) {
		o = x.originOf(originBytes)
		q.last = o
	}
	if local, found := o.lookup(pos); found {
		o.dups++
		return true, local.LedgerID, local.EntryID, 0, nil
	}
	if pos.Compare(o.floor) <= 0 {
		o.dups++
		return true, -1, -1, 0, nil
	}
	if o.failedAt != nil {
		if pos.Compare(*o.failedAt) > 0 {
			return false, 0, 0, 0, fmt.Errorf("%w: %s %s arrived before %s, whose append failed", ErrIndexOutOfOrder, o.name, pos, *o.failedAt)
		}
		o.failedAt = nil
	}
	if o.npending > 0 && pos.Compare(o.pendingMax) <= 0 && q.isPending(o, pos) {
		return false, 0, 0, 0, fmt.Errorf("%w: %s %s", ErrIndexPending, o.name, pos)
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
	q.inflight = append(q.inflight, admission{origin: o, pos: pos, msgs: msgs, size: size})
	return false, 0, 0, ticket, nil
}

// Commit ends the admission of ticket (from AdmitTicket): with err == nil the entry is recorded at
// local position ledger:entry; with an error its origin refuses later entries until the replicator
// resends from this one. A ticket acts once; 0, unknown or repeated tickets are ignored.
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
		if o.failedAt == nil || pos.Compare(*o.failedAt) < 0 {
			failed := pos
			o.failedAt = &failed
		}
	} else {
		x.record(o, pos, Position{ledger, entry})
		o.msgIn += a.msgs
		o.bytesIn += a.size
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
func (q *admissions) isPending(o *originState, pos Position) bool {
	for i := q.head; i < len(q.inflight); i++ {
		if a := &q.inflight[i]; !a.done && a.origin == o && a.pos == pos {
			return true
		}
	}
	return false
}

// admissions are the entries between AdmitTicket and Commit (guarded by Index.mu).
type admissions struct {
	last *originState // the origin of the last admitted entry: one map lookup less per entry
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
	pos        Position
	msgs, size int64
	done       bool
}

// record adds origin pos -> local; x.mu is held.
func (x *Index) record(o *originState, pos, local Position) {
	x.dirty = true
	if local.Compare(x.lastLocal) > 0 {
		x.lastLocal = local
	}
	if n := len(o.runs); n > 0 {
		last := &o.runs[n-1]
		if last.originEnd().Next() == pos && last.localEnd().Next() == local {
			last.count++
			return
		}
		if pos.Compare(last.originEnd()) <= 0 {
			// Out of order (rare: a source that was recreated); keep the runs sorted.
			i := sort.Search(n, func(i int) bool { return o.runs[i].origin.Compare(pos) > 0 })
			o.runs = slices.Insert(o.runs, i, run{origin: pos, local: local, count: 1})
			x.capRuns(o)
			return
		}
	}
	o.runs = append(o.runs, run{origin: pos, local: local, count: 1})
	x.capRuns(o)
}

func (x *Index) capRuns(o *originState) {
	if len(o.runs) > x.opts.MaxRuns {
		drop := len(o.runs) - x.opts.MaxRuns
		o.floor = maxPos(o.floor, o.runs[drop-1].originEnd())
		o.runs = slices.Delete(o.runs, 0, drop)
	}
}

func maxPos(a, b Position) Position {
	if a.Compare(b) >= 0 {
		return a
	}
	return b
}

func (o *originState) lookup(pos Position) (Position, bool) {
	i := sort.Search(len(o.runs), func(i int) bool { return o.runs[i].origin.Compare(pos) > 0 }) - 1
	if i < 0 {
		return Position{}, false
	}
	r := o.runs[i]
	if r.origin.LedgerID != pos.LedgerID || pos.EntryID >= r.origin.EntryID+r.count {
		return Position{}, false
	}
	return Position{r.local.LedgerID, r.local.EntryID + (pos.EntryID - r.origin.EntryID)}, true
}

// replicatedSource extracts the origin cluster, origin position and message count of a replicated
// entry without decoding its metadata into a message (this runs for every replicated SEND). origin
// aliases data.
func replicatedSource(data []byte) (origin []byte, pos Position, msgs int64, indexed bool, err error) {
	parts, err := wire.ParseEntry(data)
	if err != nil {
		return nil, Position{}, 0, false, fmt.Errorf("replication: replicated entry: %w", err)
	}
	s, err := scanMetadata(parts.Metadata, "")
	if err != nil {
		return nil, Position{}, 0, false, fmt.Errorf("replication: replicated entry: malformed metadata")
	}
	return originSource(wire.ReplicatedOrigin{From: s.replicatedFrom, HasFrom: s.hasReplicatedFrom,
		Position: s.sourcePosition, HasPosition: s.hasSourcePosition, NumMessages: s.numMessages, HasNumMessages: s.hasNumMessages})
}

// originSource is replicatedSource of an entry whose metadata was scanned.
func originSource(o wire.ReplicatedOrigin) (origin []byte, pos Position, msgs int64, indexed bool, err error) {
	if !o.HasFrom || !o.HasPosition {
		return nil, Position{}, 0, false, nil
	}
	pos, err = parsePositionBytes(o.Position)
	if err != nil {
		return o.From, Position{}, 0, false, fmt.Errorf("replication: replicated entry from %s: %w", o.From, err)
	}
	msgs = int64(o.NumMessages)
	if !o.HasNumMessages || msgs < 1 {
		msgs = 1
	}
	return o.From, pos, msgs, true, nil
}

// Lookup returns the local position holding origin cluster's entry at pos. ok is false if that
// entry was never stored here or its mapping is no longer kept (see the floor in the package doc).
func (x *Index) Lookup(origin string, pos Position) (local Position, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.origins[origin]
	if o == nil {
		return Position{}, false
	}
	return o.lookup(pos)
}

// Contains reports whether origin's entry at pos is stored here (mapped, or below the floor).
func (x *Index) Contains(origin string, pos Position) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.origins[origin]
	if o == nil {
		return false
	}
	_, ok := o.lookup(pos)
	return ok || pos.Compare(o.floor) <= 0
}

// InboundStats is the receiving side of replication from one origin cluster.
type InboundStats struct {
	Origin            string
	MsgInCount        int64
	BytesInCount      int64
	MsgRateIn         float64
	MsgThroughputIn   float64
	DuplicatesDropped int64
	Runs              int      // mapping runs kept in memory
	LastOrigin        Position // highest origin position mapped
}

// Inbound returns per-origin inbound stats, sorted by origin.
func (x *Index) Inbound() []InboundStats {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]InboundStats, 0, len(x.origins))
	for name, o := range x.origins {
		s := InboundStats{Origin: name, MsgInCount: o.msgIn, BytesInCount: o.bytesIn, DuplicatesDropped: o.dups, Runs: len(o.runs), LastOrigin: o.floor}
		if n := len(o.runs); n > 0 {
			s.LastOrigin = o.runs[n-1].originEnd()
		}
		s.MsgRateIn, s.MsgThroughputIn = o.window.rates()
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b InboundStats) int {
		if a.Origin < b.Origin {
			return -1
		}
		if a.Origin > b.Origin {
			return 1
		}
		return 0
	})
	return out
}

// Tick samples rates (called about once a second).
func (x *Index) Tick(now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, o := range x.origins {
		o.window.add(now, o.msgIn, o.bytesIn)
	}
}

// Maintain is called about once a second by the index's owner (Manager): it samples rates and saves
// a snapshot every SnapshotInterval. There is no goroutine per index, so ten thousand topics cost
// ten thousand small structs, not ten thousand tickers.
func (x *Index) Maintain(ctx context.Context, now time.Time) {
	x.Tick(now)
	x.mu.Lock()
	due := now.UnixNano()-x.lastSave >= int64(x.opts.SnapshotInterval)
	if due {
		x.lastSave = now.UnixNano()
	}
	x.mu.Unlock()
	if !due {
		return
	}
	if err := x.Save(ctx); err != nil {
		x.opts.Logger.Warn("save inbound replication index snapshot", "topic", x.topicName(), "err", err)
	}
}

// Save writes a snapshot if the index changed, or the log grew, since the last one. The snapshot's
// cursor is mark-deleted up to what the snapshot covers, so it never holds back trimming for long.
func (x *Index) Save(ctx context.Context) error {
	if x.topic == nil {
		return nil
	}
	x.saveMu.Lock()
	defer x.saveMu.Unlock()
	x.mu.Lock()
	// With nothing pending, every replicated entry up to the end of the log is recorded; otherwise
	// only those up to the highest recorded local position are known to be.
	covered := x.lastLocal
	if !x.pending() {
		if lc := x.topic.LastConfirmed(); lc.Compare(covered) > 0 {
			covered = lc
		}
	}
	if !x.dirty && covered.Compare(x.savedCovered) <= 0 {
		x.mu.Unlock()
		return nil
	}
	if len(x.origins) == 0 && !x.pending() && covered.EntryID < 0 {
		// An empty log with nothing recorded: the snapshot would only save a rescan of nothing,
		// and costs every idle topic its properties in memory and on disk.
		x.mu.Unlock()
		return nil
	}
	props := x.encodeSnapshot(covered.Next())
	wasDirty := x.dirty
	x.dirty = false
	x.mu.Unlock()
	cur, err := x.snapshotCursor(ctx, true)
	if err == nil {
		err = cur.SetProperties(ctx, props)
	}
	if err != nil {
		x.mu.Lock()
		x.dirty = x.dirty || wasDirty
		x.mu.Unlock()
		return err
	}
	x.mu.Lock()
	x.savedCovered = covered
	x.mu.Unlock()
	if covered.EntryID >= 0 {
		if err := cur.MarkDelete(ctx, covered); err != nil {
			return err
		}
	}
	return nil
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
	return x.Save(ctx)
}

// encodeSnapshot encodes the index (x.mu held), dropping old runs to fit MaxSnapshotBytes.
func (x *Index) encodeSnapshot(scanFrom Position) map[string]string {
	names := make([]string, 0, len(x.origins))
	for n := range x.origins {
		names = append(names, n)
	}
	slices.Sort(names)
	type view struct {
		floor Position
		runs  []run
	}
	views := make([]view, len(names))
	for i, n := range names {
		views[i] = view{x.origins[n].floor, x.origins[n].runs}
	}
	const perRun = 5 * binary.MaxVarintLen64
	budget := x.opts.MaxSnapshotBytes * 3 / 4 // base64 expands by 4/3
	for {
		size := binary.MaxVarintLen64
		largest := -1
		for i, v := range views {
			size += 3*binary.MaxVarintLen64 + len(names[i]) + 2*binary.MaxVarintLen64 + len(v.runs)*perRun
			if largest < 0 || len(v.runs) > len(views[largest].runs) {
				largest = i
			}
		}
		if size <= budget || largest < 0 || len(views[largest].runs) == 0 {
			break
		}
		v := &views[largest]
		drop := max(1, len(v.runs)/4)
		v.floor = maxPos(v.floor, v.runs[drop-1].originEnd())
		v.runs = v.runs[drop:]
	}
	buf := binary.AppendUvarint(nil, uint64(len(names)))
	for i, n := range names {
		buf = binary.AppendUvarint(buf, uint64(len(n)))
		buf = append(buf, n...)
		buf = binary.AppendVarint(buf, views[i].floor.LedgerID)
		buf = binary.AppendVarint(buf, views[i].floor.EntryID)
		buf = binary.AppendUvarint(buf, uint64(len(views[i].runs)))
		for _, r := range views[i].runs {
			buf = binary.AppendVarint(buf, r.origin.LedgerID)
			buf = binary.AppendVarint(buf, r.origin.EntryID)
			buf = binary.AppendVarint(buf, r.local.LedgerID)
			buf = binary.AppendVarint(buf, r.local.EntryID)
			buf = binary.AppendUvarint(buf, uint64(r.count))
		}
	}
	return map[string]string{
		"index.version":  "1",
		"index.scanFrom": scanFrom.String(),
		"index.data":     base64.StdEncoding.EncodeToString(buf),
	}
}

var errBadSnapshot = errors.New("replication: bad index snapshot")

// decodeSnapshot loads a snapshot into x and returns its scanFrom position.
func (x *Index) decodeSnapshot(props map[string]string) (Position, error) {
	if v := props["index.version"]; v != "1" {
		return Position{}, fmt.Errorf("%w: version %q", errBadSnapshot, v)
	}
	scanFrom, err := ParsePosition(props["index.scanFrom"])
	if err != nil {
		return Position{}, fmt.Errorf("%w: %v", errBadSnapshot, err)
	}
	buf, err := base64.StdEncoding.DecodeString(props["index.data"])
	if err != nil {
		return Position{}, fmt.Errorf("%w: %v", errBadSnapshot, err)
	}
	origins, err := decodeOrigins(buf)
	if err != nil {
		return Position{}, err
	}
	x.origins = origins
	now := x.opts.Now()
	for _, o := range origins {
		o.window.add(now, 0, 0) // counters start at zero with the load (see origin)
		if n := len(o.runs); n > 0 && o.runs[n-1].localEnd().Compare(x.lastLocal) > 0 {
			x.lastLocal = o.runs[n-1].localEnd()
		}
	}
	return scanFrom, nil
}

func decodeOrigins(buf []byte) (map[string]*originState, error) {
	r := snapReader{b: buf}
	n := r.uvarint()
	if r.err != nil || n > uint64(len(buf)) {
		return nil, fmt.Errorf("%w: origin count", errBadSnapshot)
	}
	out := make(map[string]*originState, n)
	for range n {
		l := r.uvarint()
		if r.err != nil || l > uint64(len(r.b)) || l == 0 {
			return nil, fmt.Errorf("%w: origin name", errBadSnapshot)
		}
		name := string(r.b[:l])
		r.b = r.b[l:]
		o := &originState{name: name, floor: Position{r.varint(), r.varint()}}
		runs := r.uvarint()
		if r.err != nil || runs > uint64(len(r.b)) {
			return nil, fmt.Errorf("%w: run count of %q", errBadSnapshot, name)
		}
		o.runs = make([]run, 0, runs)
		for range runs {
			rn := run{origin: Position{r.varint(), r.varint()}, local: Position{r.varint(), r.varint()}}
			c := r.uvarint()
			if r.err != nil || c == 0 || c > 1<<40 {
				return nil, fmt.Errorf("%w: run of %q", errBadSnapshot, name)
			}
			rn.count = int64(c)
			if k := len(o.runs); k > 0 && o.runs[k-1].origin.Compare(rn.origin) >= 0 {
				return nil, fmt.Errorf("%w: runs of %q not sorted", errBadSnapshot, name)
			}
			o.runs = append(o.runs, rn)
		}
		out[name] = o
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, fmt.Errorf("%w: trailing bytes", errBadSnapshot)
	}
	return out, nil
}

type snapReader struct {
	b   []byte
	err error
}

func (r *snapReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errBadSnapshot
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errBadSnapshot
		return 0
	}
	r.b = r.b[n:]
	return v
}
