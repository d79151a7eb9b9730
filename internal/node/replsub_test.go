package node

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// stateMarker is a state marker as cluster origin's replicator sends it, at source position pos.
func stateMarker(t *testing.T, origin string, pos mtypes.Position, st replication.SubscriptionState) []byte {
	t.Helper()
	body, err := replication.EncodeSubscriptionState(st)
	if err != nil {
		t.Fatal(err)
	}
	e, err := replication.EncodeStateMarkerEntry(body, time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	if e, err = wire.SetReplicatedFrom(e, origin, pos.String()); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestReplicatedSubscriptionStateFromReplicator: over real TCP, cluster a's replicator stores ten
// entries and a state marker of subscription "moved" (Shared, a property, entries 0-3 and 5-6
// acknowledged, indexes 0 and 2 of the batch at 8). The receiving node creates the subscription
// with a's type and properties, replicated, and a consumer gets exactly the entries a did not
// acknowledge, never a marker. Markers whose source is not the cluster they came from, or whose
// body is garbage, change nothing (logged), and the stats show where the state came from.
func TestReplicatedSubscriptionStateFromReplicator(t *testing.T) {
	o := testOptions(t, t.TempDir())
	n := startNode(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := adminapi.NewClient(n.WebURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateCluster(ctx, "a", adminapi.ClusterData{ServiceURL: "http://127.0.0.1:1", BrokerServiceURL: "pulsar://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	tenant, err := admin.GetTenant(ctx, "public")
	if err != nil {
		t.Fatal(err)
	}
	tenant.AllowedClusters = append(tenant.AllowedClusters, "a")
	if err := admin.UpdateTenant(ctx, "public", tenant); err != nil {
		t.Fatal(err)
	}
	const topic = "persistent://public/default/replsub-in"
	c, err := client.New(client.Options{ServiceURL: n.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic, Name: replication.ProducerName("a", o.Cluster)})
	if err != nil {
		t.Fatal(err)
	}
	var local []client.MessageID
	for i := range int64(10) {
		id, err := p.SendRaw(ctx, client.RawMessage{Entry: replicatedEntry(t, "a", 7, i)})
		if err != nil {
			t.Fatal(err)
		}
		local = append(local, id)
	}
	st := replication.SubscriptionState{Subscription: "moved", Type: 1, Properties: map[string]string{"team": "x"}, Source: "a",
		TakenMs: time.Now().UnixMilli(), Seq: 1, Origins: []replication.OriginAcks{{Key: replication.OriginKey{Cluster: "a"},
			Ranges:  []mtypes.PositionRange{{From: mtypes.Earliest, To: mtypes.Position{LedgerID: 7, EntryID: 3}}, {From: mtypes.Position{LedgerID: 7, EntryID: 5}, To: mtypes.Position{LedgerID: 7, EntryID: 6}}},
			Batches: []mtypes.BatchAck{{Position: mtypes.Position{LedgerID: 7, EntryID: 8}, Size: 3, Acked: []uint64{0b101}}}}}}
	// Hostile first: a state claiming another source, and a marker whose body is garbage.
	forged := st
	forged.Subscription, forged.Source = "forged", "b"
	garbage, err := replication.EncodeStateMarkerEntry([]byte{0xff, 0xff, 0xff}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if garbage, err = wire.SetReplicatedFrom(garbage, "a", "7:11"); err != nil {
		t.Fatal(err)
	}
	for i, e := range [][]byte{stateMarker(t, "a", mtypes.Position{LedgerID: 7, EntryID: 10}, forged), garbage,
		stateMarker(t, "a", mtypes.Position{LedgerID: 7, EntryID: 12}, st)} {
		if _, err := p.SendRaw(ctx, client.RawMessage{Entry: e}); err != nil {
			t.Fatalf("marker %d: %v", i, err)
		}
	}

	name, _ := naming.ParseTopic(topic)
	tp, err := n.components.broker.GetTopic(ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	poll.UntilNil(t, 30*time.Second, "subscription moved on the receiver", func() error {
		sub, ok := tp.Stats().Subscriptions["moved"]
		if ok && sub.Type == "Shared" && sub.IsReplicated && maps.Equal(sub.SubscriptionProperties, map[string]string{"team": "x"}) {
			return nil
		}
		return fmt.Errorf("%+v (present %v)", sub, ok)
	})
	if _, ok := tp.Stats().Subscriptions["forged"]; ok {
		t.Fatal("a state whose source is not the cluster it was replicated from created a subscription")
	}
	as, err := tp.SubscriptionAckState("moved", 100, 100)
	if err != nil {
		t.Fatal(err)
	}
	pos := func(id client.MessageID) string { return fmt.Sprintf("%d:%d", id.LedgerID, id.EntryID) }
	if got := fmt.Sprintf("%d:%d", as.MarkDelete.LedgerID, as.MarkDelete.EntryID); got != pos(local[3]) || len(as.Ranges) != 1 ||
		as.Ranges[0].From != int64(local[5].EntryID) || as.Ranges[0].To != int64(local[6].EntryID) || len(as.Batches) != 1 || as.Batches[0].Acked[0] != 0b101 {
		t.Fatalf("acknowledgement state on the receiver: %+v (local positions %v)", as, local)
	}

	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "moved", Type: pulsarpb.CommandSubscribe_Shared})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	var got []string
	for len(got) < 4 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("received %v: %v", got, err)
		}
		got = append(got, pos(m.ID))
		if err := cons.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{pos(local[4]), pos(local[7]), pos(local[8]), pos(local[9])}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delivered %v, want %v (a's unacknowledged entries, no marker)", got, want)
	}
	// Nothing more before a barrier published after everything: no marker is ever delivered.
	bp, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	barrier, err := bp.Send(ctx, client.ProducerMessage{Payload: []byte("barrier"), ReplicateTo: []string{replication.LocalOnly}})
	if err != nil {
		t.Fatal(err)
	}
	bp.Close(ctx)
	if m, err := cons.Receive(ctx); err != nil || m.ID != barrier {
		t.Fatalf("after a's unacknowledged entries delivered %v (%v), want the barrier %s (a marker?)", m, err, pos(barrier))
	}
	sync := n.components.replication.SubscriptionSyncStats(topic)
	if sync["moved"] == nil || sync["moved"].Inbound["a"].LastStateTimestamp != st.TakenMs {
		t.Fatalf("sync stats %+v", sync["moved"])
	}
	code, body := httpGet(t, n.WebURL()+"/admin/v2/persistent/public/default/replsub-in/stats")
	if code != http.StatusOK || !strings.Contains(body, `"replicatedSubscriptionSync":{"inbound":{"a":{"lastStateTimestamp":`) {
		t.Fatalf("topic stats: %d %s", code, body)
	}
	// Pulsar's replicatedSubscriptionStatus on the broker: the flag the sync set, then cleared.
	status := n.WebURL() + "/admin/v2/persistent/public/default/replsub-in/subscription/moved/replicatedSubscriptionStatus"
	if code, body := httpGet(t, status); code != http.StatusOK || body != `{"persistent://public/default/replsub-in":true}` {
		t.Fatalf("GET replicatedSubscriptionStatus: %d %s", code, body)
	}
	resp, err := http.Post(status, "application/json", strings.NewReader("false"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, body := httpGet(t, status); resp.StatusCode != http.StatusNoContent || code != http.StatusOK || body != `{"persistent://public/default/replsub-in":false}` {
		t.Fatalf("POST false: %d; GET: %d %s", resp.StatusCode, code, body)
	}
	code, body = httpGet(t, n.WebURL()+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, `meridian_replicated_subscription_sync_lag_seconds{`) || !strings.Contains(body, `direction="inbound"`) {
		t.Fatalf("metrics without the sync lag: %d", code)
	}
}
