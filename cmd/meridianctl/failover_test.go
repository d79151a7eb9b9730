package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/failover"
)

func statusOf(r failover.Report, check string) string {
	for _, c := range r.Checks {
		if c.Check == check {
			return c.Status
		}
	}
	return "(absent)"
}

// TestFailoverCheck: the checklist against two real clusters, a replicating to b. A subscription
// that exists only on a makes b not ready (exit 1); once b has it and the backlog is 0, b is ready
// (exit 0, with a warning for the subscription that is not replicated and the producer is gone);
// with b stopped it is not ready either.
func TestFailoverCheck(t *testing.T) {
	a, b := replicatingPair(t)
	mustBroker(t, a, "produce", "orders", "-m", "one", "-m", "two")
	mustBroker(t, a, "subscriptions", "create", "orders", "app", "--position", "earliest")
	mustBroker(t, a, "namespaces", "replication-status", "public/default", "--remote", "b", "--wait", "30s", "--interval", "100ms")

	run := func() (failover.Report, int) {
		t.Helper()
		r := ctlBroker(t, a, "-o", "json", "failover", "check", "public/default", "--to", "b")
		var rep failover.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("exit %d: %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
		}
		return rep, r.code
	}
	rep, code := run()
	if code != 1 || rep.Verdict != "not-ready" || statusOf(rep, "subscriptions") != failover.StatusFail || statusOf(rep, "replication backlog") != failover.StatusOK ||
		statusOf(rep, "target reachable") != failover.StatusOK || statusOf(rep, "namespace") != failover.StatusOK {
		t.Fatalf("subscription only on a: exit %d, %+v", code, rep)
	}
	mustBroker(t, b, "subscriptions", "create", "orders", "app", "--position", "earliest")
	rep, code = run()
	if code != 0 || rep.Verdict != "ready" || statusOf(rep, "subscription positions") != failover.StatusWarn || rep.BacklogMessages != 0 {
		t.Fatalf("ready: exit %d, %+v", code, rep)
	}
	text := mustBroker(t, a, "failover", "check", "public/default", "--to", "b")
	if !strings.Contains(text, "public/default -> b: ready") {
		t.Fatalf("table:\n%s", text)
	}

	b.Stop()
	rep, code = run()
	if code != 1 || statusOf(rep, "target reachable") != failover.StatusFail {
		t.Fatalf("b stopped: exit %d, %+v", code, rep)
	}
	r := ctlBroker(t, a, "failover", "check", "public/default", "--to", "nowhere")
	if r.code != 1 || !strings.Contains(r.stdout, "target registered") {
		t.Fatalf("unknown target: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}
