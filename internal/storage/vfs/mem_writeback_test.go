package vfs

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// durableContent is name's content after a power loss now (nothing unsynced kept).
func durableContent(t *testing.T, m *Mem, name string) []byte {
	t.Helper()
	return memContent(t, m.Crash(nil), name)
}

// TestMemFailedSyncLosesWrites: after a Sync that failed, the bytes written before it are not
// dirty any more: a later Sync succeeds without making them durable (only the size), and they
// are still what a read returns (the page cache keeps them). Writing them again makes them
// durable at the next Sync.
func TestMemFailedSyncLosesWrites(t *testing.T) {
	m, f := newSyncedFile(t, []byte("aaaa"))
	memWrite(t, f, []byte("bbbb"), 4) // appended
	memWrite(t, f, []byte("B"), 1)    // overwrite of durable bytes
	fail := true
	m.SetInjector(func(op Op, name string) error {
		if op == OpSync && fail {
			fail = false
			return EIO
		}
		return nil
	})
	if err := f.Sync(); !errors.Is(err, EIO) {
		t.Fatalf("sync: %v, want EIO", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("second sync: %v, want success (the error was reported once)", err)
	}
	if got := memContent(t, m, "/f"); string(got) != "aBaabbbb" {
		t.Fatalf("read %q, want the written bytes (still cached)", got)
	}
	if got, want := durableContent(t, m, "/f"), []byte("aaaa\x00\x00\x00\x00"); !bytes.Equal(got, want) {
		t.Fatalf("durable %q, want %q: the lost writes must not become durable", got, want)
	}
	if n, _ := m.LostBytes("/f"); n == 0 {
		t.Fatal("no bytes reported lost")
	}
	memWrite(t, f, []byte("aBaabbbb"), 0) // the writer rewrites what it knows was lost
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := durableContent(t, m, "/f"); string(got) != "aBaabbbb" {
		t.Fatalf("durable %q after the rewrite, want %q", got, "aBaabbbb")
	}
	if n, _ := m.LostBytes("/f"); n != 0 {
		t.Fatalf("%d bytes still lost after the rewrite", n)
	}
}

// TestMemCrashNeverKeepsLostBytes: a torn tail kept by Crash stops where lost bytes start.
func TestMemCrashNeverKeepsLostBytes(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		m, f := newSyncedFile(t, []byte("aaaa"))
		memWrite(t, f, []byte("lost"), 4)
		if err := m.FailWriteback("/f", EIO); err != nil {
			t.Fatal(err)
		}
		memWrite(t, f, []byte("next"), 8)
		got := memContent(t, m.Crash(rand.New(rand.NewPCG(seed, 9))), "/f")
		if len(got) > 4 {
			t.Fatalf("seed %d: crash kept %q past the durable bytes: the lost write is never on disk", seed, got)
		}
		f.Close()
	}
}

// TestMemWritebackErrorOncePerDescription: a writeback failure is reported by the next Sync of
// every description open when it happened, once each; a description opened after it reports it
// only while nobody has.
func TestMemWritebackErrorOncePerDescription(t *testing.T) {
	m, a := newSyncedFile(t, []byte("aaaa"))
	b, err := m.OpenFile("/f", ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	memWrite(t, a, []byte("x"), 0)
	if err := m.FailWriteback("/f", EIO); err != nil {
		t.Fatal(err)
	}
	c, err := m.OpenFile("/f", ReadWrite) // opened after the failure, before anyone reported it
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []File{b, a, c} {
		if err := f.Sync(); !errors.Is(err, EIO) {
			t.Fatalf("sync: %v, want the writeback error", err)
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("second sync of the same description: %v, want success", err)
		}
	}
	d, err := m.OpenFile("/f", ReadWrite) // opened after the error was reported
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("sync of a description opened after the error was reported: %v", err)
	}
	for _, f := range []File{a, b, c, d} {
		f.Close()
	}
}

// TestMemWritebackErrorForgottenWithLastClose: an error nobody reported is lost when the file's
// last description closes (the inode may be evicted): a later description's Sync succeeds
// although the data never reached the disk.
func TestMemWritebackErrorForgottenWithLastClose(t *testing.T) {
	m, f := newSyncedFile(t, []byte("aaaa"))
	memWrite(t, f, []byte("bbbb"), 4)
	if err := m.FailWriteback("/f", EIO); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g, err := m.OpenFile("/f", ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Sync(); err != nil {
		t.Fatalf("sync: %v: the error should have been forgotten with the last close", err)
	}
	if got := durableContent(t, m, "/f"); bytes.Contains(got, []byte("bbbb")) {
		t.Fatalf("durable %q holds the lost write", got)
	}
}

// TestMemWaitWritebackReportsWithoutSyncing: WaitWriteback reports a writeback error to its
// description like Sync (once), and makes nothing durable.
func TestMemWaitWritebackReportsWithoutSyncing(t *testing.T) {
	m, f := newSyncedFile(t, []byte("aaaa"))
	memWrite(t, f, []byte("bbbb"), 4)
	if err := WaitWriteback(f); err != nil {
		t.Fatalf("wait writeback: %v", err)
	}
	if got := durableContent(t, m, "/f"); string(got) != "aaaa" {
		t.Fatalf("durable %q after WaitWriteback, want the old content (only Sync makes data durable)", got)
	}
	if err := m.FailWriteback("/f", EIO); err != nil {
		t.Fatal(err)
	}
	if err := WaitWriteback(f); !errors.Is(err, EIO) {
		t.Fatalf("wait writeback after a failed writeback: %v, want EIO", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync after the error was reported: %v", err)
	}
	f.Close()
}
