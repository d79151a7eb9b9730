package localstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) metadata.Store {
		s, err := OpenDir(t.TempDir(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestReopenKeepsKeysRevisionsAndHistory(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := OpenDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Put(ctx, "/a", []byte("1"), 0)
	b, _ := s.Put(ctx, "/b", []byte("2"), 0)
	b2, _ := s.Put(ctx, "/b", []byte("3"), b.Version)
	if err := s.Delete(ctx, "/a", a.Version); err != nil {
		t.Fatal(err)
	}
	_, rev, _ := s.List(ctx, "/")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = OpenDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Get(ctx, "/b")
	if err != nil || string(got.Value) != "3" || got.Version != 2 || got.ModRevision != b2.ModRevision {
		t.Fatalf("after reopen Get(/b) = %+v, %v; want %+v", got, err, b2)
	}
	if _, err := s.Get(ctx, "/a"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("deleted key back after reopen: %v", err)
	}
	if _, rev2, _ := s.List(ctx, "/"); rev2 != rev {
		t.Fatalf("revision %d after reopen, was %d", rev2, rev)
	}
	next, _ := s.Put(ctx, "/c", nil, 0)
	if next.ModRevision != rev+1 {
		t.Fatalf("first write after reopen at revision %d, want %d", next.ModRevision, rev+1)
	}
	// A watch from a revision before the restart replays the persisted history.
	ch, err := s.Watch(ctx, "/", a.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for range 4 {
		ev := <-ch
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		seen = append(seen, ev.Type.String()+" "+ev.KV.Key)
	}
	if strings.Join(seen, ",") != "PUT /b,PUT /b,DELETE /a,PUT /c" {
		t.Fatalf("replayed %v", seen)
	}
}

// Ephemeral keys left by a crash (the store never closed) are deleted at the next open, visibly.
func TestEphemeralKeysRemovedAfterCrash(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := OpenDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.NewSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	eph, err := sess.PutEphemeral(ctx, "/owner", []byte("me"))
	if err != nil {
		t.Fatal(err)
	}
	// Simulate a crash: copy the file while the store is open (bbolt's file is consistent after every
	// committed transaction), then open the copy.
	crashDir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(dir, metadata.LocalFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashDir, metadata.LocalFileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenDir(crashDir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Get(ctx, "/owner"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("ephemeral key survived a crash: %v", err)
	}
	ch, err := s2.Watch(ctx, "/", eph.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Type != metadata.EventDelete || ev.KV.Key != "/owner" {
		t.Fatalf("watch after crash recovery got %+v, want the delete of /owner", ev)
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := OpenDir(dir, Options{LockTimeout: 50 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second open: %v, want a lock error", err)
	}
}

func TestHistoryTrimmedOnDisk(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := OpenDir(dir, Options{MaxHistoryEvents: 10})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s.Put(ctx, "/k", []byte("0"), metadata.AnyVersion)
	for range 30 {
		if _, err := s.Put(ctx, "/k", []byte("x"), metadata.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err = OpenDir(dir, Options{MaxHistoryEvents: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ch, _ := s.Watch(ctx, "/", first.ModRevision)
	if ev := <-ch; !errors.Is(ev.Err, metadata.ErrCompacted) {
		t.Fatalf("watch from a trimmed revision: %+v", ev)
	}
	ch2, _ := s.Watch(ctx, "/", s.Revision()-5)
	for range 5 {
		if ev := <-ch2; ev.Err != nil {
			t.Fatal(ev.Err)
		}
	}
}

func FuzzDecodeKV(f *testing.F) {
	f.Add([]byte("/k"), encodeKV(metadata.KV{Key: "/k", Value: []byte("v"), Version: 1, ModRevision: 2}, true))
	f.Add([]byte("/k"), []byte{0})
	f.Fuzz(func(t *testing.T, k, v []byte) {
		kv, eph, err := decodeKV(k, v)
		if err != nil {
			return
		}
		again, eph2, err := decodeKV(k, encodeKV(kv, eph))
		if err != nil || eph != eph2 || again.Version != kv.Version || string(again.Value) != string(kv.Value) {
			t.Fatalf("round trip: %+v %v -> %+v %v %v", kv, eph, again, eph2, err)
		}
	})
}

func FuzzDecodeLog(f *testing.F) {
	f.Add(u64(5), encodeLogForTest(metadata.EventPut, "/a", "v", 3))
	f.Add(u64(6), encodeLogForTest(metadata.EventDelete, "/a", "", 0))
	f.Add([]byte{1}, []byte{1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, k, v []byte) {
		ev, err := decodeLog(k, v)
		if err != nil {
			return
		}
		if ev.Revision != ev.KV.ModRevision {
			t.Fatalf("revision mismatch: %+v", ev)
		}
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) metadata.Store {
		s, err := OpenDir(b.TempDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	})
}

func TestGarbageFileRefused(t *testing.T) {
	dir := t.TempDir()
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(i*7 + 3)
	}
	if err := os.WriteFile(filepath.Join(dir, metadata.LocalFileName), garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := OpenDir(dir, Options{}); err == nil {
		s.Close()
		t.Fatal("opened a garbage file")
	}
}

func TestMalformedRecordRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), "/k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(filepath.Join(dir, metadata.LocalFileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketKV).Put([]byte("/k"), []byte{0, 1}) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := OpenDir(dir, Options{}); err == nil || !strings.Contains(err.Error(), `key "/k"`) {
		t.Fatalf("open with a truncated record: %v", err)
	}
}

// The store file's directory entry is made durable before the store is used: a change acknowledged
// on a fresh data dir must survive a power loss, the file's entry included. A reopen syncs it
// again (an earlier open may have died between creating the file and the sync).
func TestOpenSyncsTheDirectoryOfANewFile(t *testing.T) {
	var synced []string
	old := syncDir
	syncDir = func(dir string) error { synced = append(synced, dir); return syncDirOS(dir) }
	t.Cleanup(func() { syncDir = old })

	dir := filepath.Join(t.TempDir(), "new", "data")
	for _, open := range []string{"a new file", "a reopen"} {
		synced = nil
		s, err := OpenDir(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(synced, []string{dir}) {
			t.Fatalf("%s synced %q, want the file's directory %q", open, synced, dir)
		}
	}
}
