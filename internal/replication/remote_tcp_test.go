package replication_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/brokertest"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// directory is a ClusterDirectory with fixed clusters.
type directory map[string]adminapi.ClusterData

func (d directory) Cluster(name string) (adminapi.ClusterData, bool) { c, ok := d[name]; return c, ok }
func (d directory) PartitionedTopic(string) (adminapi.PartitionedTopicMetadata, bool) {
	return adminapi.PartitionedTopicMetadata{}, false
}

// TestClientFactoryAgainstRealBroker sends prepared entries through the real client over TCP to an
// in-process broker and reads them back with the real client: replicated_from, the source position
// and the original producer name, sequence id and properties arrive intact.
func TestClientFactoryAgainstRealBroker(t *testing.T) {
	b := brokertest.Start(t, brokertest.WithCluster("remote"))
	f := replication.NewClientFactory(replication.ClientFactoryOptions{
		Local:    "origin",
		Clusters: directory{"remote": {ServiceURL: b.AdminURL, BrokerServiceURL: b.ServiceURL}},
	})
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "persistent://public/default/repl-tcp"
	// The receiving cluster accepts replicated traffic from a registered cluster that the tenant
	// allows.
	adm, err := adminapi.NewClient(b.AdminURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.CreateCluster(ctx, "origin", adminapi.ClusterData{ServiceURL: "http://127.0.0.1:1", BrokerServiceURL: "pulsar://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if err := adm.UpdateTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"remote", "origin"}, AdminRoles: []string{}}); err != nil {
		t.Fatal(err)
	}

	// Subscribe first (the topic is created by the consumer).
	cl, err := client.New(client.Options{ServiceURL: b.ServiceURL})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := cl.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "check"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)

	p, err := f.NewProducer(ctx, "remote", topic, replication.ProducerName("origin", "remote"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	done := make(chan error, n)
	for i := range n {
		md := &pulsarpb.MessageMetadata{
			ProducerName: proto.String("app"), SequenceId: proto.Uint64(uint64(100 + i)),
			PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())),
			Properties:  []*pulsarpb.KeyValue{{Key: proto.String("k"), Value: proto.String(fmt.Sprint(i))}},
		}
		data, err := wire.EncodeEntry(md, []byte(fmt.Sprintf("payload-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		out, reason, err := replication.PrepareEntry(mtypes.Entry{Position: mtypes.Position{LedgerID: 9, EntryID: int64(i)}, Data: data}, "origin", "remote")
		if err != nil || reason != replication.SkipNone {
			t.Fatal(reason, err)
		}
		p.Send(out, func(err error) { done <- err })
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != fmt.Sprintf("payload-%d", i) {
			t.Fatalf("message %d: payload %q", i, m.Payload)
		}
		md := m.Metadata
		if md.GetReplicatedFrom() != "origin" || md.GetProducerName() != "app" || md.GetSequenceId() != uint64(100+i) {
			t.Fatalf("message %d metadata: %v", i, md)
		}
		if o, pos, ok, err := replication.SourceOf(md); !ok || err != nil || o != "origin" || pos != (mtypes.Position{LedgerID: 9, EntryID: int64(i)}) {
			t.Fatalf("message %d source: %v %v %v %v", i, o, pos, ok, err)
		}
	}
}
