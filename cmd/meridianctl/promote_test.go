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
