package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/brokertest"
	"github.com/meridian-mq/meridian/internal/poll"
)

func TestAssessReplication(t *testing.T) {
	stats := map[string]adminapi.TopicStats{
		"persistent://t/n/done": {Replication: map[string]adminapi.ReplicatorStats{
			"east": {Connected: true},
			// An old error with nothing left to send: the remote has everything.
			"west": {Connected: true, LastError: "connect: refused"},
		}},
		"persistent://t/n/busy": {Replication: map[string]adminapi.ReplicatorStats{
			"east": {Connected: true, ReplicationBacklog: 7},
			"west": {Connected: false, ReplicationBacklog: 3, LastError: "connect: refused"},
		}},
		"persistent://t/n/refused": {Replication: map[string]adminapi.ReplicatorStats{
			"east": {Connected: true, ReplicationBacklog: 2, LastError: "remote refused: namespace not allowed"},
		}},
		"persistent://t/n/local": {},
	}
	all := assessReplication("t/n", stats, nil)
	if all.CaughtUp || len(all.Rows) != 5 || all.Backlog != 12 {
		t.Fatalf("all replicators: %+v", all)
	}
	want := map[string]int{replCaughtUp: 2, replBehind: 1, replDisconnected: 1, replError: 1}
	for k, v := range want {
		if all.Counts[k] != v {
			t.Fatalf("counts %v, want %v", all.Counts, want)
		}
	}
	east := assessReplication("t/n", stats, []string{"east"})
	if east.CaughtUp || len(east.Rows) != 4 || east.Counts[replMissing] != 1 || east.Counts[replCaughtUp] != 1 {
		t.Fatalf("east: %+v", east)
	}
	done := assessReplication("t/n", map[string]adminapi.TopicStats{"persistent://t/n/done": stats["persistent://t/n/done"]}, []string{"east", "west"})
	if !done.CaughtUp || summarizeRepl(done) != "2 replicators, 2 caught-up; backlog 0 entries" {
		t.Fatalf("done: %+v (%s)", done, summarizeRepl(done))
	}
}

// TestReplicationStatusCommand: the failback check against two real clusters, a replicating to b;
// caught up after --wait, not caught up (exit 1) once b is stopped and a has new messages.
func TestReplicationStatusCommand(t *testing.T) {
	a := brokertest.Start(t, brokertest.WithCluster("a"))
	b := brokertest.Start(t, brokertest.WithCluster("b"))
	for _, c := range []*brokertest.Broker{a, b} {
		other, name := b, "b"
		if c == b {
			other, name = a, "a"
		}
		mustBroker(t, c, "clusters", "create", name, "--url", other.AdminURL, "--broker-url", other.ServiceURL)
		mustBroker(t, c, "tenants", "update", "public", "--allowed-clusters", "a,b")
	}
	mustBroker(t, a, "namespaces", "set-clusters", "public/default", "--clusters", "a,b")
	for i := range 3 {
		mustBroker(t, a, "produce", "orders-"+string(rune('0'+i)), "-m", "hello")
	}

	waited := ctlBroker(t, a, "namespaces", "replication-status", "public/default", "--remote", "b", "--wait", "30s", "--interval", "100ms")
	if waited.code != 0 || !strings.Contains(waited.stdout, "3 replicators, 3 caught-up; backlog 0 entries") ||
		!strings.Contains(waited.stderr, "waiting for public/default:") || strings.Contains(waited.stdout, "waiting for") {
		t.Fatalf("after --wait: exit %d\n%s\n%s", waited.code, waited.stdout, waited.stderr)
	}
	if quiet := ctlBroker(t, a, "-o", "json", "namespaces", "replication-status", "public/default", "--wait", "5s"); quiet.code != 0 || quiet.stderr != "" {
		t.Fatalf("-o json --wait: exit %d, stderr %q", quiet.code, quiet.stderr)
	}
	var rep replReport
	if err := json.Unmarshal([]byte(mustBroker(t, a, "-o", "json", "namespaces", "replication-status", "public/default")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.CaughtUp || len(rep.Rows) != 3 || rep.Rows[0].Remote != "b" {
		t.Fatalf("json: %+v", rep)
	}
	// A cluster the namespace does not replicate to: every topic would keep its messages here.
	r := ctlBroker(t, a, "namespaces", "replication-status", "public/default", "--remote", "b,c")
	if r.code != 1 || !strings.Contains(r.stdout, "3 no-replicator") || !strings.Contains(r.stderr, "replication not caught up") {
		t.Fatalf("--remote b,c: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	b.Stop()
	mustBroker(t, a, "produce", "orders-0", "-m", "while b is down")
	r = ctlBroker(t, a, "namespaces", "replication-status", "public/default", "--remote", "b", "--wait", "300ms", "--interval", "100ms")
	// (Each replicator shows "disconnected" once it noticed, "behind" or "caught-up" until then.)
	if r.code != 1 || !strings.Contains(r.stdout, "backlog 1 entries") {
		t.Fatalf("b stopped: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestReplicationStatusOnReceivingCluster: with one-way replication a -> b, b has no outbound
// replicator: replication-status on b judges nothing, says that b only receives (from a) and exits 0,
// and topics stats lists a under REPLICATION FROM, not under REPLICATION TO.
func TestReplicationStatusOnReceivingCluster(t *testing.T) {
	a := brokertest.Start(t, brokertest.WithCluster("a"))
	b := brokertest.Start(t, brokertest.WithCluster("b"))
	mustBroker(t, a, "clusters", "create", "b", "--url", b.AdminURL, "--broker-url", b.ServiceURL)
	mustBroker(t, a, "tenants", "update", "public", "--allowed-clusters", "a,b")
	mustBroker(t, b, "clusters", "create", "a", "--url", a.AdminURL, "--broker-url", a.ServiceURL)
	mustBroker(t, b, "tenants", "update", "public", "--allowed-clusters", "a,b")
	mustBroker(t, a, "namespaces", "set-clusters", "public/default", "--clusters", "a,b")
	mustBroker(t, a, "produce", "orders", "-m", "hello")
	mustBroker(t, a, "namespaces", "replication-status", "public/default", "--remote", "b", "--wait", "30s", "--interval", "100ms")

	// b's stats show a's link while a's replicator producer is connected to b.
	var stats adminapi.TopicStats
	poll.UntilNil(t, 30*time.Second, "a's link in b's stats", func() error {
		stats = adminapi.TopicStats{}
		if err := json.Unmarshal([]byte(mustBroker(t, b, "-o", "json", "topics", "stats", "orders")), &stats); err != nil {
			t.Fatal(err)
		}
		if _, ok := stats.InboundReplication["a"]; !ok {
			return fmt.Errorf("inbound replication %+v", stats.InboundReplication)
		}
		return nil
	})
	if _, ok := stats.Replication["a"]; ok {
		t.Fatalf("b lists a as an outbound replicator: %+v", stats.Replication)
	}
	if in, ok := stats.InboundReplication["a"]; !ok || in.Connection == "" {
		t.Fatalf("b's inbound replication: %+v", stats.InboundReplication)
	}
	text := mustBroker(t, b, "topics", "stats", "orders")
	if strings.Contains(text, "REPLICATION TO") || !strings.Contains(text, "REPLICATION FROM") {
		t.Fatalf("topics stats on b:\n%s", text)
	}

	r := ctlBroker(t, b, "namespaces", "replication-status", "public/default")
	if r.code != 0 || !strings.Contains(r.stdout, "only receives") || !strings.Contains(r.stdout, "a") {
		t.Fatalf("replication-status on b: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var rep replReport
	if err := json.Unmarshal([]byte(mustBroker(t, b, "-o", "json", "namespaces", "replication-status", "public/default")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.CaughtUp || len(rep.Rows) != 0 || !slices.Equal(rep.ReceivesFrom, []string{"a"}) {
		t.Fatalf("json on b: %+v", rep)
	}
}
