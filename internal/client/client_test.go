package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTestClient(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := New(Options{
		ServiceURL:       "pulsar://" + addr,
		MinBackoff:       5 * time.Millisecond,
		MaxBackoff:       50 * time.Millisecond,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		OperationTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLookupAndPartitionedMetadata(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	addr, err := c.Lookup(ctx, "t")
	if err != nil || addr != b.addr() {
		t.Fatalf("lookup: %q %v", addr, err)
	}
	b.mu.Lock()
	b.partitions = 3
	b.mu.Unlock()
	n, err := c.PartitionedMetadata(ctx, "persistent://public/default/t")
	if err != nil || n != 3 {
		t.Fatalf("partitions %d %v", n, err)
	}
	if _, err := c.Lookup(ctx, "a/b/c/d"); err == nil {
		t.Fatal("invalid topic name accepted")
	}
}

func TestProduceConsumePipelined(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	cons, err := c.Subscribe(ctx, ConsumerOptions{Topic: "t", Subscription: "s", ReceiverQueueSize: 10, AckWithResponse: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "fake-producer-1" {
		t.Fatalf("name %q", p.Name())
	}
	const n = 200
	var mu sync.Mutex
	var ids []MessageID
	for i := 0; i < n; i++ {
		err := p.SendAsync(ctx, ProducerMessage{Payload: []byte(fmt.Sprint(i)), Key: "k", Properties: map[string]string{"i": fmt.Sprint(i)}}, func(id MessageID, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
			}
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]MessageID(nil), ids...)
	mu.Unlock()
	if len(got) != n {
		t.Fatalf("%d receipts after Flush", len(got))
	}
	for i, id := range got {
		if id.EntryID != uint64(i) {
			t.Fatalf("receipt %d has entry %d: out of order", i, id.EntryID)
		}
	}
	for i, s := range b.sendsCopy() {
		if s.GetSequenceId() != uint64(i) {
			t.Fatalf("send %d has sequence %d", i, s.GetSequenceId())
		}
	}
	// The queue of 10 forces several FLOW rounds.
	for i := 0; i < n; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != fmt.Sprint(i) || m.Key != "k" || m.Properties["i"] != fmt.Sprint(i) || m.ProducerName != "fake-producer-1" || m.SequenceID != uint64(i) {
			t.Fatalf("message %d: %+v", i, m)
		}
		if err := cons.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cons.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, ProducerMessage{Payload: []byte("late")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

func TestProducerResendsPendingAfterReconnect(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t", Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, ProducerMessage{Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	// The broker swallows the next sends, then the connection dies: they must be resent.
	b.mu.Lock()
	b.blackholeSend = true
	b.mu.Unlock()
	done := make(chan error, 5)
	for i := 0; i < 5; i++ {
		if err := p.SendAsync(ctx, ProducerMessage{Payload: []byte{byte(i)}}, func(_ MessageID, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 5*time.Second, "sends reach the broker", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.swallowed == 5
	})
	b.mu.Lock()
	b.blackholeSend = false
	b.mu.Unlock()
	b.dropConnections()
	for i := 0; i < 5; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := b.storedCount(); got != 6 {
		t.Fatalf("%d stored, want 6", got)
	}
	for i, s := range b.sendsCopy() {
		if s.GetSequenceId() != uint64(i) {
			t.Fatalf("stored send %d has sequence %d", i, s.GetSequenceId())
		}
	}
	if p.Name() != "mine" || !p.Connected() {
		t.Fatalf("after reconnect: name %q connected %v", p.Name(), p.Connected())
	}
	if p.Reconnects() != 1 || !p.DisconnectedSince().IsZero() {
		t.Fatalf("after reconnect: reconnects %d, disconnected since %v", p.Reconnects(), p.DisconnectedSince())
	}
	// While the broker is gone the producer says since when.
	before := time.Now()
	b.close()
	poll.Until(t, 5*time.Second, "disconnected", func() bool { return !p.Connected() })
	if d := p.DisconnectedSince(); d.Before(before) || d.After(time.Now()) {
		t.Fatalf("disconnected since %v, want after %v", d, before)
	}
}

func TestProducerSequenceFromBroker(t *testing.T) {
	b := newFakeBroker(t)
	b.lastSequence = 41
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	md, _ := wire.DecodeMetadata(b.stored(0))
	if md.GetSequenceId() != 42 {
		t.Fatalf("sequence %d, want 42", md.GetSequenceId())
	}
	start := uint64(100)
	p2, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t", Name: "p2", InitialSequenceID: &start})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Send(ctx, ProducerMessage{Payload: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	md, _ = wire.DecodeMetadata(b.stored(1))
	if md.GetSequenceId() != 100 || md.GetProducerName() != "p2" {
		t.Fatalf("metadata %v", md)
	}
}

func TestProducerCreationError(t *testing.T) {
	b := newFakeBroker(t)
	busy := pulsarpb.ServerError_ProducerBusy
	b.producerErr = &busy
	c := newTestClient(t, b.addr())
	_, err := c.CreateProducer(testCtx(t), ProducerOptions{Topic: "t", Name: "taken"})
	if !errors.Is(err, wire.ErrProducerBusy) {
		t.Fatalf("got %v", err)
	}
}

func TestSendRawForwardsEntryBytes(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t", Name: "pulsar.repl.a-->b"})
	if err != nil {
		t.Fatal(err)
	}
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("origin"), SequenceId: proto.Uint64(9000), PublishTime: proto.Uint64(1), NumMessagesInBatch: proto.Int32(1)}
	var body []byte
	body, _ = wire.AppendBatchRecord(body, &pulsarpb.SingleMessageMetadata{}, []byte("m"))
	entry, _ := wire.EncodeEntry(md, body)
	entry, _ = wire.SetReplicatedFrom(entry, "a", "3:4")
	if _, err := p.SendRaw(ctx, RawMessage{Entry: entry, SourcePosition: &MessageID{LedgerID: 3, EntryID: 4}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.stored(0), entry) {
		t.Fatal("stored bytes differ from the forwarded entry")
	}
	s := b.sendsCopy()[0]
	if s.GetSequenceId() != 0 || s.GetMessageId().GetEntryId() != 4 || s.NumMessages == nil || s.GetNumMessages() != 1 {
		t.Fatalf("send command %v", s)
	}
	// A marker entry (replicated-subscription marker, any marker_type) goes with CommandSend.marker;
	// an ordinary one without it.
	mk := &pulsarpb.MessageMetadata{ProducerName: proto.String("pulsar.marker"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1), MarkerType: proto.Int32(10), ReplicateTo: []string{"b"}}
	markerEntry, _ := wire.EncodeEntry(mk, []byte("snapshot request"))
	markerEntry, _ = wire.SetReplicatedFrom(markerEntry, "a", "3:5")
	if _, err := p.SendRaw(ctx, RawMessage{Entry: markerEntry}); err != nil {
		t.Fatal(err)
	}
	if s := b.sendsCopy()[1]; !s.GetMarker() || s.NumMessages != nil {
		t.Fatalf("marker send %v", s)
	}
	if s := b.sendsCopy()[0]; s.Marker != nil {
		t.Fatalf("ordinary send flagged: %v", s)
	}
	// A corrupted entry is refused by the broker with ChecksumError.
	bad := bytes.Clone(entry)
	bad[len(bad)-1] ^= 0xff
	if _, err := p.SendRaw(ctx, RawMessage{Entry: bad}); !errors.Is(err, wire.ErrChecksum) {
		t.Fatalf("corrupt entry: %v", err)
	}
}

func TestConsumerBatchAckSetAndSeek(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	for i := 0; i < 3; i++ {
		body, _ = wire.AppendBatchRecord(body, &pulsarpb.SingleMessageMetadata{PartitionKey: proto.String(fmt.Sprint("k", i))}, []byte{byte('a' + i)})
	}
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("x"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1), NumMessagesInBatch: proto.Int32(3)}
	entry, _ := wire.EncodeEntry(md, body)
	if _, err := p.SendRaw(ctx, RawMessage{Entry: entry}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, ProducerMessage{Payload: []byte("single")}); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(ctx, ConsumerOptions{Topic: "t", Subscription: "s", InitialPosition: PositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := 0; i < 4; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s@%d/%d", m.Payload, m.ID.EntryID, m.ID.BatchIndex))
		if i < 3 && (m.Key != fmt.Sprint("k", i) || m.ID.BatchSize != 3) {
			t.Fatalf("batch message %d: %+v", i, m.ID)
		}
		if err := cons.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if want := "[a@0/0 b@0/1 c@0/2 single@1/-1]"; fmt.Sprint(got) != want {
		t.Fatalf("got %v, want %v", got, want)
	}
	// The batch is acked once, after its last message.
	poll.Until(t, 5*time.Second, "acks", func() bool { return len(b.acksCopy()) == 2 })
	if acks := b.acksCopy(); acks[0].GetMessageId()[0].GetEntryId() != 0 || acks[1].GetMessageId()[0].GetEntryId() != 1 {
		t.Fatalf("acks %v", acks)
	}

	last, markDelete, err := cons.GetLastMessageID(ctx)
	if err != nil || last.EntryID != 1 || markDelete == nil {
		t.Fatalf("last id %v %v %v", last, markDelete, err)
	}

	// Seek back to entry 1: the broker closes the consumer, which resubscribes and gets it again.
	if err := cons.Seek(ctx, MessageID{LedgerID: 7, EntryID: 1}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload) != "single" {
		t.Fatalf("after seek: %v %v", m, err)
	}
}

func TestConsumerSkipsAckedBatchIndexes(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	cons, err := c.Subscribe(ctx, ConsumerOptions{Topic: "t", Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	cons.mu.Lock()
	cn := cons.cn
	cons.mu.Unlock()
	var body []byte
	for i := 0; i < 3; i++ {
		body, _ = wire.AppendBatchRecord(body, &pulsarpb.SingleMessageMetadata{}, []byte{byte('a' + i)})
	}
	entry, _ := wire.EncodeEntry(&pulsarpb.MessageMetadata{ProducerName: proto.String("x"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1), NumMessagesInBatch: proto.Int32(3)}, body)
	// Index 1 acknowledged: ack_set has bits 0 and 2 set.
	cons.onMessage(cn, &pulsarpb.CommandMessage{ConsumerId: proto.Uint64(cons.id), MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(7), EntryId: proto.Uint64(5)}, AckSet: []int64{5}, RedeliveryCount: proto.Uint32(2)}, entry)
	for _, want := range []string{"a", "c"} {
		m, err := cons.Receive(ctx)
		if err != nil || string(m.Payload) != want || m.RedeliveryCount != 2 {
			t.Fatalf("got %v %v, want %s", m, err, want)
		}
	}
}

func TestClientAnswersPing(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	if _, err := c.Lookup(testCtx(t), "t"); err != nil {
		t.Fatal(err)
	}
	b.pingClients()
	poll.Until(t, 5*time.Second, "pong", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.pongs > 0
	})
}

func TestKeepAliveClosesSilentConnection(t *testing.T) {
	// A "broker" that completes the handshake and then never says anything again.
	b := newFakeBroker(t)
	c, err := New(Options{ServiceURL: b.addr(), KeepAliveInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cn, err := c.connTo(testCtx(t), b.addr())
	if err != nil {
		t.Fatal(err)
	}
	// Once the broker stops answering PINGs, the connection is closed.
	b.mu.Lock()
	for fc := range b.conns {
		fc.wmu.Lock() // block every write of the fake
		defer fc.wmu.Unlock()
	}
	b.mu.Unlock()
	poll.Until(t, 5*time.Second, "silent connection closed", cn.isClosed)
}

func TestOptionsAndURLs(t *testing.T) {
	for in, want := range map[string]string{
		"pulsar://h:1": "h:1", "h:2": "h:2", "pulsar://h": "h:6650", "pulsar+ssl://h": "h:6651+tls", "pulsar+ssl://h:7": "h:7+tls",
	} {
		got, useTLS, err := serviceAddr(in)
		if useTLS {
			got += "+tls"
		}
		if err != nil || got != want {
			t.Errorf("%s: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "http://h:1", "pulsar://"} {
		if _, _, err := serviceAddr(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	bo := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	var got []time.Duration
	for i := 0; i < 8; i++ {
		got = append(got, bo.delay())
	}
	if fmt.Sprint(got) != "[100ms 200ms 400ms 800ms 1.6s 3.2s 5s 5s]" {
		t.Fatalf("backoff %v", got)
	}
}

func TestWaitForExclusiveWaitsForReadyProducer(t *testing.T) {
	b := newFakeBroker(t)
	b.lastSequence = 9
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t", AccessMode: AccessWaitForExclusive})
	if err != nil {
		t.Fatal(err)
	}
	// The "not ready" answer carries no last_sequence_id; the ready one does.
	if _, err := p.Send(ctx, ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if md, _ := wire.DecodeMetadata(b.stored(0)); md.GetSequenceId() != 10 {
		t.Fatalf("sequence %d: the not-ready answer was taken for the real one", md.GetSequenceId())
	}
}

func TestAbortClosesOnBrokerEvenWithEndedContext(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t", Name: "repl"})
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.blackholeSend = true
	b.mu.Unlock()
	failed := make(chan error, 1)
	if err := p.SendAsync(ctx, ProducerMessage{Payload: []byte("lost")}, func(_ MessageID, err error) { failed <- err }); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.Close(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("close with ended context: %v", err)
	}
	if err := <-failed; !errors.Is(err, ErrClosed) {
		t.Fatalf("pending send: %v", err)
	}
	poll.Until(t, 5*time.Second, "CLOSE_PRODUCER", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.closedProducers == 1
	})
	p2, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t", Name: "repl"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Abort(ended); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "second CLOSE_PRODUCER", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.closedProducers == 2
	})
}

func TestBatchingProducer(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	cons, err := c.Subscribe(ctx, ConsumerOptions{Topic: "t", Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t", BatchingMaxMessages: 10, BatchingMaxDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ids []MessageID
	for i := 0; i < 25; i++ {
		err := p.SendAsync(ctx, ProducerMessage{Payload: []byte(fmt.Sprint(i)), Key: fmt.Sprint("k", i), Properties: map[string]string{"i": fmt.Sprint(i)}}, func(id MessageID, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
			}
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Two full batches went out; Flush sends the last five.
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.storedCount(); got != 3 {
		t.Fatalf("%d entries, want 3", got)
	}
	sends := b.sendsCopy()
	for i, want := range []int32{10, 10, 5} {
		if sends[i].GetNumMessages() != want || sends[i].GetSequenceId() != uint64(10*i) {
			t.Fatalf("send %d: %v", i, sends[i])
		}
	}
	md, _ := wire.DecodeMetadata(b.stored(1))
	if wire.NumMessages(md) != 10 || md.GetSequenceId() != 10 || md.GetHighestSequenceId() != 19 || md.GetPartitionKey() != "k10" {
		t.Fatalf("batch metadata %v", md)
	}
	mu.Lock()
	got := append([]MessageID(nil), ids...)
	mu.Unlock()
	for i, id := range got {
		if id.EntryID != uint64(i/10) || id.BatchIndex != int32(i%10) {
			t.Fatalf("id %d: %+v", i, id)
		}
	}
	for i := 0; i < 25; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != fmt.Sprint(i) || m.Key != fmt.Sprint("k", i) || m.Properties["i"] != fmt.Sprint(i) || m.SequenceID != uint64(i) {
			t.Fatalf("message %d: %q key %q props %v seq %d", i, m.Payload, m.Key, m.Properties, m.SequenceID)
		}
	}
}

func TestBatchingDelayAndUnbatchable(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t", BatchingMaxMessages: 100, BatchingMaxDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// A lone message goes out when the delay expires.
	id, err := p.Send(ctx, ProducerMessage{Payload: []byte("alone")})
	if err != nil || id.BatchIndex != 0 || id.BatchSize != 1 {
		t.Fatalf("delayed batch: %+v %v", id, err)
	}
	// A delayed-delivery message closes the open batch and goes alone, in order.
	done := make(chan error, 2)
	if err := p.SendAsync(ctx, ProducerMessage{Payload: []byte("batched")}, func(_ MessageID, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := p.SendAsync(ctx, ProducerMessage{Payload: []byte("later"), DeliverAt: time.Now().Add(time.Minute)}, func(_ MessageID, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	sends := b.sendsCopy()
	if len(sends) != 3 || sends[1].GetSequenceId() != 1 || sends[2].GetSequenceId() != 2 || sends[2].NumMessages != nil {
		t.Fatalf("sends %v", sends)
	}
	// Close flushes what is still batched.
	if err := p.SendAsync(ctx, ProducerMessage{Payload: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if b.storedCount() != 4 {
		t.Fatalf("%d stored after close", b.storedCount())
	}
}

// SendRawBatchAsync queues in order with one call; each message's callback gets its index; a
// message that cannot be queued fails with every later one, the earlier ones are sent.
func TestSendRawBatch(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t", Name: "pulsar.repl.a-->b"})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(i int) []byte {
		md := &pulsarpb.MessageMetadata{ProducerName: proto.String("origin"), SequenceId: proto.Uint64(uint64(i)), PublishTime: proto.Uint64(1)}
		e, _ := wire.EncodeEntry(md, []byte(fmt.Sprint("m", i)))
		return e
	}
	type result struct {
		i   int
		id  MessageID
		err error
	}
	results := make(chan result, 10)
	cb := func(i int, id MessageID, err error) { results <- result{i, id, err} }
	var msgs []RawMessage
	for i := range 4 {
		e := entry(i)
		split := len(e) - 2 // also in two parts
		msgs = append(msgs, RawMessage{Entry: e[:split], Body: e[split:]})
	}
	p.SendRawBatchAsync(ctx, msgs, cb)
	for want := range 4 {
		r := <-results
		if r.i != want || r.err != nil || r.id.EntryID != uint64(want) {
			t.Fatalf("result %d: %+v", want, r)
		}
	}
	for i := range 4 {
		if !bytes.Equal(b.stored(i), entry(i)) {
			t.Fatalf("stored entry %d differs", i)
		}
	}
	// A malformed third message: the first two are sent, the third and fourth fail.
	msgs = []RawMessage{{Entry: entry(4)}, {Entry: entry(5)}, {Entry: []byte{1, 2}}, {Entry: entry(7)}}
	p.SendRawBatchAsync(ctx, msgs, cb)
	got := map[int]error{}
	for range 4 {
		r := <-results
		got[r.i] = r.err
	}
	if got[0] != nil || got[1] != nil || got[2] == nil || got[3] == nil {
		t.Fatalf("results %v", got)
	}
	if err := p.Flush(ctx); err != nil || b.storedCount() != 6 || p.Pending() != 0 {
		t.Fatalf("flush %v, stored %d, pending %d", err, b.storedCount(), p.Pending())
	}
	// A closed producer fails the whole batch.
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p.SendRawBatchAsync(ctx, msgs[:2], cb)
	for range 2 {
		if r := <-results; !errors.Is(r.err, ErrClosed) {
			t.Fatalf("after close: %+v", r)
		}
	}
}

// A batch larger than MaxPending goes out in chunks, in order; entries whose SEND fields the
// caller supplies (RawMessage.Info) get the same SEND as scanned ones.
func TestSendRawBatchBeyondMaxPending(t *testing.T) {
	b := newFakeBroker(t)
	c := newTestClient(t, b.addr())
	ctx := testCtx(t)
	p, err := c.CreateProducer(ctx, ProducerOptions{Topic: "t", Name: "pulsar.repl.a-->b", MaxPending: 3})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []RawMessage
	var entries [][]byte
	for i := range 10 {
		md := &pulsarpb.MessageMetadata{ProducerName: proto.String("origin"), SequenceId: proto.Uint64(uint64(i)), PublishTime: proto.Uint64(1),
			NumMessagesInBatch: proto.Int32(int32(i + 1)), HighestSequenceId: proto.Uint64(uint64(100 + i))}
		e, err := wire.EncodeEntry(md, []byte(fmt.Sprint("m", i)))
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
		m := RawMessage{Entry: e}
		if i%2 == 0 {
			if m.Info, err = ScanRawInfo(e); err != nil {
				t.Fatal(err)
			}
		}
		msgs = append(msgs, m)
	}
	results := make(chan int, len(msgs))
	p.SendRawBatchAsync(ctx, msgs, func(i int, id MessageID, err error) {
		if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
		results <- i
	})
	for want := range len(msgs) {
		if got := <-results; got != want {
			t.Fatalf("result %d, want %d", got, want)
		}
	}
	sends := b.sendsCopy()
	if len(sends) != len(msgs) {
		t.Fatalf("%d sends", len(sends))
	}
	for i, s := range sends {
		if s.GetNumMessages() != int32(i+1) || s.GetHighestSequenceId() != uint64(100+i) || !bytes.Equal(b.stored(i), entries[i]) {
			t.Fatalf("send %d: %v", i, s)
		}
	}
}

// TestSlotPool runs in a synctest bubble: synctest.Wait returns once the taker is blocked, so "it
// did not take" is checked without waiting for time to pass.
func TestSlotPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlotPool(3)
		ctx := testCtx(t)
		stop := make(chan struct{})
		if err := s.take(ctx, stop, 2); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- s.take(ctx, stop, 3) }() // waits for all three
		s.give(1)
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("took 3 with 2 free: %v", err)
		default:
		}
		s.give(1)
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		go func() { got <- s.take(ctx, stop, 1) }()
		close(stop)
		if err := <-got; !errors.Is(err, ErrClosed) {
			t.Fatalf("take after stop: %v", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.take(cctx, make(chan struct{}), 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("take with ended context: %v", err)
		}
	})
}

// TestMultiHostServiceURL: a service URL naming several brokers is used host by host, and a host
// that cannot be reached is skipped.
func TestMultiHostServiceURL(t *testing.T) {
	addrs, useTLS, err := serviceAddrs("pulsar+ssl://a:1,b,c:3")
	if err != nil || !useTLS || fmt.Sprint(addrs) != "[a:1 b:6651 c:3]" {
		t.Fatalf("serviceAddrs = %v %v %v", addrs, useTLS, err)
	}
	if _, _, err := serviceAddrs("pulsar://a:1,"); err == nil {
		t.Fatal("an empty host was accepted")
	}
	b := newFakeBroker(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close() // nothing listens there now
	c := newTestClient(t, deadAddr+","+b.addr())
	ctx := testCtx(t)
	for range 4 { // every turn, whichever host comes first
		if _, err := c.Lookup(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PartitionedMetadata(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	}
}
