package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
	"github.com/meridian-mq/meridian/tests/internal/harness"
	"google.golang.org/protobuf/proto"
)

// TestHostileBatchAckKill9 is the reproduction of issue 20's hostile ACK on a real `meridian
// standalone`: a durable subscription, 20 stored messages, then from a raw connection SUBSCRIBE,
// FLOW 0 and ACKs of stored entries claiming batch sizes 2^31-1 and 2^20+1 with a one-word ack set.
// The broker answers each with an error at once (it used to loop 2^31 times in the connection's
// reader and allocate a 256 MiB bitset), and after a clean restart and after kill -9 the
// subscription is there with its 20 messages (the cursor record it wrote used to be refused on the
// next start, and the subscription lost).
func TestHostileBatchAckKill9(t *testing.T) {
	p := harness.StartStandalone(t, harness.Options{})
	topic := harness.Topic(t)
	addr := strings.TrimPrefix(p.ServiceURL(), "pulsar://")
	c := dialProto(t, addr)
	c.send(&pulsarpb.CommandConnect{ClientVersion: proto.String("raw"), ProtocolVersion: proto.Int32(20)})
	c.expect(pulsarpb.BaseCommand_CONNECTED)
	subscribe := func(c *protoConn, sub string, id uint64, initial pulsarpb.CommandSubscribe_InitialPosition) {
		c.send(&pulsarpb.CommandSubscribe{
			Topic: proto.String(topic), Subscription: proto.String(sub), SubType: pulsarpb.CommandSubscribe_Shared.Enum(),
			ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(id), Durable: proto.Bool(true),
			InitialPosition: initial.Enum(),
		})
		c.expect(pulsarpb.BaseCommand_SUCCESS)
	}
	subscribe(c, "sub", 1, pulsarpb.CommandSubscribe_Earliest)
	c.send(&pulsarpb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(2)})
	name := c.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS).GetProducerSuccess().GetProducerName()
	var ids []*pulsarpb.MessageIdData
	for seq := range int64(20) {
		c.send(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(uint64(seq))}, rawEntry(t, name, seq, []byte(fmt.Sprint("m", seq))))
		ids = append(ids, c.expect(pulsarpb.BaseCommand_SEND_RECEIPT).GetSendReceipt().GetMessageId())
	}
	c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(0)})
	start := time.Now()
	for i, size := range []int32{2147483647, 1048577} {
		c.send(&pulsarpb.CommandAck{
			ConsumerId: proto.Uint64(1), AckType: pulsarpb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(uint64(10 + i)),
			MessageId: []*pulsarpb.MessageIdData{{LedgerId: ids[i].LedgerId, EntryId: ids[i].EntryId, BatchSize: proto.Int32(size), AckSet: []int64{^int64(1)}}},
		})
		r := c.expect(pulsarpb.BaseCommand_ACK_RESPONSE).GetAckResponse()
		if r.Error == nil || r.GetMessage() == "" {
			t.Errorf("ACK claiming a batch of %d: %v, want an error", size, r)
		}
	}
	t.Logf("both hostile ACKs answered in %v", time.Since(start))
	// A subscription created after the hostile ACKs: its cursor is recorded after theirs.
	subscribe(c, "later", 2, pulsarpb.CommandSubscribe_Earliest)

	// A clean stop writes every cursor; kill -9 then restarts from what is on disk. Each time the
	// subscription must be found (subscribing at Latest would skip the 20 messages if it were not).
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	p.Start()
	for _, restart := range []string{"a clean restart", "kill -9"} {
		if restart == "kill -9" {
			p.Restart()
		}
		c = dialProto(t, addr)
		c.send(&pulsarpb.CommandConnect{ClientVersion: proto.String("raw"), ProtocolVersion: proto.Int32(20)})
		c.expect(pulsarpb.BaseCommand_CONNECTED)
		for id, sub := range []string{"sub", "later"} {
			subscribe(c, sub, uint64(id+1), pulsarpb.CommandSubscribe_Latest)
			c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(uint64(id + 1)), MessagePermits: proto.Uint32(100)})
			for i := range ids {
				cmd, err := c.next()
				if err != nil || cmd.GetType() != pulsarpb.BaseCommand_MESSAGE {
					t.Fatalf("after %s, subscription %q, message %d: %v %v (the subscription was lost)", restart, sub, i, cmd.GetType(), err)
				}
				if m := cmd.GetMessage().GetMessageId(); m.GetEntryId() != ids[i].GetEntryId() || m.GetLedgerId() != ids[i].GetLedgerId() {
					t.Fatalf("after %s, subscription %q, message %d is %v, want %v", restart, sub, i, m, ids[i])
				}
			}
		}
		c.conn.Close()
	}
}
