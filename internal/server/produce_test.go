package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// entry builds SEND payload bytes (magic, checksum, metadata, body) as a client does.
func entry(t testing.TB, producer string, seq uint64, body []byte) []byte {
	t.Helper()
	e, err := wire.EncodeEntry(&pulsarpb.MessageMetadata{
		ProducerName: proto.String(producer),
		SequenceId:   proto.Uint64(seq),
		PublishTime:  proto.Uint64(uint64(time.Now().UnixMilli())),
	}, body)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// createProducer sends PRODUCER and returns the producer name from PRODUCER_SUCCESS.
func (c *rawClient) createProducer(topic string, producerID, reqID uint64) string {
	c.t.Helper()
	c.send(&pulsarpb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(producerID), RequestId: proto.Uint64(reqID),
		ProducerAccessMode: pulsarpb.ProducerAccessMode_Shared.Enum(), InitialSubscriptionName: proto.String(""),
	})
	f := c.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS)
	ps := f.Cmd.GetProducerSuccess()
	if ps.GetRequestId() != reqID || ps.GetProducerName() == "" || !ps.GetProducerReady() {
		c.t.Fatalf("PRODUCER_SUCCESS %v", ps)
	}
	return ps.GetProducerName()
}

func (c *rawClient) sendMessage(producerID, seq uint64, payload []byte) {
	c.t.Helper()
	c.send(&pulsarpb.CommandSend{ProducerId: proto.Uint64(producerID), SequenceId: proto.Uint64(seq)}, payload)
}

func TestSendWithWrongChecksumGetsChecksumErrorAndConnectionLives(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	name := c.createProducer("persistent://public/default/crc", 1, 1)

	bad := entry(t, name, 0, []byte("hello"))
	bad[len(bad)-1] ^= 0xff // flip a body byte: the stored CRC no longer matches
	c.sendMessage(1, 0, bad)
	f := c.expect(pulsarpb.BaseCommand_SEND_ERROR)
	if se := f.Cmd.GetSendError(); se.GetError() != pulsarpb.ServerError_ChecksumError || se.GetSequenceId() != 0 || se.GetProducerId() != 1 {
		t.Fatalf("SEND_ERROR %v", se)
	}
	if got := s.Stats().ChecksumErrors; got != 1 {
		t.Errorf("checksum errors = %d, want 1", got)
	}
	// The connection and the producer live on.
	c.sendMessage(1, 0, entry(t, name, 0, []byte("hello")))
	r := c.expect(pulsarpb.BaseCommand_SEND_RECEIPT).Cmd.GetSendReceipt()
	if r.GetSequenceId() != 0 || r.GetProducerId() != 1 {
		t.Fatalf("SEND_RECEIPT %v", r)
	}
}

func TestProduceAndConsumeByteForByte(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	topic := "persistent://public/default/roundtrip"
	name := c.createProducer(topic, 1, 1)
	var sent [][]byte
	for seq := uint64(0); seq < 5; seq++ {
		e := entry(t, name, seq, []byte(fmt.Sprintf("message %d", seq)))
		sent = append(sent, e)
		c.sendMessage(1, seq, e)
	}
	var last *pulsarpb.MessageIdData
	for seq := uint64(0); seq < 5; seq++ { // receipts strictly in order
		r := c.expect(pulsarpb.BaseCommand_SEND_RECEIPT).Cmd.GetSendReceipt()
		if r.GetSequenceId() != seq {
			t.Fatalf("receipt %d for sequence %d", seq, r.GetSequenceId())
		}
		if last != nil && !(r.GetMessageId().GetLedgerId() > last.GetLedgerId() ||
			r.GetMessageId().GetLedgerId() == last.GetLedgerId() && r.GetMessageId().GetEntryId() > last.GetEntryId()) {
			t.Fatalf("message ids not increasing: %v after %v", r.GetMessageId(), last)
		}
		last = r.GetMessageId()
	}

	c.send(&pulsarpb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("sub"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2), ConsumerName: proto.String("c"), Durable: proto.Bool(true),
		InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum(),
	})
	c.expect(pulsarpb.BaseCommand_SUCCESS)
	c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(100)})
	for i := 0; i < 5; i++ {
		f := c.expectSkipping(pulsarpb.BaseCommand_MESSAGE, pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE)
		if !bytes.Equal(f.Payload, sent[i]) {
			t.Fatalf("message %d: stored bytes differ from the sent ones", i)
		}
		if i == 4 {
			id := f.Cmd.GetMessage().GetMessageId()
			c.send(&pulsarpb.CommandAck{
				ConsumerId: proto.Uint64(1), AckType: pulsarpb.CommandAck_Cumulative.Enum(),
				MessageId: []*pulsarpb.MessageIdData{{LedgerId: id.LedgerId, EntryId: id.EntryId}}, RequestId: proto.Uint64(3),
			})
			r := c.expect(pulsarpb.BaseCommand_ACK_RESPONSE).Cmd.GetAckResponse()
			if r.GetRequestId() != 3 || r.Error != nil {
				t.Fatalf("ACK_RESPONSE %v", r)
			}
		}
	}
	c.send(&pulsarpb.CommandGetLastMessageId{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(4)})
	lm := c.expect(pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE).Cmd.GetGetLastMessageIdResponse()
	if lm.GetLastMessageId().GetEntryId() != last.GetEntryId() || lm.ConsumerMarkDeletePosition == nil {
		t.Fatalf("GET_LAST_MESSAGE_ID_RESPONSE %v, last receipt %v", lm, last)
	}
	c.send(&pulsarpb.CommandCloseConsumer{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(5)})
	c.expect(pulsarpb.BaseCommand_SUCCESS)
	c.send(&pulsarpb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(6)})
	c.expect(pulsarpb.BaseCommand_SUCCESS)
}

// expectSkipping is expect that also skips the given command types.
func (c *rawClient) expectSkipping(want pulsarpb.BaseCommand_Type, skip ...pulsarpb.BaseCommand_Type) wire.Frame {
	c.t.Helper()
	for {
		f, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", want, err)
		}
		t := f.Type()
		if t == want {
			return f
		}
		skipped := t == pulsarpb.BaseCommand_PING
		for _, s := range skip {
			skipped = skipped || t == s
		}
		if !skipped {
			c.t.Fatalf("got %s (%v), want %s", t, f.Cmd, want)
		}
	}
}

func TestSendForUnknownProducerClosesConnection(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	c.sendMessage(42, 0, entry(t, "nobody", 0, []byte("x")))
	c.expectClosed()
}

func TestSendAfterCloseProducerIsIgnored(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	name := c.createProducer("persistent://public/default/closed", 1, 1)
	c.send(&pulsarpb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(2)})
	c.sendMessage(1, 0, entry(t, name, 0, []byte("late"))) // already on the wire when the close lands
	c.expect(pulsarpb.BaseCommand_SUCCESS)
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG)
}

func TestMessageOverMaxSizeInAWellFormedFrameIsRefused(t *testing.T) {
	s := startServer(t, Options{MaxMessageSize: 2048})
	c := dialRaw(t, s.addr)
	c.connect()
	name := c.createProducer("persistent://public/default/big", 1, 1)
	c.sendMessage(1, 0, entry(t, name, 0, make([]byte, 4096))) // frame < 2048+10 KiB, message > 2048
	se := c.expect(pulsarpb.BaseCommand_SEND_ERROR).Cmd.GetSendError()
	if se.GetError() != pulsarpb.ServerError_NotAllowedError {
		t.Fatalf("SEND_ERROR %v", se)
	}
}

func TestPayloadWithoutMagicIsStoredWithChecksum(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	topic := "persistent://public/default/nomagic"
	name := c.createProducer(topic, 1, 1)
	withMagic := entry(t, name, 0, []byte("old client"))
	c.sendMessage(1, 0, withMagic[6:]) // [metadataSize][metadata][body], as protocol < v6 clients send
	c.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
	c.send(&pulsarpb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Shared.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2), InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum(),
	})
	c.expect(pulsarpb.BaseCommand_SUCCESS)
	c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)})
	f := c.expectSkipping(pulsarpb.BaseCommand_MESSAGE, pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE)
	if !bytes.Equal(f.Payload, withMagic) {
		t.Fatal("the broker did not store magic and checksum in front of a payload without them")
	}
}

// TestPublishFloodStaysWithinLimits floods one connection with SENDs without reading receipts
// slowly, and checks that the in-flight publishes never exceed the per-connection limit: the
// server stops reading instead of buffering without bound.
func TestPublishFloodStaysWithinLimits(t *testing.T) {
	const maxPending = 8
	s := startServer(t, Options{MaxPendingSends: maxPending})
	c := dialRaw(t, s.addr)
	c.connect()
	name := c.createProducer("persistent://public/default/flood", 1, 1)

	var maxSeen atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			s.mu.Lock()
			for conn := range s.conns {
				if _, n := conn.limiter.InUse(); n > maxSeen.Load() {
					maxSeen.Store(n)
				}
			}
			s.mu.Unlock()
			select {
			case <-stop:
				return
			default:
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()

	const total = 2000
	body := make([]byte, 1024)
	var frames []byte
	for seq := uint64(0); seq < total; seq++ {
		f, err := wire.EncodeFrame(wire.Command(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq)}), entry(t, name, seq, body))
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f...)
	}
	writeDone := make(chan error, 1)
	go func() { _, err := c.nc.Write(frames); writeDone <- err }()
	for seq := uint64(0); seq < total; seq++ {
		r := c.expect(pulsarpb.BaseCommand_SEND_RECEIPT).Cmd.GetSendReceipt()
		if r.GetSequenceId() != seq {
			t.Fatalf("receipt for %d, want %d", r.GetSequenceId(), seq)
		}
	}
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if got := maxSeen.Load(); got > maxPending {
		t.Errorf("%d publishes in flight on one connection, limit %d", got, maxPending)
	}
	t.Logf("max in flight %d, throttled %d times", maxSeen.Load(), s.Stats().Throttled)
}

func TestReplicatorProducerIsAdmittedByHook(t *testing.T) {
	var asked []string
	s := startServer(t, Options{AdmitReplicator: func(_ context.Context, topic naming.TopicName, source string) error {
		asked = append(asked, source+" "+topic.String())
		if source == "east" {
			return fmt.Errorf("%w: cluster east is not allowed for tenant public", wire.ErrNotAllowed)
		}
		return nil
	}})
	c := dialRaw(t, s.addr)
	c.connect()
	topic := "persistent://public/default/repl"
	c.send(&pulsarpb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1),
		ProducerName: proto.String("pulsar.repl.east-->west"), UserProvidedProducerName: proto.Bool(true)})
	e := c.expect(pulsarpb.BaseCommand_ERROR).Cmd.GetError()
	if e.GetError() != pulsarpb.ServerError_NotAllowedError || !strings.Contains(e.GetMessage(), "not allowed") {
		t.Fatalf("refused replicator: %v", e)
	}
	c.send(&pulsarpb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(2), RequestId: proto.Uint64(2),
		ProducerName: proto.String("pulsar.repl.north-->west"), UserProvidedProducerName: proto.Bool(true)})
	if ps := c.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS).Cmd.GetProducerSuccess(); ps.GetProducerName() != "pulsar.repl.north-->west" {
		t.Fatalf("admitted replicator: %v", ps)
	}
	c.createProducer(topic, 3, 3) // ordinary producers are not asked about
	if len(asked) != 2 {
		t.Errorf("hook called for %v, want the two replicators only", asked)
	}
}

// TestBrokerWidePublishBudgetBoundsMemory floods from several connections against a small
// broker-wide budget of in-flight publish bytes: the bytes held never exceed the budget by more
// than one frame per connection (a connection checks the budget before reading the next frame),
// and every SEND is answered.
func TestBrokerWidePublishBudgetBoundsMemory(t *testing.T) {
	const budget = 64 * 1024
	const conns, perConn, size = 4, 300, 4096
	b := newTestBrokerWith(t, broker.Config{Cluster: "test", AutoTopicCreation: true, MaxPublishBytesInFlight: budget})
	s := startServer(t, Options{Broker: b})

	var maxBytes atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			if n, _ := b.PublishLimiter().InUse(); n > maxBytes.Load() {
				maxBytes.Store(n)
			}
			select {
			case <-stop:
				return
			default:
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()

	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		c := dialRaw(t, s.addr)
		c.connect()
		name := c.createProducer(fmt.Sprintf("persistent://public/default/budget-%d", i), 1, 1)
		var frames []byte
		for seq := uint64(0); seq < perConn; seq++ {
			f, err := wire.EncodeFrame(wire.Command(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq)}), entry(t, name, seq, make([]byte, size)))
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, f...)
		}
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = c.nc.Write(frames) }()
		go func() {
			defer wg.Done()
			for seq := uint64(0); seq < perConn; seq++ {
				f, err := c.read()
				if err != nil || f.Type() != pulsarpb.BaseCommand_SEND_RECEIPT || f.Cmd.GetSendReceipt().GetSequenceId() != seq {
					t.Errorf("connection %s: receipt %d: %v %v", name, seq, err, f.Cmd)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	frame := int64(size + 200)
	if got, limit := maxBytes.Load(), int64(budget)+conns*frame; got > limit {
		t.Errorf("%d bytes in flight, budget %d (+%d for one frame per connection)", got, budget, conns*frame)
	}
	t.Logf("max %d bytes in flight with a %d byte budget; connections throttled %d times", maxBytes.Load(), budget, s.Stats().Throttled)
}

func TestProducerInitialSubscriptionIsCreatedBeforeTheFirstMessage(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	topic := "persistent://public/default/with-initial-sub"
	c.send(&pulsarpb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1),
		InitialSubscriptionName: proto.String("dlq-sub")})
	name := c.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS).Cmd.GetProducerSuccess().GetProducerName()
	c.sendMessage(1, 0, entry(t, name, 0, []byte("dead letter")))
	c.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
	// A consumer arriving later with the default initial position (Latest) still gets it.
	c.send(&pulsarpb.CommandSubscribe{Topic: proto.String(topic), Subscription: proto.String("dlq-sub"),
		SubType: pulsarpb.CommandSubscribe_Shared.Enum(), ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2)})
	c.expect(pulsarpb.BaseCommand_SUCCESS)
	c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)})
	c.expectSkipping(pulsarpb.BaseCommand_MESSAGE, pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE)
}

// TestNonPersistentPipelinedSendsKeepTheirBytes: the reader reuses its payload buffer for the
// next frame, and a non-persistent topic hands each entry to its consumers as is, so the server
// must copy it: pipelined SENDs of different payloads are all delivered intact.
func TestNonPersistentPipelinedSendsKeepTheirBytes(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	topic := "non-persistent://public/default/np-reuse"
	c.send(&pulsarpb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("sub"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2), ConsumerName: proto.String("c"),
	})
	c.expect(pulsarpb.BaseCommand_SUCCESS)
	c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(100)})
	name := c.createProducer(topic, 1, 3)
	var sent [][]byte
	for seq := uint64(0); seq < 20; seq++ {
		e := entry(t, name, seq, bytes.Repeat([]byte{byte('a' + seq)}, 1000))
		sent = append(sent, e)
		c.sendMessage(1, seq, e)
	}
	got := 0
	for got < len(sent) {
		f := c.expectSkipping(pulsarpb.BaseCommand_MESSAGE, pulsarpb.BaseCommand_SEND_RECEIPT, pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE)
		if !bytes.Equal(f.Payload, sent[got]) {
			t.Fatalf("message %d: delivered bytes differ from the sent ones", got)
		}
		got++
	}
}

// SENDs that arrive together are published in groups; a SEND refused in the middle of a run
// (bad checksum, too large), another producer's SENDs and other commands interleaved with the run
// split it, and every SEND still gets the answer it would get alone: receipts strictly in order
// per producer, the errors for the refused ones, and the stored entries in sending order.
func TestGroupedSendsKeepOrderAndErrors(t *testing.T) {
	s := startServer(t, Options{MaxMessageSize: 4096})
	c := dialRaw(t, s.addr)
	c.connect()
	topicA, topicB := "persistent://public/default/groupA", "persistent://public/default/groupB"
	nameA := c.createProducer(topicA, 1, 1)
	nameB := c.createProducer(topicB, 2, 2)

	type sent struct {
		producer, seq uint64
		entry         []byte
		refused       pulsarpb.ServerError // 0: must be stored
	}
	var all []sent
	var stream []byte
	add := func(producer, seq uint64, body []byte, mangle func([]byte)) {
		name := nameA
		if producer == 2 {
			name = nameB
		}
		e := entry(t, name, seq, body)
		var refused pulsarpb.ServerError
		if mangle != nil {
			mangle(e)
			refused = pulsarpb.ServerError_ChecksumError
		}
		if len(body) > 4096 {
			refused = pulsarpb.ServerError_NotAllowedError
		}
		f, err := wire.EncodeFrame(wire.Command(&pulsarpb.CommandSend{ProducerId: proto.Uint64(producer), SequenceId: proto.Uint64(seq)}), e)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(stream, f...)
		all = append(all, sent{producer, seq, e, refused})
	}
	body := func(seq uint64) []byte { return bytes.Repeat([]byte{byte(seq)}, 500+int(seq)%300) }
	seqA, seqB := uint64(0), uint64(0)
	nextA := func(b []byte, mangle func([]byte)) { add(1, seqA, b, mangle); seqA++ }
	nextB := func() { add(2, seqB, body(seqB), nil); seqB++ }
	for range 10 {
		nextA(body(seqA), nil)
	}
	nextA(body(seqA), func(e []byte) { e[len(e)-1] ^= 0xff }) // checksum error mid-run
	for range 9 {
		nextA(body(seqA), nil)
	}
	ping, err := wire.EncodeFrame(wire.Command(&pulsarpb.CommandPing{}))
	if err != nil {
		t.Fatal(err)
	}
	stream = append(stream, ping...)
	for range 5 {
		nextA(body(seqA), nil)
	}
	for range 4 { // two producers interleaved
		nextA(body(seqA), nil)
		nextB()
	}
	nextA(make([]byte, 6000), nil) // over the max message size mid-run
	for range 40 {
		nextA(body(seqA), nil)
	}
	for range 3 {
		nextB()
	}
	c.writeRaw(stream)
	c.writeRaw(ping)

	next := map[uint64]int{} // producer -> index into its SENDs of the next answer expected
	byProducer := map[uint64][]sent{}
	for _, m := range all {
		byProducer[m.producer] = append(byProducer[m.producer], m)
	}
	// Errors are queued as soon as the SEND is read, receipts once stored: per producer the
	// receipts come strictly in order, each error before the receipts of the SENDs after it.
	pending := map[uint64]map[uint64]pulsarpb.ServerError{} // producer -> refused seqs not yet answered
	for _, m := range all {
		if m.refused != 0 {
			if pending[m.producer] == nil {
				pending[m.producer] = map[uint64]pulsarpb.ServerError{}
			}
			pending[m.producer][m.seq] = m.refused
		}
	}
	pongs := 0
	for pongs < 2 || next[1] < len(byProducer[1]) || next[2] < len(byProducer[2]) {
		f, err := c.read()
		if err != nil {
			t.Fatalf("after %v answers: %v", next, err)
		}
		switch f.Type() {
		case pulsarpb.BaseCommand_PONG:
			pongs++
		case pulsarpb.BaseCommand_PING:
		case pulsarpb.BaseCommand_SEND_ERROR:
			se := f.Cmd.GetSendError()
			seqs := pending[se.GetProducerId()]
			want, ok := seqs[se.GetSequenceId()]
			if !ok {
				t.Fatalf("unexpected SEND_ERROR %v", se)
			}
			delete(seqs, se.GetSequenceId())
			if se.GetError() != want {
				t.Fatalf("SEND_ERROR %v, want %v", se, want)
			}
		case pulsarpb.BaseCommand_SEND_RECEIPT:
			r := f.Cmd.GetSendReceipt()
			p := r.GetProducerId()
			ms := byProducer[p]
			for next[p] < len(ms) && ms[next[p]].refused != 0 {
				if _, ok := pending[p][ms[next[p]].seq]; ok {
					t.Fatalf("receipt for %d:%d before the SEND_ERROR of %d", p, r.GetSequenceId(), ms[next[p]].seq)
				}
				next[p]++
			}
			if next[p] >= len(ms) || ms[next[p]].seq != r.GetSequenceId() {
				t.Fatalf("receipt for %d:%d out of order (next index %d)", p, r.GetSequenceId(), next[p])
			}
			next[p]++
		default:
			t.Fatalf("unexpected %s", f.Type())
		}
	}
	if len(pending[1])+len(pending[2]) != 0 {
		t.Fatalf("SEND_ERRORs missing: %v", pending)
	}
	var groups int64
	s.mu.Lock()
	for conn := range s.conns {
		groups += conn.sendGroups.Load()
	}
	s.mu.Unlock()
	if groups == 0 {
		t.Error("no SENDs were grouped")
	}

	// Topic A holds exactly producer 1's accepted entries, in sending order.
	c.send(&pulsarpb.CommandSubscribe{
		Topic: proto.String(topicA), Subscription: proto.String("sub"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(3), ConsumerName: proto.String("c"), Durable: proto.Bool(true),
		InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum(),
	})
	c.expect(pulsarpb.BaseCommand_SUCCESS)
	c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(1000)})
	for _, m := range byProducer[1] {
		if m.refused != 0 {
			continue
		}
		f := c.expectSkipping(pulsarpb.BaseCommand_MESSAGE, pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE)
		if !bytes.Equal(f.Payload, m.entry) {
			t.Fatalf("stored entry differs from SEND %d", m.seq)
		}
	}
}

// Marker entries are the broker's own (replicated subscriptions' states, written with
// Topic.AppendMarker) or a replicator's, forwarding another cluster's: a producer that is neither
// is refused one, whether the marker is in the metadata (marker_type) or in the command (marker).
// Stored, such an entry was replicated as the cluster's own and could move another cluster's
// replicated subscription (acknowledge its backlog).
func TestOrdinaryProducerCannotPublishMarkers(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	const topic = "persistent://public/default/markers"
	name := c.createProducer(topic, 1, 1)
	marker, err := wire.EncodeEntry(&pulsarpb.MessageMetadata{ProducerName: proto.String(name), SequenceId: proto.Uint64(0),
		PublishTime: proto.Uint64(1), MarkerType: proto.Int32(1000)}, []byte("state"))
	if err != nil {
		t.Fatal(err)
	}
	c.sendMessage(1, 0, marker)
	if se := c.expect(pulsarpb.BaseCommand_SEND_ERROR).Cmd.GetSendError(); se.GetError() != pulsarpb.ServerError_NotAllowedError || se.GetSequenceId() != 0 {
		t.Fatalf("a marker entry from an ordinary producer: %v, want NotAllowedError", se)
	}
	c.send(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1), Marker: proto.Bool(true)}, entry(t, name, 1, []byte("m")))
	if se := c.expect(pulsarpb.BaseCommand_SEND_ERROR).Cmd.GetSendError(); se.GetError() != pulsarpb.ServerError_NotAllowedError || se.GetSequenceId() != 1 {
		t.Fatalf("SEND with marker=true from an ordinary producer: %v, want NotAllowedError", se)
	}
	c.sendMessage(1, 2, entry(t, name, 2, []byte("plain")))
	c.expect(pulsarpb.BaseCommand_SEND_RECEIPT)

	// A replicator forwards the markers of the cluster it replicates from.
	c.send(&pulsarpb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(2), RequestId: proto.Uint64(2),
		ProducerName: proto.String("pulsar.repl.west-->east")})
	c.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS)
	forwarded, err := wire.EncodeEntry(&pulsarpb.MessageMetadata{ProducerName: proto.String(name), SequenceId: proto.Uint64(0),
		PublishTime: proto.Uint64(1), MarkerType: proto.Int32(1000), ReplicatedFrom: proto.String("west")}, []byte("state"))
	if err != nil {
		t.Fatal(err)
	}
	c.sendMessage(2, 0, forwarded)
	c.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
}

// A SEND whose entry would make a MESSAGE frame larger than the clients' max frame size (the
// MESSAGE command is longer than the SEND's) is refused with NotAllowedError; the largest entry
// accepted is delivered in a frame within the limit. Stored, the first would make every consumer's
// client drop its connection at each delivery.
func TestAcceptedSendFitsAMessageFrame(t *testing.T) {
	const maxMsg = 64 << 10
	s := startServer(t, Options{MaxMessageSize: maxMsg})
	limit := wire.MaxFrameSize(maxMsg)
	c := dialRaw(t, s.addr)
	c.connect()
	const topic = "persistent://public/default/frame-edge"
	name := c.createProducer(topic, 1, 1)
	body := make([]byte, maxMsg)
	// entryOfSendFrame returns an entry (body plus padded metadata) whose SEND frame has the
	// given totalSize.
	entryOfSendFrame := func(total int) []byte {
		t.Helper()
		for pad := 0; pad < 16<<10; pad++ {
			e, err := wire.EncodeEntry(&pulsarpb.MessageMetadata{
				ProducerName: proto.String(name), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1),
				Properties: []*pulsarpb.KeyValue{{Key: proto.String("k"), Value: proto.String(strings.Repeat("v", pad))}},
			}, body)
			if err != nil {
				t.Fatal(err)
			}
			f, err := wire.EncodeFrame(wire.Command(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(0)}), e)
			if err != nil {
				t.Fatal(err)
			}
			if len(f)-4 == total {
				return e
			}
		}
		t.Fatalf("no padding makes a SEND frame of %d bytes", total)
		return nil
	}
	c.sendMessage(1, 0, entryOfSendFrame(limit))
	if se := c.expect(pulsarpb.BaseCommand_SEND_ERROR).Cmd.GetSendError(); se.GetError() != pulsarpb.ServerError_NotAllowedError {
		t.Fatalf("a SEND at the frame limit: %v, want NotAllowedError", se)
	}
	c.sendMessage(1, 1, entryOfSendFrame(limit-messageHeadRoom))
	c.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
	c.subscribeRaw(topic, "s", 1, 2)
	c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)})
	if f := c.expectSkipping(pulsarpb.BaseCommand_MESSAGE); f.WireSize-4 > limit {
		t.Fatalf("MESSAGE frame of totalSize %d: above the clients' max frame size %d", f.WireSize-4, limit)
	}
}
