package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/node"
	"github.com/meridian-mq/meridian/internal/storage"
)

func runRepair(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(append([]string{"repair"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestRepairCommand: a topic whose cursor log is damaged does not load; `meridian repair` reports
// it without changing anything, and with --accept-loss salvages the subscriptions.
func TestRepairCommand(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	topic, err := naming.ParseTopic("persistent://public/default/repaired")
	if err != nil {
		t.Fatal(err)
	}
	opts := storage.Options{Dir: node.StorageDir(dataDir), Logger: newLogger()}
	e, err := storage.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.OpenLedger(ctx, topic.StorageName())
	if err != nil {
		t.Fatal(err)
	}
	var last mtypes.Position
	for range 5 {
		if last, err = l.Append(ctx, []byte("m"), 1); err != nil {
			t.Fatal(err)
		}
	}
	c, err := l.OpenCursor(ctx, "sub", storage.CursorOptions{Initial: mtypes.Earliest, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MarkDelete(ctx, last); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(node.StorageDir(dataDir), "ledgers", "*", "cursors.log"))
	if len(logs) != 1 {
		t.Fatalf("cursor logs: %v", logs)
	}
	b, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[2] ^= 0xff // the header
	if err := os.WriteFile(logs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := runRepair(t, "--data-dir", dataDir, "--topic", topic.String())
	if !errors.Is(err, errDamageFound) || !strings.Contains(out, "cursors.log") || !strings.Contains(out, "sub at") {
		t.Fatalf("repair without --accept-loss: %v\n%s", err, out)
	}
	out, err = runRepair(t, "--data-dir", dataDir, "--topic", topic.String(), "--accept-loss")
	if err != nil || !strings.Contains(out, "repaired:") || !strings.Contains(out, "loads") {
		t.Fatalf("repair --accept-loss: %v\n%s", err, out)
	}
	e, err = storage.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, err = e.OpenLedger(ctx, topic.StorageName())
	if err != nil {
		t.Fatal(err)
	}
	if c := l.Cursor("sub"); c == nil || c.MarkDeletePosition() != last {
		t.Fatalf("subscription after the repair: %+v", c)
	}
}

// TestRepairCommandRefusesARunningBroker: the data dir's lock is taken.
func TestRepairCommandRefusesARunningBroker(t *testing.T) {
	dataDir := t.TempDir()
	release, err := node.LockDataDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := runRepair(t, "--data-dir", dataDir); !errors.Is(err, node.ErrDataDirLocked) {
		t.Fatalf("repair of a locked data dir: %v", err)
	}
}
