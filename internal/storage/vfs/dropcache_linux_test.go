package vfs

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestDropCacheKeepsData: DropCache of a synced file takes its pages out of the page cache and
// the file still reads back exactly as written; DropCache on a file system without it is a no-op.
func TestDropCacheKeepsData(t *testing.T) {
	name := filepath.Join(t.TempDir(), "seg")
	f, err := OS{}.OpenFile(name, ReadWrite|Create|Excl)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := bytes.Repeat([]byte("meridian page cache "), 200_000) // ~4 MB
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := DataSync(f); err != nil {
		t.Fatal(err)
	}
	before, total, err := ResidentPages(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := DropCache(f, 0, 0); err != nil {
		t.Fatal(err)
	}
	after, _, err := ResidentPages(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resident pages of %d: %d before, %d after DropCache", total, before, after)
	if after > 0 && after == before {
		t.Skipf("this file system keeps the pages (tmpfs?): %d of %d resident", after, total)
	}
	if after > total/10 {
		t.Fatalf("%d of %d pages still resident after DropCache of a synced file", after, total)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("data changed after DropCache")
	}
	// An unsynced (dirty) range is kept: dropping never loses a write.
	tail := []byte("not yet synced")
	if _, err := f.WriteAt(tail, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := DropCache(f, 0, 0); err != nil {
		t.Fatal(err)
	}
	got = make([]byte, len(tail))
	if _, err := f.ReadAt(got, int64(len(data))); err != nil || !bytes.Equal(got, tail) {
		t.Fatalf("unsynced write after DropCache: %q, %v", got, err)
	}
	// The in-memory file system has no page cache: DropCache does nothing.
	m := NewMem()
	mf, err := m.OpenFile("x", ReadWrite|Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := DropCache(mf, 0, 0); err != nil {
		t.Fatal(err)
	}
}
