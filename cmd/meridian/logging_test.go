package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLogFormatFlag(t *testing.T) {
	var b strings.Builder
	l, err := newLoggerTo(&b, "json")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hello", "cluster", "a")
	var rec map[string]any
	if err := json.Unmarshal([]byte(b.String()), &rec); err != nil || rec["msg"] != "hello" || rec["cluster"] != "a" {
		t.Errorf("json line %q: %v", b.String(), err)
	}
	if _, err := parseStandalone(t, "--log-format", "xml"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("--log-format xml: %v", err)
	}
	if _, err := parseStandalone(t, "--log-format", "json"); err != nil {
		t.Errorf("--log-format json: %v", err)
	}
}

// TestProcessLogFormatJSON: with --log-format json every line the broker writes, from start to
// shutdown, is one JSON object (the Go runtime's scheduler line is not the broker's:
// docs/operations.md, "Lifecycle").
func TestProcessLogFormatJSON(t *testing.T) {
	web := freePort(t)
	p := startProcess(t, "--data-dir", t.TempDir(), "--broker-addr", freePort(t), "--web-addr", web, "--log-format", "json")
	p.waitReady(t, web)
	if !p.waitOutput(`"msg":"broker ready"`, 10*time.Second) {
		t.Fatalf("no JSON 'broker ready' line:\n%s", p.out.String())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Fatalf("exit: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	lines := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "SCHED ") {
			continue // the Go runtime's own line on a host up more than 24.9 days (sysmon.go)
		}
		lines++
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec["msg"] == nil || rec["level"] == nil {
			t.Errorf("not a JSON log line: %q (%v)", sc.Text(), err)
		}
	}
	if lines < 3 {
		t.Errorf("only %d lines:\n%s", lines, p.out.String())
	}
}
