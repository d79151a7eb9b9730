package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// appendIDs appends n entries to a new ledger name on e and returns the ledger ids they got.
func appendIDs(t *testing.T, e *Engine, name string, n int) []int64 {
	t.Helper()
	l, err := e.OpenLedger(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, p := range appendN(t, l, n) {
		if len(ids) == 0 || ids[len(ids)-1] != p.LedgerID {
			ids = append(ids, p.LedgerID)
		}
	}
	return ids
}

// TestIncarnationAfterRestore: a data dir restored from an old copy reuses ledger ids that the
// lost branch had already used (and replicated); the incarnation tells them apart. Every open
// gets a new random incarnation, recorded durably before any of its ledger ids is handed out.
func TestIncarnationAfterRestore(t *testing.T) {
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	inc1 := e.Incarnation()
	if inc1 == 0 {
		t.Fatal("incarnation is 0")
	}
	first := appendIDs(t, e, "inc/a", 3)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	backup := mem.Crash(nil) // a copy of the stopped broker's data dir

	// The branch that is lost later: it runs on after the backup was taken.
	e = openMem(t, mem, nil)
	inc2 := e.Incarnation()
	lost := appendIDs(t, e, "inc/b", 3)
	for _, id := range lost {
		if got := e.IncarnationOf(id); got != inc2 {
			t.Fatalf("lost branch: IncarnationOf(%d) = %x, want %x", id, got, inc2)
		}
	}
	for _, id := range first {
		if got := e.IncarnationOf(id); got != inc1 {
			t.Fatalf("lost branch: IncarnationOf(%d) = %x, want the first open's %x", id, got, inc1)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	// Restore the backup: its ledger ids start where the backup's left off, which the lost
	// branch had used already.
	e = openMem(t, backup, nil)
	defer e.Close()
	inc3 := e.Incarnation()
	if inc3 == inc1 || inc3 == inc2 || inc2 == inc1 {
		t.Fatalf("incarnations not distinct: %x %x %x", inc1, inc2, inc3)
	}
	restored := appendIDs(t, e, "inc/b", 3)
	if restored[0] != lost[0] {
		t.Fatalf("the restored copy was expected to reuse the lost branch's ledger id %d, got %d", lost[0], restored[0])
	}
	for _, id := range restored {
		if got := e.IncarnationOf(id); got != inc3 {
			t.Fatalf("restored: IncarnationOf(%d) = %x, want %x (the lost branch had %x)", id, got, inc3, inc2)
		}
	}
	for _, id := range first {
		if got := e.IncarnationOf(id); got != inc1 {
			t.Fatalf("restored: IncarnationOf(%d) = %x, want %x", id, got, inc1)
		}
	}
}

// TestIncarnationDurableBeforeIDs: a crash right after ledger ids were handed out keeps the
// incarnation they belong to.
func TestIncarnationDurableBeforeIDs(t *testing.T) {
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	inc := e.Incarnation()
	ids := appendIDs(t, e, "inc/crash", 2)
	crashed := mem.Crash(nil) // only what was fsynced
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, crashed, nil)
	defer e.Close()
	if e.Incarnation() == inc {
		t.Fatal("the reopened engine kept the old incarnation")
	}
	for _, id := range ids {
		if got := e.IncarnationOf(id); got != inc {
			t.Fatalf("after the crash IncarnationOf(%d) = %x, want %x", id, got, inc)
		}
	}
}

// TestIncarnationOldDataDir: ledger ids from before incarnations were recorded (a version-1 state
// file, no incarnations file) belong to incarnation 0.
func TestIncarnationOldDataDir(t *testing.T) {
	mem := vfs.NewMem()
	e := openMem(t, mem, nil)
	ids := appendIDs(t, e, "inc/old", 2)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Make it look like a data dir written before incarnations: a version-1 state file.
	st := readStateForTest(t, mem)
	writeFileForTest(t, mem, "/data/"+stateFile, encodeEngineStateV1(st))
	if err := mem.Remove("/data/" + incarnationsFile); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	for _, id := range ids {
		if got := e.IncarnationOf(id); got != 0 {
			t.Fatalf("IncarnationOf(%d) = %x for an id from before incarnations, want 0", id, got)
		}
	}
	now := appendIDs(t, e, "inc/old", 1)
	if got := e.IncarnationOf(now[0]); got != e.Incarnation() || got == 0 {
		t.Fatalf("IncarnationOf(new id %d) = %x, want %x", now[0], got, e.Incarnation())
	}
}

// TestIncarnationsFileDamage: a torn tail (an open that crashed while recording its incarnation)
// is cut; a record lost or damaged anywhere else stops Open with an error naming the file.
func TestIncarnationsFileDamage(t *testing.T) {
	setup := func(t *testing.T) *vfs.Mem {
		mem := vfs.NewMem()
		for range 3 {
			e := openMem(t, mem, nil)
			appendIDs(t, e, "inc/d", 1)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
		}
		return mem
	}
	path := "/data/" + incarnationsFile
	t.Run("torn tail", func(t *testing.T) {
		mem := setup(t)
		b := readFileForTest(t, mem, path)
		writeFileForTest(t, mem, path, append(b, 16, 0, 0, 0, 1, 2, 3))
		e := openMem(t, mem, nil)
		defer e.Close()
		if n := len(e.inc.records); n != 4 {
			t.Fatalf("%d incarnations after a torn tail, want 4", n)
		}
	})
	t.Run("damaged middle record", func(t *testing.T) {
		mem := setup(t)
		b := readFileForTest(t, mem, path)
		b[headerSize+recHeaderSize+2] ^= 0xff // the first record's body
		writeFileForTest(t, mem, path, b)
		wantOpenError(t, mem, incarnationsFile)
	})
	t.Run("lost last record", func(t *testing.T) {
		mem := setup(t)
		b := readFileForTest(t, mem, path)
		writeFileForTest(t, mem, path, b[:len(b)-incarnationRecordSize])
		wantOpenError(t, mem, incarnationsFile)
	})
	t.Run("damaged last record", func(t *testing.T) {
		mem := setup(t)
		b := readFileForTest(t, mem, path)
		b[len(b)-1] ^= 0xff
		writeFileForTest(t, mem, path, b)
		wantOpenError(t, mem, incarnationsFile)
	})
	t.Run("torn creation", func(t *testing.T) {
		// The first open of a fresh data dir crashed while creating the file.
		mem := vfs.NewMem()
		if err := mem.MkdirAll("/data"); err != nil {
			t.Fatal(err)
		}
		writeFileForTest(t, mem, path, make([]byte, 100))
		e := openMem(t, mem, nil)
		defer e.Close()
		if n := len(e.inc.records); n != 1 || e.IncarnationOf(e.inc.records[0].firstLedgerID) != e.Incarnation() {
			t.Fatalf("%d incarnations after a torn creation", n)
		}
		if got := readFileForTest(t, mem, path); len(got) != headerSize+incarnationRecordSize {
			t.Fatalf("the file holds %d bytes, want a header and one record", len(got))
		}
	})
	t.Run("missing file", func(t *testing.T) {
		mem := setup(t)
		if err := mem.Remove(path); err != nil {
			t.Fatal(err)
		}
		wantOpenError(t, mem, incarnationsFile)
	})
}

func wantOpenError(t *testing.T, fs vfs.FS, naming string) {
	t.Helper()
	e, err := Open(context.Background(), Options{Dir: "/data", FS: fs, Logger: testLogger()})
	if err == nil {
		e.Close()
		t.Fatalf("Open succeeded, want an error naming %s", naming)
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), naming) {
		t.Fatalf("Open: %v; want ErrCorrupt naming %s", err, naming)
	}
}

func readFileForTest(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.OpenFile(path, vfs.ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && int64(len(b)) != size {
		t.Fatal(err)
	}
	return b
}

// writeFileForTest replaces path's content durably (file and directory synced).
func writeFileForTest(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.OpenFile(path, vfs.ReadWrite|vfs.Create|vfs.Trunc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir(path[:strings.LastIndex(path, "/")]); err != nil {
		t.Fatal(err)
	}
}

func readStateForTest(t *testing.T, fs vfs.FS) engineState {
	t.Helper()
	st, err := decodeEngineState(readFileForTest(t, fs, "/data/"+stateFile))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// encodeEngineStateV1 writes a state file as builds before incarnations did (format version 1).
func encodeEngineStateV1(s engineState) []byte {
	b := appendHeaderVersion(nil, magicState, 0, 0, 1)
	body := binary.LittleEndian.AppendUint64(nil, s.ledgerIDLimit)
	body = binary.LittleEndian.AppendUint64(body, s.firstJournal)
	return appendPlainRecord(b, body)
}

// Every entry a read returns carries the incarnation of the open that wrote its ledger, from the
// segment file and from the cache alike: a replicator sends it on as the source incarnation.
func TestReadEntriesCarryIncarnation(t *testing.T) {
	mem := vfs.NewMem()
	ctx := context.Background()
	e := openMem(t, mem, nil)
	inc1 := e.Incarnation()
	l, err := e.OpenLedger(ctx, "inc/read")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openMem(t, mem, nil)
	defer e.Close()
	inc2 := e.Incarnation()
	l, err = e.OpenLedger(ctx, "inc/read") // a new ledger id, of the second open
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 2)
	for _, pass := range []string{"first read", "second read"} {
		es, err := l.Read(ctx, mtypes.Earliest, 100, 0)
		if err != nil || len(es) != 5 {
			t.Fatalf("%s: %d entries, %v", pass, len(es), err)
		}
		for i, en := range es {
			want := inc1
			if i >= 3 {
				want = inc2
			}
			if en.Incarnation != want || want != e.IncarnationOf(en.Position.LedgerID) {
				t.Fatalf("%s: entry %s has incarnation %x, want %x", pass, en.Position, en.Incarnation, want)
			}
		}
	}
}
