package storage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

func testLogger() *slog.Logger {
	if os.Getenv("CRASH_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if os.Getenv("CRASHDBG") != "" {
		return slog.New(slog.NewTextHandler(&crashLog, nil)) // printed when a crash test fails
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func openMem(t testing.TB, fs vfs.FS, mod func(*Options)) *Engine {
	t.Helper()
	o := Options{Dir: "/data", FS: fs, Logger: testLogger()}
	if mod != nil {
		mod(&o)
	}
	e, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return e
}

func payload(i int) []byte {
	return []byte(fmt.Sprintf("entry-%06d-%s", i, bytes.Repeat([]byte{'x'}, i%50)))
}

func TestAppendReadReopen(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	e := openMem(t, fs, nil)
	l, err := e.OpenLedger(ctx, "public/default/persistent/t1")
	if err != nil {
		t.Fatal(err)
	}
	if lc := l.LastConfirmed(); lc.EntryID != -1 {
		t.Fatalf("empty LastConfirmed = %v", lc)
	}
	var ps []mtypes.Position
	for i := 0; i < 100; i++ {
		p, err := l.Append(ctx, payload(i), int64(1000+i))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if l.Entries() != 100 || l.LastConfirmed() != ps[99] {
		t.Fatalf("entries %d lc %v", l.Entries(), l.LastConfirmed())
	}
	es, err := l.Read(ctx, mtypes.Earliest, 0, 0)
	if err != nil || len(es) != 100 {
		t.Fatalf("read %d %v", len(es), err)
	}
	for i, en := range es {
		if en.Position != ps[i] || !bytes.Equal(en.Data, payload(i)) || en.PublishTime != int64(1000+i) {
			t.Fatalf("entry %d mismatch: %v", i, en.Position)
		}
	}
	c, err := l.OpenCursor(ctx, "sub", CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Backlog() != 100 {
		t.Fatalf("backlog %d", c.Backlog())
	}
	if err := c.MarkDelete(ctx, ps[9]); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, ps[11], ps[12]); err != nil {
		t.Fatal(err)
	}
	if c.Backlog() != 88 {
		t.Fatalf("backlog %d", c.Backlog())
	}
	c.Delete(ctx, ps[10])
	if c.MarkDeletePosition() != ps[12] {
		t.Fatalf("md %v", c.MarkDeletePosition())
	}
	if p, _ := l.FindByTime(ctx, 1050); p != ps[50] {
		t.Fatalf("find %v", p)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e = openMem(t, fs, nil)
	defer e.Close()
	l, err = e.OpenLedger(ctx, "public/default/persistent/t1")
	if err != nil {
		t.Fatal(err)
	}
	if l.Entries() != 100 {
		t.Fatalf("reopened entries %d", l.Entries())
	}
	p, err := l.Append(ctx, []byte("after"), 5000)
	if err != nil || p.LedgerID <= ps[99].LedgerID || p.EntryID != 0 {
		t.Fatalf("append after reopen: %v %v", p, err)
	}
	c = l.Cursor("sub")
	if c == nil || c.MarkDeletePosition() != ps[12] || c.Backlog() != 88 {
		t.Fatalf("cursor after reopen: %+v", c)
	}
	es, err = l.Read(ctx, ps[50], 10, 0)
	if err != nil || len(es) != 10 || es[0].Position != ps[50] {
		t.Fatalf("read after reopen %d %v", len(es), err)
	}
	names, _ := e.ListLedgers(ctx, "public/")
	if len(names) != 1 || names[0] != "public/default/persistent/t1" {
		t.Fatalf("list %v", names)
	}
}

func TestCrashReplay(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	e := openMem(t, fs, nil)
	l, _ := e.OpenLedger(ctx, "a")
	var ps []mtypes.Position
	for i := 0; i < 50; i++ {
		p, err := l.Append(ctx, payload(i), int64(i))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	crashed := fs.Crash(nil)
	e.Close()
	e2 := openMem(t, crashed, nil)
	defer e2.Close()
	l2, err := e2.OpenLedger(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	es, err := l2.Read(ctx, mtypes.Earliest, 0, 0)
	if err != nil || len(es) != 50 {
		t.Fatalf("after crash: %d entries, %v", len(es), err)
	}
	for i, en := range es {
		if en.Position != ps[i] || !bytes.Equal(en.Data, payload(i)) {
			t.Fatalf("entry %d mismatch", i)
		}
	}
}

// TestCrashKeepsANewDataDirsAncestors: a data directory whose parents Open creates survives a power
// loss once an append is acknowledged: every directory it created has its entry synced, not only
// the data directory's own and its parent's (the created grandparent's entry, unsynced, took the
// whole tree with it, and the broker started empty).
func TestCrashKeepsANewDataDirsAncestors(t *testing.T) {
	appendCrashAndRead(t, vfs.NewMem(), "/srv/meridian/cluster-a/data")
}

// An open whose directory sync failed leaves the new directories' entries unsynced; the next open
// finds them existing and still makes them durable before it acknowledges anything.
func TestRetriedOpenKeepsANewDataDirsAncestors(t *testing.T) {
	fs := vfs.NewMem()
	failed := false
	fs.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpSyncDir && !failed {
			failed = true
			return vfs.EIO
		}
		return nil
	})
	const dir = "/srv/meridian/cluster-a/data"
	if _, err := Open(context.Background(), Options{Dir: dir, FS: fs, Logger: testLogger()}); err == nil {
		t.Fatal("the first open did not report the injected directory sync failure")
	}
	appendCrashAndRead(t, fs, dir)
}

// appendCrashAndRead opens an engine on dir, has one append acknowledged, simulates a power loss
// and checks that the entry is there after the next open.
func appendCrashAndRead(t *testing.T, fs *vfs.Mem, dir string) {
	t.Helper()
	ctx := context.Background()
	e := openMem(t, fs, func(o *Options) { o.Dir = dir })
	l, err := e.OpenLedger(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Append(ctx, payload(1), 1)
	if err != nil {
		t.Fatal(err)
	}
	crashed := fs.Crash(nil)
	e.Close()
	if _, err := crashed.Stat(dir); err != nil {
		t.Fatalf("entry %v acknowledged, then after a power loss the data dir is gone: %v", p, err)
	}
	e2 := openMem(t, crashed, func(o *Options) { o.Dir = dir })
	defer e2.Close()
	l2, err := e2.OpenLedger(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	es, err := l2.Read(ctx, mtypes.Earliest, 0, 0)
	if err != nil || len(es) != 1 || es[0].Position != p {
		t.Fatalf("after the crash: %v, %v; want the acknowledged entry %v", es, err, p)
	}
}
