package storage

import (
	"sync"
	"sync/atomic"

	"github.com/meridian-mq/meridian/internal/mtypes"
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
	queue ring[cacheKey]      // FIFO of what was inserted
	bytes int64

	hits, misses atomic.Int64
}

// cacheRun is one ledger id's cached entries, first..first+len-1. A ring: entries are appended at
// one end and evicted from the other, so neither moves the others. (With a slice popped from
// the front, every append past its capacity copied the whole run, write barriers included:
// ~60 ns per 1 KiB entry of a catch-up, half of what a put cost.)
type cacheRun struct {
	first   int64 // entry id of the oldest entry held
	entries ring[cachedEntry]
}

type cachedEntry struct {
	publishTime int64
	data        []byte
}

type cacheKey struct {
	p    mtypes.Position
	size int64
}

// cacheEntryOverhead approximates the bookkeeping bytes charged per cached entry.
const cacheEntryOverhead = 64

func newEntryCache(limit int64) *entryCache {
	return &entryCache{limit: limit, runs: map[int64]*cacheRun{}}
}

func (c *entryCache) put(p mtypes.Position, publishTime int64, data []byte) {
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
	case r == nil || p.EntryID != r.first+int64(r.entries.len()):
		if r != nil && p.EntryID >= r.first && p.EntryID < r.first+int64(r.entries.len()) {
			c.mu.Unlock()
			return // already cached
		}
		r = &cacheRun{first: p.EntryID}
		c.runs[p.LedgerID] = r
	}
	r.entries.push(cachedEntry{publishTime, data})
	c.queue.push(cacheKey{p, size})
	c.bytes += size
	for c.bytes > c.limit && c.queue.len() > 0 {
		k := c.queue.pop()
		c.bytes -= k.size
		if r := c.runs[k.p.LedgerID]; r != nil && r.entries.len() > 0 && r.first == k.p.EntryID {
			r.entries.pop()
			r.first++
			if r.entries.len() == 0 {
				delete(c.runs, k.p.LedgerID)
			}
		}
	}
	c.mu.Unlock()
}

func (c *entryCache) get(p mtypes.Position) (cachedEntry, bool) {
	if c.limit <= 0 {
		c.misses.Add(1)
		return cachedEntry{}, false
	}
	var e cachedEntry
	ok := false
	c.mu.Lock()
	if r := c.runs[p.LedgerID]; r != nil && p.EntryID >= r.first && p.EntryID < r.first+int64(r.entries.len()) {
		e, ok = r.entries.at(int(p.EntryID-r.first)), true
	}
	c.mu.Unlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return e, ok
}

// ring is a FIFO queue in a power-of-two buffer that doubles when full and halves when a quarter
// full (so a run that once held many entries does not keep their slots).
type ring[T any] struct {
	buf  []T
	head int // index of the oldest element
	n    int
}

// ringMinSize is the smallest buffer a ring allocates or shrinks to.
const ringMinSize = 16

func (q *ring[T]) len() int { return q.n }

func (q *ring[T]) push(v T) {
	if q.n == len(q.buf) {
		q.resize(max(2*len(q.buf), ringMinSize))
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
}

// pop removes and returns the oldest element (the queue must not be empty).
func (q *ring[T]) pop() T {
	var zero T
	v := q.buf[q.head]
	q.buf[q.head] = zero // release what it references
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	if q.n < len(q.buf)/4 && len(q.buf) > ringMinSize {
		q.resize(len(q.buf) / 2)
	}
	return v
}

// resize moves the elements, oldest first, into a new buffer of size (a power of two >= n).
func (q *ring[T]) resize(size int) {
	buf := make([]T, size)
	if q.n > 0 {
		if end := q.head + q.n; end <= len(q.buf) {
			copy(buf, q.buf[q.head:end])
		} else {
			k := copy(buf, q.buf[q.head:])
			copy(buf[k:], q.buf[:end-len(q.buf)])
		}
	}
	q.buf, q.head = buf, 0
}

// at returns the i-th oldest element (0 <= i < len).
func (q *ring[T]) at(i int) T { return q.buf[(q.head+i)&(len(q.buf)-1)] }

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
