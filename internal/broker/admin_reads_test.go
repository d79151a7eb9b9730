package broker

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage"
)

// newUncachedEnv is newEnv on a storage engine on real files (not in the heap) without an entry
// cache, so that what a read keeps alive is what the broker keeps.
func newUncachedEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	e := &env{t: t, cfg: cfg}
	eng, err := storage.Open(context.Background(), storage.Options{Dir: t.TempDir(), Logger: testLogger(), CacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, Deps{Storage: eng, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	e.engine, e.b = eng, b
	t.Cleanup(e.close)
	return e
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestPeekKeepsOnlyTheEntryItReturns: peeking the n-th message of a backlog of large entries
// walks the backlog in bounded reads and keeps the one entry it answers with. It collected every
// entry up to n (up to 1000 entries of 5 MiB: 5 GB for one admin request).
func TestPeekKeepsOnlyTheEntryItReturns(t *testing.T) {
	e := newUncachedEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("peek")
	if err := top.CreateSubscription(t.Context(), "s", mtypes.Earliest, false); err != nil {
		t.Fatal(err)
	}
	p := addProducer(t, top, ProducerOptions{})
	const n, size = 48, 1 << 20
	body := strings.Repeat("x", size)
	for i := range n {
		if r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, body), SequenceID: int64(i)}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	before := liveHeap()
	got, found, err := peekNth(top, "s", n)
	if err != nil || !found {
		t.Fatalf("peek %d: found=%v err=%v", n, found, err)
	}
	held := int64(liveHeap()) - int64(before)
	if got.Position.EntryID != n-1 || len(got.Data) < size {
		t.Fatalf("peek %d answered %v (%d bytes)", n, got.Position, len(got.Data))
	}
	// One 1 MiB entry (and a read buffer), never the 48 MiB of the entries walked over.
	t.Logf("held %d KiB", held>>10)
	if held > 8<<20 {
		t.Fatalf("peek holds %d MiB after answering", held>>20)
	}
	runtime.KeepAlive(got)
	if _, found, err := peekNth(top, "s", n+1); err != nil || found {
		t.Fatalf("peek past the backlog: found=%v err=%v", found, err)
	}
}

// TestSkipAcrossReadChunks: admin skip acknowledges exactly the next n unacknowledged entries,
// a bounded chunk at a time, stepping over entries acknowledged already.
func TestSkipAcrossReadChunks(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("skip")
	if err := top.CreateSubscription(t.Context(), "s", mtypes.Earliest, false); err != nil {
		t.Fatal(err)
	}
	p := addProducer(t, top, ProducerOptions{})
	var ps []mtypes.Position
	for i := range 3*adminReadEntries + 10 {
		r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "x"), SequenceID: int64(i)})
		ps = append(ps, r.Position)
	}
	c, _ := subscribe(t, top, SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true})
	if err := c.Ack(t.Context(), []Ack{{Position: ps[5]}, {Position: ps[100]}}, false); err != nil {
		t.Fatal(err)
	}
	c.Close()
	const n = 2*adminReadEntries + 7
	if err := top.Skip(t.Context(), "s", n); err != nil {
		t.Fatal(err)
	}
	// n entries skipped, stepping over the two acknowledged: the next is the (n+2)-th stored one.
	got, found, err := top.PeekEntry(t.Context(), "s", 1)
	if err != nil || !found || got.Position != ps[n+2] {
		t.Fatalf("after skipping %d: first unacknowledged %v (found %v, %v), want %v", n, got.Position, found, err, ps[n+2])
	}
	if err := top.Skip(t.Context(), "s", 1<<40); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := top.PeekEntry(t.Context(), "s", 1); found {
		t.Fatal("backlog left after skipping everything")
	}
}
