package server

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// subscribeRaw subscribes consumer id to a durable subscription from the earliest entry.
func (c *rawClient) subscribeRaw(topic, sub string, consumerID, reqID uint64) {
	c.t.Helper()
	c.send(&pulsarpb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String(sub), SubType: pulsarpb.CommandSubscribe_Shared.Enum(),
		ConsumerId: proto.Uint64(consumerID), RequestId: proto.Uint64(reqID), ConsumerName: proto.String("c"),
		Durable: proto.Bool(true), InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum(),
	})
	f := c.expect(pulsarpb.BaseCommand_SUCCESS)
	if f.Cmd.GetSuccess().GetRequestId() != reqID {
		c.t.Fatalf("SUCCESS for request %d, want %d", f.Cmd.GetSuccess().GetRequestId(), reqID)
	}
}

// ackBatch sends an individual ACK of one entry with a batch size and ack set; reqID 0 sends it
// without a request id (no ACK_RESPONSE).
func (c *rawClient) ackBatch(consumerID uint64, id *pulsarpb.MessageIdData, batchSize int32, ackSet []int64, reqID uint64) {
	c.t.Helper()
	m := &pulsarpb.MessageIdData{LedgerId: id.LedgerId, EntryId: id.EntryId, BatchSize: proto.Int32(batchSize), AckSet: ackSet}
	cmd := &pulsarpb.CommandAck{ConsumerId: proto.Uint64(consumerID), AckType: pulsarpb.CommandAck_Individual.Enum(), MessageId: []*pulsarpb.MessageIdData{m}}
	if reqID != 0 {
		cmd.RequestId = proto.Uint64(reqID)
	}
	c.send(cmd)
}

// TestAckBatchSizeComesFromTheEntry is the reproduction of a hostile ACK: a client claiming a batch
// size of 2^31-1 (or just above the storage reader's 2^20 bound) for a stored entry made the
// broker loop 2^31 times in the connection's reader, allocate a 256 MiB bitset, and write a cursor
// record the next start refused, losing the subscription. The batch size now comes from the entry:
// such an ACK is refused (ACK_RESPONSE with an error when asked for, a log line otherwise), the
// connection goes on, and the subscription survives a restart with its acknowledgements.
func TestAckBatchSizeComesFromTheEntry(t *testing.T) {
	r := newRestartable(t, broker.Config{Cluster: "test", AutoTopicCreation: true})
	const topic = "persistent://public/default/hostile-ack"
	c := dialRaw(t, r.addr)
	c.connect()
	// The subscription exists before the messages, so it must see all of them.
	c.subscribeRaw(topic, "sub", 1, 1)
	name := c.createProducer(topic, 1, 2)
	var ids []*pulsarpb.MessageIdData
	for seq := uint64(0); seq < 20; seq++ {
		c.sendMessage(1, seq, entry(t, name, seq, []byte(fmt.Sprintf("m%d", seq))))
		ids = append(ids, c.expect(pulsarpb.BaseCommand_SEND_RECEIPT).Cmd.GetSendReceipt().GetMessageId())
	}
	c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(0)})

	oneWord := []int64{^int64(1)} // index 0 acknowledged, every other index still pending
	c.ackBatch(1, ids[0], 2147483647, oneWord, 10)
	c.ackBatch(1, ids[1], 1048577, oneWord, 11)
	for _, req := range []uint64{10, 11} {
		resp := c.expect(pulsarpb.BaseCommand_ACK_RESPONSE).Cmd.GetAckResponse()
		if resp.GetRequestId() != req || resp.Error == nil || resp.GetMessage() == "" {
			t.Errorf("ACK_RESPONSE %v: want an error for request %d", resp, req)
		}
	}
	// Without a request id: refused silently, and the reader goes on at once.
	c.ackBatch(1, ids[2], 2147483647, oneWord, 0)
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG)
	// An ack set longer than the entry's batch needs is refused too.
	c.ackBatch(1, ids[3], 0, []int64{-1, -1}, 12)
	if resp := c.expect(pulsarpb.BaseCommand_ACK_RESPONSE).Cmd.GetAckResponse(); resp.Error == nil {
		t.Errorf("ACK_RESPONSE %v: want an error for an oversized ack set", resp)
	}
	// A well-formed acknowledgement of entry 4 (a single message: batch size 1) is applied.
	c.ackBatch(1, ids[4], 1, []int64{0}, 13)
	if resp := c.expect(pulsarpb.BaseCommand_ACK_RESPONSE).Cmd.GetAckResponse(); resp.Error != nil {
		t.Fatalf("ACK_RESPONSE %v for a valid ack", resp)
	}

	r.restart()
	c = dialRaw(t, r.addr)
	c.connect()
	// Subscribing again (Earliest only applies to a new subscription): the stored one must be found.
	c.subscribeRaw(topic, "sub", 1, 1)
	c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(100)})
	want := map[uint64]bool{}
	for i, id := range ids {
		if i != 4 {
			want[id.GetEntryId()] = true
		}
	}
	for range len(want) {
		m := c.expect(pulsarpb.BaseCommand_MESSAGE).Cmd.GetMessage()
		e := m.GetMessageId().GetEntryId()
		if !want[e] {
			t.Fatalf("after the restart got entry %d, which is acknowledged or repeated", e)
		}
		delete(want, e)
	}
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG) // nothing else was delivered before the PONG
}

// TestSendWithTooManyMessagesIsRefused: a SEND claiming more messages than the batch bound, in
// the command or in the metadata, gets SEND_ERROR NotAllowedError (the client gives up on it), and
// the producer goes on.
func TestSendWithTooManyMessagesIsRefused(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	name := c.createProducer("persistent://public/default/huge-batch", 1, 1)
	c.send(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(0), NumMessages: proto.Int32(wire.MaxBatchMessages + 1)},
		entry(t, name, 0, []byte("x")))
	if se := c.expect(pulsarpb.BaseCommand_SEND_ERROR).Cmd.GetSendError(); se.GetError() != pulsarpb.ServerError_NotAllowedError {
		t.Fatalf("SEND_ERROR %v, want NotAllowedError", se)
	}
	md := &pulsarpb.MessageMetadata{
		ProducerName: proto.String(name), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1),
		NumMessagesInBatch: proto.Int32(1 << 30),
	}
	huge, err := wire.EncodeEntry(md, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	c.sendMessage(1, 1, huge)
	if se := c.expect(pulsarpb.BaseCommand_SEND_ERROR).Cmd.GetSendError(); se.GetError() != pulsarpb.ServerError_NotAllowedError || se.GetSequenceId() != 1 {
		t.Fatalf("SEND_ERROR %v, want NotAllowedError for sequence 1", se)
	}
	c.sendMessage(1, 2, entry(t, name, 2, []byte("fine")))
	if r := c.expect(pulsarpb.BaseCommand_SEND_RECEIPT).Cmd.GetSendReceipt(); r.GetSequenceId() != 2 {
		t.Fatalf("SEND_RECEIPT %v", r)
	}
}
