package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/brokertest"
)

func held(keys ...string) []heldMessage {
	var out []heldMessage
	for _, k := range keys {
		var m heldMessage
		parts := strings.Split(k, "=")
		var l, e uint64
		var b int32
		if _, err := fmtSscan(parts[0], &l, &e, &b); err != nil {
			panic(err)
		}
		m.key = originKey{l, e, b}
		if len(parts) > 1 {
			copy(m.digest[:], parts[1])
		}
		out = append(out, m)
	}
	return out
}

// TestCompareHoldings: per origin, counts, checksums and the first origin position where two
// clusters differ (held by one only, or held with another content).
func TestCompareHoldings(t *testing.T) {
	names := [2]string{"a", "b"}
	same := compareHoldings(names,
		map[string][]heldMessage{"a": held("1:0:-1", "1:1:-1"), "b": held("7:0:0", "7:0:1")},
		map[string][]heldMessage{"a": held("1:0:-1", "1:1:-1"), "b": held("7:0:0", "7:0:1")})
	if len(same) != 2 || !same[0].Same || !same[1].Same || same[0].Checksums[0] != same[0].Checksums[1] {
		t.Fatalf("same: %+v", same)
	}
	diff := compareHoldings(names,
		map[string][]heldMessage{"a": held("1:0:-1", "1:1:-1", "1:2:-1=x"), "c": held("3:0:-1")},
		map[string][]heldMessage{"a": held("1:0:-1", "1:2:-1=y")})
	want := map[string]string{
		"a": "1:1: on a, missing on b",
		"c": "3:0: on a, missing on b",
	}
	for _, r := range diff {
		if r.Same || r.FirstDifference != want[r.Origin] {
			t.Errorf("%s: %+v, want first difference %q", r.Origin, r, want[r.Origin])
		}
	}
	content := compareHoldings(names, map[string][]heldMessage{"a": held("1:0:-1=x")}, map[string][]heldMessage{"a": held("1:0:-1=y")})
	if content[0].FirstDifference != "1:0: content differs" || content[0].DifferingRanges != 1 {
		t.Fatalf("content: %+v", content[0])
	}
	onlyB := compareHoldings(names, nil, map[string][]heldMessage{"b": held("5:5:-1")})
	if onlyB[0].FirstDifference != "5:5: on b, missing on a" || onlyB[0].Counts[0] != 0 {
		t.Fatalf("only b: %+v", onlyB[0])
	}
}

// TestReplicationVerifyCommand: against two real clusters, a replicating to b: verify says both hold
// the same messages (exit 0); after replication to b stops and a stores more, it names the first
// message b does not have (exit 1).
func TestReplicationVerifyCommand(t *testing.T) {
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
	mustBroker(t, a, "produce", "orders", "-m", "one", "-m", "two", "-m", "three")
	mustBroker(t, b, "produce", "orders", "-m", "written on b")
	mustBroker(t, a, "namespaces", "replication-status", "public/default", "--remote", "b", "--wait", "30s", "--interval", "100ms")

	// One-way a -> b: what b wrote is only on b; a's messages are on both.
	all := ctlBroker(t, a, "-o", "json", "replication", "verify", "orders", "--clusters", "a,b")
	var rep verifyReport
	if err := json.Unmarshal([]byte(all.stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, all.stdout)
	}
	if all.code != 1 || rep.Same || len(rep.Origins) != 2 || rep.Origins[0].Origin != "a" || !rep.Origins[0].Same ||
		rep.Origins[0].Counts[0] != 3 || rep.Origins[0].Counts[1] != 3 ||
		rep.Origins[1].Origin != "b" || rep.Origins[1].Counts[0] != 0 || rep.Origins[1].Counts[1] != 1 ||
		!strings.HasSuffix(rep.Origins[1].FirstDifference, "on b, missing on a") {
		t.Fatalf("all origins: exit %d, %+v", all.code, rep)
	}
	out := mustBroker(t, a, "replication", "verify", "orders", "--clusters", "a,b", "--origins", "a")
	if !strings.Contains(out, "same messages on both") {
		t.Fatalf("verify --origins a after catching up:\n%s", out)
	}

	mustBroker(t, a, "namespaces", "set-clusters", "public/default", "--clusters", "a")
	mustBroker(t, a, "produce", "orders", "-m", "four")
	r := ctlBroker(t, a, "replication", "verify", "orders", "--clusters", "a,b", "--origins", "a")
	if r.code != 1 || !strings.Contains(r.stdout, "on a, missing on b") || !strings.Contains(r.stdout, "the clusters differ") {
		t.Fatalf("verify after a stopped replicating: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// fmtSscan reads "ledger:entry:batch" for the tests' message keys.
func fmtSscan(s string, l, e *uint64, b *int32) (int, error) {
	return fmt.Sscanf(s, "%d:%d:%d", l, e, b)
}
