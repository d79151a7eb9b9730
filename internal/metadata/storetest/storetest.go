// Package storetest is the conformance suite every metadata.Store implementation must pass. Call Run
// from the implementation's tests with a constructor that returns a fresh, empty store (for etcd: a
// fresh key prefix on a shared server).
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/poll"
)

// waitTimeout bounds every wait for an event; generous because CI machines are slow and shared.
const waitTimeout = 20 * time.Second

// Run runs the conformance suite. newStore must return a new store with no keys; the suite closes it.
func Run(t *testing.T, newStore func(t *testing.T) metadata.Store) {
	open := func(t *testing.T) metadata.Store {
		t.Helper()
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	tests := []struct {
		name string
		fn   func(*testing.T, metadata.Store)
	}{
		{"GetPutDelete", testGetPutDelete},
		{"InvalidKeys", testInvalidKeys},
		{"CASCreate", testCASCreate},
		{"CASUpdateAndDelete", testCASUpdateAndDelete},
		{"List", testList},
		{"ValuesAreCopied", testValuesAreCopied},
		{"ConcurrentCASCounter", testConcurrentCASCounter},
		{"WatchBasic", testWatchBasic},
		{"WatchFromNow", testWatchFromNow},
		{"WatchFromRevision", testWatchFromRevision},
		{"WatchOrderUnderConcurrentWrites", testWatchOrderConcurrent},
		{"ListThenWatchNoGap", testListThenWatchNoGap},
		{"WatchStopsOnCancel", testWatchStopsOnCancel},
		{"ManyWatchersSlowReader", testManyWatchersSlowReader},
		{"SessionEphemeralKeys", testSessionEphemeral},
		{"SessionPlainPutDetaches", testSessionPlainPutDetaches},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t *testing.T, s metadata.Store, key, value string, expected int64) metadata.KV {
	t.Helper()
	kv, err := s.Put(ctxT(t), key, []byte(value), expected)
	if err != nil {
		t.Fatalf("Put(%q, %q, %d): %v", key, value, expected, err)
	}
	return kv
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

// next receives one event or fails after waitTimeout.
func next(t *testing.T, ch <-chan metadata.Event) metadata.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("watch channel closed unexpectedly")
		}
		if ev.Err != nil {
			t.Fatalf("watch failed: %v", ev.Err)
		}
		return ev
	case <-time.After(waitTimeout):
		t.Fatalf("no watch event within %v", waitTimeout)
	}
	return metadata.Event{}
}

// noEvent checks that nothing arrives until a marker write outside the checked keys shows up: a
// deterministic way to prove "no event" without sleeping.
func expectMarker(t *testing.T, s metadata.Store, ch <-chan metadata.Event, markerKey string) {
	t.Helper()
	kv := mustPut(t, s, markerKey, "marker", metadata.AnyVersion)
	ev := next(t, ch)
	if ev.KV.Key != markerKey || ev.Revision != kv.ModRevision {
		t.Fatalf("expected only the marker event %q@%d, got %s %q@%d", markerKey, kv.ModRevision, ev.Type, ev.KV.Key, ev.Revision)
	}
}

func testGetPutDelete(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	_, err := s.Get(ctx, "/a/b")
	wantErr(t, "Get missing", err, metadata.ErrNotFound)

	kv1 := mustPut(t, s, "/a/b", "one", metadata.AnyVersion)
	if kv1.Key != "/a/b" || string(kv1.Value) != "one" || kv1.Version != 1 || kv1.ModRevision < 1 {
		t.Fatalf("create returned %+v", kv1)
	}
	got, err := s.Get(ctx, "/a/b")
	if err != nil || got.Key != "/a/b" || string(got.Value) != "one" || got.Version != 1 || got.ModRevision != kv1.ModRevision {
		t.Fatalf("Get after create = %+v, %v; want %+v", got, err, kv1)
	}
	kv2 := mustPut(t, s, "/a/b", "two", metadata.AnyVersion)
	if kv2.Version != 2 || kv2.ModRevision <= kv1.ModRevision || string(kv2.Value) != "two" {
		t.Fatalf("update returned %+v after %+v", kv2, kv1)
	}
	// An empty value is a value.
	kv3 := mustPut(t, s, "/a/b", "", metadata.AnyVersion)
	if got, err := s.Get(ctx, "/a/b"); err != nil || len(got.Value) != 0 || got.Version != 3 || got.ModRevision != kv3.ModRevision {
		t.Fatalf("Get after empty put = %+v, %v", got, err)
	}
	if err := s.Delete(ctx, "/a/b", metadata.AnyVersion); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = s.Get(ctx, "/a/b")
	wantErr(t, "Get deleted", err, metadata.ErrNotFound)
	wantErr(t, "Delete missing", s.Delete(ctx, "/a/b", metadata.AnyVersion), metadata.ErrNotFound)
	kv4 := mustPut(t, s, "/a/b", "again", 0)
	if kv4.Version != 1 || kv4.ModRevision <= kv3.ModRevision {
		t.Fatalf("re-create returned %+v; want version 1 and a newer revision than %d", kv4, kv3.ModRevision)
	}
	// A parent and a child are independent keys.
	mustPut(t, s, "/a", "parent", 0)
	if got, err := s.Get(ctx, "/a"); err != nil || string(got.Value) != "parent" {
		t.Fatalf("Get parent = %+v, %v", got, err)
	}
	// Large values up to the documented limit are accepted; over it refused.
	big := bytes.Repeat([]byte{'x'}, metadata.MaxValueSize)
	if _, err := s.Put(ctx, "/big", big, metadata.AnyVersion); err != nil {
		t.Fatalf("Put of MaxValueSize bytes: %v", err)
	}
	if got, err := s.Get(ctx, "/big"); err != nil || !bytes.Equal(got.Value, big) {
		t.Fatalf("Get big: len %d, %v", len(got.Value), err)
	}
	if _, err := s.Put(ctx, "/big", append(big, 'y'), metadata.AnyVersion); err == nil {
		t.Fatalf("Put over MaxValueSize succeeded")
	}
}

func testInvalidKeys(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	for _, k := range []string{"", "/", "a/b", "/a/", "/a//b", "/a\x00b", "/a\nb"} {
		_, err := s.Put(ctx, k, []byte("v"), metadata.AnyVersion)
		wantErr(t, fmt.Sprintf("Put(%q)", k), err, metadata.ErrInvalidKey)
		_, err = s.Get(ctx, k)
		wantErr(t, fmt.Sprintf("Get(%q)", k), err, metadata.ErrInvalidKey)
		wantErr(t, fmt.Sprintf("Delete(%q)", k), s.Delete(ctx, k, metadata.AnyVersion), metadata.ErrInvalidKey)
	}
	if _, err := s.Put(ctx, "/ok", nil, -2); err == nil {
		t.Fatalf("Put with expected version -2 succeeded")
	}
}

func testCASCreate(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	mustPut(t, s, "/c", "first", 0)
	_, err := s.Put(ctx, "/c", []byte("second"), 0)
	wantErr(t, "second create", err, metadata.ErrBadVersion)
	if got, _ := s.Get(ctx, "/c"); string(got.Value) != "first" || got.Version != 1 {
		t.Fatalf("failed create changed the key: %+v", got)
	}
	_, err = s.Put(ctx, "/missing", []byte("x"), 3)
	wantErr(t, "update of a missing key", err, metadata.ErrBadVersion)
	if _, err := s.Get(ctx, "/missing"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("failed CAS created the key: %v", err)
	}

	// Racing creators: exactly one wins.
	const n = 8
	var wg sync.WaitGroup
	wins := make(chan int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Put(ctx, "/race", []byte(strconv.Itoa(i)), 0)
			switch {
			case err == nil:
				wins <- i
			case !errors.Is(err, metadata.ErrBadVersion):
				t.Errorf("racing create %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	close(wins)
	var winners []int
	for w := range wins {
		winners = append(winners, w)
	}
	if len(winners) != 1 {
		t.Fatalf("racing creates: %d winners %v, want exactly 1", len(winners), winners)
	}
	if got, _ := s.Get(ctx, "/race"); string(got.Value) != strconv.Itoa(winners[0]) {
		t.Fatalf("stored %q, winner was %d", got.Value, winners[0])
	}
}

func testCASUpdateAndDelete(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	kv := mustPut(t, s, "/u", "v1", 0)
	kv2 := mustPut(t, s, "/u", "v2", kv.Version)
	if kv2.Version != 2 {
		t.Fatalf("CAS update gave version %d", kv2.Version)
	}
	_, err := s.Put(ctx, "/u", []byte("stale"), kv.Version)
	wantErr(t, "stale update", err, metadata.ErrBadVersion)
	wantErr(t, "stale delete", s.Delete(ctx, "/u", kv.Version), metadata.ErrBadVersion)
	wantErr(t, "delete with version 0 of an existing key", s.Delete(ctx, "/u", 0), metadata.ErrBadVersion)
	if got, _ := s.Get(ctx, "/u"); string(got.Value) != "v2" {
		t.Fatalf("failed CAS changed the key: %+v", got)
	}
	if err := s.Delete(ctx, "/u", kv2.Version); err != nil {
		t.Fatalf("CAS delete: %v", err)
	}
	wantErr(t, "CAS delete of missing key", s.Delete(ctx, "/u", 1), metadata.ErrNotFound)
}

func testList(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	kvs, rev, err := s.List(ctx, "/l/")
	if err != nil || len(kvs) != 0 || rev < 1 {
		t.Fatalf("List empty = %v, %d, %v; want nothing at a revision >= 1", kvs, rev, err)
	}
	keys := []string{"/l/b", "/l/a", "/l/c/d", "/l/c", "/lx", "/m/a"}
	var last int64
	for _, k := range keys {
		last = mustPut(t, s, k, "v"+k, 0).ModRevision
	}
	kvs, rev, err = s.List(ctx, "/l/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/l/a", "/l/b", "/l/c", "/l/c/d"}
	if len(kvs) != len(want) {
		t.Fatalf("List(/l/) returned %d keys %v, want %v", len(kvs), kvs, want)
	}
	for i, kv := range kvs {
		if kv.Key != want[i] || string(kv.Value) != "v"+want[i] || kv.Version != 1 || kv.ModRevision < 1 {
			t.Fatalf("List(/l/)[%d] = %+v, want key %q", i, kv, want[i])
		}
	}
	if rev < last {
		t.Fatalf("List revision %d is older than the last write %d", rev, last)
	}
	kvs, _, _ = s.List(ctx, "/l")
	if len(kvs) != 5 {
		t.Fatalf("List(/l) is a byte prefix and should match 5 keys, got %d", len(kvs))
	}
	kvs, _, _ = s.List(ctx, "")
	if len(kvs) != len(keys) {
		t.Fatalf("List(\"\") returned %d keys, want %d", len(kvs), len(keys))
	}
	for i := 1; i < len(kvs); i++ {
		if kvs[i-1].Key >= kvs[i].Key {
			t.Fatalf("List not sorted: %q before %q", kvs[i-1].Key, kvs[i].Key)
		}
	}
}

func testValuesAreCopied(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	buf := []byte("original")
	if _, err := s.Put(ctx, "/copy", buf, metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXX")
	got, _ := s.Get(ctx, "/copy")
	if string(got.Value) != "original" {
		t.Fatalf("store kept the caller's buffer: %q", got.Value)
	}
	copy(got.Value, "YYYYYYYY")
	again, _ := s.Get(ctx, "/copy")
	if string(again.Value) != "original" {
		t.Fatalf("store returned its own buffer: %q", again.Value)
	}
}

// testConcurrentCASCounter: N writers increment one counter with read-modify-CAS; no increment is lost.
func testConcurrentCASCounter(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	writers, increments := 6, 20
	if testing.Short() {
		increments = 10
	}
	mustPut(t, s, "/counter", "0", 0)
	var wg sync.WaitGroup
	var conflicts sync.Map
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for range increments {
				for {
					kv, err := s.Get(ctx, "/counter")
					if err != nil {
						t.Errorf("writer %d: get: %v", w, err)
						return
					}
					v, _ := strconv.Atoi(string(kv.Value))
					_, err = s.Put(ctx, "/counter", []byte(strconv.Itoa(v+1)), kv.Version)
					if err == nil {
						break
					}
					if !errors.Is(err, metadata.ErrBadVersion) {
						t.Errorf("writer %d: put: %v", w, err)
						return
					}
					n++
				}
			}
			conflicts.Store(w, n)
		}()
	}
	wg.Wait()
	kv, err := s.Get(ctx, "/counter")
	if err != nil {
		t.Fatal(err)
	}
	want := writers * increments
	if string(kv.Value) != strconv.Itoa(want) || kv.Version != int64(want+1) {
		t.Fatalf("counter = %s (version %d), want %d (version %d): an update was lost", kv.Value, kv.Version, want, want+1)
	}
}

func testWatchBasic(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	_, rev, err := s.List(ctx, "/w/")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, "/w/", rev)
	if err != nil {
		t.Fatal(err)
	}
	p1 := mustPut(t, s, "/w/a", "1", 0)
	mustPut(t, s, "/other", "x", metadata.AnyVersion) // outside the prefix
	p2 := mustPut(t, s, "/w/a", "2", p1.Version)
	if err := s.Delete(ctx, "/w/a", metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	ev := next(t, ch)
	if ev.Type != metadata.EventPut || ev.KV.Key != "/w/a" || string(ev.KV.Value) != "1" || ev.KV.Version != 1 || ev.Revision != p1.ModRevision || ev.KV.ModRevision != p1.ModRevision {
		t.Fatalf("first event %+v, want put of %+v", ev, p1)
	}
	ev = next(t, ch)
	if ev.Type != metadata.EventPut || string(ev.KV.Value) != "2" || ev.KV.Version != 2 || ev.Revision != p2.ModRevision {
		t.Fatalf("second event %+v, want put of %+v", ev, p2)
	}
	ev = next(t, ch)
	if ev.Type != metadata.EventDelete || ev.KV.Key != "/w/a" || ev.Revision <= p2.ModRevision || ev.KV.ModRevision != ev.Revision {
		t.Fatalf("third event %+v, want delete of /w/a after %d", ev, p2.ModRevision)
	}
	expectMarker(t, s, ch, "/w/marker")
}

func testWatchFromNow(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	mustPut(t, s, "/n/old", "old", 0)
	ch, err := s.Watch(ctx, "/n/", 0)
	if err != nil {
		t.Fatal(err)
	}
	kv := mustPut(t, s, "/n/new", "new", 0)
	ev := next(t, ch)
	if ev.KV.Key != "/n/new" || ev.Revision != kv.ModRevision {
		t.Fatalf("Watch(0) delivered %+v first, want the write made after it started (%+v)", ev, kv)
	}
}

func testWatchFromRevision(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	a := mustPut(t, s, "/r/a", "a", 0)
	b := mustPut(t, s, "/r/b", "b", 0)
	mustPut(t, s, "/q/x", "x", 0)
	c := mustPut(t, s, "/r/a", "a2", a.Version)
	ch, err := s.Watch(ctx, "/r/", a.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []metadata.KV{b, c} {
		ev := next(t, ch)
		if ev.Type != metadata.EventPut || ev.KV.Key != want.Key || ev.Revision != want.ModRevision || string(ev.KV.Value) != string(want.Value) || ev.KV.Version != want.Version {
			t.Fatalf("replayed event %+v, want %+v", ev, want)
		}
	}
	expectMarker(t, s, ch, "/r/marker")
}

// testWatchOrderConcurrent: writers race on several keys; the watch sees every write, each exactly
// once, in revision order, and per key in write order.
func testWatchOrderConcurrent(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	writers, perWriter := 4, 40
	if testing.Short() {
		perWriter = 20
	}
	_, rev, err := s.List(ctx, "/o/")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, "/o/", rev)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	written := map[int64]string{} // revision -> key=value
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				key := fmt.Sprintf("/o/k%d", (w+i)%3) // keys shared between writers
				val := fmt.Sprintf("w%d-%d", w, i)
				var kv metadata.KV
				var err error
				if i%7 == 6 {
					err = s.Delete(ctx, key, metadata.AnyVersion)
					if errors.Is(err, metadata.ErrNotFound) {
						continue
					}
					if err == nil {
						mu.Lock()
						written[-1-int64(len(written))] = "delete " + key // revision unknown
						mu.Unlock()
					}
				} else {
					kv, err = s.Put(ctx, key, []byte(val), metadata.AnyVersion)
					if err == nil {
						mu.Lock()
						written[kv.ModRevision] = key + "=" + val
						mu.Unlock()
					}
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	puts, deletes := 0, 0
	for r := range written {
		if r > 0 {
			puts++
		} else {
			deletes++
		}
	}
	var last int64 = rev
	lastVersion := map[string]int64{}
	for gotPuts, gotDeletes := 0, 0; gotPuts < puts || gotDeletes < deletes; {
		ev := next(t, ch)
		if ev.Revision <= last {
			t.Fatalf("event revision %d not after %d: reordered or duplicated", ev.Revision, last)
		}
		last = ev.Revision
		switch ev.Type {
		case metadata.EventPut:
			gotPuts++
			if w, ok := written[ev.Revision]; !ok || w != ev.KV.Key+"="+string(ev.KV.Value) {
				t.Fatalf("event %s=%s@%d does not match the write at that revision (%q)", ev.KV.Key, ev.KV.Value, ev.Revision, w)
			}
			if v := lastVersion[ev.KV.Key]; ev.KV.Version != v+1 {
				t.Fatalf("key %s went from version %d to %d: a change was skipped", ev.KV.Key, v, ev.KV.Version)
			}
			lastVersion[ev.KV.Key] = ev.KV.Version
		case metadata.EventDelete:
			gotDeletes++
			lastVersion[ev.KV.Key] = 0
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
	}
	expectMarker(t, s, ch, "/o/marker")
}

// testListThenWatchNoGap: while a writer runs, List and then Watch from List's revision; replaying
// the events onto the listed state yields exactly the final state.
func testListThenWatchNoGap(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("/g/k%d", i%5)
			var err error
			if i%4 == 3 {
				err = s.Delete(ctx, key, metadata.AnyVersion)
				if errors.Is(err, metadata.ErrNotFound) {
					err = nil
				}
			} else {
				_, err = s.Put(ctx, key, []byte(strconv.Itoa(i)), metadata.AnyVersion)
			}
			if err != nil {
				t.Errorf("writer: %v", err)
				return
			}
		}
	}()
	// Let the writer make some progress before listing (poll, not sleep).
	poll.Until(t, waitTimeout, "the store to catch up", func() bool { kvs, _, _ := s.List(ctx, "/g/"); return len(kvs) >= 2 })
	kvs, rev, err := s.List(ctx, "/g/")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, "/g/", rev)
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]string{}
	for _, kv := range kvs {
		state[kv.Key] = string(kv.Value)
	}
	// Let a few more writes happen, then stop.
	var seen int64 = rev
	for n := 0; n < 20; n++ {
		ev := next(t, ch)
		apply(t, state, ev, &seen)
	}
	close(stop)
	<-done
	final, finalRev, err := s.List(ctx, "/g/")
	if err != nil {
		t.Fatal(err)
	}
	for seen < finalRev {
		// Changes outside the prefix could raise finalRev; use a marker to know when we are done.
		m := mustPut(t, s, "/g/zz-marker", "m", metadata.AnyVersion)
		final = append(final, m)
		finalRev = m.ModRevision
		for seen < finalRev {
			apply(t, state, next(t, ch), &seen)
		}
	}
	want := map[string]string{}
	for _, kv := range final {
		want[kv.Key] = string(kv.Value)
	}
	if fmt.Sprint(state) != fmt.Sprint(want) {
		t.Fatalf("list+watch replay = %v\nfinal list       = %v", state, want)
	}
}

func apply(t *testing.T, state map[string]string, ev metadata.Event, seen *int64) {
	t.Helper()
	if ev.Revision <= *seen {
		t.Fatalf("event at revision %d after %d", ev.Revision, *seen)
	}
	*seen = ev.Revision
	switch ev.Type {
	case metadata.EventPut:
		state[ev.KV.Key] = string(ev.KV.Value)
	case metadata.EventDelete:
		if _, ok := state[ev.KV.Key]; !ok {
			t.Fatalf("delete of %q that the replayed state does not have: a put was missed", ev.KV.Key)
		}
		delete(state, ev.KV.Key)
	}
}

func testWatchStopsOnCancel(t *testing.T, s metadata.Store) {
	ctx, cancel := context.WithCancel(ctxT(t))
	ch, err := s.Watch(ctx, "/c/", 0)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "/c/x", "1", 0)
	next(t, ch)
	cancel()
	timeout := time.After(waitTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("watch channel still open %v after cancel", waitTimeout)
		}
	}
}

// testManyWatchersSlowReader: several watchers on one prefix each see every change in order, and a
// watcher that reads nothing while hundreds of changes happen neither blocks the writer nor loses any.
func testManyWatchersSlowReader(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	_, rev, err := s.List(ctx, "/m/")
	if err != nil {
		t.Fatal(err)
	}
	const watchers, writes = 4, 300
	chans := make([]<-chan metadata.Event, watchers)
	for i := range chans {
		if chans[i], err = s.Watch(ctx, "/m/", rev); err != nil {
			t.Fatal(err)
		}
	}
	// Nobody reads while the writes happen; far more than any channel buffer.
	revs := make([]int64, 0, writes)
	for i := range writes {
		kv := mustPut(t, s, fmt.Sprintf("/m/k%d", i%10), strconv.Itoa(i), metadata.AnyVersion)
		revs = append(revs, kv.ModRevision)
	}
	for w, ch := range chans {
		for i := range writes {
			ev := next(t, ch)
			if ev.Revision != revs[i] || string(ev.KV.Value) != strconv.Itoa(i) {
				t.Fatalf("watcher %d event %d: %s=%s@%d, want value %d@%d", w, i, ev.KV.Key, ev.KV.Value, ev.Revision, i, revs[i])
			}
		}
	}
}

func testSessionEphemeral(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	sess, err := s.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, rev, _ := s.List(ctx, "/e/")
	ch, err := s.Watch(ctx, "/e/", rev)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := sess.PutEphemeral(ctx, "/e/owner", []byte("me"))
	if err != nil {
		t.Fatal(err)
	}
	if kv.Version != 1 || string(kv.Value) != "me" {
		t.Fatalf("PutEphemeral = %+v", kv)
	}
	kv2, err := sess.PutEphemeral(ctx, "/e/owner", []byte("me again"))
	if err != nil || kv2.Version != 2 {
		t.Fatalf("second PutEphemeral = %+v, %v", kv2, err)
	}
	if _, err := sess.PutEphemeral(ctx, "/e/second", []byte("2")); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "/e/persistent", "stays", 0)
	if got, err := s.Get(ctx, "/e/owner"); err != nil || string(got.Value) != "me again" {
		t.Fatalf("Get ephemeral = %+v, %v", got, err)
	}
	for range 4 {
		next(t, ch)
	}
	select {
	case <-sess.Done():
		t.Fatalf("session done before Close")
	default:
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("session Close: %v", err)
	}
	select {
	case <-sess.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("Done not closed after Close")
	}
	deleted := map[string]bool{}
	for range 2 {
		ev := next(t, ch)
		if ev.Type != metadata.EventDelete {
			t.Fatalf("after session close got %+v, want deletes", ev)
		}
		deleted[ev.KV.Key] = true
	}
	if !deleted["/e/owner"] || !deleted["/e/second"] {
		t.Fatalf("session close deleted %v", deleted)
	}
	for _, k := range []string{"/e/owner", "/e/second"} {
		if _, err := s.Get(ctx, k); !errors.Is(err, metadata.ErrNotFound) {
			t.Fatalf("ephemeral %s still there after session close: %v", k, err)
		}
	}
	if _, err := s.Get(ctx, "/e/persistent"); err != nil {
		t.Fatalf("persistent key gone with the session: %v", err)
	}
	_, err = sess.PutEphemeral(ctx, "/e/late", []byte("x"))
	wantErr(t, "PutEphemeral after Close", err, metadata.ErrSessionExpired)
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("second session Close: %v", err)
	}
	if _, err := s.NewSession(ctx, 0); err == nil {
		t.Fatalf("NewSession with ttl 0 succeeded")
	}
}

func testSessionPlainPutDetaches(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	sess, err := s.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.PutEphemeral(ctx, "/d/k", []byte("eph")); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "/d/k", "persistent now", metadata.AnyVersion)
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "/d/k"); err != nil || string(got.Value) != "persistent now" {
		t.Fatalf("a plain Put should detach the key from the session: %+v, %v", got, err)
	}
}

func testClosed(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	if err := s.Health(ctx); err != nil {
		t.Fatalf("Health of an open store: %v", err)
	}
	sess, err := s.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, "/", 0)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "/x", "1", 0)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	timeout := time.After(waitTimeout)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-timeout:
			t.Fatalf("watch still open after store Close")
		}
	}
	select {
	case <-sess.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("session not done after store Close")
	}
	_, err = s.Get(ctx, "/x")
	wantErr(t, "Get after Close", err, metadata.ErrClosed)
	_, err = s.Put(ctx, "/x", nil, metadata.AnyVersion)
	wantErr(t, "Put after Close", err, metadata.ErrClosed)
	wantErr(t, "Delete after Close", s.Delete(ctx, "/x", metadata.AnyVersion), metadata.ErrClosed)
	_, _, err = s.List(ctx, "/")
	wantErr(t, "List after Close", err, metadata.ErrClosed)
	_, err = s.Watch(ctx, "/", 0)
	wantErr(t, "Watch after Close", err, metadata.ErrClosed)
	_, err = s.NewSession(ctx, time.Second)
	wantErr(t, "NewSession after Close", err, metadata.ErrClosed)
	_, err = sess.PutEphemeral(ctx, "/y", nil)
	if !errors.Is(err, metadata.ErrClosed) && !errors.Is(err, metadata.ErrSessionExpired) {
		t.Fatalf("PutEphemeral after store Close: %v", err)
	}
	wantErr(t, "Health after Close", s.Health(ctx), metadata.ErrClosed)
}
