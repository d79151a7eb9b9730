package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// prefilledJournal is journal file seq as the engine leaves it: header, records, an end record if
// rotated, then zeros up to size (a file zero-filled before use, nextjournal.go).
func prefilledJournal(seq uint64, flags uint32, recs []byte, rotated bool, size int) []byte {
	return tornPrefilledJournal(seq, flags, recs, rotated, size, -1)
}

// tornPrefilledJournal is prefilledJournal with only the first keep bytes of the records written
// (keep < 0: all of them).
func tornPrefilledJournal(seq uint64, flags uint32, recs []byte, rotated bool, size, keep int) []byte {
	b := appendHeaderFlags(nil, magicJournal, seq, flags)
	body := append([]byte(nil), recs...)
	if rotated {
		body = appendEndRecord(body)
	}
	sealJournalRecords(body, journalSeed(seq))
	if keep >= 0 {
		body = body[:keep]
	}
	b = append(b, body...)
	if len(b) < size {
		b = append(b, make([]byte, size-len(b))...)
	}
	return b
}

// entryRecords are journal records for entries first..first+n-1 of segment 5 of ledger "t"
// (slot 1), announced first; offsets[i] is where entry first+i's record starts in the result.
func entryRecords(first, n int) (recs []byte, offsets []int) {
	recs = appendAnnounce(recs, 1, "t")
	for i := first; i < first+n; i++ {
		offsets = append(offsets, len(recs))
		var start int
		recs, start = beginJournalRecord(recs, jEntry, 1)
		recs = binary.LittleEndian.AppendUint64(recs, 5)
		recs = appendSegRecord(recs, int64(i), int64(i), payload(i))
		finishJournalRecord(recs, start)
	}
	return recs, offsets
}

func writeJournalFiles(t *testing.T, files map[uint64][]byte) *vfs.Mem {
	t.Helper()
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/data/journal"); err != nil {
		t.Fatal(err)
	}
	for seq, b := range files {
		f, err := fs.OpenFile(fmtJournalPath(seq), vfs.ReadWrite|vfs.Create)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(b, 0); err != nil {
			t.Fatal(err)
		}
		_ = f.Sync()
		_ = f.Close()
	}
	for _, d := range []string{"/data/journal", "/data", "/"} {
		_ = fs.SyncDir(d)
	}
	writeInitialState(fs)
	return fs
}

// writeInitialState writes the state file of a data directory whose journal starts at file 1
// (Open refuses journal files or ledger directories without a state file).
func writeInitialState(fs vfs.FS) {
	_ = fs.MkdirAll("/data")
	f, _ := fs.OpenFile("/data/"+stateFile, vfs.ReadWrite|vfs.Create|vfs.Trunc)
	_, _ = f.WriteAt(encodeEngineState(engineState{ledgerIDLimit: 1, firstJournal: 1}), 0)
	_ = f.Sync()
	_ = f.Close()
	_ = fs.SyncDir("/data")
}

func fmtJournalPath(seq uint64) string {
	return (&Engine{journalDir: "/data/journal"}).journalPath(seq)
}

// TestJournalTailReplay: what recovery makes of journal files that are longer than their
// records (zeros after them: a torn tail, or a file zero-filled before use; stale bytes of a
// recycled file's previous use): zeros after the last record of the last file are a quiet end,
// a bad record before the end record of a file that is not the last is corruption whatever
// follows it, and a file that is not the last must end with its end record.
func TestJournalTailReplay(t *testing.T) {
	const size = 64 << 10
	recs1, _ := entryRecords(0, 3)
	recs2, offs2 := entryRecords(3, 2)
	cases := []struct {
		name    string
		files   map[uint64][]byte
		entries int64 // -1: Open fails with ErrCorrupt
	}{
		{"intact", map[uint64][]byte{
			1: prefilledJournal(1, 0, recs1, true, size),
			2: prefilledJournal(2, 0, recs2, false, size),
		}, 5},
		{"last file torn before its zeros", map[uint64][]byte{
			1: prefilledJournal(1, 0, recs1, true, size),
			2: tornPrefilledJournal(2, 0, recs2, false, size, offs2[1]+20),
		}, 4},
		{"last file only zeros after its header", map[uint64][]byte{
			1: prefilledJournal(1, 0, recs1, true, size),
			2: prefilledJournal(2, 0, nil, false, size),
		}, 3},
		{"bad record in the middle of a file that is not the last", map[uint64][]byte{
			1: func() []byte {
				b := prefilledJournal(1, 0, recs1, true, size)
				b[headerSize+len(recs1)/2] ^= 0x40
				return b
			}(),
			2: prefilledJournal(2, 0, recs2, false, size),
		}, -1},
		{"file that is not the last ends in zeros without its end record", map[uint64][]byte{
			1: prefilledJournal(1, 0, recs1, false, size),
			2: prefilledJournal(2, 0, recs2, false, size),
		}, -1},
		{"torn new header of a recycled file whose fsync failed", map[uint64][]byte{
			1: prefilledJournal(1, 0, recs1, true, size),
			2: func() []byte {
				// The file's previous use (journal 0x77) and 20 bytes of its new header.
				old, _ := entryRecords(7, 3)
				b := prefilledJournal(0x77, 0, old, true, size)
				copy(b, appendHeaderFlags(nil, magicJournal, 2, 0)[:20])
				return b
			}(),
			3: prefilledJournal(3, journalFlagPrevUnclean, recs2, false, size),
		}, 5},
		{"corrupt header of a file that holds records", map[uint64][]byte{
			1: prefilledJournal(1, 0, recs1, true, size),
			2: func() []byte {
				b := prefilledJournal(2, 0, recs2, false, size)
				b[17] ^= 1
				return b
			}(),
		}, -1},
		{"the next file says this one was abandoned", map[uint64][]byte{
			1: prefilledJournal(1, 0, recs1, false, size),
			2: prefilledJournal(2, journalFlagPrevUnclean, recs2, false, size),
		}, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := writeJournalFiles(t, tc.files)
			e, err := Open(context.Background(), Options{Dir: "/data", FS: fs, Logger: testLogger()})
			if tc.entries < 0 {
				if err == nil {
					e.Close()
					t.Fatal("Open succeeded, want ErrCorrupt")
				}
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Open: %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			l := openUnfenced(t, e, "t")
			es, err := l.Read(context.Background(), mtypes.Earliest, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(es)) != tc.entries {
				t.Fatalf("%d entries, want %d", len(es), tc.entries)
			}
			for i, en := range es {
				if en.Position != (mtypes.Position{LedgerID: 5, EntryID: int64(i)}) || string(en.Data) != string(payload(i)) {
					t.Fatalf("entry %d: %v %q", i, en.Position, en.Data)
				}
			}
		})
	}
}

// TestJournalZeroLengthRecord: zeros after the last record read as a record header with body
// length 0 and checksum 0. For the few sequence numbers whose seeded checksum of an empty body is
// 0 that is a well-formed record; a journal record body is never empty, so replay must take it
// for the end of the file like any invalid record, not fail Open.
func TestJournalZeroLengthRecord(t *testing.T) {
	recs, _ := entryRecords(0, 2)
	b := prefilledJournal(1, 0, recs, false, 0)
	empty := make([]byte, recHeaderSize)
	binary.LittleEndian.PutUint32(empty[4:], crc32.Update(0, castagnoli, journalSeed(1)))
	b = append(b, empty...)
	b = append(b, make([]byte, 4096)...)
	fs := writeJournalFiles(t, map[uint64][]byte{1: b})
	e, err := Open(context.Background(), Options{Dir: "/data", FS: fs, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, err := e.OpenLedger(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if n := l.Entries(); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
}
