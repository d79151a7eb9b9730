package replication

import (
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// OriginKey names a source of replicated entries: a cluster and the storage incarnation of the
// source entry's ledger there (see the package doc of the index). Incarnation 0 is an entry that
// carries none: from a Pulsar cluster, or from a ledger written before incarnations existed.
type OriginKey struct {
	Cluster     string
	Incarnation uint64
}

// originState is what the index holds for one origin key (guarded by Index.mu).
type originState struct {
	key     OriginKey
	cluster *clusterState
	runs    runList
	floor   mtypes.Position // origin positions <= floor are stored but no longer mapped
	// npending counts this key's admitted entries whose append is in progress; pendingMax is the
	// highest of their positions (meaningful while npending > 0). An entry above pendingMax cannot
	// be pending, which spares the scan of the admissions in the usual, ascending case.
	npending   int
	pendingMax mtypes.Position
	// lastUse orders the keys of a cluster by the last entry they recorded (cluster.clock; 0: none
	// yet): the key used least recently gives up its runs first, and is forgotten first when a
	// cluster has more than maxKeysPerCluster keys. The key with the cluster's clock is its newest:
	// the incarnation its source writes now. Duplicates (resends of older incarnations) do not
	// count as use.
	lastUse uint64
	// pins: the lowest origin position each holder still needs mapped (nil: none).
	pins map[string]mtypes.Position

	persist keyPersist // what the durable snapshot holds of this key (index_store.go)
}

// clusterState aggregates the keys (incarnations) of one origin cluster: stats are per cluster,
// and so is the order of its entries (one replicator sends them, whatever their incarnation).
type clusterState struct {
	name string
	keys map[uint64]*originState
	// nruns is the number of runs of all keys; the memory bounds apply to it.
	nruns int
	// foldBlockedAt, when > 0, is nruns when folding last found nothing it may forget (every old
	// run pinned): folding is not tried again before another block's worth of runs arrived or a pin
	// is released, so a pinned cluster costs no scan per entry.
	foldBlockedAt int
	clock         uint64 // last lastUse handed out
	// failed is set when the append of an entry from this cluster failed: later entries are
	// refused until the replicator resends that one, so the cluster's order is kept (see admit).
	failed *failedAppend

	msgIn, bytesIn, dups int64
	pinnedDropped        int64 // runs forgotten although pinned (the hard memory bound)
	window               rateWindow
}

// failedAppend is the entry whose append failed, and when.
type failedAppend struct {
	key *originState
	pos mtypes.Position
	at  time.Time
}

// failedAppendHold bounds how long entries of other incarnations are refused after an append
// failure: a source that lost the failed entry (restored from an older copy, rebuilt) never sends
// it again.
const failedAppendHold = time.Minute

// maxKeysPerCluster bounds the incarnations the index keeps per origin cluster; the least recently
// used key beyond it is forgotten (logged): a resend of its entries would be stored again. A source
// gets a new incarnation per start of its broker, and resends only entries its replication cursor
// had not yet seen acknowledged, so this many starts cover any realistic backlog.
const maxKeysPerCluster = 256

// cluster returns the state of cluster name (allocating the name only for a new cluster).
func (x *Index) cluster(name []byte) *clusterState {
	if c := x.clusters[string(name)]; c != nil {
		return c
	}
	if x.clusters == nil {
		x.clusters = map[string]*clusterState{}
	}
	c := &clusterState{name: string(name), keys: map[uint64]*originState{}}
	// A zero sample at creation: traffic of the cluster's first second shows as a rate at the
	// first tick instead of being absorbed into the window's first sample.
	c.window.add(x.opts.Now(), 0, 0)
	x.clusters[c.name] = c
	return c
}

// originOf returns the state of key (cluster, incarnation), creating it.
func (x *Index) originOf(cluster []byte, incarnation uint64) *originState {
	c := x.cluster(cluster)
	if o := c.keys[incarnation]; o != nil {
		return o
	}
	if len(c.keys) >= maxKeysPerCluster {
		x.forgetOldestKey(c)
	}
	o := &originState{key: OriginKey{c.name, incarnation}, cluster: c, floor: mtypes.Position{LedgerID: -1, EntryID: -1}}
	c.keys[incarnation] = o
	return o
}

// existing returns the state of key, or nil.
func (x *Index) existing(key OriginKey) *originState {
	if c := x.clusters[key.Cluster]; c != nil {
		return c.keys[key.Incarnation]
	}
	return nil
}

// touch marks o as just used.
func (o *originState) touch() {
	if o.lastUse == 0 || o.lastUse != o.cluster.clock {
		o.cluster.clock++
		o.lastUse = o.cluster.clock
	}
}

// forgetOldestKey drops the least recently used key of c that has nothing in flight and no pins.
func (x *Index) forgetOldestKey(c *clusterState) {
	var victim *originState
	for _, o := range c.keys {
		if o.npending > 0 || len(o.pins) > 0 || (c.failed != nil && c.failed.key == o) {
			continue
		}
		if victim == nil || o.lastUse < victim.lastUse {
			victim = o
		}
	}
	if victim == nil {
		return
	}
	x.opts.Logger.Warn("inbound replication index forgets an old incarnation of an origin cluster; a resend of its entries would be stored again",
		"topic", x.topicName(), "origin", c.name, "incarnation", victim.key.Incarnation, "keys", len(c.keys))
	c.nruns -= victim.runs.len()
	delete(c.keys, victim.key.Incarnation)
	if x.adm != nil && x.adm.last == victim {
		x.adm.last = nil
	}
	x.dirty = true
}

// record adds origin pos -> local for key o; x.mu is held. It runs for every replicated entry
// (from Commit, on the storage's completion path): O(1) amortised.
func (x *Index) record(o *originState, pos, local mtypes.Position) {
	x.dirty = true
	o.persist.changed = true
	o.touch()
	if local.Compare(x.lastLocal) > 0 {
		x.lastLocal = local
	}
	if last := o.runs.last(); last != nil {
		if last.originEnd().Next() == pos && last.localEnd().Next() == local {
			last.count++
			return
		}
		if pos.Compare(last.originEnd()) <= 0 {
			// Out of order (rare: a source that was recreated with lower ids); keep the runs sorted.
			o.runs.insert(run{origin: pos, local: local, count: 1})
			o.persist.noteInsert()
			o.cluster.nruns++
			x.fold(o.cluster)
			return
		}
	}
	o.runs.append(run{origin: pos, local: local, count: 1})
	o.cluster.nruns++
	if o.cluster.nruns > x.opts.MaxRuns+runBlockSize {
		x.fold(o.cluster)
	}
}

// fold keeps cluster c's runs within the memory bounds: while it holds more than MaxRuns plus a
// block, the oldest block of its least recently used key is folded into that key's floor (dedup
// stays exact: everything at or below the floor counts as stored; only Lookup of those positions
// answers "unknown"). Pinned runs are kept up to MaxPinnedRuns, the hard bound. Whole blocks go at
// once, so this costs O(1) amortised per recorded run.
func (x *Index) fold(c *clusterState) {
	if c.foldBlockedAt > 0 && c.nruns < c.foldBlockedAt+runBlockSize && c.nruns <= x.opts.MaxPinnedRuns {
		return
	}
	c.foldBlockedAt = 0
	for c.nruns > x.opts.MaxRuns+runBlockSize {
		hard := c.nruns > x.opts.MaxPinnedRuns
		victim := c.foldVictim(false)
		if victim == nil && hard {
			victim = c.foldVictim(true)
		}
		if victim == nil {
			c.foldBlockedAt = c.nruns
			return
		}
		n, end := victim.runs.firstBlock()
		if !victim.canFold(false) {
			c.pinnedDropped += int64(n)
			x.opts.Logger.Warn("inbound replication index drops pinned mappings (memory bound)", "topic", x.topicName(),
				"origin", c.name, "incarnation", victim.key.Incarnation, "runs", n, "upTo", end.String())
		}
		victim.floor = maxPos(victim.floor, end)
		victim.runs.dropFirstBlock()
		victim.persist.changed = true
		c.nruns -= n
		x.dirty = true
	}
}

// foldVictim returns the least recently used key whose oldest block may be folded (hard: pins
// overruled), or nil.
func (c *clusterState) foldVictim(hard bool) *originState {
	var victim *originState
	for _, o := range c.keys {
		if o.canFold(hard) && (victim == nil || o.lastUse < victim.lastUse) {
			victim = o
		}
	}
	return victim
}

// canFold reports whether o's oldest block may be folded into its floor: it has one, it is not the
// block the key appends to (unless the key is not its cluster's newest), and no pin needs it (hard:
// pins are overruled).
func (o *originState) canFold(hard bool) bool {
	if o.runs.len() == 0 || (len(o.runs.blocks) == 1 && o.lastUse == o.cluster.clock) {
		return false
	}
	if hard {
		return true
	}
	_, end := o.runs.firstBlock()
	for _, p := range o.pins {
		if p.Compare(end) <= 0 {
			return false
		}
	}
	return true
}

// Pin keeps the mappings of origin key from position from onwards (Lookup answers them) until
// Unpin, beyond MaxRuns and up to MaxPinnedRuns runs per origin cluster. holder names the pin's
// owner (for example a replicated subscription); a holder has one pin per key, a later Pin moves
// it. Pins live in memory: a holder pins again after the topic loads.
func (x *Index) Pin(holder string, key OriginKey, from mtypes.Position) {
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.originOf([]byte(key.Cluster), key.Incarnation)
	if o.pins == nil {
		o.pins = map[string]mtypes.Position{}
	}
	if prev, ok := o.pins[holder]; ok && prev.Compare(from) < 0 {
		o.cluster.foldBlockedAt = 0 // the pin moved forward: older runs may go now
	}
	o.pins[holder] = from
}

// Unpin releases holder's pin of key.
func (x *Index) Unpin(holder string, key OriginKey) {
	x.mu.Lock()
	defer x.mu.Unlock()
	o := x.existing(key)
	if o == nil {
		return
	}
	delete(o.pins, holder)
	if len(o.pins) == 0 {
		o.pins = nil
	}
	o.cluster.foldBlockedAt = 0
	x.fold(o.cluster)
}
