package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// renameCountFS counts free journal files taken for reuse.
type renameCountFS struct {
	vfs.FS
	reused atomic.Int32
}

func (r *renameCountFS) Rename(oldname, newname string) error {
	err := r.FS.Rename(oldname, newname)
	if err == nil && strings.HasSuffix(oldname, ".free") && strings.HasSuffix(newname, ".jnl") {
		r.reused.Add(1)
	}
	return err
}

// TestJournalRecycling rotates through many small journal files: retired files are reused
// (overwritten in place), and after crashes at any point (random prefixes of unsynced appends
// kept) replay never takes the stale records of a file's previous use for data or for damage.
func TestJournalRecycling(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	stall := &stallFS{FS: mem}
	fs := &renameCountFS{FS: stall}
	e := openMem(t, fs, func(o *Options) { o.JournalFileBytes = 8 << 10 })
	defer e.Close()
	defer stall.release()
	l, err := e.OpenLedger(ctx, "recycled")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := e.OpenLedger(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	var acked []mtypes.Position
	for round := 0; round < 6; round++ {
		if round < 3 {
			// Another ledger's records fill the files that get recycled; it is deleted before
			// the crashes of the later rounds, so a stale record taken for a live one would
			// bring it back (or fail replay).
			for i := 0; i < 40; i++ {
				if _, err := gone.Append(ctx, payload(i), 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		if round == 3 {
			if err := e.DeleteLedger(ctx, "gone"); err != nil {
				t.Fatal(err)
			}
			// From now on checkpoints stall (segment fsyncs wait), so several journal files,
			// recycled ones among them, stay to be replayed after a crash: replay must stop at
			// each rotated file's end record and never take stale records for live ones.
			stall.mu.Lock()
			stall.segGate = make(chan struct{})
			stall.mu.Unlock()
		}
		for i := 0; i < 40; i++ {
			p, err := l.Append(ctx, payload(round*40+i), 1)
			if err != nil {
				t.Fatal(err)
			}
			acked = append(acked, p)
		}
		for seed := uint64(0); seed < 4; seed++ {
			crashed := mem.Crash(rand.New(rand.NewPCG(seed, uint64(round))))
			e2 := openMem(t, crashed, nil)
			l2, err := e2.OpenLedger(ctx, "recycled")
			if err != nil {
				t.Fatalf("round %d seed %d: %v", round, seed, err)
			}
			if l2.Err() != nil {
				t.Fatalf("round %d seed %d: ledger fenced: %v", round, seed, l2.Err())
			}
			for i, p := range acked {
				en, err := l2.ReadEntry(ctx, p)
				if err != nil || string(en.Data) != string(payload(i)) {
					t.Fatalf("round %d seed %d: entry %d at %v: %q, %v", round, seed, i, p, en.Data, err)
				}
			}
			if n := l2.Entries(); n != int64(len(acked)) {
				t.Fatalf("round %d seed %d: %d entries after the crash, want %d", round, seed, n, len(acked))
			}
			if ok, _ := e2.LedgerExists(ctx, "gone"); ok && round >= 3 {
				t.Fatalf("round %d seed %d: deleted ledger back after the crash", round, seed)
			}
			if err := e2.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fs.reused.Load() == 0 {
		t.Fatal("no journal file was recycled")
	}
	des, _ := mem.ReadDir("/data/journal")
	free := 0
	for _, d := range des {
		if strings.HasSuffix(d.Name, ".free") {
			free++
		}
	}
	if free > maxFreeJournals {
		t.Fatalf("%d free journal files kept, at most %d wanted", free, maxFreeJournals)
	}
}

// TestReplayVersion1Journal: a journal written by an earlier format (version 1: unseeded
// checksums, no end record; version 2: seeded, same layout as 3) is still replayed, and a
// version this build does not know is refused as unsupported, never read as damage.
func TestReplayVersion1Journal(t *testing.T) {
	for _, version := range []uint32{1, 2} {
		t.Run(fmt.Sprint(version), func(t *testing.T) { replayOldJournal(t, version) })
	}
	fs := vfs.NewMem()
	_ = fs.MkdirAll("/data/journal")
	jf, _ := fs.OpenFile("/data/journal/0000000000000001.jnl", vfs.ReadWrite|vfs.Create)
	_, _ = jf.WriteAt(appendHeaderVersion(nil, magicJournal, 1, 0, journalFormatVersion+1), 0)
	_ = jf.Sync()
	_ = jf.Close()
	_ = fs.SyncDir("/data/journal")
	if _, err := Open(context.Background(), Options{Dir: "/data", FS: fs, Logger: testLogger()}); !errors.Is(err, errUnsupportedVersion) {
		t.Fatalf("open with a journal of version %d: %v, want unsupported version", journalFormatVersion+1, err)
	}
}

func replayOldJournal(t *testing.T, version uint32) {
	fs := vfs.NewMem()
	_ = fs.MkdirAll("/data/journal")
	var rec []byte
	var start int
	rec, start = beginJournalRecord(rec, jAnnounce, 1)
	rec = append(rec, "old"...)
	finishJournalRecord(rec, start)
	rec, start = beginJournalRecord(rec, jCreate, 1)
	finishJournalRecord(rec, start)
	rec, start = beginJournalRecord(rec, jEntry, 1)
	rec = binary.LittleEndian.AppendUint64(rec, 5)
	rec = appendSegRecord(rec, 0, 1, []byte("from version 1"))
	finishJournalRecord(rec, start)
	var seed []byte
	if version >= 2 {
		seed = journalSeed(1)
	}
	sealJournalRecords(rec, seed)
	jf, _ := fs.OpenFile("/data/journal/0000000000000001.jnl", vfs.ReadWrite|vfs.Create)
	_, _ = jf.WriteAt(append(appendHeaderVersion(nil, magicJournal, 1, 0, version), rec...), 0)
	_ = jf.Sync()
	_ = jf.Close()
	_ = fs.SyncDir("/data/journal")
	writeInitialState(fs)
	e := openMem(t, fs, nil)
	defer e.Close()
	l, err := e.OpenLedger(context.Background(), "old")
	if err != nil {
		t.Fatal(err)
	}
	en, err := l.ReadEntry(context.Background(), mtypes.Position{LedgerID: 5, EntryID: 0})
	if err != nil || string(en.Data) != "from version 1" { // the same bytes in both versions
		t.Fatalf("entry %q, %v", en.Data, err)
	}
}

// TestRetiredJournalStaysRetiredAfterACrash: a checkpoint's retirement of journal files (renamed
// for reuse, or removed) is durable with it. Left to the next fsync of the journal directory, a
// crash brought the retired file back under its old name: recovery skips it by the state file's
// first journal, but `meridian repair` over a lost state file replays from the lowest journal
// file there, and would replay deletes and trimmed entries again.
func TestRetiredJournalStaysRetiredAfterACrash(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	mod := func(o *Options) {
		smallJournalsThroughCache(o)
		// The next file is prepared (which fsyncs the directory too) only once the current one
		// holds an eighth of this: not before the crash below.
		o.JournalFileBytes = 512 << 10
	}
	e := openMem(t, mem, mod)
	l, err := e.OpenLedger(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; e.Metrics().Checkpoints == 0; i++ {
		if i == 1000 {
			t.Fatal("no checkpoint after 1000 appends")
		}
		if _, err := l.Append(ctx, bytes.Repeat([]byte{'r'}, 1000), 1); err != nil {
			t.Fatal(err)
		}
	}
	// Not in the middle of a checkpoint (between its state file and its retirement).
	e.checkpointer.mu.Lock()
	crashed := mem.Crash(nil)
	e.checkpointer.mu.Unlock()
	_ = e.Close()
	data, err := readWholeFile(crashed, "/data/"+stateFile)
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeEngineState(data)
	if err != nil {
		t.Fatal(err)
	}
	des, _ := crashed.ReadDir("/data/journal")
	for _, de := range des {
		if seq, ok := parseHexName(de.Name, ".jnl"); ok && uint64(seq) < st.firstJournal {
			t.Fatalf("journal file %s is back after the crash (the state file starts at %d)", de.Name, st.firstJournal)
		}
	}
}
