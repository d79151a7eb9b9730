package storage

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// TestSegmentPagesLeaveThePageCache: segment data, once written back, leaves the page cache
// (docs/storage.md, "Page cache"), on both write paths: the applier's (journal, then segment) and
// direct writes; and every entry still reads back.
func TestSegmentPagesLeaveThePageCache(t *testing.T) {
	probe := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(probe, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := (vfs.OS{}).OpenFile(probe, vfs.ReadWrite); err != nil {
		t.Fatal(err)
	} else {
		_ = vfs.DataSync(f)
		_ = vfs.DropCache(f, 0, 0)
		f.Close()
	}
	if res, _, err := vfs.ResidentPages(probe); err != nil || res > 0 {
		t.Skipf("the temporary directory's file system keeps dropped pages (%d resident, %v)", res, err)
	}
	for _, tc := range []struct {
		name   string
		direct int
	}{{"journaled", -1}, {"direct", 64 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			e, err := Open(ctx, Options{Dir: dir, Logger: testLogger(), JournalFileBytes: 1 << 20,
				DirectWriteBytes: tc.direct, CacheBytes: -1, BypassCacheBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			l, err := e.OpenLedger(ctx, "pagecache/t")
			if err != nil {
				t.Fatal(err)
			}
			payload := make([]byte, 64<<10)
			const n = 128 // 8 MiB
			// One entry per group commit: with direct writes on, each commit is at the threshold,
			// so the ledger goes direct from its third commit on.
			for i := range n {
				payload[0] = byte(i)
				if _, err := l.Append(ctx, payload, 1); err != nil {
					t.Fatal(err)
				}
			}
			seg := largestFile(t, filepath.Join(dir, "ledgers"))
			// Checkpoints (every 1 MiB of journal here) fsync the segment and drop what is
			// left; poll until the first half of the file is out of the page cache.
			poll.UntilNil(t, 10*time.Second, "half of "+seg+" out of the page cache", func() error {
				res, total, err := vfs.ResidentPages(seg)
				if err != nil {
					t.Fatal(err)
				}
				if res > total/2 {
					return fmt.Errorf("%d of %d pages resident", res, total)
				}
				t.Logf("%s: %d of %d pages resident", filepath.Base(seg), res, total)
				return nil
			})
			m := e.Metrics()
			if tc.direct > 0 && m.DirectWrites == 0 {
				t.Fatal("no direct writes: the test does not cover that path")
			}
			es, err := l.Read(ctx, l.FirstPosition(), n, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != n {
				t.Fatalf("read %d entries, want %d", len(es), n)
			}
			for i, en := range es {
				if len(en.Data) != len(payload) || en.Data[0] != byte(i) {
					t.Fatalf("entry %d: %d bytes, first %d", i, len(en.Data), en.Data[0])
				}
			}
		})
	}
}

// TestUnbufferedSegmentWrites: with every segment write and read around the page cache
// (unbuffered.go), on the real file system, entries of many sizes (so that blocks start and end mid-record, after the
// header, on boundaries) read back from the files, the segment's pages stay out of the page cache,
// sealed segments carry no padding, and a reopen finds everything with no torn tail.
func TestUnbufferedSegmentWrites(t *testing.T) {
	// By the applier (journal, then segment), and by the sync loop's direct writes.
	for _, direct := range []int{-1, 2048} {
		t.Run(fmt.Sprint("direct=", direct), func(t *testing.T) { testUnbufferedSegmentWrites(t, direct) })
	}
}

func testUnbufferedSegmentWrites(t *testing.T, directWriteBytes int) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{Dir: dir, Logger: testLogger(), CacheBytes: -1, BypassCacheBytes: 1,
		SegmentMaxEntries: 150, DirectWriteBytes: directWriteBytes}
	e, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.OpenLedger(ctx, "unbuffered/t")
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	data := func(i int) []byte {
		b := make([]byte, (i*397)%9000+1)
		for j := range b {
			b[j] = byte(i + j)
		}
		return b
	}
	var pos []mtypes.Position
	for i := range n {
		p, err := l.Append(ctx, data(i), int64(i))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	check := func(l *Ledger) {
		t.Helper()
		es, err := l.Read(ctx, pos[0], 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != n {
			t.Fatalf("read %d entries, want %d", len(es), n)
		}
		for i, en := range es {
			if en.Position != pos[i] || string(en.Data) != string(data(i)) {
				t.Fatalf("entry %d at %v: %d bytes, want %v with %d bytes", i, en.Position, len(en.Data), pos[i], len(data(i)))
			}
		}
	}
	if m := e.Metrics(); (m.DirectWrites > 0) != (directWriteBytes > 0) {
		t.Fatalf("%d direct writes with DirectWriteBytes %d", m.DirectWrites, directWriteBytes)
	}
	// Before any read: only the blocks whose start a write read back (after a seal, or the header
	// of a new segment) went through the page cache.
	seg := largestFile(t, filepath.Join(dir, "ledgers"))
	if res, total, err := vfs.ResidentPages(seg); err != nil || res > 2 {
		t.Errorf("%s: %d of %d pages in the page cache (%v), want at most the two a prefix read brings in", seg, res, total, err)
	}
	check(l)
	// Reads bypass it too.
	if res, total, err := vfs.ResidentPages(seg); err != nil || res > 2 {
		t.Errorf("after reading: %s: %d of %d pages in the page cache (%v)", seg, res, total, err)
	}
	// Sealed segments were cut back to their records.
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments, want the ledger rolled", len(segs))
	}
	for _, s := range segs[:len(segs)-1] {
		st, err := os.Stat(segPath(l.dirPath(), s.ID))
		if err != nil {
			t.Fatal(err)
		}
		l.mu.RLock()
		size := l.segByIDLocked(s.ID).size
		l.mu.RUnlock()
		if st.Size() != size {
			t.Errorf("sealed segment %d: file of %d bytes, records end at %d", s.ID, st.Size(), size)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, err = e.OpenLedger(ctx, "unbuffered/t")
	if err != nil {
		t.Fatal(err)
	}
	check(l)
	if m := e.Metrics(); m.RecoveredTornTails != 0 {
		t.Errorf("%d torn tails after a clean reopen: padding taken for a torn tail", m.RecoveredTornTails)
	}
}

func largestFile(t *testing.T, root string) string {
	t.Helper()
	var best string
	var size int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if info, err := d.Info(); err == nil && info.Size() > size {
			best, size = p, info.Size()
		}
		return nil
	})
	if err != nil || best == "" {
		t.Fatalf("no segment file under %s: %v", root, err)
	}
	return best
}
