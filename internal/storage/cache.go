package storage

import (
	"sync"
	"sync/atomic"
)

// entryCache is the broker-wide, byte-bounded cache of recently appended entries, keyed by
// position (ledger ids are unique across the engine). Eviction is FIFO by insertion: the tail of
// every ledger is what caught-up consumers and replicators read, and the tail is what was
// inserted last. Entries of a removed ledger id are dropped lazily as they reach the front.
type entryCache struct {
	limit int64

	mu    sync.Mutex
	m     map[Position]cachedEntry
	queue []cacheKey // FIFO ring
	head  int
	bytes int64

	hits, misses atomic.Int64
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
	return &entryCache{limit: limit, m: map[Position]cachedEntry{}}
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
	if _, ok := c.m[p]; !ok {
		c.m[p] = cachedEntry{publishTime, data}
		c.queue = append(c.queue, cacheKey{p, size})
		c.bytes += size
		for c.bytes > c.limit && c.head < len(c.queue) {
			k := c.queue[c.head]
			c.queue[c.head] = cacheKey{}
			c.head++
			if _, ok := c.m[k.p]; ok {
				delete(c.m, k.p)
			}
			c.bytes -= k.size
		}
		if c.head > 1024 && c.head > len(c.queue)/2 {
			n := copy(c.queue, c.queue[c.head:])
			clear(c.queue[n:])
			c.queue = c.queue[:n]
			c.head = 0
		}
	}
	c.mu.Unlock()
}

func (c *entryCache) get(p Position) (cachedEntry, bool) {
	if c.limit <= 0 {
		c.misses.Add(1)
		return cachedEntry{}, false
	}
	c.mu.Lock()
	e, ok := c.m[p]
	c.mu.Unlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return e, ok
}

// dropLedger forgets the entries of one ledger id (their bytes are released as they reach the front).
func (c *entryCache) dropLedger(ledgerID, entries int64) {
	if c.limit <= 0 {
		return
	}
	c.mu.Lock()
	for e := int64(0); e < entries; e++ {
		delete(c.m, Position{ledgerID, e})
	}
	c.mu.Unlock()
}

func (c *entryCache) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
