package server

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// fuzzFrame encodes one command (and payload) for the seed corpus.
func fuzzFrame(tb testing.TB, body proto.Message, payload ...[]byte) []byte {
	tb.Helper()
	b, err := wire.EncodeFrame(wire.Command(body), payload...)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// FuzzConnectionInput feeds arbitrary bytes to a connection after a valid CONNECT and checks that
// the server survives: no panic, no hang, and the connection's goroutines end when the peer goes
// away. It runs against a real broker, so well-formed inputs reach the produce and consume paths.
func FuzzConnectionInput(f *testing.F) {
	topic := proto.String("persistent://public/default/fuzz")
	producer := fuzzFrame(f, &pulsarpb.CommandProducer{Topic: topic, ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)})
	e, err := wire.EncodeEntry(&pulsarpb.MessageMetadata{
		ProducerName: proto.String("fuzz"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1),
	}, []byte("payload"))
	if err != nil {
		f.Fatal(err)
	}
	send := fuzzFrame(f, &pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(0)}, e)
	subscribe := fuzzFrame(f, &pulsarpb.CommandSubscribe{
		Topic: topic, Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Shared.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2), InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum(),
	})
	flow := fuzzFrame(f, &pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)})
	ack := fuzzFrame(f, &pulsarpb.CommandAck{ConsumerId: proto.Uint64(1), AckType: pulsarpb.CommandAck_Individual.Enum(),
		MessageId: []*pulsarpb.MessageIdData{{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(0)}}, RequestId: proto.Uint64(3)})
	seek := fuzzFrame(f, &pulsarpb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(4), MessagePublishTime: proto.Uint64(0)})

	f.Add(fuzzFrame(f, &pulsarpb.CommandPing{}))
	f.Add(fuzzFrame(f, &pulsarpb.CommandLookupTopic{Topic: topic, RequestId: proto.Uint64(1)}))
	f.Add(fuzzFrame(f, &pulsarpb.CommandPartitionedTopicMetadata{Topic: proto.String("a/b/c-partition-2"), RequestId: proto.Uint64(1)}))
	f.Add(fuzzFrame(f, &pulsarpb.CommandGetTopicsOfNamespace{Namespace: proto.String("public/default"), RequestId: proto.Uint64(1)}))
	f.Add(concat(producer, send, send))
	f.Add(concat(producer, send, subscribe, flow, ack, seek))
	f.Add(concat(subscribe, flow, fuzzFrame(f, &pulsarpb.CommandGetLastMessageId{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(9)})))
	f.Add(concat(producer, fuzzFrame(f, &pulsarpb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(2)}), send))
	f.Add([]byte{0, 0, 0, 5, 0, 0, 0, 1, 8})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})

	s := startServer(f, Options{KeepAliveInterval: 5 * time.Second})
	connect := fuzzFrame(f, &pulsarpb.CommandConnect{ClientVersion: proto.String("fuzz"), ProtocolVersion: proto.Int32(20)})

	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		s.startConn(server)
		_ = client.SetDeadline(time.Now().Add(5 * time.Second))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // drain whatever the server answers until it closes
			defer wg.Done()
			_, _ = io.Copy(io.Discard, client)
		}()
		_, _ = client.Write(connect)
		_, _ = client.Write(data)
		_ = client.Close()
		wg.Wait()
	})
}

func concat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
