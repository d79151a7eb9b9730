package storage

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Recovery never silently drops state: a damaged cursor log or a missing state file stops the
// ledger (or Open) with an error naming the file, where an ordinary crash outcome (a torn tail,
// a hole the journal rewrites) is repaired.

const damageLedger = "damage/t"

// cursorHistory builds a ledger with three durable cursors whose log holds five records:
// a, b created; a and b moved; c created. It returns the positions of the ledger's entries.
func cursorHistory(t *testing.T, mem *vfs.Mem) []mtypes.Position {
	t.Helper()
	ctx := context.Background()
	e := openMem(t, mem, nil)
	l, err := e.OpenLedger(ctx, damageLedger)
	if err != nil {
		t.Fatal(err)
	}
	ps := appendN(t, l, 10)
	a := openCursorT(t, l, "a")
	b := openCursorT(t, l, "b")
	if err := a.MarkDelete(ctx, ps[3]); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkDelete(ctx, ps[5]); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c := openCursorT(t, l, "c")
	if err := c.MarkDelete(ctx, ps[1]); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return ps
}

func openCursorT(t *testing.T, l *Ledger, name string) *Cursor {
	t.Helper()
	c, err := l.OpenCursor(context.Background(), name, CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func cursorLogFile(t *testing.T) string {
	return "/data/ledgers/" + mustDirName(t, damageLedger) + "/cursors.log"
}

// wantLedgerStopped opens the engine (which must succeed: one ledger's damage does not stop the
// broker) and expects OpenLedger to fail with ErrCorrupt naming the cursor log.
func wantLedgerStopped(t *testing.T, fs vfs.FS) {
	t.Helper()
	e := openMem(t, fs, nil)
	defer e.Close()
	_, err := e.OpenLedger(context.Background(), damageLedger)
	if err == nil {
		t.Fatal("the ledger opened over a damaged cursor log")
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "cursors.log") {
		t.Fatalf("OpenLedger: %v; want ErrCorrupt naming cursors.log", err)
	}
}

// wantCursors opens the ledger and checks the cursors' mark-delete positions.
func wantCursors(t *testing.T, fs vfs.FS, want map[string]mtypes.Position) {
	t.Helper()
	e := openMem(t, fs, nil)
	defer e.Close()
	l, err := e.OpenLedger(context.Background(), damageLedger)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]mtypes.Position{}
	for _, c := range l.Cursors() {
		got[c.Name()] = c.MarkDeletePosition()
	}
	if len(got) != len(want) {
		t.Fatalf("cursors %v, want %v", got, want)
	}
	for n, p := range want {
		if got[n] != p {
			t.Fatalf("cursors %v, want %v", got, want)
		}
	}
}

func TestCursorLogHeaderDamageStopsLedger(t *testing.T) {
	mem := vfs.NewMem()
	cursorHistory(t, mem)
	p := cursorLogFile(t)
	b := readFileForTest(t, mem, p)
	b[3] ^= 0xff // the magic
	writeFileForTest(t, mem, p, b)
	wantLedgerStopped(t, mem)
}

func TestCursorLogMidDamageStopsLedger(t *testing.T) {
	mem := vfs.NewMem()
	cursorHistory(t, mem)
	p := cursorLogFile(t)
	b := readFileForTest(t, mem, p)
	scan := scanCursorLog(b)
	if len(scan.prefix) < 3 {
		t.Fatalf("the cursor log holds %d records", len(scan.prefix))
	}
	b[scan.prefix[1].off+recHeaderSize+3] ^= 0xff // b's creation
	writeFileForTest(t, mem, p, b)
	wantLedgerStopped(t, mem)
}

// TestCursorLogTornTailIsCut: a torn record at the end is a normal crash outcome.
func TestCursorLogTornTailIsCut(t *testing.T) {
	mem := vfs.NewMem()
	ps := cursorHistory(t, mem)
	p := cursorLogFile(t)
	b := readFileForTest(t, mem, p)
	writeFileForTest(t, mem, p, append(b, 200, 0, 0, 0, 9, 9, 9, 9, cState, 1, 2))
	wantCursors(t, mem, map[string]mtypes.Position{"a": ps[3], "b": ps[5], "c": ps[1]})
}

// journalAfterCheckpoint reopens the data dir, moves cursor a and flushes it (a journal record;
// its cursor-log append is not fsynced) and returns what a crash then leaves, with a's new
// position and the cursor-log body the journal holds.
func journalAfterCheckpoint(t *testing.T, mem *vfs.Mem, ps []mtypes.Position) (*vfs.Mem, mtypes.Position, []byte) {
	t.Helper()
	ctx := context.Background()
	e := openMem(t, mem, nil)
	l, err := e.OpenLedger(ctx, damageLedger)
	if err != nil {
		t.Fatal(err)
	}
	a := l.Cursor("a")
	if err := a.MarkDelete(ctx, ps[7]); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	body := encodeCursorState([]byte{cState}, &a.st)
	a.mu.Unlock()
	crashed := mem.Crash(nil)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return crashed, ps[7], body
}

// TestCursorLogDamageAtReplayKeepsJournal: the journal replay finds the cursor log's header
// damaged. Starting the log over would lose cursors b and c (not in the replayed journal): the
// ledger stops instead, and repair salvages every state (TestRepairCursorLogAfterReplay).
func TestCursorLogDamageAtReplayKeepsJournal(t *testing.T) {
	mem := vfs.NewMem()
	ps := cursorHistory(t, mem)
	crashed, _, _ := journalAfterCheckpoint(t, mem, ps)
	p := cursorLogFile(t)
	b := readFileForTest(t, crashed, p)
	b[3] ^= 0xff
	writeFileForTest(t, crashed, p, b)
	wantLedgerStopped(t, crashed)
}

// TestCursorLogHoleAtReplay: a hole in the cursor log before a record the replayed journal holds
// is an ordinary crash outcome (unsynced appends reach the disk out of order): the replay
// rewrites it. A record after the hole that the journal does not hold is damage.
func TestCursorLogHoleAtReplay(t *testing.T) {
	t.Run("journal holds the record", func(t *testing.T) {
		mem := vfs.NewMem()
		ps := cursorHistory(t, mem)
		crashed, aPos, body := journalAfterCheckpoint(t, mem, ps)
		p := cursorLogFile(t)
		b := readFileForTest(t, crashed, p)
		b = append(b, make([]byte, 300)...)
		writeFileForTest(t, crashed, p, appendPlainRecord(b, body))
		wantCursors(t, crashed, map[string]mtypes.Position{"a": aPos, "b": ps[5], "c": ps[1]})
	})
	t.Run("journal does not hold the record", func(t *testing.T) {
		mem := vfs.NewMem()
		ps := cursorHistory(t, mem)
		crashed, _, _ := journalAfterCheckpoint(t, mem, ps)
		p := cursorLogFile(t)
		b := readFileForTest(t, crashed, p)
		stale := encodeCursorState([]byte{cState}, &cursorState{name: "d", markDelete: ps[2]})
		b = append(b, make([]byte, 300)...)
		writeFileForTest(t, crashed, p, appendPlainRecord(b, stale))
		wantLedgerStopped(t, crashed)
	})
}

// TestMissingStateFileRefused: without meridian.state over existing ledgers, the ledger id counter
// would restart at 1 and new positions would sort before acknowledged ones. Open refuses.
func TestMissingStateFileRefused(t *testing.T) {
	mem := vfs.NewMem()
	cursorHistory(t, mem)
	if err := mem.Remove("/data/" + stateFile); err != nil {
		t.Fatal(err)
	}
	wantOpenError(t, mem, stateFile)
}

// TestCursorLogResyncBounded: the search for readable records after a bad one checksums a bounded
// number of bytes. Property values are chosen by clients, and a torn record full of offsets that
// each claim a record up to the end of the file would otherwise cost time quadratic in its size;
// past the bound, whether records follow is unknown, which counts as damage.
func TestCursorLogResyncBounded(t *testing.T) {
	data := appendHeader(nil, magicCursors, 0)
	data = appendPlainRecord(data, encodeCursorState([]byte{cState}, &cursorState{name: "a", markDelete: mtypes.Position{LedgerID: 1, EntryID: 2}}))
	// A torn record: its header claims more than is there, its body is crafted.
	crafted := make([]byte, 4<<20)
	for i := 0; i+16 <= len(crafted); i += 16 {
		rest := len(crafted) - i - recHeaderSize
		crafted[i], crafted[i+1], crafted[i+2], crafted[i+3] = byte(rest), byte(rest>>8), byte(rest>>16), byte(rest>>24)
		crafted[i+8], crafted[i+9] = cState, 1
	}
	torn := append(appendPlainRecord(nil, make([]byte, 64<<20))[:recHeaderSize], crafted...)
	data = append(data, torn...)
	scan := scanCursorLog(data)
	if !scan.incomplete || !scan.damaged(data, nil) {
		t.Fatalf("the search was not bounded: incomplete %v, %d records after", scan.incomplete, len(scan.after))
	}
	if len(scan.prefix) != 1 {
		t.Fatalf("%d records before the torn one, want 1", len(scan.prefix))
	}
}

// TestSegmentResyncBounded: loading tells a segment's torn tail from damage by looking for a valid
// record after the bad one, at every offset of the next MiB. Entry payloads are chosen by clients:
// bytes whose every offset claims a record of 4 MiB made that search checksum a terabyte (a
// minute here; up to 64 TiB with records of the largest size). It is bounded; past the bound valid
// data may follow, which counts as damage.
func TestSegmentResyncBounded(t *testing.T) {
	mem := vfs.NewMem()
	data := appendHeader(nil, magicSegment, 7)
	data = appendSegRecord(data, 0, 1, []byte("good"))
	bad := int64(len(data))
	crafted := make([]byte, 6<<20)
	for i := 0; i+4 <= len(crafted); i += 4 {
		crafted[i+2] = 0x40 // the offsets read lengths of 4 MiB, 16 KiB, 64 bytes and 1 GiB
	}
	data = append(data, crafted...)
	writeFileForTest(t, mem, "/seg", data)
	f, err := mem.OpenFile("/seg", vfs.ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan recordsVerdict, 1)
	go func() { done <- classifyBadRecord(f, bad, int64(len(data)), false) }()
	select {
	case v := <-done:
		if v != recordsDamagedUnsearched {
			t.Fatalf("verdict %d, want damage that was not searched to the end", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the search for a valid record after the bad one is not bounded")
	}
}
