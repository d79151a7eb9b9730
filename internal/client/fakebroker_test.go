package client

import (
	"net"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// fakeBroker is a minimal in-test broker built on package wire: one log per topic, cursors by
// subscription name, receipts in order. It exists to test the client until the real broker
// (brokertest) is available; it implements only what the tests need.
type fakeBroker struct {
	t  *testing.T
	ln net.Listener
	wg sync.WaitGroup

	mu              sync.Mutex
	conns           map[*fakeConn]struct{}
	logs            map[string][][]byte // topic -> entry bytes
	sends           []*pulsarpb.CommandSend
	cursors         map[string]int // topic|subscription -> next entry
	acks            []*pulsarpb.CommandAck
	blackholeSend   bool // swallow SENDs (no receipt, not stored)
	swallowed       int
	closedProducers int
	producerErr     *pulsarpb.ServerError
	lastSequence    int64
	partitions      uint32
	pongs           int
	closed          bool
}

type fakeConn struct {
	nc        net.Conn
	wmu       sync.Mutex
	w         *wire.Writer
	consumers map[uint64]*fakeConsumer
}

type fakeConsumer struct {
	topic, sub string
	permits    int
}

func newFakeBroker(t *testing.T) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{t: t, ln: ln, conns: map[*fakeConn]struct{}{}, logs: map[string][][]byte{}, cursors: map[string]int{}, lastSequence: -1}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *fakeBroker) addr() string { return b.ln.Addr().String() }

func (b *fakeBroker) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.ln.Close()
	b.dropConnections()
	b.wg.Wait()
}

// dropConnections closes every client connection (the broker itself keeps running).
func (b *fakeBroker) dropConnections() {
	b.mu.Lock()
	for c := range b.conns {
		c.nc.Close()
	}
	b.mu.Unlock()
}

func (b *fakeBroker) accept() {
	defer b.wg.Done()
	for {
		nc, err := b.ln.Accept()
		if err != nil {
			return
		}
		c := &fakeConn{nc: nc, w: wire.NewWriter(nc), consumers: map[uint64]*fakeConsumer{}}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			nc.Close()
			return
		}
		b.conns[c] = struct{}{}
		b.mu.Unlock()
		b.wg.Add(1)
		go b.serve(c)
	}
}

func (c *fakeConn) write(cmd *pulsarpb.BaseCommand, payload ...[]byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.w.WritePayloadCommand(cmd, payload...); err == nil {
		_ = c.w.Flush()
	}
}

func (b *fakeBroker) serve(c *fakeConn) {
	defer b.wg.Done()
	defer func() {
		b.mu.Lock()
		delete(b.conns, c)
		b.mu.Unlock()
		c.nc.Close()
	}()
	r := wire.NewReader(c.nc, 0)
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return
		}
		b.handle(c, f)
	}
}

func (b *fakeBroker) handle(c *fakeConn, f wire.Frame) {
	cmd := f.Cmd
	switch f.Type() {
	case pulsarpb.BaseCommand_CONNECT:
		c.write(wire.Command(&pulsarpb.CommandConnected{ServerVersion: proto.String("fake"), ProtocolVersion: proto.Int32(20), MaxMessageSize: proto.Int32(1 << 20)}))
	case pulsarpb.BaseCommand_PING:
		c.write(wire.Command(&pulsarpb.CommandPong{}))
	case pulsarpb.BaseCommand_PONG:
		b.mu.Lock()
		b.pongs++
		b.mu.Unlock()
	case pulsarpb.BaseCommand_PARTITIONED_METADATA:
		b.mu.Lock()
		n := b.partitions
		b.mu.Unlock()
		c.write(wire.Command(&pulsarpb.CommandPartitionedTopicMetadataResponse{RequestId: cmd.GetPartitionMetadata().RequestId, Partitions: proto.Uint32(n), Response: pulsarpb.CommandPartitionedTopicMetadataResponse_Success.Enum()}))
	case pulsarpb.BaseCommand_LOOKUP:
		c.write(wire.Command(&pulsarpb.CommandLookupTopicResponse{RequestId: cmd.GetLookupTopic().RequestId, Response: pulsarpb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String("pulsar://" + b.addr())}))
	case pulsarpb.BaseCommand_PRODUCER:
		p := cmd.GetProducer()
		b.mu.Lock()
		perr, last := b.producerErr, b.lastSequence
		b.mu.Unlock()
		if perr != nil {
			c.write(wire.Command(&pulsarpb.CommandError{RequestId: p.RequestId, Error: perr.Enum(), Message: proto.String("refused")}))
			return
		}
		name := p.GetProducerName()
		if name == "" {
			name = "fake-producer-1"
		}
		if p.GetProducerAccessMode() == pulsarpb.ProducerAccessMode_WaitForExclusive {
			c.write(wire.Command(&pulsarpb.CommandProducerSuccess{RequestId: p.RequestId, ProducerName: proto.String(name), ProducerReady: proto.Bool(false)}))
		}
		c.write(wire.Command(&pulsarpb.CommandProducerSuccess{RequestId: p.RequestId, ProducerName: proto.String(name), LastSequenceId: proto.Int64(last)}))
	case pulsarpb.BaseCommand_SEND:
		s := cmd.GetSend()
		b.mu.Lock()
		if b.blackholeSend {
			b.swallowed++
			b.mu.Unlock()
			return
		}
		if err := wire.VerifyChecksum(f.Payload); err != nil {
			b.mu.Unlock()
			c.write(wire.Command(&pulsarpb.CommandSendError{ProducerId: s.ProducerId, SequenceId: s.SequenceId, Error: pulsarpb.ServerError_ChecksumError.Enum(), Message: proto.String(err.Error())}))
			return
		}
		topic := "persistent://public/default/t"
		b.logs[topic] = append(b.logs[topic], f.Payload)
		b.sends = append(b.sends, s)
		entry := uint64(len(b.logs[topic]) - 1)
		b.mu.Unlock()
		c.write(wire.Command(&pulsarpb.CommandSendReceipt{ProducerId: s.ProducerId, SequenceId: s.SequenceId, MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(7), EntryId: proto.Uint64(entry)}}))
		b.dispatchAll()
	case pulsarpb.BaseCommand_SUBSCRIBE:
		s := cmd.GetSubscribe()
		b.mu.Lock()
		key := s.GetTopic() + "|" + s.GetSubscription()
		if _, ok := b.cursors[key]; !ok {
			start := len(b.logs[s.GetTopic()])
			if s.GetInitialPosition() == pulsarpb.CommandSubscribe_Earliest {
				start = 0
			}
			b.cursors[key] = start
		}
		c.consumers[s.GetConsumerId()] = &fakeConsumer{topic: s.GetTopic(), sub: s.GetSubscription()}
		b.mu.Unlock()
		c.write(wire.Command(&pulsarpb.CommandSuccess{RequestId: s.RequestId}))
	case pulsarpb.BaseCommand_FLOW:
		b.mu.Lock()
		if fc := c.consumers[cmd.GetFlow().GetConsumerId()]; fc != nil {
			fc.permits += int(cmd.GetFlow().GetMessagePermits())
		}
		b.mu.Unlock()
		b.dispatchAll()
	case pulsarpb.BaseCommand_ACK:
		a := cmd.GetAck()
		b.mu.Lock()
		b.acks = append(b.acks, a)
		b.mu.Unlock()
		if a.RequestId != nil {
			c.write(wire.Command(&pulsarpb.CommandAckResponse{ConsumerId: a.ConsumerId, RequestId: a.RequestId}))
		}
	case pulsarpb.BaseCommand_SEEK:
		s := cmd.GetSeek()
		b.mu.Lock()
		fc := c.consumers[s.GetConsumerId()]
		if fc != nil {
			b.cursors[fc.topic+"|"+fc.sub] = int(s.GetMessageId().GetEntryId())
			delete(c.consumers, s.GetConsumerId())
		}
		b.mu.Unlock()
		c.write(wire.Command(&pulsarpb.CommandSuccess{RequestId: s.RequestId}))
		c.write(wire.Command(&pulsarpb.CommandCloseConsumer{ConsumerId: s.ConsumerId, RequestId: proto.Uint64(0)}))
	case pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID:
		g := cmd.GetGetLastMessageId()
		b.mu.Lock()
		n := len(b.logs["persistent://public/default/t"])
		b.mu.Unlock()
		c.write(wire.Command(&pulsarpb.CommandGetLastMessageIdResponse{
			RequestId:                  g.RequestId,
			LastMessageId:              &pulsarpb.MessageIdData{LedgerId: proto.Uint64(7), EntryId: proto.Uint64(uint64(n - 1))},
			ConsumerMarkDeletePosition: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(7), EntryId: proto.Uint64(wire.EntryIDNone)},
		}))
	case pulsarpb.BaseCommand_CLOSE_PRODUCER:
		b.mu.Lock()
		b.closedProducers++
		b.mu.Unlock()
		c.write(wire.Command(&pulsarpb.CommandSuccess{RequestId: cmd.GetCloseProducer().RequestId}))
	case pulsarpb.BaseCommand_CLOSE_CONSUMER:
		b.mu.Lock()
		delete(c.consumers, cmd.GetCloseConsumer().GetConsumerId())
		b.mu.Unlock()
		c.write(wire.Command(&pulsarpb.CommandSuccess{RequestId: cmd.GetCloseConsumer().RequestId}))
	case pulsarpb.BaseCommand_UNSUBSCRIBE:
		c.write(wire.Command(&pulsarpb.CommandSuccess{RequestId: cmd.GetUnsubscribe().RequestId}))
	}
}

// dispatchAll sends stored entries to every consumer with permits.
func (b *fakeBroker) dispatchAll() {
	type out struct {
		c     *fakeConn
		id    uint64
		entry uint64
		data  []byte
	}
	var outs []out
	b.mu.Lock()
	for c := range b.conns {
		for id, fc := range c.consumers {
			key := fc.topic + "|" + fc.sub
			log := b.logs[fc.topic]
			for fc.permits > 0 && b.cursors[key] < len(log) {
				i := b.cursors[key]
				b.cursors[key]++
				md, err := wire.DecodeMetadata(log[i])
				if err != nil {
					b.t.Errorf("fake broker: stored entry: %v", err)
					continue
				}
				fc.permits -= wire.NumMessages(md)
				outs = append(outs, out{c, id, uint64(i), log[i]})
			}
		}
	}
	b.mu.Unlock()
	for _, o := range outs {
		o.c.write(wire.Command(&pulsarpb.CommandMessage{ConsumerId: proto.Uint64(o.id), MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(7), EntryId: proto.Uint64(o.entry)}}), o.data)
	}
}

// pingClients sends a PING on every connection.
func (b *fakeBroker) pingClients() {
	b.mu.Lock()
	var cs []*fakeConn
	for c := range b.conns {
		cs = append(cs, c)
	}
	b.mu.Unlock()
	for _, c := range cs {
		c.write(wire.Command(&pulsarpb.CommandPing{}))
	}
}

func (b *fakeBroker) storedCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.logs["persistent://public/default/t"])
}

func (b *fakeBroker) stored(i int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logs["persistent://public/default/t"][i]
}

func (b *fakeBroker) sendsCopy() []*pulsarpb.CommandSend {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*pulsarpb.CommandSend(nil), b.sends...)
}

func (b *fakeBroker) acksCopy() []*pulsarpb.CommandAck {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*pulsarpb.CommandAck(nil), b.acks...)
}
