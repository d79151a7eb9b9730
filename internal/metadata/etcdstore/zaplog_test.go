package etcdstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestZapEntriesReachTheSlogHandler(t *testing.T) {
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})
	l := zapToSlog(slog.New(h).With("component", "etcd-client").Handler()).Named("client").With(zap.String("endpoint", "h1:2379"))
	l.Debug("not shown at info")
	l.Warn("retrying of unary invoker failed", zap.Error(errors.New("connection refused")), zap.Duration("backoff", time.Second), zap.Int("attempt", 2))
	l.Error("lease keepalive failed")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (debug filtered by the handler's level):\n%s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"level": "WARN", "msg": "retrying of unary invoker failed", "component": "etcd-client", "logger": "client",
		"endpoint": "h1:2379", "error": "connection refused", "attempt": float64(2),
	} {
		if rec[k] != want {
			t.Errorf("%s = %v, want %v (record %s)", k, rec[k], want, lines[0])
		}
	}
	if rec["backoff"] == nil {
		t.Errorf("no backoff field: %s", lines[0])
	}
	if !strings.Contains(lines[1], `"level":"ERROR"`) {
		t.Errorf("error line: %s", lines[1])
	}
}
