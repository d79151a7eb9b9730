package storage

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

func appendN(t *testing.T, l *Ledger, n int) []mtypes.Position {
	t.Helper()
	var ps []mtypes.Position
	for i := 0; i < n; i++ {
		p, err := l.Append(context.Background(), payload(i), time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

func TestCursorStateTable(t *testing.T) {
	// Two segments: ledger 5 with entries 0..3, ledger 9 with entries 0..2.
	entries := map[int64]int64{5: 4, 9: 3}
	next := func(p mtypes.Position) (mtypes.Position, bool) {
		for _, id := range []int64{5, 9} {
			if id < p.LedgerID {
				continue
			}
			if id == p.LedgerID {
				if p.EntryID+1 < entries[id] {
					return mtypes.Position{LedgerID: id, EntryID: p.EntryID + 1}, true
				}
				continue
			}
			return mtypes.Position{LedgerID: id, EntryID: 0}, true
		}
		return mtypes.Position{}, false
	}
	s := &cursorState{markDelete: mtypes.Position{LedgerID: 5, EntryID: -1}}
	s.ack(mtypes.Position{LedgerID: 5, EntryID: 2})
	s.ack(mtypes.Position{LedgerID: 9, EntryID: 0})
	s.ack(mtypes.Position{LedgerID: 5, EntryID: 3})
	s.normalize(next)
	if s.markDelete != (mtypes.Position{LedgerID: 5, EntryID: -1}) || len(s.acked) != 2 || s.ackedCount != 3 {
		t.Fatalf("after holes: %+v", s)
	}
	s.ack(mtypes.Position{LedgerID: 5, EntryID: 1})
	s.ack(mtypes.Position{LedgerID: 5, EntryID: 0})
	s.normalize(next)
	// 5:0..3 and 9:0 are contiguous across the segment boundary.
	if s.markDelete != (mtypes.Position{LedgerID: 9, EntryID: 0}) || len(s.acked) != 0 || s.ackedCount != 0 {
		t.Fatalf("after filling: %+v", s)
	}
	s.ack(mtypes.Position{LedgerID: 9, EntryID: 2})
	s.setMarkDelete(mtypes.Position{LedgerID: 9, EntryID: 1})
	s.normalize(next)
	if s.markDelete != (mtypes.Position{LedgerID: 9, EntryID: 2}) || s.ackedCount != 0 {
		t.Fatalf("mark-delete over an ack: %+v", s)
	}
	if all, err := s.ackBatch(mtypes.Position{LedgerID: 10, EntryID: 0}, 3, []int{0, 1, 2}); err != nil || !all {
		t.Fatal("full batch not complete")
	}
	if all, err := s.ackBatch(mtypes.Position{LedgerID: 10, EntryID: 1}, 3, []int{0, 2}); err != nil || all || s.batches[mtypes.Position{LedgerID: 10, EntryID: 1}].acked[0] != 0b101 {
		t.Fatal("partial batch")
	}
	st, err := decodeCursorState(encodeCursorState(nil, s))
	if err != nil || st.markDelete != s.markDelete || st.batches[mtypes.Position{LedgerID: 10, EntryID: 1}].acked[0] != 0b101 {
		t.Fatalf("round trip: %v %+v", err, st)
	}
}

func TestCursorAcksAndReset(t *testing.T) {
	ctx := context.Background()
	e := openMem(t, vfs.NewMem(), nil)
	defer e.Close()
	l, _ := e.OpenLedger(ctx, "c")
	c, _ := l.OpenCursor(ctx, "s", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	ps := appendN(t, l, 5)
	if err := l.Roll(ctx); err != nil {
		t.Fatal(err)
	}
	ps = append(ps, appendN(t, l, 5)...)
	_ = c.Delete(ctx, ps[1], ps[4], ps[5])
	if c.Backlog() != 7 || !c.IsAcknowledged(ps[4]) || c.IsAcknowledged(ps[2]) {
		t.Fatalf("backlog %d", c.Backlog())
	}
	_ = c.Delete(ctx, ps[0], ps[2], ps[3])
	if c.MarkDeletePosition() != ps[5] || c.Backlog() != 4 {
		t.Fatalf("md %v backlog %d", c.MarkDeletePosition(), c.Backlog())
	}
	_ = c.AckBatchIndexes(ctx, ps[6], 4, []int{0, 3})
	if got := c.AckedBatchIndexes(ps[6]); len(got) != 1 || got[0] != 0b1001 {
		t.Fatalf("batch bits %v", got)
	}
	_ = c.AckBatchIndexes(ctx, ps[6], 4, []int{1, 2})
	if c.MarkDeletePosition() != ps[6] || c.AckedBatchIndexes(ps[6]) != nil {
		t.Fatalf("batch completion: md %v", c.MarkDeletePosition())
	}
	_ = c.ResetTo(ctx, ps[2])
	if c.MarkDeletePosition() != (mtypes.Position{LedgerID: ps[2].LedgerID, EntryID: 1}) || c.Backlog() != 8 {
		t.Fatalf("reset: md %v backlog %d", c.MarkDeletePosition(), c.Backlog())
	}
	_ = c.ResetTo(ctx, mtypes.Latest)
	if c.Backlog() != 0 {
		t.Fatalf("reset to latest: backlog %d", c.Backlog())
	}
	_ = c.SetProperties(ctx, map[string]string{"a": "b"})
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	latest, _ := l.OpenCursor(ctx, "late", CursorOptions{Initial: mtypes.Latest})
	if latest.Backlog() != 0 || latest.Durable() {
		t.Fatal("non-durable latest cursor")
	}
	_, _ = l.Append(ctx, []byte("x"), 1)
	if latest.Backlog() != 1 {
		t.Fatalf("latest backlog %d", latest.Backlog())
	}
	if err := l.DeleteCursor(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if l.Cursor("s") != nil || len(l.Cursors()) != 1 {
		t.Fatal("cursor not deleted")
	}
}

func TestTrimAndRetention(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	e := openMem(t, fs, nil)
	l, _ := e.OpenLedger(ctx, "r")
	c, _ := l.OpenCursor(ctx, "s", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	var all []mtypes.Position
	for i := 0; i < 4; i++ {
		all = append(all, appendN(t, l, 10)...)
		_ = l.Roll(ctx)
	}
	l.SetRetention(-1, -1)
	_ = c.MarkDelete(ctx, all[len(all)-1])
	_ = c.Flush(ctx) // Trim goes by persisted positions (trimposition.go)
	if err := l.Trim(ctx); err != nil || l.Entries() != 40 {
		t.Fatalf("infinite retention trimmed: %d %v", l.Entries(), err)
	}
	l.SetRetention(-1, 351) // each segment holds 175 bytes: keep two (Pulsar: remove while larger)
	_ = l.Trim(ctx)
	if n := l.Entries(); n != 20 {
		t.Fatalf("size retention kept %d entries, want 20", n)
	}
	l.SetRetention(0, 0)
	_ = c.ResetTo(ctx, all[25]) // the cursor needs 25.. again: nothing before its segment may go
	_ = c.Flush(ctx)
	_ = l.Trim(ctx)
	if l.FirstPosition() != all[20] {
		t.Fatalf("first %v", l.FirstPosition())
	}
	_ = c.MarkDelete(ctx, all[len(all)-1])
	_ = c.Flush(ctx)
	_ = l.Trim(ctx)
	if l.Entries() != 0 || c.Backlog() != 0 {
		t.Fatalf("after full trim: %d entries", l.Entries())
	}
	if _, err := l.ReadEntry(ctx, all[0]); !errors.Is(err, ErrNotFound) || !errors.Is(err, ErrTrimmed) {
		t.Fatalf("trimmed entry: %v", err)
	}
	crashed := fs.Crash(nil)
	e.Close()
	e2 := openMem(t, crashed, nil)
	defer e2.Close()
	l2, _ := e2.OpenLedger(ctx, "r")
	if l2.Entries() != 0 {
		t.Fatalf("trimmed data came back after a crash: %d entries", l2.Entries())
	}
}

func TestDeleteLedgerNeverReusesIDs(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	e := openMem(t, fs, nil)
	name := "persistent://t/ns/" + strings.Repeat("long-name-", 40)
	l, _ := e.OpenLedger(ctx, name)
	ps := appendN(t, l, 3)
	_, _ = l.OpenCursor(ctx, "s", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if names, _ := e.ListLedgers(ctx, "persistent://t/"); len(names) != 1 || names[0] != name {
		t.Fatalf("list %v", names)
	}
	if err := e.DeleteLedger(ctx, name); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.LedgerExists(ctx, name); ok {
		t.Fatal("deleted ledger exists")
	}
	e.Close()
	e = openMem(t, fs, nil)
	defer e.Close()
	l, _ = e.OpenLedger(ctx, name)
	if l.Entries() != 0 || len(l.Cursors()) != 0 {
		t.Fatal("data or cursors survived deletion")
	}
	p, _ := l.Append(ctx, []byte("again"), 1)
	if p.LedgerID <= ps[2].LedgerID {
		t.Fatalf("ledger id reused: %v after %v", p, ps[2])
	}
}

func TestFsyncFailureFences(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	e := openMem(t, fs, nil)
	defer e.Close()
	l, _ := e.OpenLedger(ctx, "f")
	ok := appendN(t, l, 3)
	fs.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.Contains(name, "/journal/") {
			return vfs.EIO
		}
		return nil
	})
	if _, err := l.Append(ctx, []byte("lost"), 1); err == nil {
		t.Fatal("append acknowledged although fsync failed")
	}
	if !errors.Is(l.Err(), ErrFenced) {
		t.Fatalf("not fenced: %v", l.Err())
	}
	if _, err := l.Append(ctx, []byte("after"), 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("append on fenced ledger: %v", err)
	}
	fs.SetInjector(nil)
	_ = l.Close()
	l, err := e.OpenLedger(ctx, "f")
	if err != nil || l.Err() != nil || l.Entries() != 3 {
		t.Fatalf("reopen after fence: %v %v %d", err, l.Err(), l.Entries())
	}
	if _, err := l.Append(ctx, []byte("works"), 1); err != nil {
		t.Fatal(err)
	}
	_ = ok
	crashed := fs.Crash(nil)
	e2 := openMem(t, crashed, nil)
	defer e2.Close()
	l2, _ := e2.OpenLedger(ctx, "f")
	if l2.Err() != nil || l2.Entries() != 4 {
		t.Fatalf("after crash: %v, %d entries", l2.Err(), l2.Entries())
	}
}

// TestSyncIntervalMode runs in a synctest bubble: the clock moves only when every goroutine waits,
// so no interval passes while the 20 entries are appended (however loaded the machine), and the
// fsync comes when the interval has passed in fake time.
func TestSyncIntervalMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := openMem(t, vfs.NewMem(), func(o *Options) { o.Sync = SyncInterval; o.SyncInterval = 5 * time.Millisecond })
		defer e.Close()
		l, _ := e.OpenLedger(ctx, "i")
		appendN(t, l, 20)
		synctest.Wait()
		m := e.Metrics()
		if m.SyncMode != "interval" || m.UnsyncedAcks != 20 || m.Fsyncs != 0 {
			t.Fatalf("metrics before the interval passed %+v", m)
		}
		poll.Until(t, 5*time.Second, "the interval fsync", func() bool { return e.Metrics().Fsyncs > 0 })
	})
}

func TestMidSegmentCorruptionFences(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	e := openMem(t, fs, nil)
	l, _ := e.OpenLedger(ctx, "m")
	appendN(t, l, 50)
	e.Close() // checkpoint: segment durable, journal empty
	des, _ := fs.ReadDir("/data/ledgers/m")
	var seg string
	for _, d := range des {
		if strings.HasSuffix(d.Name, ".seg") {
			seg = "/data/ledgers/m/" + d.Name
		}
	}
	f, _ := fs.OpenFile(seg, vfs.ReadWrite)
	_, _ = f.WriteAt([]byte{0xde, 0xad}, 200) // inside an early record
	_ = f.Sync()
	_ = f.Close()
	e = openMem(t, fs, nil)
	defer e.Close()
	l, err := e.OpenLedger(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), ErrFenced) || !errors.Is(l.Err(), ErrCorrupt) {
		t.Fatalf("corruption not reported: %v", l.Err())
	}
	if _, err := l.Append(ctx, []byte("x"), 1); err == nil {
		t.Fatal("append to a corrupt ledger")
	}
}

// TestReadChunkBoundaries reads with every batch size over records of mixed sizes, so that
// records straddle the end of every read buffer (a regression test for a panic there).
func TestReadChunkBoundaries(t *testing.T) {
	ctx := context.Background()
	e := openMem(t, vfs.NewMem(), func(o *Options) { o.CacheBytes = -1 })
	defer e.Close()
	l, _ := e.OpenLedger(ctx, "chunks")
	var want [][]byte
	for i := 0; i < 300; i++ {
		d := []byte(strings.Repeat(string(rune('a'+i%26)), (i*397)%9000))
		if _, err := l.Append(ctx, d, int64(i)); err != nil {
			t.Fatal(err)
		}
		want = append(want, d)
	}
	for _, batch := range []int{0, 1, 2, 3, 7, 64, 299} {
		for _, maxBytes := range []int64{0, 1, 5000, 1 << 20} {
			var got []mtypes.Entry
			from := mtypes.Earliest
			for {
				es, err := l.Read(ctx, from, batch, maxBytes)
				if err != nil {
					t.Fatalf("batch %d maxBytes %d: %v", batch, maxBytes, err)
				}
				if len(es) == 0 {
					break
				}
				got = append(got, es...)
				last := es[len(es)-1].Position
				from = mtypes.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
			}
			if len(got) != len(want) {
				t.Fatalf("batch %d maxBytes %d: %d entries", batch, maxBytes, len(got))
			}
			for i := range got {
				if string(got[i].Data) != string(want[i]) {
					t.Fatalf("batch %d maxBytes %d: entry %d differs", batch, maxBytes, i)
				}
			}
		}
	}
}

func TestCreatedLedgerSurvivesCrash(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	e := openMem(t, fs, nil)
	if _, err := e.OpenLedger(ctx, "public/default/persistent/empty"); err != nil {
		t.Fatal(err)
	}
	crashed := fs.Crash(nil)
	e.Close()
	e2 := openMem(t, crashed, nil)
	defer e2.Close()
	if ok, err := e2.LedgerExists(ctx, "public/default/persistent/empty"); !ok || err != nil {
		t.Fatalf("created ledger lost in a crash: %v %v", ok, err)
	}
}

// TestRetriedCreationOfHashedLedgerSurvivesPowerLoss: a hashed-name ledger whose first creation
// made its directory and then failed writing NAME (ENOSPC) is created by a retried OpenLedger, and
// the entries it acknowledges survive a power loss after a checkpoint retired their journal. Before,
// the retry found the directory, took the ledger for an existing one (no jCreate record, nothing
// marked dirty) and no fsync of ledgers/ ever covered the directory's entry: the checkpoint retired
// the journal and the power loss took the ledger with its entries.
func TestRetriedCreationOfHashedLedgerSurvivesPowerLoss(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var failed atomic.Bool
	mem.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpCreate && strings.HasSuffix(name, "/NAME") && failed.CompareAndSwap(false, true) {
			return vfs.ENOSPC
		}
		return nil
	})
	mod := func(o *Options) { o.DirectWriteBytes = -1 }
	e := openMem(t, mem, mod)
	name := strings.Repeat("long-topic-name/", 16) // escaped form > 200 bytes: hashed directory
	if _, hashed := dirName(name); !hashed {
		t.Fatal("name is not hashed")
	}
	if _, err := e.OpenLedger(ctx, name); err == nil {
		t.Fatal("the first open did not report the injected NAME failure")
	}
	l, err := e.OpenLedger(ctx, name) // the disk has room again: the retry succeeds
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Append(ctx, payload(1), 1)
	if err != nil {
		t.Fatal(err)
	}
	checkpointThrough(t, e)
	crashed := mem.Crash(nil)
	_ = e.Close()
	e2 := openMem(t, crashed, mod)
	defer e2.Close()
	verifyAcked(t, e2, name, map[mtypes.Position]string{p: string(payload(1))})
}

// readCountingFS counts the bytes read from segment files.
type readCountingFS struct {
	vfs.FS
	read *atomic.Int64
}

func (f readCountingFS) OpenFile(name string, flag int) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return file, err
	}
	return readCountingFile{file, f.read}, nil
}

type readCountingFile struct {
	vfs.File
	read *atomic.Int64
}

func (f readCountingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.read.Add(int64(n))
	return n, err
}

// TestReadHints: sequential readers going through a ledger in interleaved reads (several segments,
// uncached) get every entry, and a reader of 100 entries at a time reads each byte about once
// (the read hints start every read where the reader's previous one stopped, not at the index
// point before it).
func TestReadHints(t *testing.T) {
	ctx := context.Background()
	var read atomic.Int64
	e := openMem(t, readCountingFS{vfs.NewMem(), &read}, func(o *Options) {
		o.CacheBytes = -1
		o.SegmentMaxEntries = 1500
	})
	defer e.Close()
	l, _ := e.OpenLedger(ctx, "hints")
	var want [][]byte
	var stored int64
	for i := 0; i < 4000; i++ {
		d := []byte(strings.Repeat(string(rune('a'+i%26)), 1000+(i*37)%100))
		if _, err := l.Append(ctx, d, int64(i)); err != nil {
			t.Fatal(err)
		}
		want = append(want, d)
		stored += int64(len(d) + segRecordOverhead)
	}
	type reader struct {
		from  mtypes.Position
		n     int
		batch int
		bytes int64
	}
	readers := []*reader{{from: mtypes.Earliest, batch: 100}, {from: mtypes.Earliest, batch: 37}, {from: mtypes.Earliest, batch: 250, bytes: 100 << 10},
		{from: mtypes.Earliest, batch: 1}, {from: mtypes.Earliest, batch: 64}, {from: mtypes.Earliest, batch: 100}}
	for round := 0; ; round++ {
		active := 0
		for i, r := range readers {
			if r.n == len(want) || (i == 3 && round%7 != 0) {
				active += min(1, len(want)-r.n)
				continue
			}
			active++
			es, err := l.Read(ctx, r.from, r.batch, r.bytes)
			if err != nil {
				t.Fatalf("reader %d at %v: %v", i, r.from, err)
			}
			for _, en := range es {
				if string(en.Data) != string(want[r.n]) {
					t.Fatalf("reader %d: entry %d (%v) differs", i, r.n, en.Position)
				}
				r.n++
			}
			last := es[len(es)-1].Position
			r.from = mtypes.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
		}
		if active == 0 {
			break
		}
	}
	// One reader alone, 100 entries per read: each byte is read about once.
	read.Store(0)
	from := mtypes.Earliest
	for n := 0; n < len(want); {
		es, err := l.Read(ctx, from, 100, 0)
		if err != nil || len(es) == 0 {
			t.Fatalf("read at %v: %d entries, %v", from, len(es), err)
		}
		n += len(es)
		last := es[len(es)-1].Position
		from = mtypes.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	}
	if got := read.Load(); got > stored*11/10 {
		t.Errorf("read %d bytes of segment files for %d stored: sequential reads start before their entries", got, stored)
	}
}
