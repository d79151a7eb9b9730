package storage

import (
	"bytes"
	"context"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// TestPacedWriteback: segment data written by the applier is handed to the device every
// writebackChunk bytes (paceWriteback), not left for the checkpoint's fsync; what is written last
// (less than a chunk) waits for the checkpoint. The data reads back unchanged.
func TestPacedWriteback(t *testing.T) {
	fs := vfs.NewMem()
	e, l := openDirect(t, fs, func(o *Options) { o.DirectWriteBytes = -1 }, "pace/l")
	entry := bytes.Repeat([]byte("w"), 32<<10)
	const n = 112 // 3.5 MiB of entries
	for i := range n {
		if _, err := l.Append(context.Background(), entry, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	started := fs.WritebackStartedUnder("/data/ledgers/") // journal files are zero-filled with writeback too (nextjournal.go)
	if started < 3*writebackChunk || started > n*int64(len(entry)+segRecordOverhead)+headerSize {
		t.Fatalf("writeback started for %d bytes of a %d-byte segment", started, n*(len(entry)+segRecordOverhead))
	}
	if m := e.Metrics(); m.DirectWrites != 0 {
		t.Fatalf("%d direct writes with direct writes off", m.DirectWrites)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	_, l = openDirect(t, fs, nil, "pace/l") // read back from the files
	got, err := l.Read(context.Background(), mtypes.Earliest, 0, 0)
	if err != nil || len(got) != n {
		t.Fatalf("read back %d entries, err %v", len(got), err)
	}
	for i, en := range got {
		if !bytes.Equal(en.Data, entry) || en.PublishTime != int64(i) {
			t.Fatalf("entry %d (%v) changed", i, en.Position)
		}
	}
}
