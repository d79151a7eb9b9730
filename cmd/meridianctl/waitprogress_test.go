package main

import (
	"strings"
	"testing"
	"time"
)

// TestWaitProgress: the line replication-status --wait prints while it waits: counts, backlog, the
// drain rate over its window and the time left at that rate; growing and stuck backlogs say so.
func TestWaitProgress(t *testing.T) {
	t0 := time.Unix(1000, 0)
	report := func(backlog int64, caughtUp, total int) replReport {
		r := replReport{Namespace: "t/n", Counts: map[string]int{replCaughtUp: caughtUp, replBehind: total - caughtUp}, Backlog: backlog}
		r.Rows = make([]replRow, total)
		return r
	}
	var p waitProgress
	if got := p.observe(t0, report(1000, 1, 3)); !strings.Contains(got, "1 of 3 caught up") || !strings.Contains(got, "backlog 1000 entries") || strings.Contains(got, "left") {
		t.Fatalf("first poll: %q", got)
	}
	if got := p.observe(t0.Add(2*time.Second), report(600, 2, 3)); !strings.Contains(got, "draining 200/s") || !strings.Contains(got, "about 3s left") {
		t.Fatalf("draining: %q", got)
	}
	if got := p.observe(t0.Add(4*time.Second), report(1400, 2, 3)); !strings.Contains(got, "growing") {
		t.Fatalf("growing: %q", got)
	}
	// Beyond the window the oldest samples drop out: a backlog flat for the whole window is stuck.
	for i := 5; i <= 20; i++ {
		p.observe(t0.Add(time.Duration(i)*time.Second), report(1400, 2, 3))
	}
	if got := p.observe(t0.Add(21*time.Second), report(1400, 2, 3)); !strings.Contains(got, "not draining") {
		t.Fatalf("stuck: %q", got)
	}
}
