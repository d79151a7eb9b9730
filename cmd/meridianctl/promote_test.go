package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/poll"
)

// TestFailoverPromoteReportsWhatNeverArrived: a replicates to b at 2 messages a second; a stores 40
// messages, advertises its last position to b, and is lost. promote on b turns on replication back
// to a and reports, exactly, the messages b never received.
func TestFailoverPromoteReportsWhatNeverArrived(t *testing.T) {
	a, b := replicatingPair(t)
	mustBroker(t, a, "namespaces", "set-replicator-dispatch-rate", "public/default", "--msg-dispatch-rate", "2")
	for i := range 40 {
		mustBroker(t, a, "produce", "orders", "-m", fmt.Sprint("m", i))
	}
	aAdmin, err := adminapi.NewClient(a.AdminURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	last, err := aAdmin.LastMessageID(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d:%d", last.LedgerID, last.EntryID)
	bAdmin, err := adminapi.NewClient(b.AdminURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "a's last position advertised to b", func() bool {
		var states []adminapi.SourceTopicState
		_, err := bAdmin.Do(context.Background(), http.MethodGet, "/admin/v2/namespaces/public/default/replicationSources", nil, nil, &states)
		return err == nil && len(states) == 1 && states[0].LastPosition == want
	})
	a.Stop()

	r := ctlBroker(t, b, "-o", "json", "failover", "promote", "public/default", "--from", "a")
	var rep promoteReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("promote: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if rep.FailbackReplication != "turned on" || len(rep.Topics) != 1 || rep.Topics[0].LastPosition != want {
		t.Fatalf("promote: %+v", rep)
	}
	// What b holds of a's messages, as its stats count them.
	st, err := bAdmin.TopicStats(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	arrived := st.InboundReplication["a"].MsgInCounter
	if !rep.MissingExact || rep.Missing <= 0 || rep.Missing+arrived != 40 {
		t.Fatalf("promote says %d missing (exact %v); b received %d of 40", rep.Missing, rep.MissingExact, arrived)
	}
	t.Logf("a stored 40, b received %d before a was lost; promote reports %d missing", arrived, rep.Missing)
	clusters := mustBroker(t, b, "namespaces", "get-clusters", "public/default")
	if !strings.Contains(clusters, "a") {
		t.Fatalf("b's replication clusters after promote: %s", clusters)
	}
}

// TestFailoverPromotePlanned: against the source, promote --to b checks that b is ready, sets the
// source's migration target to b's URLs and switches the namespace over; it refuses while b is not
// ready.
func TestFailoverPromotePlanned(t *testing.T) {
	a, b := replicatingPair(t)
	mustBroker(t, a, "produce", "orders", "-m", "one")
	mustBroker(t, a, "namespaces", "replication-status", "public/default", "--remote", "b", "--wait", "30s", "--interval", "100ms")

	if out := mustBroker(t, a, "failover", "promote", "public/default", "--to", "b", "--dry-run"); !strings.Contains(out, "would switch public/default over from a to b") {
		t.Fatalf("dry run:\n%s", out)
	}
	r := ctlBroker(t, a, "failover", "promote", "public/default", "--to", "b", "--wait", "10s")
	if r.code != 0 || !strings.Contains(r.stdout, "no client left on a") {
		t.Fatalf("promote --to b: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	aAdmin, err := adminapi.NewClient(a.AdminURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	var state struct {
		Migrated           bool              `json:"migrated"`
		MigratedClusterURL map[string]string `json:"migratedClusterUrl"`
	}
	if _, err := aAdmin.Do(context.Background(), http.MethodGet, "/admin/v2/clusters/a/migrate", nil, nil, &state); err != nil {
		t.Fatal(err)
	}
	if state.MigratedClusterURL["brokerServiceUrl"] != b.ServiceURL {
		t.Fatalf("a's migration target: %+v, want %s", state, b.ServiceURL)
	}
	var nsMigrated bool
	if _, err := aAdmin.Do(context.Background(), http.MethodGet, "/admin/v2/namespaces/public/default/migration", nil, nil, &nsMigrated); err != nil || !nsMigrated {
		t.Fatalf("namespace migration: %v, %v", nsMigrated, err)
	}

	b.Stop()
	r = ctlBroker(t, a, "failover", "promote", "public/default", "--to", "b")
	if r.code != 1 || !strings.Contains(r.stderr, "not ready") {
		t.Fatalf("promote --to a stopped b: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r := ctlBroker(t, a, "failover", "promote", "public/default"); r.code != 2 {
		t.Fatalf("promote without --to or --from: exit %d", r.code)
	}
}
