package storage

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// TestBatchDemandTrim: a batch keeps buffers up to four times the recent demand (and batchKeep),
// drops larger ones, and never drops a buffer that holds data.
func TestBatchDemandTrim(t *testing.T) {
	big := 8 * batchKeep
	d := batchDemand{}
	d.note(&batch{buf: make([]byte, big/4)})
	b := &batch{buf: make([]byte, 0, big), jbuf: make([]byte, 0, big)}
	d.trim(b)
	if cap(b.buf) != big || cap(b.jbuf) != big {
		t.Fatalf("within 4x of the demand: caps %d, %d, want %d kept", cap(b.buf), cap(b.jbuf), big)
	}
	// Two windows later the demand is gone.
	d.prevBuf, d.prevItems, d.buf, d.items = d.buf, d.items, 0, 0
	d.prevBuf, d.prevItems, d.buf, d.items = d.buf, d.items, 0, 0
	held := &batch{buf: make([]byte, 10, big), items: make([]item, 1, 1<<16)}
	d.trim(b)
	d.trim(held)
	if b.buf != nil || b.jbuf != nil {
		t.Fatalf("no demand: caps %d, %d, want dropped", cap(b.buf), cap(b.jbuf))
	}
	if cap(held.buf) != big || cap(held.items) != 1<<16 {
		t.Fatal("a batch holding data lost its buffer")
	}
	small := &batch{buf: make([]byte, 0, batchKeep)}
	d.trim(small)
	if cap(small.buf) != batchKeep {
		t.Fatal("a buffer within batchKeep was dropped")
	}
}

// TestFreeBatchesAreAStack: the sync loop reuses the batch freed last.
func TestFreeBatchesAreAStack(t *testing.T) {
	e := &Engine{}
	e.queue.cond = sync.NewCond(&e.queue.mu)
	b1, b2 := &batch{}, &batch{}
	e.queue.freeBatches = []*batch{b1, b2}
	e.queue.mu.Lock()
	defer e.queue.mu.Unlock()
	if got := e.takeFreeBatch(); got != b2 {
		t.Fatal("took the batch freed first")
	}
	if got := e.takeFreeBatch(); got != b1 || len(e.queue.freeBatches) != 0 {
		t.Fatal("second take")
	}
}

// TestIdleBatchesReleased: after a burst of large group commits the engine's batches give their
// buffers back once the load is gone, and appends afterwards still read back intact (from the
// cache and from the files).
func TestIdleBatchesReleased(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			ctx := context.Background()
			e := openMem(t, vfs.NewMem(), func(o *Options) {
				o.CursorFlushInterval = time.Hour // releaseIdleBatches is called by the test, with its own clock
				if direct {
					directOpts(o)
				}
			})
			defer e.Close()
			l, err := e.OpenLedger(ctx, "public/default/persistent/idle")
			if err != nil {
				t.Fatal(err)
			}
			data := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 3*batchKeep/2+i) }
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for i := range 16 {
				wg.Add(1)
				l.AppendAsync(data(i), int64(i), func(_ mtypes.Position, err error) {
					if err != nil {
						errs <- err
					}
					wg.Done()
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			largest := func() int {
				e.queue.mu.Lock()
				defer e.queue.mu.Unlock()
				bs := append([]*batch{e.queue.pending, e.queue.spare}, e.queue.freeBatches...)
				n := 0
				for _, b := range bs {
					if b != nil {
						n = max(n, cap(b.buf), cap(b.jbuf))
					}
				}
				return n
			}
			if largest() <= batchKeep {
				t.Fatal("no batch buffer grew past batchKeep: the test does not test anything")
			}
			// Batches come back from the applier after the callbacks: poll.
			now := time.Now()
			poll.UntilNil(t, 10*time.Second, "the large batch buffers released after the load went away", func() error {
				// Two windows without demand.
				now = now.Add(batchDemandWindow)
				e.releaseIdleBatches(now)
				now = now.Add(batchDemandWindow)
				e.releaseIdleBatches(now)
				if n := largest(); n > batchKeep {
					return fmt.Errorf("largest batch buffer %d", n)
				}
				return nil
			})
			for i := 16; i < 24; i++ {
				if _, err := l.Append(ctx, data(i), int64(i)); err != nil {
					t.Fatal(err)
				}
			}
			es, err := l.Read(ctx, mtypes.Earliest, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != 24 {
				t.Fatalf("%d entries, want 24", len(es))
			}
			for i, en := range es {
				if !bytes.Equal(en.Data, data(i)) {
					t.Fatalf("entry %d differs", i)
				}
			}
		})
	}
}

// TestDirectBufferReusedNotCached: a group that the entry cache may not keep slices of (one entry
// is too large for it) is written from its batch's reused direct buffer; the cache holds copies of
// the small entries, so later batches overwriting that buffer never change what the cache serves.
func TestDirectBufferReusedNotCached(t *testing.T) {
	fs := vfs.NewMem()
	mod := func(o *Options) { directOpts(o); o.CacheBytes = 64 << 10 } // entries > 16 KiB are not cached
	e, a := openDirect(t, fs, mod, "direct/reuse-a")
	b, err := e.OpenLedger(context.Background(), "direct/reuse-b")
	if err != nil {
		t.Fatal(err)
	}
	// Each burst starts with an entry too large for the cache: its group is written from the
	// batch's direct buffer. (The cache's run of a ledger restarts after an entry it does not
	// keep, so only the small entries after the last large one are served from it.)
	na, nb := intoDirectMode(t, e, a), intoDirectMode(t, e, b)
	large := map[*Ledger]int{a: na, b: nb}
	data := func(l *Ledger, i int) []byte {
		if first := large[l]; i >= first && (i-first)%8 == 0 {
			return bytes.Repeat([]byte{byte(i)}, 20<<10)
		}
		p := directPayload(i)
		if l == b && i >= large[b] { // (intoDirectMode appended plain payloads before)
			p[0] = 'b' // as long as a's: b's groups fit (and overwrite) a's direct buffers
		}
		return p
	}
	burst8 := func(l *Ledger, first int) {
		t.Helper()
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := first; i < first+8; i++ {
			wg.Add(1)
			l.AppendAsync(data(l, i), int64(i), func(_ mtypes.Position, err error) {
				if err != nil {
					failed.Add(1)
				}
				wg.Done()
			})
		}
		wg.Wait()
		if failed.Load() != 0 {
			t.Fatal("appends failed")
		}
	}
	before := e.Metrics().DirectWrites
	for range 4 {
		burst8(a, na)
		na += 8
	}
	// a's last small entries are cached (copied from a direct buffer); b's bursts reuse the
	// batches and their direct buffers.
	for range 5 { // not more: a's entries must stay in the 64 KiB cache
		burst8(b, nb)
		nb += 8
	}
	if e.Metrics().DirectWrites-before < 6 {
		t.Fatalf("%d direct writes of groups with a large entry", e.Metrics().DirectWrites-before)
	}
	for _, c := range []struct {
		l *Ledger
		n int
	}{{a, na}, {b, nb}} {
		es, err := c.l.Read(context.Background(), mtypes.Earliest, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != c.n {
			t.Fatalf("%s: %d entries, want %d", c.l.name, len(es), c.n)
		}
		for i, en := range es {
			if !bytes.Equal(en.Data, data(c.l, i)) {
				t.Fatalf("%s: entry %d (%v) differs: %.12q", c.l.name, i, en.Position, en.Data)
			}
		}
		// The tail, from the cache.
		hits := e.cache.hits.Load()
		tail, err := c.l.Read(context.Background(), es[c.n-7].Position, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, en := range tail {
			if !bytes.Equal(en.Data, data(c.l, c.n-7+i)) {
				t.Fatalf("%s: cached entry %d (%v) differs: %.12q", c.l.name, c.n-7+i, en.Position, en.Data)
			}
		}
		if got := e.cache.hits.Load() - hits; got != 7 {
			t.Fatalf("%s: %d of the last 7 entries served from the cache, want 7", c.l.name, got)
		}
	}
}
