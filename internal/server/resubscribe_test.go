package server

import (
	"testing"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// TestRepeatedSubscribeRedeliversWhatTheClientDropped: a client that sends SUBSCRIBE again for a
// consumer id it already has on the connection (pulsar-client-go does when a CLOSE_CONSUMER and a
// connection failure both ask it to reconnect) cleared its receiver queue before it did, and
// grants its full permits again after the SUCCESS. The broker answers SUCCESS (as Pulsar does)
// and must also take back what it had sent to that consumer: before, the held message stayed
// assigned to a consumer that no longer had it, and was never delivered again.
func TestRepeatedSubscribeRedeliversWhatTheClientDropped(t *testing.T) {
	for _, subType := range []pulsarpb.CommandSubscribe_SubType{pulsarpb.CommandSubscribe_Shared, pulsarpb.CommandSubscribe_Exclusive,
		pulsarpb.CommandSubscribe_Failover, pulsarpb.CommandSubscribe_Key_Shared} {
		t.Run(subType.String(), func(t *testing.T) {
			s := startServer(t, Options{})
			topic := "persistent://public/default/resubscribe-" + subType.String()
			cons := dialRaw(t, s.addr)
			cons.connect()
			subscribe := func(reqID uint64) {
				cons.send(&pulsarpb.CommandSubscribe{Topic: proto.String(topic), Subscription: proto.String("s"), SubType: subType.Enum(),
					ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(reqID), Durable: proto.Bool(true),
					InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum()})
				cons.expect(pulsarpb.BaseCommand_SUCCESS)
			}
			receive := func() *pulsarpb.CommandMessage {
				t.Helper()
				for {
					f, err := cons.read()
					if err != nil {
						t.Fatalf("waiting for a MESSAGE: %v", err)
					}
					switch f.Type() {
					case pulsarpb.BaseCommand_MESSAGE:
						return f.Cmd.GetMessage()
					case pulsarpb.BaseCommand_PING, pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE:
					default:
						t.Fatalf("got %s (%v), want MESSAGE", f.Type(), f.Cmd)
					}
				}
			}
			subscribe(1)
			cons.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)})

			pub := dialRaw(t, s.addr)
			pub.connect()
			name := pub.createProducer(topic, 1, 1)
			pub.sendMessage(1, 0, entry(t, name, 0, []byte("held")))
			pub.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
			first := receive()

			// The client drops its queue and subscribes again on the same connection.
			subscribe(2)
			cons.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)})
			again := receive()
			if again.GetMessageId().GetEntryId() != first.GetMessageId().GetEntryId() || again.GetMessageId().GetLedgerId() != first.GetMessageId().GetLedgerId() {
				t.Fatalf("after the repeated SUBSCRIBE got %v, want %v again", again.GetMessageId(), first.GetMessageId())
			}
			if again.GetRedeliveryCount() != first.GetRedeliveryCount()+1 {
				t.Fatalf("redelivery count %d after %d", again.GetRedeliveryCount(), first.GetRedeliveryCount())
			}
		})
	}
}
