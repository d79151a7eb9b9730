package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/poll"
)

func topicStatsOf(t *testing.T, n *Node, topic string) adminapi.TopicStats {
	t.Helper()
	code, body := httpGet(t, n.WebURL()+"/admin/v2/persistent/public/default/"+topic+"/stats")
	if code != http.StatusOK {
		t.Fatalf("stats of %s: %d %s", topic, code, body)
	}
	var st adminapi.TopicStats
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("stats of %s: %v", topic, err)
	}
	return st
}

// waitFor polls cond until it holds or the deadline passes; a failure shows the last state cond
// described.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	poll.UntilNil(t, timeout, what, func() error {
		if ok, state := cond(); !ok {
			return fmt.Errorf("last: %s", state)
		}
		return nil
	})
}

// TestReplicatorStallWhileRemoteIsDown: east replicates to west; west stops; east's replicator has
// a backlog and makes no progress, and after --replication-stall-timeout its stats say stalled (since
// when, why), its backlog's bytes are counted and meridian_replication_stalled is 1. When west comes
// back the backlog drains and the stall ends.
func TestReplicatorStallWhileRemoteIsDown(t *testing.T) {
	shared := memstore.New()
	t.Cleanup(func() { _ = shared.Close() })
	opts := map[string]Options{}
	nodes := map[string]*Node{}
	for _, name := range []string{"east", "west"} {
		o := testOptions(t, t.TempDir())
		o.Cluster, o.SharedConfigStore = name, shared
		o.ReplicationStallTimeout = 2 * time.Second
		opts[name] = o
		nodes[name] = startNode(t, o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := ReplicateFullMesh(ctx, nodes["east"], []string{"east", "west"}); err != nil {
		t.Fatal(err)
	}
	east := nodes["east"]
	c, err := client.New(client.Options{ServiceURL: east.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const topic = "stall"
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	send := func(n int) {
		for i := range n {
			if _, err := p.Send(ctx, client.ProducerMessage{Payload: fmt.Appendf(nil, "payload-%04d", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(1)
	waitFor(t, 30*time.Second, "replicated to west", func() (bool, string) {
		r := topicStatsOf(t, east, topic).Replication["west"]
		return r.Connected && r.ReplicationBacklog == 0, fmt.Sprintf("%+v", r)
	})
	if r := topicStatsOf(t, east, topic).Replication["west"]; r.Stalled || r.ReplicationBacklogBytes != 0 {
		t.Fatalf("caught up, yet %+v", r)
	}

	if err := nodes["west"].Close(); err != nil {
		t.Fatal(err)
	}
	send(3)
	var stalled adminapi.ReplicatorStats
	waitFor(t, 30*time.Second, "stalled while west is down", func() (bool, string) {
		stalled = topicStatsOf(t, east, topic).Replication["west"]
		return stalled.Stalled, fmt.Sprintf("%+v", stalled)
	})
	if stalled.ReplicationBacklog != 3 || stalled.ReplicationBacklogBytes <= 0 || stalled.StalledReason == "" ||
		stalled.StalledSince <= 0 || stalled.StalledSince > time.Now().Add(-2*time.Second).UnixMilli() {
		t.Errorf("stalled replicator: %+v", stalled)
	}
	fams := scrapeMetrics(t, east)
	want := map[string]string{"topic": "persistent://public/default/" + topic, "remote_cluster": "west"}
	if s := findSeries(fams, "meridian_replication_stalled", want); len(s) != 1 || seriesValue(s[0]) != 1 {
		t.Errorf("meridian_replication_stalled: %v, want 1", s)
	}
	if s := findSeries(fams, "meridian_replication_backlog_bytes", want); len(s) != 1 || seriesValue(s[0]) <= 0 {
		t.Errorf("meridian_replication_backlog_bytes: %v, want > 0", s)
	}

	// west back (new ports, same data): the backlog drains, the stall ends.
	nodes["west"] = startNode(t, opts["west"])
	waitFor(t, 60*time.Second, "caught up after west is back", func() (bool, string) {
		r := topicStatsOf(t, east, topic).Replication["west"]
		return r.ReplicationBacklog == 0 && !r.Stalled, fmt.Sprintf("%+v", r)
	})
	fams = scrapeMetrics(t, east)
	if s := findSeries(fams, "meridian_replication_stalled", want); len(s) != 1 || seriesValue(s[0]) != 0 {
		t.Errorf("meridian_replication_stalled after catch-up: %v, want 0", s)
	}
}
