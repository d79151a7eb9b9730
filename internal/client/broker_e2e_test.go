package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/brokertest"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// End-to-end tests of the client against a real in-process broker (brokertest).

func e2eClient(t *testing.T, serviceURL string) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{
		ServiceURL: serviceURL, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		OperationTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func e2eCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestBrokerProduceConsume(t *testing.T) {
	b := brokertest.Start(t)
	c := e2eClient(t, b.ServiceURL)
	ctx := e2eCtx(t)
	topic := "persistent://public/default/client-e2e"
	if n, err := c.PartitionedMetadata(ctx, topic); err != nil || n != 0 {
		t.Fatalf("partitioned metadata: %d %v", n, err)
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.PositionEarliest, ReceiverQueueSize: 20, AckWithResponse: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() == "" {
		t.Fatal("broker assigned no producer name")
	}
	const n = 100
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		if err := p.SendAsync(ctx, client.ProducerMessage{Payload: []byte(fmt.Sprint(i)), Properties: map[string]string{"i": fmt.Sprint(i)}}, func(_ client.MessageID, err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != fmt.Sprint(i) || m.Properties["i"] != fmt.Sprint(i) {
			t.Fatalf("message %d: %q %v", i, m.Payload, m.Properties)
		}
		if err := cons.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	last, _, err := cons.GetLastMessageID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Seek back to the last entry: the broker closes the consumer, it resubscribes and gets it again.
	if err := cons.Seek(ctx, last); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload) != fmt.Sprint(n-1) {
		t.Fatalf("after seek: %v %v", m, err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cons.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBrokerSendRawKeepsEntryBytes(t *testing.T) {
	b := brokertest.Start(t)
	c := e2eClient(t, b.ServiceURL)
	ctx := e2eCtx(t)
	topic := "persistent://public/default/client-raw"
	allowReplicationFrom(t, ctx, b, "east")
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.PositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic, Name: "pulsar.repl.east-->standalone"})
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	for i := 0; i < 3; i++ {
		body, _ = wire.AppendBatchRecord(body, &pulsarpb.SingleMessageMetadata{}, []byte{byte('a' + i)})
	}
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("origin"), SequenceId: proto.Uint64(5), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), NumMessagesInBatch: proto.Int32(3)}
	entry, _ := wire.EncodeEntry(md, body)
	entry, err = wire.SetReplicatedFrom(entry, "east", "3:4")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendRaw(ctx, client.RawMessage{Entry: entry, SourcePosition: &client.MessageID{LedgerID: 3, EntryID: 4}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Entry, entry) {
			t.Fatal("dispatched entry bytes differ from the ones sent")
		}
		if m.ReplicatedFrom != "east" || string(m.Payload) != string(rune('a'+i)) {
			t.Fatalf("message %d: %q from %q", i, m.Payload, m.ReplicatedFrom)
		}
	}
	bad := bytes.Clone(entry)
	bad[len(bad)-1] ^= 0xff
	if _, err := p.SendRaw(ctx, client.RawMessage{Entry: bad}); !errors.Is(err, wire.ErrChecksum) {
		t.Fatalf("corrupt entry: %v", err)
	}
}

func TestBrokerProducerSurvivesRestart(t *testing.T) {
	b := brokertest.Start(t)
	c := e2eClient(t, b.ServiceURL)
	ctx := e2eCtx(t)
	topic := "persistent://public/default/client-restart"
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic, Name: "restarter"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	b.Restart()
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatalf("send after restart: %v (last error %v)", err, p.LastError())
	}
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.PositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"before", "after"} {
		m, err := cons.Receive(ctx)
		if err != nil || string(m.Payload) != want {
			t.Fatalf("got %v %v, want %s", m, err, want)
		}
	}
}

// BenchmarkBrokerProduce1KiB publishes 1 KiB messages through the client to an in-process broker
// (fsync before each receipt, group commit), MaxPending in flight: the path replication takes.
func BenchmarkBrokerProduce1KiB(b *testing.B) { benchProduce(b, 0) }

// BenchmarkBrokerProduceBatched1KiB is the same with producer batching (up to 1000 messages or
// 128 KiB per entry, 10 ms delay), as pulsar-perf produces by default.
func BenchmarkBrokerProduceBatched1KiB(b *testing.B) { benchProduce(b, 1000) }

func benchProduce(b *testing.B, batching int) {
	br := brokertest.Start(b)
	c, err := client.New(client.Options{ServiceURL: br.ServiceURL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: "bench-produce", MaxPending: 1000, BatchingMaxMessages: batching})
	if err != nil {
		b.Fatal(err)
	}
	payload := bytes.Repeat([]byte("x"), 1024)
	errs := make(chan error, 1)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.SendAsync(ctx, client.ProducerMessage{Payload: payload}, func(_ client.MessageID, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

func TestBrokerConsumerResubscribesAfterRestart(t *testing.T) {
	b := brokertest.Start(t)
	c := e2eClient(t, b.ServiceURL)
	ctx := e2eCtx(t)
	topic := "persistent://public/default/client-resub"
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Failover, InitialPosition: client.PositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload) != "one" {
		t.Fatalf("before restart: %v %v", m, err)
	}
	if err := cons.Ack(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the failover consumer told it is active", cons.IsActive)
	b.Restart()
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("two")}); err != nil {
		t.Fatal(err)
	}
	// The durable subscription resumes after the acknowledged message (redelivery of "one" would
	// only be allowed if its ack had not been persisted).
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after restart: %v (last error %v)", err, cons.LastError())
		}
		if string(m.Payload) == "two" {
			break
		}
		if string(m.Payload) != "one" {
			t.Fatalf("unexpected %q", m.Payload)
		}
	}
}

// allowReplicationFrom registers cluster src and allows it for tenant public, as a receiving cluster
// requires before it accepts a replicator producer from src.
func allowReplicationFrom(t *testing.T, ctx context.Context, b *brokertest.Broker, src string) {
	t.Helper()
	admin, err := adminapi.NewClient(b.AdminURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateCluster(ctx, src, adminapi.ClusterData{ServiceURL: "http://127.0.0.1:1", BrokerServiceURL: "pulsar://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	tenant, err := admin.GetTenant(ctx, "public")
	if err != nil {
		t.Fatal(err)
	}
	tenant.AllowedClusters = append(tenant.AllowedClusters, src)
	if err := admin.UpdateTenant(ctx, "public", tenant); err != nil {
		t.Fatal(err)
	}
}

// An entry sent in two parts (RawMessage.Body: a large payload sent from where it is) is stored
// as the concatenation, with or without the command form of SEND.
func TestBrokerSendRawTwoParts(t *testing.T) {
	b := brokertest.Start(t)
	c := e2eClient(t, b.ServiceURL)
	ctx := e2eCtx(t)
	topic := "persistent://public/default/client-raw-parts"
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.PositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	for i := 0; i < 3; i++ {
		body, _ = wire.AppendBatchRecord(body, &pulsarpb.SingleMessageMetadata{}, bytes.Repeat([]byte{byte('a' + i)}, 10<<10))
	}
	for round, srcPos := range []*client.MessageID{nil, {LedgerID: 3, EntryID: 4}} {
		md := &pulsarpb.MessageMetadata{ProducerName: proto.String("origin"), SequenceId: proto.Uint64(uint64(round)), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), NumMessagesInBatch: proto.Int32(3)}
		entry, _ := wire.EncodeEntry(md, body)
		split := len(entry) - len(body)
		if _, err := p.SendRaw(ctx, client.RawMessage{Entry: entry[:split], Body: entry[split:], SourcePosition: srcPos}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Entry, entry) || !bytes.Equal(m.Payload, bytes.Repeat([]byte{byte('a' + i)}, 10<<10)) {
				t.Fatalf("round %d message %d: entry or payload differ", round, i)
			}
		}
	}
	// A first part without magic and checksum cannot be combined with a body.
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("origin"), SequenceId: proto.Uint64(9), PublishTime: proto.Uint64(1)}
	entry, _ := wire.EncodeEntry(md, body)
	if _, err := p.SendRaw(ctx, client.RawMessage{Entry: entry[6 : len(entry)-len(body)], Body: body}); !errors.Is(err, wire.ErrMalformedPayload) {
		t.Fatalf("two parts without checksum: %v", err)
	}
}
