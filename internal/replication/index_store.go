package replication

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Persistence of the inbound index: loading it (snapshot, then the log after it) and saving
// snapshots (format in index_format.go).
//
// A save writes what changed: the new tail of each changed origin key, sealed into a chunk of its
// own once it is SealBytes long (written once, in the properties of a new cursor), else carried in
// the head; chunks merge size-tiered (mergeFanout chunks of one level into one of the next), so an
// origin key has O(log n) chunks and every run is rewritten O(log n) times. The order of writes
// keeps every durable head complete: new chunks are durable before the head that lists them, the
// head is durable before the chunks it no longer lists are deleted, and the head cursor's
// mark-delete (which lets storage trim the log) moves only to what an already durable head covers.

// mergeFanout chunks of one level merge into one chunk of the next.
const mergeFanout = 4

// maxChunksPerKey bounds an origin key's chunks whatever their levels (the smallest neighbours
// merge beyond it).
const maxChunksPerKey = 24

// keyPersist is what the durable snapshot holds of an origin key (guarded by Index.mu).
type keyPersist struct {
	chunks []chunkRef // the key's chunks in the last durable head, in origin order; replaced, never changed in place
	// changed: runs or floor changed since the last save. rewrite: a run was inserted out of
	// order, so the next save rewrites the key's chunks.
	changed, rewrite bool
	tail             []byte // the key's tail as encoded in the last durable head (while !changed)
	tailRuns         int
}

// noteInsert records an out-of-order run.
func (p *keyPersist) noteInsert() { p.rewrite = true }

// indexStore is the durable side of an index: the head cursor and the chunk cursors (guarded by
// Index.saveMu; the pointer is set under Index.mu).
type indexStore struct {
	cursor      Cursor
	nextChunkID uint64
	// chunks are the chunk cursors that exist: listed by the last durable head, or waiting to be
	// deleted.
	chunks map[uint64]Cursor
	// durableCovered is the local position the last durable head covers; the head cursor's
	// mark-delete follows it one save later.
	durableCovered mtypes.Position
	hasDurable     bool
	marked         mtypes.Position // the head cursor's mark-delete as this index last set it
}

// LoadIndex opens the index of topic: it loads the snapshot from the cursor IndexCursorName (and
// its chunk cursors) if the topic has that cursor, and reads the entries written after the
// snapshot (the whole log without one). It does not create the cursor (see the package doc). It
// must complete before the topic accepts replicated entries. The owner calls Maintain about once
// a second (snapshots, rates) and Close when the topic unloads.
func LoadIndex(ctx context.Context, topic LocalTopic, opts IndexOptions) (*Index, error) {
	x := NewIndex(opts)
	x.topic = topic
	scanFrom := mtypes.Earliest
	migrate := false
	names := topic.CursorNames()
	if slices.Contains(names, IndexCursorName) {
		cur, _, err := topic.OpenCursor(ctx, IndexCursorName, mtypes.Earliest)
		if err != nil {
			return nil, fmt.Errorf("replication: open index cursor of %s: %w", topic.Name(), err)
		}
		st := &indexStore{cursor: cur, chunks: map[uint64]Cursor{}}
		x.store = st
		x.hasCursor.Store(true)
		props := cur.Properties()
		listed := map[uint64]bool{}
		if v := props[propVersion]; v != "" {
			p, err := x.loadSnapshot(ctx, names, props, listed)
			if err != nil {
				// A damaged snapshot costs time, never correctness: rebuild from the whole log.
				x.opts.Logger.Warn("inbound replication index snapshot unreadable; rebuilding from the log", "topic", topic.Name(), "err", err)
				x.clusters, x.lastLocal, listed = nil, mtypes.Position{}, map[uint64]bool{}
				clear(st.chunks)
			} else {
				scanFrom = p
				st.durableCovered, st.hasDurable = mtypes.Position{LedgerID: p.LedgerID, EntryID: p.EntryID - 1}, true
				st.marked = cur.MarkDeletePosition()
				x.savedCovered = st.durableCovered
				migrate = v == "1"
			}
		}
		x.removeOrphanChunks(ctx, names, listed)
	} else {
		x.removeOrphanChunks(ctx, names, nil) // chunks without a head are of no use, and hold back trimming
	}
	n, err := x.scan(ctx, scanFrom)
	if err != nil {
		return nil, fmt.Errorf("replication: rebuild index of %s: %w", topic.Name(), err)
	}
	x.opts.Logger.Debug("inbound replication index loaded", "topic", topic.Name(), "scanFrom", scanFrom.String(), "scanned", n, "clusters", len(x.clusters))
	if n > 0 || !x.hasCursor.Load() || migrate {
		// Without a cursor the first snapshot (once the log has entries) creates it; a version 1
		// snapshot is written again as version 2.
		x.dirty = true
	}
	x.lastSave = x.opts.Now().UnixNano()
	return x, nil
}

// loadSnapshot loads the snapshot in the head cursor's properties (and its chunks) and returns
// its scanFrom position; listed collects the chunk ids the head lists.
func (x *Index) loadSnapshot(ctx context.Context, names []string, props map[string]string, listed map[uint64]bool) (mtypes.Position, error) {
	switch props[propVersion] {
	case "1":
		scanFrom, origins, err := decodeV1(props)
		if err != nil {
			return mtypes.Position{}, err
		}
		for _, v := range origins {
			o := x.originOf([]byte(v.name), 0)
			o.floor = v.floor
			for _, r := range v.runs {
				x.loadRun(o, r)
			}
		}
		x.afterLoad()
		return scanFrom, nil
	case "2":
	default:
		return mtypes.Position{}, fmt.Errorf("%w: version %q", errBadSnapshot, props[propVersion])
	}
	tails := map[int][]run{}
	h, err := decodeHead(props, func(k int, r run) { tails[k] = append(tails[k], r) })
	if err != nil {
		return mtypes.Position{}, err
	}
	st := x.store
	st.nextChunkID = h.nextChunkID
	for ki, k := range h.keys {
		o := x.originOf([]byte(k.key.Cluster), k.key.Incarnation)
		o.floor = k.floor
		for _, ref := range k.chunks {
			if listed[ref.id] {
				return mtypes.Position{}, fmt.Errorf("%w: chunk %d listed twice", errBadSnapshot, ref.id)
			}
			listed[ref.id] = true
			name := ChunkCursorName(ref.id)
			if !slices.Contains(names, name) {
				return mtypes.Position{}, fmt.Errorf("%w: chunk cursor %s missing", errBadSnapshot, name)
			}
			c, _, err := x.topic.OpenCursor(ctx, name, mtypes.Latest)
			if err != nil {
				return mtypes.Position{}, fmt.Errorf("replication: open index chunk %s: %w", name, err)
			}
			st.chunks[ref.id] = c
			if err := decodeChunk(c.Properties(), k.key, ref, func(r run) { x.loadRun(o, r) }); err != nil {
				return mtypes.Position{}, err
			}
		}
		for _, r := range tails[ki] {
			x.loadRun(o, r)
		}
		o.persist.chunks = k.chunks
	}
	x.afterLoad()
	return h.scanFrom, nil
}

// loadRun appends a run read from a snapshot to o (clipped to after o's floor; joined to the last
// run when they continue each other).
func (x *Index) loadRun(o *originState, r run) {
	r, ok := r.clip(o.floor, mtypes.Latest)
	if !ok {
		return
	}
	if last := o.runs.last(); last != nil {
		if last.originEnd().Next() == r.origin && last.localEnd().Next() == r.local {
			last.count += r.count
			return
		}
		if r.origin.Compare(last.originEnd()) <= 0 {
			o.runs.insert(r)
			o.cluster.nruns++
			return
		}
	}
	o.runs.append(r)
	o.cluster.nruns++
}

// afterLoad applies the hard memory bound to what a snapshot held and sets lastLocal. The first
// save encodes every key's tail again.
func (x *Index) afterLoad() {
	for _, c := range x.clusters {
		if c.nruns > x.opts.MaxPinnedRuns {
			x.fold(c)
		}
		for _, o := range c.keys {
			o.persist.changed = true
			if last := o.runs.last(); last != nil && last.localEnd().Compare(x.lastLocal) > 0 {
				x.lastLocal = last.localEnd()
			}
		}
	}
}

// removeOrphanChunks deletes chunk cursors that the loaded head does not list: left by a save
// that failed or crashed between its writes, or by a head that could not be read.
func (x *Index) removeOrphanChunks(ctx context.Context, names []string, listed map[uint64]bool) {
	st := x.store
	for _, name := range names {
		id, ok := chunkIDOf(name)
		if !ok || listed[id] {
			continue
		}
		if st != nil {
			st.nextChunkID = max(st.nextChunkID, id+1)
		}
		if err := x.topic.DeleteCursor(ctx, name); err != nil {
			x.opts.Logger.Warn("delete orphan inbound replication index chunk", "topic", x.topic.Name(), "cursor", name, "err", err)
			if c, _, err := x.topic.OpenCursor(ctx, name, mtypes.Latest); err == nil && st != nil {
				st.chunks[id] = c // the next save tries again
			}
		}
	}
}

// snapshotCursor returns the snapshot cursor, creating it (at Earliest, so it holds back trimming
// until a snapshot covers the log) when create is set. Without a topic (NewIndex) there is none.
func (x *Index) snapshotCursor(ctx context.Context, create bool) (Cursor, error) {
	x.mu.Lock()
	st := x.store
	x.mu.Unlock()
	if st != nil || !create || x.topic == nil {
		if st == nil {
			return nil, nil
		}
		return st.cursor, nil
	}
	cur, _, err := x.topic.OpenCursor(ctx, IndexCursorName, mtypes.Earliest)
	if err != nil {
		return nil, fmt.Errorf("replication: create index cursor of %s: %w", x.topic.Name(), err)
	}
	x.mu.Lock()
	x.store = &indexStore{cursor: cur, chunks: map[uint64]Cursor{}}
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

func (x *Index) scan(ctx context.Context, from mtypes.Position) (int, error) {
	n := 0
	if from == mtypes.Earliest {
		from = mtypes.Position{LedgerID: 0, EntryID: 0}
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

// keyCapture is an origin key as a save found it (taken under Index.mu, used outside it).
type keyCapture struct {
	o       *originState
	key     OriginKey
	floor   mtypes.Position
	chunks  []chunkRef
	newest  bool // the key its cluster used last
	work    bool // changed since the last save, or to be consolidated: view is set
	rewrite bool
	// consolidate: a key its cluster no longer uses (an older incarnation) has all its runs
	// written as few chunks as the size bound allows, none in the head.
	consolidate bool
	view        runView
	tail        []byte // when !work: the tail of the last head
	tailRuns    int
}

// capture takes what a save needs of every origin key (x.mu held) and clears their change flags.
func (x *Index) capture() []keyCapture {
	var out []keyCapture
	for _, c := range x.clusters {
		for _, o := range c.keys {
			kc := keyCapture{o: o, key: o.key, floor: o.floor, chunks: o.persist.chunks, newest: o.lastUse == c.clock}
			kc.consolidate = !kc.newest && (o.persist.tailRuns > 0 || (len(kc.chunks) >= 2 && totalSize(kc.chunks) <= maxChunkBytes))
			if o.persist.changed || o.persist.rewrite || kc.consolidate {
				kc.work, kc.rewrite, kc.view = true, o.persist.rewrite, o.runs.view()
				o.persist.changed, o.persist.rewrite = false, false
			} else {
				kc.tail, kc.tailRuns = o.persist.tail, o.persist.tailRuns
			}
			out = append(out, kc)
		}
	}
	slices.SortFunc(out, func(a, b keyCapture) int {
		return cmp.Or(cmp.Compare(a.key.Cluster, b.key.Cluster), cmp.Compare(a.key.Incarnation, b.key.Incarnation))
	})
	return out
}

// newChunk is a chunk a save writes.
type newChunk struct {
	ref   chunkRef
	props map[string]string
}

// savePlan is what a save writes.
type savePlan struct {
	head   snapshotHead
	chunks []newChunk
	listed map[uint64]bool // chunk ids the head lists
}

// plan decides, outside Index.mu, what a save writes for the captured keys: new chunks (sealed
// tails, merges) and the head.
func (x *Index) plan(caps []keyCapture, scanFrom mtypes.Position) savePlan {
	st := x.store
	p := savePlan{listed: map[uint64]bool{}}
	for i := range caps {
		kc := &caps[i]
		hk := headKey{key: kc.key, floor: kc.floor, chunks: kc.chunks, tail: kc.tail, tailRuns: kc.tailRuns}
		if kc.work {
			hk = x.planKey(kc, &p)
			kc.chunks, kc.tail, kc.tailRuns = hk.chunks, hk.tail, hk.tailRuns
		}
		for _, c := range hk.chunks {
			p.listed[c.id] = true
		}
		p.head.keys = append(p.head.keys, hk)
	}
	p.head.scanFrom, p.head.nextChunkID = scanFrom, st.nextChunkID
	return p
}

// planKey plans one changed key: drop chunks wholly at or below the floor, seal the tail (or keep
// it in the head while shorter than SealBytes), merge full levels; or, for a key with an
// out-of-order insert or one to consolidate, write all its runs again.
func (x *Index) planKey(kc *keyCapture, p *savePlan) headKey {
	hk := headKey{key: kc.key, floor: kc.floor}
	chunks := slices.Clone(kc.chunks)
	for len(chunks) > 0 && chunks[0].last.Compare(kc.floor) <= 0 {
		chunks = chunks[1:]
	}
	seal := func(enc runEncoder, minLevel uint8) chunkRef {
		ref := chunkRef{id: x.store.nextChunkID, level: max(minLevel, x.levelFor(len(enc.buf))), runs: enc.n, size: len(enc.buf),
			first: enc.first, last: enc.prevOrigin}
		x.store.nextChunkID++
		p.chunks = append(p.chunks, newChunk{ref: ref, props: encodeChunk(kc.key, enc)})
		return ref
	}
	// sealFrom writes the runs after lo as chunks of at most maxChunkBytes, or (allowTail) as the
	// head's tail when they are fewer than SealBytes.
	sealFrom := func(lo mtypes.Position, allowTail bool) {
		encs := kc.encode(lo, mtypes.Latest)
		if allowTail && len(encs) == 1 && len(encs[0].buf) < x.opts.SealBytes {
			hk.tail, hk.tailRuns = encs[0].buf, encs[0].n
			return
		}
		for _, enc := range encs {
			if enc.n > 0 {
				chunks = append(chunks, seal(enc, 0))
			}
		}
	}
	if kc.rewrite || kc.consolidate {
		chunks = chunks[:0]
		sealFrom(kc.floor, kc.newest)
		hk.chunks = chunks
		return hk
	}
	boundary := kc.floor
	if k := len(chunks); k > 0 {
		boundary = maxPos(boundary, chunks[k-1].last)
	}
	sealFrom(boundary, kc.newest)
	// Merge: mergeFanout trailing chunks of one level become one of a higher level, while the
	// result stays within maxChunkBytes.
	for {
		k := len(chunks)
		if k < mergeFanout {
			break
		}
		group := chunks[k-mergeFanout:]
		level := group[len(group)-1].level
		full := totalSize(group) <= maxChunkBytes
		for _, c := range group {
			full = full && c.level == level
		}
		if !full {
			break
		}
		chunks = kc.merge(chunks, k-mergeFanout, k, level+1, seal)
	}
	for len(chunks) > maxChunksPerKey {
		best := -1
		for i := 0; i+1 < len(chunks); i++ {
			if size := chunks[i].size + chunks[i+1].size; size <= maxChunkBytes && (best < 0 || size < chunks[best].size+chunks[best+1].size) {
				best = i
			}
		}
		if best < 0 {
			break // every neighbour pair is too large to merge: the count stays above the bound
		}
		chunks = kc.merge(chunks, best, best+2, max(chunks[best].level, chunks[best+1].level), seal)
	}
	hk.chunks = chunks
	return hk
}

// encode returns the key's runs after lo (and after its floor) and at or before hi, delta-encoded
// in pieces of at most maxChunkBytes (at least one, maybe empty).
func (kc *keyCapture) encode(lo, hi mtypes.Position) []runEncoder {
	encs := []runEncoder{newRunEncoder(nil)}
	kc.view.each(maxPos(lo, kc.floor), hi, func(r run) bool {
		if len(encs[len(encs)-1].buf) >= maxChunkBytes {
			encs = append(encs, newRunEncoder(nil))
		}
		encs[len(encs)-1].add(r)
		return true
	})
	return encs
}

// merge replaces chunks[i:j] by one chunk of their runs (none when all are below the floor).
func (kc *keyCapture) merge(chunks []chunkRef, i, j int, level uint8, seal func(runEncoder, uint8) chunkRef) []chunkRef {
	lo := kc.floor
	if i > 0 {
		lo = chunks[i-1].last
	}
	out := append(slices.Clone(chunks[:i]), chunks[j:]...)
	var merged []chunkRef
	for _, enc := range kc.encode(lo, chunks[j-1].last) { // one piece: the inputs fit maxChunkBytes
		if enc.n > 0 {
			merged = append(merged, seal(enc, level))
		}
	}
	return slices.Insert(out, i, merged...)
}

// totalSize is the encoded size of chunks.
func totalSize(chunks []chunkRef) int {
	n := 0
	for _, c := range chunks {
		n += c.size
	}
	return n
}

// levelFor is the size tier of a chunk of n encoded bytes: 0 below SealBytes·mergeFanout, then
// one more per factor mergeFanout.
func (x *Index) levelFor(n int) uint8 {
	level, limit := uint8(0), x.opts.SealBytes*mergeFanout
	for n >= limit && level < 60 {
		level++
		limit *= mergeFanout
	}
	return level
}

// Save writes a snapshot if the index changed, or the log grew, since the last one (see the
// comment at the top of this file for what it writes and in which order).
func (x *Index) Save(ctx context.Context) error { return x.save(ctx, 0) }

// save is Save with the writes bounded by timeout (0: ctx alone). The bound is set up only once
// there is something to write: most saves of an idle topic find nothing, and a context with a
// timer for each of 10,000 of them every few seconds was a good part of an idle broker's CPU.
func (x *Index) save(ctx context.Context, timeout time.Duration) error {
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
		if !x.markDeleteBehind() {
			return nil
		}
		ctx, cancel := withTimeout(ctx, timeout)
		defer cancel()
		return x.catchUpMarkDelete(ctx)
	}
	if len(x.clusters) == 0 && !x.pending() && covered.EntryID < 0 {
		// An empty log with nothing recorded: the snapshot would only save a rescan of nothing,
		// and costs every idle topic its properties in memory and on disk.
		x.mu.Unlock()
		return nil
	}
	caps := x.capture()
	wasDirty := x.dirty
	x.dirty = false
	x.mu.Unlock()
	ctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	cur, err := x.snapshotCursor(ctx, true)
	if err == nil {
		p := x.plan(caps, covered.Next())
		if err = x.write(ctx, cur, p, covered); err == nil {
			x.mu.Lock()
			for _, kc := range caps {
				if kc.work {
					kc.o.persist.chunks, kc.o.persist.tail, kc.o.persist.tailRuns = kc.chunks, kc.tail, kc.tailRuns
				}
			}
			x.savedCovered = covered
			x.mu.Unlock()
			x.removeUnlisted(ctx, p.listed)
			x.rebaseChunks(ctx, p.listed)
			return nil
		}
	}
	x.mu.Lock()
	x.dirty = x.dirty || wasDirty
	for _, kc := range caps {
		if kc.work {
			kc.o.persist.changed = true
			kc.o.persist.rewrite = kc.o.persist.rewrite || kc.rewrite
		}
	}
	x.mu.Unlock()
	return err
}

// write makes the plan durable: the new chunks, then the head, whose cursor's mark-delete moves
// to what the previous durable head covers.
func (x *Index) write(ctx context.Context, head Cursor, p savePlan, covered mtypes.Position) error {
	st := x.store
	created := make([]Cursor, 0, len(p.chunks))
	for _, c := range p.chunks {
		cur, _, err := x.topic.OpenCursor(ctx, ChunkCursorName(c.ref.id), mtypes.Latest)
		if err != nil {
			return fmt.Errorf("replication: create index chunk of %s: %w", x.topic.Name(), err)
		}
		st.chunks[c.ref.id] = cur // known from now on: deleted once no durable head lists it
		if err := cur.SetProperties(ctx, c.props); err != nil {
			return err
		}
		created = append(created, cur)
	}
	for _, cur := range created {
		if err := cur.Flush(ctx); err != nil {
			return fmt.Errorf("replication: write index chunk of %s: %w", x.topic.Name(), err)
		}
	}
	if err := head.SetProperties(ctx, encodeHead(p.head)); err != nil {
		return err
	}
	marked := st.durableCovered
	if st.hasDurable && marked.EntryID >= 0 {
		if err := head.MarkDelete(ctx, marked); err != nil {
			return err
		}
	}
	if err := head.Flush(ctx); err != nil {
		return fmt.Errorf("replication: write index snapshot of %s: %w", x.topic.Name(), err)
	}
	st.marked = marked
	st.durableCovered, st.hasDurable = covered, true
	return nil
}

// catchUpMarkDelete moves the head cursor's mark-delete to what the durable head covers when no
// save followed the last one (the topic went idle), so the last interval is not held back.
func (x *Index) catchUpMarkDelete(ctx context.Context) error {
	if !x.markDeleteBehind() {
		return nil
	}
	st := x.store
	if err := st.cursor.MarkDelete(ctx, st.durableCovered); err != nil {
		return err
	}
	st.marked = st.durableCovered
	return nil
}

// markDeleteBehind reports whether the head cursor's mark-delete is behind what the durable head
// covers (catchUpMarkDelete has a move to make; saveMu held).
func (x *Index) markDeleteBehind() bool {
	st := x.store
	return st != nil && st.hasDurable && st.durableCovered.EntryID >= 0 && st.durableCovered.Compare(st.marked) > 0
}

// withTimeout is context.WithTimeout, or ctx itself for timeout 0.
func withTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

// removeUnlisted deletes the chunk cursors the durable head no longer lists (merged, wholly below
// the floor, of a forgotten key, or left by a failed save).
func (x *Index) removeUnlisted(ctx context.Context, listed map[uint64]bool) {
	st := x.store
	var errs []error
	for id := range st.chunks {
		if listed[id] {
			continue
		}
		if err := x.topic.DeleteCursor(ctx, ChunkCursorName(id)); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(st.chunks, id)
	}
	if len(errs) > 0 {
		x.opts.Logger.Warn("delete inbound replication index chunks (retried at the next save)", "topic", x.topic.Name(), "err", errors.Join(errs...))
	}
}

// rebaseChunks moves the mark-delete of chunk cursors left in an older ledger of the log to what
// the durable head covers: storage trims whole ledgers that every cursor has passed, and a chunk
// cursor holds no data the head cursor does not already protect. It costs one more write of the
// chunk per ledger the log rolls over.
func (x *Index) rebaseChunks(ctx context.Context, listed map[uint64]bool) {
	st := x.store
	for id := range listed {
		c := st.chunks[id]
		if c == nil || c.MarkDeletePosition().LedgerID >= st.durableCovered.LedgerID {
			continue
		}
		if err := c.MarkDelete(ctx, st.durableCovered); err != nil {
			x.opts.Logger.Warn("move inbound replication index chunk cursor", "topic", x.topic.Name(), "chunk", id, "err", err)
		}
	}
}
