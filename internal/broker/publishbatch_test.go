package broker

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
)

// PublishBatch gives each request the result Publish would: in order, a duplicate or refused
// request in the middle of a group answered on its own while the rest of the group is stored,
// the limiter charged and released for every request, and every stored entry stored once, in
// order.
func TestPublishBatchMatchesPublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, Config{AutoTopicCreation: true, DedupDefault: true})
		top := e.topic("groups")
		lim := NewMemoryLimiter(1<<30, 1<<20, e.b.PublishLimiter())
		p := addProducer(t, top, ProducerOptions{Name: "groups", Limiter: lim})
		const n = 2000
		type got struct {
			i   int
			res PublishResult
		}
		results := make(chan got, n)
		wantDup := func(i int) bool { return i%11 == 7 }  // resends seq 0 (stored): a duplicate
		wantBad := func(i int) bool { return i%89 == 40 } // highest below lowest: refused at once
		var reqs []PublishRequest
		var mu sync.Mutex
		var idx []int // request index of each result to come, in request order
		next := 0
		done := func(r PublishResult) {
			mu.Lock()
			i := idx[0]
			idx = idx[1:]
			mu.Unlock()
			results <- got{i, r}
		}
		stored := 0
		sizes := []int{1, 2, 3, 17, 300, 64, 5} // 300: past maxPublishGroup
		for k := 0; next < n; k++ {
			size := sizes[k%len(sizes)]
			reqs = reqs[:0]
			for range size {
				if next == n {
					break
				}
				i := next
				next++
				req := PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, fmt.Sprint(i)), SequenceID: int64(i)}
				switch {
				case wantBad(i):
					req.HighestSequenceID = 1
					req.SequenceID = int64(i) + 1_000_000
				case wantDup(i):
					req.SequenceID = 0
				default:
					stored++
				}
				reqs = append(reqs, req)
				mu.Lock()
				idx = append(idx, i)
				mu.Unlock()
			}
			p.PublishBatch(reqs, done)
			if k == 0 { // the first group: seq 0 is stored before anything resends it
				poll.Until(t, 10*time.Second, "first group", func() bool { return len(results) == size })
			}
		}
		for i := 0; i < n; i++ {
			var g got
			select {
			case g = <-results:
			case <-time.After(waitTimeout):
				t.Fatalf("result %d missing", i)
			}
			if g.i != i {
				t.Fatalf("result of request %d arrived as the %d-th", g.i, i)
			}
			switch {
			case wantBad(i):
				if !errors.Is(g.res.Err, ErrInvalidRequest) || g.res.SequenceID != int64(i)+1_000_000 {
					t.Fatalf("%d: %+v", i, g.res)
				}
			case wantDup(i):
				if g.res.Err != nil || !g.res.Duplicate || g.res.SequenceID != 0 {
					t.Fatalf("%d: %+v", i, g.res)
				}
			default:
				if g.res.Err != nil || g.res.Duplicate || g.res.SequenceID != int64(i) || g.res.Position.EntryID < 0 {
					t.Fatalf("%d: %+v", i, g.res)
				}
			}
		}
		if b, c := lim.InUse(); b != 0 || c != 0 {
			t.Fatalf("limiter in use %d/%d", b, c)
		}
		c, s := subscribe(t, top, SubscribeOptions{Subscription: "check", Type: mtypes.SubExclusive, Durable: true, InitialPosition: mtypes.InitialEarliest})
		c.Flow(n)
		msgs := s.waitMessages(t, stored)
		s.quiet(t, stored)
		prev := -1
		for _, m := range msgs {
			var i int
			if _, err := fmt.Sscan(payloadOf(t, m), &i); err != nil || i <= prev || wantDup(i) || wantBad(i) {
				t.Fatalf("stored %q after %d", payloadOf(t, m), prev)
			}
			prev = i
		}
		c.Close()
	})
}

// A group for a closed producer is refused request by request, in order.
func TestPublishBatchClosedProducer(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("closedgroup")
	p := addProducer(t, top, ProducerOptions{Name: "c"})
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	var reqs []PublishRequest
	for i := range 5 {
		reqs = append(reqs, PublishRequest{Entry: entry(t, "c", uint64(i), 1, "x"), SequenceID: int64(i)})
	}
	var seqs []int64
	p.PublishBatch(reqs, func(r PublishResult) {
		if !errors.Is(r.Err, ErrProducerClosed) {
			t.Errorf("seq %d: %v", r.SequenceID, r.Err)
		}
		seqs = append(seqs, r.SequenceID)
	})
	if fmt.Sprint(seqs) != "[0 1 2 3 4]" {
		t.Fatalf("results %v", seqs)
	}
}

// PublishBatchCharged takes requests the caller charged already: it does not charge them again,
// and releases them as they complete (the limiter ends at zero).
func TestPublishBatchChargedReleasesWhatTheCallerCharged(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("charged")
	lim := NewMemoryLimiter(1<<20, 1000, e.b.PublishLimiter())
	p := addProducer(t, top, ProducerOptions{Limiter: lim})
	for _, size := range []int{1, 7, 300} {
		var reqs []PublishRequest
		for i := range size {
			req := PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "x"), SequenceID: int64(i)}
			lim.Acquire(int64(len(req.Entry)))
			reqs = append(reqs, req)
		}
		if _, n := lim.InUse(); n != int64(size) {
			t.Fatalf("%d charged, limiter counts %d", size, n)
		}
		done := make(chan PublishResult, size)
		p.PublishBatchCharged(reqs, func(r PublishResult) { done <- r })
		for range size {
			if r := <-done; r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		poll.Until(t, 10*time.Second, "limiter released", func() bool { b, n := lim.InUse(); return b == 0 && n == 0 })
	}
}
