package vfs

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"syscall"
	"testing"
)

func memWrite(t *testing.T, f File, b []byte, off int64) {
	t.Helper()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func memContent(t *testing.T, m *Mem, name string) []byte {
	t.Helper()
	f, err := m.OpenFile(name, ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, _ := f.Size()
	b := make([]byte, n)
	if n > 0 {
		if _, err := f.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// newSyncedFile makes /f durable with content b and returns it open.
func newSyncedFile(t *testing.T, b []byte) (*Mem, File) {
	t.Helper()
	m := NewMem()
	f, err := m.OpenFile("/f", ReadWrite|Create)
	if err != nil {
		t.Fatal(err)
	}
	memWrite(t, f, b, 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	return m, f
}

// TestMemSyncCopiesWrittenRange: a Sync after writes over and after durable bytes makes exactly
// the file's content durable.
func TestMemSyncCopiesWrittenRange(t *testing.T) {
	m, f := newSyncedFile(t, bytes.Repeat([]byte{'a'}, 100))
	memWrite(t, f, []byte("bbbb"), 10)
	memWrite(t, f, []byte("cc"), 98)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte{'a'}, 100)
	copy(want[10:], "bbbb")
	copy(want[98:], "cc")
	if got := memContent(t, m.Crash(nil), "/f"); !bytes.Equal(got, want) {
		t.Fatalf("durable content %q, want %q", got, want)
	}
	// Shrink, then grow again with a hole: the hole reads as zeros (also once synced).
	if err := f.Truncate(20); err != nil {
		t.Fatal(err)
	}
	memWrite(t, f, []byte("dd"), 30)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	want = append(append(append([]byte(nil), want[:20]...), make([]byte, 10)...), "dd"...)
	if got := memContent(t, m, "/f"); !bytes.Equal(got, want) {
		t.Fatalf("content %q, want %q", got, want)
	}
	if got := memContent(t, m.Crash(nil), "/f"); !bytes.Equal(got, want) {
		t.Fatalf("durable content %q, want %q", got, want)
	}
}

// TestMemCrashTearsOverwrites: unsynced overwrites of durable bytes survive a crash as a prefix of
// the changed range (anything from none to all of it), never out of order; after a truncation to a
// smaller size only the durable content survives.
func TestMemCrashTearsOverwrites(t *testing.T) {
	old := bytes.Repeat([]byte{'o'}, 64)
	m, f := newSyncedFile(t, old)
	memWrite(t, f, bytes.Repeat([]byte{'n'}, 40), 8)
	seen := map[int]bool{}
	for seed := range uint64(200) {
		got := memContent(t, m.Crash(rand.New(rand.NewPCG(seed, 1))), "/f")
		if len(got) != len(old) {
			t.Fatalf("durable size %d, want %d", len(got), len(old))
		}
		k := bytes.Count(got, []byte{'n'})
		want := append([]byte(nil), old...)
		copy(want[8:8+k], bytes.Repeat([]byte{'n'}, k))
		if !bytes.Equal(got, want) {
			t.Fatalf("torn overwrite %q is not a prefix of the write over the old content", got)
		}
		seen[k] = true
	}
	if !seen[0] || len(seen) < 10 {
		t.Fatalf("torn overwrites kept %d distinct prefixes (none kept: %v)", len(seen), seen[0])
	}
	if err := f.Truncate(4); err != nil {
		t.Fatal(err)
	}
	memWrite(t, f, []byte("xyz"), 4)
	for seed := range uint64(50) {
		if got := memContent(t, m.Crash(rand.New(rand.NewPCG(seed, 2))), "/f"); !bytes.Equal(got, old) {
			t.Fatalf("after a truncation the crash kept %q, want the durable content", got)
		}
	}
}

// TestMkdirAllDurable: the directories MkdirAllDurable creates survive a crash; those MkdirAll
// creates do not (their entries are not synced).
func TestMkdirAllDurable(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("/plain/a/b"); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAllDurable(m, "/durable/a/b"); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAllDurable(m, "/durable/a/c"); err != nil { // beside an existing parent
		t.Fatal(err)
	}
	c := m.Crash(nil)
	for _, d := range []string{"/durable/a/b", "/durable/a/c"} {
		if fi, err := c.Stat(d); err != nil || !fi.IsDir {
			t.Fatalf("%s after the crash: %+v, %v", d, fi, err)
		}
	}
	// The root was synced for /durable, which took /plain's entry along; /plain's own entry for a
	// was never synced.
	if _, err := c.Stat("/plain/a"); !IsNotExist(err) {
		t.Fatalf("/plain/a (never synced) after the crash: %v", err)
	}
}

// Directories an earlier call created but did not get durable (its directory sync failed, or the
// process died between the creation and the syncs) are synced by the next call, which finds them
// existing.
func TestMkdirAllDurableSyncsWhatAnEarlierCallLeft(t *testing.T) {
	t.Run("failed sync, then a retry", func(t *testing.T) {
		m := NewMem()
		failed := false
		m.SetInjector(func(op Op, name string) error {
			if op == OpSyncDir && !failed {
				failed = true
				return EIO
			}
			return nil
		})
		if err := MkdirAllDurable(m, "/data/a/b"); err == nil {
			t.Fatal("the injected directory sync failure was not reported")
		}
		if err := MkdirAllDurable(m, "/data/a/b"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Crash(nil).Stat("/data/a/b"); err != nil {
			t.Fatalf("/data/a/b after a crash, though MkdirAllDurable returned nil: %v", err)
		}
	})
	t.Run("created, the process died before the syncs", func(t *testing.T) {
		m := NewMem()
		if err := m.MkdirAll("/data/a"); err != nil {
			t.Fatal(err)
		}
		if err := MkdirAllDurable(m, "/data/a/b"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Crash(nil).Stat("/data/a/b"); err != nil {
			t.Fatalf("/data/a/b after a crash, though MkdirAllDurable returned nil: %v", err)
		}
	})
}

// A parent the process may not open is left alone when its child on the path existed before the
// call, and is an error when the call created that child.
func TestMkdirAllDurablePermission(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("/srv"); err != nil {
		t.Fatal(err)
	}
	m.SetInjector(func(op Op, name string) error {
		if op == OpSyncDir && name == "/" {
			return fs.ErrPermission
		}
		return nil
	})
	if err := MkdirAllDurable(m, "/srv/data"); err != nil {
		t.Fatalf("the root's child /srv existed before: %v", err)
	}
	if err := MkdirAllDurable(m, "/new/data"); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("the root's child /new was created here: %v, want the permission error", err)
	}
	// A file system that does not sync directories (EINVAL) above an existing path is left alone
	// too; an I/O error is not.
	for _, c := range []struct {
		err  error
		fail bool
	}{{syscall.EINVAL, false}, {EIO, true}} {
		m.SetInjector(func(op Op, name string) error {
			if op == OpSyncDir && name == "/" {
				return c.err
			}
			return nil
		})
		if err := MkdirAllDurable(m, "/srv/data"); (err != nil) != c.fail {
			t.Fatalf("syncing the root fails with %v: MkdirAllDurable returned %v", c.err, err)
		}
	}
}
