package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/brokertest"
)

// TestTranslateAndSyncPosition: two real clusters, a replicating to b. A message id of a maps to
// b's position of its copy (exact, through b's inbound index); a subscription that consumed part
// of the topic on a is moved on b to just after the copy of the last message it consumed; a time
// gives an approximate position.
func TestTranslateAndSyncPosition(t *testing.T) {
	a, b := replicatingPair(t)
	for i := range 10 {
		mustBroker(t, a, "produce", "orders", "-m", fmt.Sprint("m", i))
	}
	mustBroker(t, a, "namespaces", "replication-status", "public/default", "--remote", "b", "--wait", "30s", "--interval", "100ms")
	// A subscription on both clusters, from the start; on a it consumes 4 messages.
	mustBroker(t, a, "subscriptions", "create", "orders", "app", "--position", "earliest")
	mustBroker(t, b, "subscriptions", "create", "orders", "app", "--position", "earliest")
	mustBroker(t, a, "consume", "orders", "-s", "app", "-n", "4")

	// The 4th message on a (entry 3 of a's first ledger) and its copy on b.
	var aStats, bStats struct {
		Cursors map[string]struct {
			MarkDeletePosition string `json:"markDeletePosition"`
		} `json:"cursors"`
	}
	if err := json.Unmarshal([]byte(mustBroker(t, a, "-o", "json", "topics", "stats-internal", "orders")), &aStats); err != nil {
		t.Fatal(err)
	}
	md := aStats.Cursors["app"].MarkDeletePosition
	if md == "" {
		t.Fatalf("a's cursor: %+v", aStats)
	}
	var tr translation
	if err := json.Unmarshal([]byte(mustBroker(t, a, "-o", "json", "topics", "translate", "orders", "--from", "a", "--to", "b", "--message-id", md)), &tr); err != nil {
		t.Fatal(err)
	}
	if tr.Method != "index" || !tr.Exact {
		t.Fatalf("translate %s: %+v", md, tr)
	}
	out := mustBroker(t, a, "subscriptions", "sync-position", "orders", "app", "--from", "a", "--to", "b")
	if !strings.Contains(out, "reset app on b") {
		t.Fatalf("sync-position:\n%s", out)
	}
	// b's subscription now starts just after the copy of m3: it receives m4..m9.
	got := mustBroker(t, b, "consume", "orders", "-s", "app", "-n", "6")
	for i := 4; i < 10; i++ {
		if !strings.Contains(got, fmt.Sprint("m", i)) {
			t.Fatalf("b after sync-position: m%d missing in\n%s", i, got)
		}
	}
	for i := range 4 {
		if strings.Contains(got, fmt.Sprint("m", i)+"\n") {
			t.Fatalf("b after sync-position: m%d (consumed on a) again in\n%s", i, got)
		}
	}
	if err := json.Unmarshal([]byte(mustBroker(t, b, "-o", "json", "topics", "stats-internal", "orders")), &bStats); err != nil {
		t.Fatal(err)
	}
	if bStats.Cursors["app"].MarkDeletePosition == "" {
		t.Fatalf("b's cursor: %+v", bStats)
	}

	// By time: approximate.
	if err := json.Unmarshal([]byte(mustBroker(t, a, "-o", "json", "topics", "translate", "orders", "--from", "a", "--to", "b", "--publish-time", "1h")), &tr); err != nil {
		t.Fatal(err)
	}
	if tr.Method != "publish-time" || tr.Exact {
		t.Fatalf("by time: %+v", tr)
	}
	// A position b never received, without a time to fall back on: a clear error.
	r := ctlBroker(t, a, "topics", "translate", "orders", "--from", "c", "--to", "b", "--message-id", "1:1")
	if r.code == 0 || !strings.Contains(r.stderr, "give publishTime") {
		t.Fatalf("unknown origin: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// replicatingPair starts clusters a and b that know each other, with public/default replicated a -> b.
func replicatingPair(t *testing.T) (a, b *brokertest.Broker) {
	t.Helper()
	a = brokertest.Start(t, brokertest.WithCluster("a"))
	b = brokertest.Start(t, brokertest.WithCluster("b"))
	for _, c := range []*brokertest.Broker{a, b} {
		other, name := b, "b"
		if c == b {
			other, name = a, "a"
		}
		mustBroker(t, c, "clusters", "create", name, "--url", other.AdminURL, "--broker-url", other.ServiceURL)
		mustBroker(t, c, "tenants", "update", "public", "--allowed-clusters", "a,b")
	}
	mustBroker(t, a, "namespaces", "set-clusters", "public/default", "--clusters", "a,b")
	return a, b
}
