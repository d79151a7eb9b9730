package storage

import (
	"sync"
	"sync/atomic"
)

// entryCache is the broker-wide, byte-bounded cache of recently appended entries, keyed by
// position (ledger ids are unique across the engine). Eviction is FIFO by insertion: the tail of
// every ledger is what caught-up consumers and replicators read, and the tail is what was
// inserted last.
//
// Entries of one ledger id are appended in entry order, so they are kept as a run (a slice
// indexed by entry id - first) per ledger id rather than one map slot per entry: a put is an
// append, a get an index, and the FIFO evicts from the front of the oldest run. A put that does
// not continue its run (an entry was too large to cache) starts a new run. Entries of a removed
// ledger id are dropped at once; their queue slots are skipped as they reach the front.
type entryCache struct {
	limit int64

	mu    sync.Mutex
	runs  map[int64]*cacheRun // by ledger id
	queue []cacheKey          // FIFO ring of what was inserted
	head  int
	bytes int64

	hits, misses atomic.Int64
}

type cacheRun struct {
	first   int64 // entry id of entries[0]
	entries []cachedEntry
}

type cachedEntry struct {
	publishTime int64
	data        []byte
}

type cacheKey struct {
	p    Position
	size int64
}

// cacheEntryOverhead approximates the bookkeeping bytes charged per cached entry.
const cacheEntryOverhead = 64

func newEntryCache(limit int64) *entryCache {
	return &entryCache{limit: limit, runs: map[int64]*cacheRun{}}
}

func (c *entryCache) put(p Position, publishTime int64, data []byte) {
	if c.limit <= 0 {
		return
	}
	size := int64(len(data)) + cacheEntryOverhead
	if size > c.limit/4 {
		return
	}
	c.mu.Lock()
	r := c.runs[p.LedgerID]
	switch {
	case r == nil || p.EntryID != r.first+int64(len(r.entries)):
		if r != nil && p.EntryID >= r.first && p.EntryID < r.first+int64(len(r.entries)) {
			c.mu.Unlock()
			return // already cached
		}
		r = &cacheRun{first: p.EntryID}
		c.runs[p.LedgerID] = r
	}
	r.entries = append(r.entries, cachedEntry{publishTime, data})
	c.queue = append(c.queue, cacheKey{p, size})
	c.bytes += size
	for c.bytes > c.limit && c.head < len(c.queue) {
		k := c.queue[c.head]
		c.queue[c.head] = cacheKey{}
		c.head++
		c.bytes -= k.size
		if r := c.runs[k.p.LedgerID]; r != nil && len(r.entries) > 0 && r.first == k.p.EntryID {
			r.entries[0] = cachedEntry{}
			r.entries = r.entries[1:]
			r.first++
			if len(r.entries) == 0 {
				delete(c.runs, k.p.LedgerID)
			}
		}
	}
	if c.head > 1024 && c.head > len(c.queue)/2 {
		n := copy(c.queue, c.queue[c.head:])
		clear(c.queue[n:])
		c.queue = c.queue[:n]
		c.head = 0
	}
	c.mu.Unlock()
}

func (c *entryCache) get(p Position) (cachedEntry, bool) {
	if c.limit <= 0 {
		c.misses.Add(1)
		return cachedEntry{}, false
	}
	var e cachedEntry
	ok := false
	c.mu.Lock()
	if r := c.runs[p.LedgerID]; r != nil && p.EntryID >= r.first && p.EntryID < r.first+int64(len(r.entries)) {
		e, ok = r.entries[p.EntryID-r.first], true
	}
	c.mu.Unlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return e, ok
}

// dropLedger forgets the entries of one ledger id (their bytes are released as their queue slots
// reach the front).
func (c *entryCache) dropLedger(ledgerID, entries int64) {
	if c.limit <= 0 {
		return
	}
	c.mu.Lock()
	delete(c.runs, ledgerID)
	c.mu.Unlock()
}

func (c *entryCache) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
