package storage

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// TestEntryCacheModel drives the cache with random puts (in entry order per ledger id, with
// gaps), gets and drops, against a model of a FIFO-bounded map.
func TestEntryCacheModel(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		limit := int64(2000 + rng.IntN(4000))
		c := newEntryCache(limit)
		type slot struct {
			p    mtypes.Position
			size int64
		}
		model := map[mtypes.Position][]byte{}
		var fifo []slot
		var bytes int64
		sizeOf := func(d []byte) int64 { return int64(len(d)) + cacheEntryOverhead }
		next := map[int64]int64{}
		dropped := map[int64]bool{}
		forget := func(id int64) {
			for k := range model {
				if k.LedgerID == id {
					delete(model, k)
				}
			}
		}
		for step := 0; step < 3000; step++ {
			id := int64(rng.IntN(4))
			switch op := rng.IntN(10); {
			case op < 6 && !dropped[id]:
				e := next[id]
				gap := rng.IntN(10) == 0 // occasionally an entry id is not cached
				if gap {
					e++
				}
				next[id] = e + 1
				data := []byte(fmt.Sprintf("%d:%d:%s", id, e, make([]byte, rng.IntN(300))))
				c.put(mtypes.Position{LedgerID: id, EntryID: e}, e, data)
				if gap {
					forget(id) // a put that does not continue its run starts a new one
				}
				model[mtypes.Position{LedgerID: id, EntryID: e}] = data
				fifo = append(fifo, slot{mtypes.Position{LedgerID: id, EntryID: e}, sizeOf(data)})
				bytes += sizeOf(data)
				for bytes > limit && len(fifo) > 0 {
					k := fifo[0]
					fifo = fifo[1:]
					bytes -= k.size
					delete(model, k.p)
				}
			case op < 9:
				if next[id] == 0 {
					continue
				}
				p := mtypes.Position{LedgerID: id, EntryID: rng.Int64N(next[id])}
				got, ok := c.get(p)
				want, wok := model[p]
				if ok != wok || (ok && string(got.data) != string(want)) {
					t.Fatalf("seed %d step %d: get %v = %q %v, want %q %v", seed, step, p, got.data, ok, want, wok)
				}
			default:
				c.dropLedger(id, next[id])
				dropped[id] = true
				forget(id)
			}
		}
	}
}

// TestRingFIFO: pushes and pops in any interleaving (growing while wrapped around) keep FIFO
// order and indexing.
func TestRingFIFO(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var q ring[int]
	var model []int
	next := 0
	for step := 0; step < 40000; step++ {
		// Mostly pushes for the first half, mostly pops for the second: the ring grows and shrinks.
		push := rng.IntN(3) > 0
		if step >= 20000 {
			push = rng.IntN(3) == 0
		}
		if push || len(model) == 0 {
			q.push(next)
			model = append(model, next)
			next++
		} else {
			if got := q.pop(); got != model[0] {
				t.Fatalf("step %d: pop %d, want %d", step, got, model[0])
			}
			model = model[1:]
		}
		if q.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, q.len(), len(model))
		}
		if len(q.buf) > ringMinSize && q.n < len(q.buf)/4 {
			t.Fatalf("step %d: %d elements in a buffer of %d", step, q.n, len(q.buf))
		}
		if len(model) > 0 {
			i := rng.IntN(len(model))
			if got := q.at(i); got != model[i] {
				t.Fatalf("step %d: at(%d) = %d, want %d", step, i, got, model[i])
			}
		}
	}
}

// BenchmarkEntryCachePut: what the applier pays per 1 KiB entry it makes visible, with the cache
// full (every put evicts): one ledger id's run, as in a catch-up.
func BenchmarkEntryCachePut(b *testing.B) {
	c := newEntryCache(64 << 20)
	data := make([]byte, 1024)
	id := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		c.put(mtypes.Position{LedgerID: 7, EntryID: id}, id, data)
		id++
	}
}
