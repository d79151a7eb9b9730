package storage

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestEntryCacheModel drives the cache with random puts (in entry order per ledger id, with
// gaps), gets and drops, against a model of a FIFO-bounded map.
func TestEntryCacheModel(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		limit := int64(2000 + rng.IntN(4000))
		c := newEntryCache(limit)
		type slot struct {
			p    Position
			size int64
		}
		model := map[Position][]byte{}
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
				c.put(Position{id, e}, e, data)
				if gap {
					forget(id) // a put that does not continue its run starts a new one
				}
				model[Position{id, e}] = data
				fifo = append(fifo, slot{Position{id, e}, sizeOf(data)})
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
				p := Position{id, rng.Int64N(next[id])}
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
