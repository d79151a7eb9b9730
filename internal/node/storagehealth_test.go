package node

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// gatherStorage returns the node's storage metrics by name, as its collector exports them (the
// value of the first sample), and the error label of the last checkpoint error if there is one.
func gatherStorage(t *testing.T, n *Node) (map[string]float64, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(&nodeCollector{n: n})
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	ckptErr := ""
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "meridian_storage_") || len(f.GetMetric()) == 0 {
			continue
		}
		m := f.GetMetric()[0]
		switch {
		case m.Gauge != nil:
			out[name] = m.GetGauge().GetValue()
		case m.Counter != nil:
			out[name] = m.GetCounter().GetValue()
		case m.Histogram != nil:
			out[name+"_count"] = float64(m.GetHistogram().GetSampleCount())
		}
		if name == "meridian_storage_last_checkpoint_error_info" {
			for _, l := range m.GetLabel() {
				if l.GetName() == "error" {
					ckptErr = l.GetValue()
				}
			}
		}
	}
	return out, ckptErr
}

func readiness(n *Node) (int, string) {
	rec := httptest.NewRecorder()
	n.serveReady(rec, httptest.NewRequest(http.MethodGet, "/admin/v2/brokers/ready", nil))
	return rec.Code, rec.Body.String()
}

// TestReadinessAndMetricsFollowStorageFailures: while the storage engine fails closed after I/O
// errors (here every segment fsync fails: checkpoints cannot complete and the failed segment waits
// to be rewritten), /admin/v2/brokers/ready answers 503 with the reason and the metrics show the
// fsync errors, the fenced ledger, the failing checkpoints and their last error; once the disk
// works again the engine recovers by itself and the node is ready again.
func TestReadinessAndMetricsFollowStorageFailures(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var failing atomic.Bool
	mem.SetInjector(func(op vfs.Op, name string) error {
		if failing.Load() && op == vfs.OpSync && strings.HasSuffix(name, ".seg") {
			return vfs.EIO
		}
		return nil
	})
	e, err := storage.Open(ctx, storage.Options{Dir: "/data", FS: mem, Logger: slog.New(slog.DiscardHandler),
		JournalFileBytes: 16 << 10, DirectWriteBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	n := &Node{}
	n.components.engine = e
	if code, body := readiness(n); code != http.StatusOK {
		t.Fatalf("ready before any failure: %d %s", code, body)
	}
	l, err := e.OpenLedger(ctx, "persistent://public/default/t")
	if err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	// Appends rotate the journal; the checkpoint's segment fsync fails and the ledger is fenced.
	poll.Until(t, 10*time.Second, "the ledger to be fenced by a failed checkpoint fsync", func() bool {
		_, _ = l.Append(ctx, make([]byte, 1000), 1)
		return l.Err() != nil
	})
	code, body := readiness(n)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "rewritten from the journal") {
		t.Fatalf("ready with a failed segment fsync: %d %q, want 503 with the reason", code, body)
	}
	// The fence comes first, inside the failing checkpoint; the checkpointer records that
	// checkpoint's failure after it, and tries the repair (which fails too: fsyncs still fail) only
	// on its next round. Wait for both, then check every figure at one moment.
	poll.Until(t, 10*time.Second, "the checkpointer to record the failed checkpoint and a failed repair", func() bool {
		got, _ := gatherStorage(t, n)
		return got["meridian_storage_checkpoint_failures_total"] >= 1 && got["meridian_storage_repair_failures_total"] >= 1
	})
	if code, body := readiness(n); code != http.StatusServiceUnavailable || !strings.Contains(body, "rewritten from the journal") {
		t.Fatalf("ready after a failed repair: %d %q, want 503 with the reason", code, body)
	}
	got, ckptErr := gatherStorage(t, n)
	for name, atLeast := range map[string]float64{
		"meridian_storage_fsync_errors_total":          1,
		"meridian_storage_fenced_ledgers":              1,
		"meridian_storage_checkpoint_failures_total":   1,
		"meridian_storage_checkpoint_failing":          1,
		"meridian_storage_repairs_pending":             1,
		"meridian_storage_repair_failures_total":       1,
		"meridian_storage_journal_backlog_files":       1,
		"meridian_storage_journal_backlog_limit_files": 2,
		"meridian_storage_open_files":                  1,
	} {
		if v, ok := got[name]; !ok || v < atLeast {
			t.Errorf("%s = %v (exported: %v), want at least %v", name, v, ok, atLeast)
		}
	}
	for _, name := range []string{"meridian_storage_checkpoints_total", "meridian_storage_recovered_torn_tails_total", "meridian_storage_cache_bytes",
		"meridian_storage_journal_backlog_waits_total", "meridian_storage_journal_backlog_wait_seconds_total", "meridian_storage_lead_commits_total"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s not exported", name)
		}
	}
	if got["meridian_storage_ready"] != 0 {
		t.Errorf("meridian_storage_ready = %v while failing", got["meridian_storage_ready"])
	}
	if !strings.Contains(ckptErr, "input/output error") {
		t.Errorf("last checkpoint error label %q, want the fsync's error", ckptErr)
	}
	failing.Store(false)
	poll.Until(t, 10*time.Second, "the node to be ready again", func() bool {
		code, _ := readiness(n)
		return code == http.StatusOK
	})
	got, _ = gatherStorage(t, n)
	if got["meridian_storage_ready"] != 1 || got["meridian_storage_repairs_pending"] != 0 || got["meridian_storage_checkpoint_failing"] != 0 || got["meridian_storage_repairs_total"] < 1 {
		t.Errorf("after recovery: %v", got)
	}
}
