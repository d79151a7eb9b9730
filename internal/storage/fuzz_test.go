package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendSegRecord(nil, 0, 1, []byte("hello")))
	f.Add(appendSegRecord(nil, 7, -1, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		body, n, err := decodeRecord(b, nil)
		if err != nil {
			return
		}
		if n != recHeaderSize+len(body) || n > len(b) {
			t.Fatalf("size %d for body %d of %d", n, len(body), len(b))
		}
		if eid, pt, data, err := parseSegBody(body); err == nil {
			if !bytes.Equal(appendSegRecord(nil, eid, pt, data), b[:n]) {
				t.Fatal("segment record does not re-encode identically")
			}
		}
	})
}

func FuzzDecodeIndex(f *testing.F) {
	f.Add(encodeIndex(&segIndex{ledgerID: 3, entries: 100, bytes: 1000, fileSize: 5000, minTime: 1, maxTime: 9,
		points: []indexPoint{{0, 32, 5}, {64, 3000, 9}}}))
	f.Add(encodeIndex(&segIndex{ledgerID: 1, fileSize: headerSize}))
	f.Add([]byte("MRDN-IDX"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := decodeIndex(b)
		if err != nil {
			return
		}
		again, err := decodeIndex(encodeIndex(ix))
		if err != nil || !reflect.DeepEqual(ix, again) {
			t.Fatalf("index does not round-trip: %v", err)
		}
	})
}

func FuzzDecodeCursorState(f *testing.F) {
	st := &cursorState{name: "sub", markDelete: mtypes.Position{LedgerID: 3, EntryID: 7}, props: map[string]string{"k": "v"}}
	st.ack(mtypes.Position{LedgerID: 3, EntryID: 9})
	st.ack(mtypes.Position{LedgerID: 3, EntryID: 10})
	st.ack(mtypes.Position{LedgerID: 5, EntryID: 0})
	_, _ = st.ackBatch(mtypes.Position{LedgerID: 3, EntryID: 12}, 10, []int{1, 3})
	f.Add(encodeCursorState(nil, st))
	f.Add(encodeCursorState(nil, &cursorState{name: "x", markDelete: mtypes.Position{LedgerID: -1, EntryID: -1}}))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeCursorState(b)
		if err != nil {
			return
		}
		again, err := decodeCursorState(encodeCursorState(nil, st))
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		if again.name != st.name || again.markDelete != st.markDelete || again.ackedCount != st.ackedCount ||
			!reflect.DeepEqual(again.acked, st.acked) || len(again.props) != len(st.props) {
			t.Fatal("cursor state does not round-trip")
		}
	})
}

func FuzzDecodeEngineState(f *testing.F) {
	f.Add(encodeEngineState(engineState{ledgerIDLimit: 4097, firstJournal: 3, incarnations: 2}))
	f.Add(encodeEngineStateV1(engineState{ledgerIDLimit: 4097, firstJournal: 3}))
	f.Add([]byte("MRDN-STA"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeEngineState(b)
		if err != nil {
			return
		}
		if again, err := decodeEngineState(encodeEngineState(st)); err != nil || again != st {
			t.Fatal("engine state does not round-trip")
		}
	})
}

// FuzzRecoverJournal feeds arbitrary bytes as the journal tail to recovery: it must fail with
// an error or recover, never panic or hang. Version-1 journal (unseeded checksums).
func FuzzRecoverJournal(f *testing.F) {
	rec := fuzzJournalRecords(nil)
	f.Add(rec)
	f.Add(rec[:len(rec)-3])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, tail []byte) { recoverJournalTail(t, 1, tail) })
}

// FuzzRecoverJournalV2 is FuzzRecoverJournal for a version-2 journal (checksums seeded with the
// file's sequence, an end record, stale bytes after it as in a recycled file).
func FuzzRecoverJournalV2(f *testing.F) {
	rec := fuzzJournalRecords(journalSeed(1))
	f.Add(rec)
	f.Add(rec[:len(rec)-3])
	ended := appendEndRecord(append([]byte(nil), rec...))
	sealJournalRecords(ended[len(rec):], journalSeed(1))
	f.Add(append(ended, fuzzJournalRecords(journalSeed(0))...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, tail []byte) { recoverJournalTail(t, 2, tail) })
}

func fuzzJournalRecords(seed []byte) []byte {
	var rec []byte
	var start int
	rec, start = beginJournalRecord(rec, jAnnounce, 1)
	rec = append(rec, "t"...)
	finishJournalRecord(rec, start)
	rec, start = beginJournalRecord(rec, jEntry, 1)
	rec = binary.LittleEndian.AppendUint64(rec, 5)
	rec = appendSegRecord(rec, 0, 1, []byte("data"))
	finishJournalRecord(rec, start)
	rec, start = beginJournalRecord(rec, jCursor, 1)
	rec = append(rec, cState)
	rec = encodeCursorState(rec, &cursorState{name: "c", markDelete: mtypes.Position{LedgerID: 5, EntryID: 0}})
	finishJournalRecord(rec, start)
	sealJournalRecords(rec, seed)
	return rec
}

func recoverJournalTail(t *testing.T, version uint32, tail []byte) {
	fs := vfs.NewMem()
	_ = fs.MkdirAll("/data/journal")
	jf, _ := fs.OpenFile("/data/journal/0000000000000001.jnl", vfs.ReadWrite|vfs.Create)
	_, _ = jf.WriteAt(append(appendHeaderVersion(nil, magicJournal, 1, 0, version), tail...), 0)
	_ = jf.Sync()
	_ = jf.Close()
	_ = fs.SyncDir("/data/journal")
	writeInitialState(fs)
	e, err := Open(context.Background(), Options{Dir: "/data", FS: fs, Logger: testLogger()})
	if err != nil {
		return
	}
	defer e.Close()
	names, err := e.ListLedgers(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		l, err := e.OpenLedger(context.Background(), n)
		if err != nil {
			continue
		}
		_, _ = l.Read(context.Background(), mtypes.Earliest, 0, 0)
		for _, c := range l.Cursors() {
			_ = c.Backlog()
		}
	}
}

// FuzzLoadSegment feeds arbitrary bytes as a segment file and a cursor log to a ledger load.
func FuzzLoadSegment(f *testing.F) {
	seg := appendHeader(nil, magicSegment, 7)
	seg = appendSegRecord(seg, 0, 1, []byte("a"))
	seg = appendSegRecord(seg, 1, 2, []byte("bb"))
	cl := appendHeader(nil, magicCursors, 0)
	cl = appendPlainRecord(cl, encodeCursorState([]byte{cState}, &cursorState{name: "c", markDelete: mtypes.Position{LedgerID: 7, EntryID: 0}}))
	f.Add(seg, cl)
	f.Add(seg[:len(seg)-1], cl[:len(cl)-2])
	f.Fuzz(func(t *testing.T, segBytes, cursorBytes []byte) {
		fs := vfs.NewMem()
		dir := "/data/ledgers/t"
		_ = fs.MkdirAll(dir)
		for name, b := range map[string][]byte{"0000000000000007.seg": segBytes, "cursors.log": cursorBytes} {
			wf, _ := fs.OpenFile(dir+"/"+name, vfs.ReadWrite|vfs.Create)
			_, _ = wf.WriteAt(b, 0)
			_ = wf.Close()
		}
		writeInitialState(fs)
		e, err := Open(context.Background(), Options{Dir: "/data", FS: fs, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		l, _ := openRecovered(t, e, "t")
		if l == nil {
			return
		}
		for _, batch := range []int{1, 3} {
			from := mtypes.Earliest
			for i := 0; i < 100; i++ {
				es, err := l.Read(context.Background(), from, batch, 10)
				if err != nil || len(es) == 0 {
					break
				}
				last := es[len(es)-1].Position
				from = mtypes.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
			}
		}
		_, _ = l.FindByTime(context.Background(), 1)
		for _, c := range l.Cursors() {
			if c.Backlog() < 0 {
				t.Fatal("negative backlog")
			}
		}
	})
}

// FuzzRecoverDirectJournal feeds arbitrary bytes as a version-4 journal tail and as the segment it
// references (direct writes: directstart and entryref records, directwrite.go) to recovery: it
// must fail with an error or recover, never panic or hang, and a recovered ledger reads back
// consistently.
func FuzzRecoverDirectJournal(f *testing.F) {
	seg := appendHeader(nil, magicSegment, 5)
	seg = appendSegRecord(seg, 0, 1, []byte("a"))
	seg = appendSegRecord(seg, 1, 2, []byte("bb"))
	jr := fuzzDirectRecords(int64(len(seg) - headerSize))
	f.Add(jr, seg)
	f.Add(jr, seg[:len(seg)-3])                       // the segment's fsync did not finish: torn reference
	f.Add(jr, append(seg, 0xab, 0xcd, 0, 1, 2, 3, 4)) // unacknowledged direct data after the last entry
	f.Add(jr[:len(jr)-5], seg)
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, tail, segBytes []byte) {
		fs := vfs.NewMem()
		_ = fs.MkdirAll("/data/journal")
		_ = fs.MkdirAll("/data/ledgers/t")
		sf, _ := fs.OpenFile("/data/ledgers/t/0000000000000005.seg", vfs.ReadWrite|vfs.Create)
		_, _ = sf.WriteAt(segBytes, 0)
		_ = sf.Sync()
		_ = sf.Close()
		jf, _ := fs.OpenFile("/data/journal/0000000000000001.jnl", vfs.ReadWrite|vfs.Create)
		_, _ = jf.WriteAt(append(appendHeaderVersion(nil, magicJournal, 1, 0, journalFormatVersion), tail...), 0)
		_ = jf.Sync()
		_ = jf.Close()
		for _, d := range []string{"/data/journal", "/data/ledgers/t", "/data/ledgers", "/data"} {
			_ = fs.SyncDir(d)
		}
		e, err := Open(context.Background(), Options{Dir: "/data", FS: fs, Logger: testLogger()})
		if err != nil {
			return
		}
		defer e.Close()
		l, es := openRecovered(t, e, "t")
		if l == nil {
			return
		}
		for i := 1; i < len(es); i++ {
			if es[i].Position.Compare(es[i-1].Position) <= 0 {
				t.Fatalf("positions out of order: %v then %v", es[i-1].Position, es[i].Position)
			}
		}
	})
}

// fuzzDirectRecords is a version-4 journal: ledger t announced, its segment 5 started for direct
// writes, entries 0-1 referenced in the segment (length bytes after the header), entry 2 in the
// journal, a void of entries from 3 on.
func fuzzDirectRecords(length int64) []byte {
	var rec []byte
	var start int
	rec, start = beginJournalRecord(rec, jAnnounce, 1)
	rec = append(rec, "t"...)
	finishJournalRecord(rec, start)
	rec = appendDirectStart(rec, 1, 5)
	rec = appendEntryRef(rec, 1, 5, 0, 2, headerSize, length)
	rec, start = beginJournalRecord(rec, jEntry, 1)
	rec = binary.LittleEndian.AppendUint64(rec, 5)
	rec = appendSegRecord(rec, 2, 3, []byte("ccc"))
	finishJournalRecord(rec, start)
	rec, start = beginJournalRecord(rec, jVoid, 1)
	rec = binary.LittleEndian.AppendUint64(rec, 5)
	rec = binary.LittleEndian.AppendUint64(rec, 3)
	finishJournalRecord(rec, start)
	sealJournalRecords(rec, journalSeed(1))
	return rec
}

// openRecovered opens ledger name of a recovered engine and reads all of it: never more entries
// than the ledger counts. A ledger that does not open (recovery fenced or dropped it) gives nil.
func openRecovered(t *testing.T, e *Engine, name string) (*Ledger, []mtypes.Entry) {
	t.Helper()
	l, err := e.OpenLedger(context.Background(), name)
	if err != nil {
		return nil, nil
	}
	es, _ := l.Read(context.Background(), mtypes.Earliest, 0, 0)
	if int64(len(es)) > l.Entries() {
		t.Fatalf("read %d entries, ledger says %d", len(es), l.Entries())
	}
	return l, es
}
