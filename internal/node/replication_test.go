package node

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// replicatedEntry is an entry as the replicator of cluster origin sends it: source position
// ledger:entry.
func replicatedEntry(t *testing.T, origin string, ledger, entry int64) []byte {
	t.Helper()
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("app"), SequenceId: proto.Uint64(uint64(entry)),
		PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}
	e, err := wire.EncodeEntry(md, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	pos := mtypes.Position{LedgerID: ledger, EntryID: entry}
	e, err = wire.SetReplicatedFrom(e, origin, pos.String())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestInboundIndexSnapshotOnStorage: two origins replicate interleaved into a topic (every entry a
// run of its own); the topic's inbound index seals chunks into cursors of their own on the real
// storage engine. After a restart the index loads them (a resend is a duplicate, answered with
// the stored copy's position), and neither its head cursor nor its chunk cursors show as
// subscriptions or in the topic's stats.
func TestInboundIndexSnapshotOnStorage(t *testing.T) {
	o := testOptions(t, t.TempDir())
	n := startNode(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := adminapi.NewClient(n.WebURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"a", "b"} {
		if err := admin.CreateCluster(ctx, c, adminapi.ClusterData{ServiceURL: "http://127.0.0.1:1", BrokerServiceURL: "pulsar://127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	tenant, err := admin.GetTenant(ctx, "public")
	if err != nil {
		t.Fatal(err)
	}
	tenant.AllowedClusters = append(tenant.AllowedClusters, "a", "b")
	if err := admin.UpdateTenant(ctx, "public", tenant); err != nil {
		t.Fatal(err)
	}
	const topic = "persistent://public/default/inbound-index"
	c, err := client.New(client.Options{ServiceURL: n.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	producers := map[string]*client.Producer{}
	for _, origin := range []string{"a", "b"} {
		p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic, Name: replication.ProducerName(origin, o.Cluster)})
		if err != nil {
			t.Fatal(err)
		}
		producers[origin] = p
	}
	// About 12 bytes per run before compression: enough runs to seal more than one chunk.
	const perOrigin = 4000
	var first client.MessageID
	for i := range int64(perOrigin) {
		for _, origin := range []string{"a", "b"} {
			id, err := producers[origin].SendRaw(ctx, client.RawMessage{Entry: replicatedEntry(t, origin, 7, i)})
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 && origin == "a" {
				first = id
			}
		}
	}
	c.Close()
	o.BrokerAddr, o.WebAddr = n.BrokerAddr().String(), n.WebAddr().String()
	if err := n.Close(); err != nil { // unloads the topic: its index saves a last snapshot
		t.Fatal(err)
	}

	n2 := startNode(t, o)
	name, _ := naming.ParseTopic(topic)
	tp, err := n2.components.broker.GetTopic(ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	var chunks []string
	hasHead := false
	for _, cur := range tp.Ledger().Cursors() {
		switch {
		case strings.HasPrefix(cur.Name(), replication.IndexCursorName+".chunk."):
			chunks = append(chunks, cur.Name())
		case cur.Name() == replication.IndexCursorName:
			hasHead = true
		}
	}
	if !hasHead || len(chunks) == 0 {
		t.Fatalf("index cursors after restart: head %v, chunks %v", hasHead, chunks)
	}
	c2, err := client.New(client.Options{ServiceURL: n2.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	p, err := c2.CreateProducer(ctx, client.ProducerOptions{Topic: topic, Name: replication.ProducerName("a", o.Cluster)})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := p.SendRaw(ctx, client.RawMessage{Entry: replicatedEntry(t, "a", 7, 0)}); err != nil || id.LedgerID != first.LedgerID || id.EntryID != first.EntryID {
		t.Fatalf("resend of a 7:0 after restart: %v %v, want a duplicate answered with %v", id, err, first)
	}
	base := n2.WebURL() + "/admin/v2/persistent/public/default/inbound-index"
	// (internalStats lists every storage cursor, as Pulsar's lists its replication cursors.)
	for _, path := range []string{"/subscriptions", "/stats"} {
		code, body := httpGet(t, base+path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		if strings.Contains(body, "meridian.") {
			t.Errorf("GET %s shows an internal cursor: %s", path, body)
		}
	}
}
