package e2e

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
	"github.com/meridian-mq/meridian/tests/internal/rawclient"
)

// The hostile client's repertoire. Every attack draws all its parameters from the worker's seeded
// generator (never from the broker's answers), so a seed replays the same inputs; each one opens
// its own connections and is bounded in time (reads and writes time out, drains are short).

// hostileEnv is what attacks know of the broker and its data.
type hostileEnv struct {
	addr string
	// stored are entries of the stored topics, for acks, seeks and flows that name real positions.
	stored []storedPosition
	// hostileTopics are topics only attacks write to.
	hostileTopics []string
}

type storedPosition struct {
	topic         string
	ledger, entry uint64
}

type attack struct {
	name string
	run  func(e *hostileEnv, r *rand.Rand)
}

const (
	ioTimeout  = 2 * time.Second
	shortDrain = 300 * time.Millisecond
	mib        = 1 << 20
)

// hostileAttacks: the two oversized batch acks come first, so the tour (see runHostile) sends them
// at the start of a run, long enough before the kill for the cursor state they leave to be written.
var hostileAttacks = []attack{
	{"ACK with batch size 2^31-1", ackAttack(ackHugeBatch)},
	{"ACK with batch size just over 2^20", ackAttack(ackOverCursorLimit)},
	{"garbage bytes", attackGarbage},
	{"lying frame sizes (4 GiB and others)", attackLyingSizes},
	{"unknown command types and garbage protobuf", attackUnknownCommands},
	{"commands before CONNECT", attackBeforeConnect},
	{"1 MiB names", attackHugeNames},
	{"SEND on unknown producers, bad checksums", attackSendUnknownProducer},
	{"many producers on one connection", attackManyProducers},
	{"FLOW with huge permits, reading or not", attackFlowHuge},
	{"ACKs of real positions never delivered", ackAttack(ackUndelivered)},
	{"ACKs of positions that do not exist", ackAttack(ackAbsent)},
	{"cumulative ACK past the end", ackAttack(ackCumulativePastEnd)},
	{"ACK of 10,000 ids", ackAttack(ackManyIDs)},
	{"ACK set of 10,000 words", ackAttack(ackHugeAckSet)},
	{"ACK with negative batch size and index", ackAttack(ackNegative)},
	{"SUBSCRIBE with huge properties", attackSubscribeProperties},
	{"batch claiming 2^31 messages", attackBatchBomb},
	{"contradictory commands", attackContradictions},
	{"truncated frames and resets", attackTruncatedReset},
}

// ---- helpers ----

func dial(e *hostileEnv) *rawclient.Conn {
	c, err := rawclient.Dial(e.addr, ioTimeout)
	if err != nil {
		return nil
	}
	c.Timeout = ioTimeout
	return c
}

func dialConnected(e *hostileEnv) *rawclient.Conn {
	c := dial(e)
	if c == nil {
		return nil
	}
	if _, err := c.Connect(); err != nil {
		_ = c.Close()
		return nil
	}
	return c
}

// finish drains the broker's answers for d and closes the connection, with a RST one time in four.
func finish(c *rawclient.Conn, r *rand.Rand, d time.Duration) {
	c.Drain(d)
	if r.IntN(4) == 0 {
		_ = c.Reset()
		return
	}
	_ = c.Close()
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func bigName(r *rand.Rand, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789-_"
	var sb strings.Builder
	sb.Grow(n)
	for range n {
		sb.WriteByte(letters[r.IntN(len(letters))])
	}
	return sb.String()
}

func msgID(ledger, entry uint64) *pulsarpb.MessageIdData {
	return &pulsarpb.MessageIdData{LedgerId: proto.Uint64(ledger), EntryId: proto.Uint64(entry)}
}

func (e *hostileEnv) storedPos(r *rand.Rand) storedPosition { return e.stored[r.IntN(len(e.stored))] }

// hostileSub is one of a few subscription names attacks use on stored topics: never one of the
// subscriptions the test keeps, and few, so the cursors they leave stay bounded.
func hostileSub(r *rand.Rand) string { return fmt.Sprintf("hostile-%d", r.IntN(8)) }

func subscribe(topic, sub string, consumerID, requestID uint64, subType pulsarpb.CommandSubscribe_SubType) *pulsarpb.CommandSubscribe {
	return &pulsarpb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String(sub), SubType: subType.Enum(),
		ConsumerId: proto.Uint64(consumerID), RequestId: proto.Uint64(requestID),
		InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum(),
	}
}

func randomSubType(r *rand.Rand) pulsarpb.CommandSubscribe_SubType {
	return pulsarpb.CommandSubscribe_SubType(r.IntN(4))
}

func producerCmd(topic string, producerID, requestID uint64) *pulsarpb.CommandProducer {
	return &pulsarpb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(producerID), RequestId: proto.Uint64(requestID)}
}

func sendFrame(r *rand.Rand, producerID, seq uint64, md *pulsarpb.MessageMetadata, payload []byte) []byte {
	if md == nil {
		md = &pulsarpb.MessageMetadata{ProducerName: proto.String(bigName(r, 8)), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}
	}
	return rawclient.SendFrame(rawclient.Cmd(&pulsarpb.CommandSend{ProducerId: proto.Uint64(producerID), SequenceId: proto.Uint64(seq)}), rawclient.Entry(md, payload))
}

// ---- attacks ----

func attackGarbage(e *hostileEnv, r *rand.Rand) {
	connect := r.IntN(2) == 0
	n := 1 + r.IntN(64<<10)
	data := randomBytes(r, n)
	c := dial(e)
	if c == nil {
		return
	}
	if connect {
		if _, err := c.Connect(); err != nil {
			_ = c.Close()
			return
		}
	}
	_ = c.Write(data)
	finish(c, r, 500*time.Millisecond)
}

func attackLyingSizes(e *hostileEnv, r *rand.Rand) {
	headers := [][]byte{
		rawclient.Header(math.MaxUint32, math.MaxUint32-16), // 4 GiB
		rawclient.Header(1<<31, 16),
		rawclient.Header(5*mib+10<<10+1, 16), // just over the default frame limit
		rawclient.Header(100, 1000),          // command larger than the frame
		rawclient.Header(0, 0),
		rawclient.Header(4, 0), // an empty command
		rawclient.Header(3*mib, 3*mib-4),
	}
	h := headers[r.IntN(len(headers))]
	filler := randomBytes(r, r.IntN(4096))
	connect := r.IntN(2) == 0
	c := dial(e)
	if c == nil {
		return
	}
	if connect {
		if _, err := c.Connect(); err != nil {
			_ = c.Close()
			return
		}
	}
	_ = c.Write(append(h, filler...))
	finish(c, r, time.Second)
}

func attackUnknownCommands(e *hostileEnv, r *rand.Rand) {
	n := 1 + r.IntN(20)
	frames := make([][]byte, 0, 2*n)
	for range n {
		typ := pulsarpb.BaseCommand_Type(100 + r.IntN(100000))
		frames = append(frames, rawclient.Frame(&pulsarpb.BaseCommand{Type: typ.Enum()}))
		frames = append(frames, rawclient.RawCommandFrame(randomBytes(r, 1+r.IntN(256))))
	}
	c := dialConnected(e)
	if c == nil {
		return
	}
	for _, f := range frames {
		if c.Write(f) != nil {
			break
		}
	}
	finish(c, r, shortDrain)
}

func attackBeforeConnect(e *hostileEnv, r *rand.Rand) {
	pos := e.storedPos(r)
	all := [][]byte{
		rawclient.Frame(rawclient.Cmd(producerCmd(e.hostileTopics[r.IntN(len(e.hostileTopics))], 1, 1))),
		rawclient.Frame(rawclient.Cmd(subscribe(pos.topic, hostileSub(r), 1, 2, randomSubType(r)))),
		sendFrame(r, 1, 0, nil, randomBytes(r, 64)),
		rawclient.Frame(rawclient.Cmd(&pulsarpb.CommandAck{ConsumerId: proto.Uint64(1), AckType: pulsarpb.CommandAck_Individual.Enum(), MessageId: []*pulsarpb.MessageIdData{msgID(pos.ledger, pos.entry)}})),
		rawclient.Frame(rawclient.Cmd(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(math.MaxUint32)})),
		rawclient.Frame(rawclient.Cmd(&pulsarpb.CommandLookupTopic{Topic: proto.String(pos.topic), RequestId: proto.Uint64(3)})),
		rawclient.Frame(rawclient.Cmd(&pulsarpb.CommandCloseConsumer{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(4)})),
	}
	picked := make([][]byte, 1+r.IntN(3))
	for i := range picked {
		picked[i] = all[r.IntN(len(all))]
	}
	c := dial(e)
	if c == nil {
		return
	}
	for _, f := range picked {
		if c.Write(f) != nil {
			break
		}
	}
	finish(c, r, 500*time.Millisecond)
}

func attackHugeNames(e *hostileEnv, r *rand.Rand) {
	name := bigName(r, mib)
	pos := e.storedPos(r)
	var f []byte
	connect := true
	switch r.IntN(6) {
	case 0:
		f = rawclient.Frame(rawclient.Cmd(producerCmd("persistent://public/default/"+name, 1, 1)))
	case 1:
		cmd := producerCmd(e.hostileTopics[r.IntN(len(e.hostileTopics))], 1, 1)
		cmd.ProducerName = proto.String(name)
		f = rawclient.Frame(rawclient.Cmd(cmd))
	case 2:
		f = rawclient.Frame(rawclient.Cmd(subscribe(pos.topic, "hostile-"+name, 1, 1, randomSubType(r))))
	case 3:
		cmd := subscribe(pos.topic, hostileSub(r), 1, 1, pulsarpb.CommandSubscribe_Shared)
		cmd.ConsumerName = proto.String(name)
		f = rawclient.Frame(rawclient.Cmd(cmd))
	case 4:
		f = rawclient.Frame(rawclient.Cmd(&pulsarpb.CommandLookupTopic{Topic: proto.String("persistent://public/default/" + name), RequestId: proto.Uint64(1)}))
	case 5:
		connect = false
		f = rawclient.Frame(rawclient.Cmd(&pulsarpb.CommandConnect{ClientVersion: proto.String(name), ProtocolVersion: proto.Int32(20), AuthData: []byte(name)}))
	}
	c := dial(e)
	if c == nil {
		return
	}
	if connect {
		if _, err := c.Connect(); err != nil {
			_ = c.Close()
			return
		}
	}
	_ = c.Write(f)
	finish(c, r, 500*time.Millisecond)
}

func attackSendUnknownProducer(e *hostileEnv, r *rand.Rand) {
	n := 1 + r.IntN(50)
	frames := make([][]byte, n)
	for i := range frames {
		f := sendFrame(r, r.Uint64(), uint64(i), nil, randomBytes(r, r.IntN(1024)))
		if r.IntN(3) == 0 {
			f[len(f)-1-r.IntN(8)] ^= 0xff // payload no longer matches its checksum
		}
		frames[i] = f
	}
	c := dialConnected(e)
	if c == nil {
		return
	}
	for _, f := range frames {
		if c.Write(f) != nil {
			break
		}
	}
	finish(c, r, shortDrain)
}

func attackManyProducers(e *hostileEnv, r *rand.Rand) {
	n := 100 + r.IntN(900)
	frames := make([][]byte, n)
	for i := range frames {
		cmd := producerCmd(e.hostileTopics[r.IntN(len(e.hostileTopics))], uint64(i+1), uint64(i+1))
		if r.IntN(2) == 0 {
			cmd.ProducerName = proto.String(fmt.Sprintf("many-%d", r.IntN(50))) // duplicates are refused
		}
		frames[i] = rawclient.Frame(rawclient.Cmd(cmd))
	}
	sends := make([][]byte, r.IntN(200))
	for i := range sends {
		sends[i] = sendFrame(r, uint64(1+r.IntN(n)), uint64(i), nil, randomBytes(r, 1+r.IntN(512)))
	}
	c := dialConnected(e)
	if c == nil {
		return
	}
	for _, f := range append(frames, sends...) {
		if c.Write(f) != nil {
			break
		}
	}
	finish(c, r, time.Second)
}

func attackFlowHuge(e *hostileEnv, r *rand.Rand) {
	pos := e.storedPos(r)
	read := r.IntN(2) == 0
	hold := time.Duration(100+r.IntN(700)) * time.Millisecond
	permits := []uint32{math.MaxUint32, math.MaxInt32, 1 << 20}[r.IntN(3)]
	c := dialConnected(e)
	if c == nil {
		return
	}
	_ = c.Send(rawclient.Cmd(subscribe(pos.topic, hostileSub(r), 1, 1, randomSubType(r))))
	_ = c.Send(rawclient.Cmd(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(permits)}))
	_ = c.Send(rawclient.Cmd(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(permits)}))
	if read {
		c.Drain(hold)
	} else {
		// A consumer that asks for everything and never reads: the broker must bound what it
		// queues for it. Holding the connection idle is the attack itself.
		time.Sleep(hold)
	}
	if r.IntN(2) == 0 {
		_ = c.Reset()
		return
	}
	_ = c.Close()
}

// ackKind is one kind of hostile ACK.
type ackKind int

const (
	ackHugeBatch         ackKind = iota // a batch size of 2^31-1 on a real position
	ackOverCursorLimit                  // a batch size just over the 2^20 a cursor record may hold
	ackUndelivered                      // real positions never delivered to this consumer
	ackAbsent                           // positions that do not exist
	ackCumulativePastEnd                // a cumulative ack far past the end
	ackManyIDs                          // ten thousand ids in one ACK
	ackHugeAckSet                       // an ack set of ten thousand words for a batch of 64
	ackNegative                         // negative batch size and index
)

// ackAttack subscribes (a durable hostile subscription on a stored topic, answered before the
// acks go out so they reach a real consumer), sends a FLOW or not (without one nothing is pending
// for the consumer, so the broker has only the ACK's word for an entry's batch size: the oversized
// batch acks never send one), then one to four ACKs of the kind.
func ackAttack(kind ackKind) func(e *hostileEnv, r *rand.Rand) {
	return func(e *hostileEnv, r *rand.Rand) {
		pos := e.storedPos(r)
		ackSetWord := []int64{int64(r.Uint64())}
		individual := func(ids ...*pulsarpb.MessageIdData) *pulsarpb.CommandAck {
			return &pulsarpb.CommandAck{ConsumerId: proto.Uint64(1), AckType: pulsarpb.CommandAck_Individual.Enum(), MessageId: ids}
		}
		var acks []*pulsarpb.CommandAck
		for range 1 + r.IntN(4) {
			id := msgID(pos.ledger, pos.entry)
			switch kind {
			case ackHugeBatch:
				id.BatchIndex, id.BatchSize, id.AckSet = proto.Int32(int32(r.IntN(64))), proto.Int32(math.MaxInt32), ackSetWord
				acks = append(acks, individual(id))
			case ackOverCursorLimit:
				id.BatchIndex, id.BatchSize, id.AckSet = proto.Int32(0), proto.Int32(1<<20+1+int32(r.IntN(1000))), ackSetWord
				acks = append(acks, individual(id))
			case ackUndelivered:
				ids := make([]*pulsarpb.MessageIdData, 1+r.IntN(20))
				for i := range ids {
					p := e.storedPos(r)
					ids[i] = msgID(p.ledger, p.entry)
				}
				acks = append(acks, individual(ids...))
			case ackAbsent:
				acks = append(acks, individual(msgID(1<<62|r.Uint64()>>2, r.Uint64()>>1), msgID(pos.ledger, 1<<40+r.Uint64()>>30)))
			case ackCumulativePastEnd:
				acks = append(acks, &pulsarpb.CommandAck{ConsumerId: proto.Uint64(1), AckType: pulsarpb.CommandAck_Cumulative.Enum(),
					MessageId: []*pulsarpb.MessageIdData{msgID(1<<62, r.Uint64()>>1)}})
			case ackManyIDs:
				ids := make([]*pulsarpb.MessageIdData, 10000)
				for i := range ids {
					ids[i] = msgID(r.Uint64()>>1, r.Uint64()>>1)
				}
				acks = append(acks, individual(ids...))
			case ackHugeAckSet:
				set := make([]int64, 10000)
				for i := range set {
					set[i] = int64(r.Uint64())
				}
				id.BatchIndex, id.BatchSize, id.AckSet = proto.Int32(3), proto.Int32(64), set
				acks = append(acks, individual(id))
			case ackNegative:
				id.BatchIndex, id.BatchSize, id.AckSet = proto.Int32(-int32(r.IntN(1<<30))), proto.Int32(-5), ackSetWord
				acks = append(acks, individual(id))
			}
		}
		flow := r.IntN(2) == 0 && kind != ackHugeBatch && kind != ackOverCursorLimit
		sub := hostileSub(r)
		c := dialConnected(e)
		if c == nil {
			return
		}
		_ = c.Send(rawclient.Cmd(subscribe(pos.topic, sub, 1, 1, pulsarpb.CommandSubscribe_Shared)))
		if _, _, err := c.Await(pulsarpb.BaseCommand_SUCCESS, ioTimeout); err != nil {
			_ = c.Close()
			return
		}
		if flow {
			_ = c.Send(rawclient.Cmd(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(1000)}))
		}
		for _, a := range acks {
			if c.Send(rawclient.Cmd(a)) != nil {
				break
			}
		}
		finish(c, r, shortDrain)
	}
}

func attackSubscribeProperties(e *hostileEnv, r *rand.Rand) {
	topic := e.hostileTopics[r.IntN(len(e.hostileTopics))]
	if r.IntN(2) == 0 {
		topic = e.storedPos(r).topic
	}
	cmd := subscribe(topic, hostileSub(r), 1, 1, pulsarpb.CommandSubscribe_Shared)
	n := 1 + r.IntN(20000)
	valueSize := 1 + r.IntN(4*mib/n)
	for i := range n {
		kv := &pulsarpb.KeyValue{Key: proto.String(fmt.Sprintf("k%d-%s", i, bigName(r, 4))), Value: proto.String(bigName(r, valueSize))}
		if r.IntN(2) == 0 {
			cmd.Metadata = append(cmd.Metadata, kv)
		} else {
			cmd.SubscriptionProperties = append(cmd.SubscriptionProperties, kv)
		}
	}
	c := dialConnected(e)
	if c == nil {
		return
	}
	_ = c.Send(rawclient.Cmd(cmd))
	finish(c, r, shortDrain)
}

func attackBatchBomb(e *hostileEnv, r *rand.Rand) {
	topic := e.hostileTopics[r.IntN(len(e.hostileTopics))]
	claimed := []int32{math.MaxInt32, 1 << 24, -1, 0}[r.IntN(4)]
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("bomb-" + bigName(r, 6)), SequenceId: proto.Uint64(r.Uint64() >> 2),
		PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), NumMessagesInBatch: proto.Int32(claimed)}
	payload := randomBytes(r, 16+r.IntN(256))
	send := rawclient.SendFrame(rawclient.Cmd(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(md.GetSequenceId()), NumMessages: proto.Int32(claimed)}),
		rawclient.Entry(md, payload))
	sub := hostileSub(r)
	c := dialConnected(e)
	if c == nil {
		return
	}
	_ = c.Send(rawclient.Cmd(producerCmd(topic, 1, 1)))
	if _, _, err := c.Await(pulsarpb.BaseCommand_PRODUCER_SUCCESS, ioTimeout); err != nil {
		_ = c.Close()
		return
	}
	_ = c.Write(send)
	_ = c.Send(rawclient.Cmd(subscribe(topic, sub, 2, 2, pulsarpb.CommandSubscribe_Shared)))
	_ = c.Send(rawclient.Cmd(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(2), MessagePermits: proto.Uint32(1000)}))
	finish(c, r, 500*time.Millisecond)
}

func attackContradictions(e *hostileEnv, r *rand.Rand) {
	pos := e.storedPos(r)
	hostile := e.hostileTopics[r.IntN(len(e.hostileTopics))]
	sub := hostileSub(r)
	all := []*pulsarpb.BaseCommand{
		rawclient.Cmd(producerCmd(hostile, 1, 1)),
		rawclient.Cmd(producerCmd(e.hostileTopics[0], 1, 2)), // the same producer id again
		rawclient.Cmd(subscribe(pos.topic, sub, 1, 3, randomSubType(r))),
		rawclient.Cmd(subscribe(hostile, sub, 1, 4, randomSubType(r))), // the same consumer id again
		rawclient.Cmd(&pulsarpb.CommandCloseProducer{ProducerId: proto.Uint64(999), RequestId: proto.Uint64(5)}),
		rawclient.Cmd(&pulsarpb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(6)}),
		rawclient.Cmd(&pulsarpb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(7), MessageId: msgID(1<<62, 5)}),
		rawclient.Cmd(&pulsarpb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(8), MessagePublishTime: proto.Uint64(math.MaxUint64)}),
		rawclient.Cmd(&pulsarpb.CommandSeek{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(9)}), // neither id nor time
		rawclient.Cmd(&pulsarpb.CommandRedeliverUnacknowledgedMessages{ConsumerId: proto.Uint64(777), MessageIds: []*pulsarpb.MessageIdData{msgID(pos.ledger, pos.entry)}}),
		rawclient.Cmd(&pulsarpb.CommandUnsubscribe{ConsumerId: proto.Uint64(888), RequestId: proto.Uint64(10)}),
		rawclient.Cmd(&pulsarpb.CommandConnect{ClientVersion: proto.String("again"), ProtocolVersion: proto.Int32(20)}),
		rawclient.Cmd(&pulsarpb.CommandGetLastMessageId{ConsumerId: proto.Uint64(555), RequestId: proto.Uint64(11)}),
		rawclient.Cmd(&pulsarpb.CommandCloseConsumer{ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(12)}),
		rawclient.Cmd(&pulsarpb.CommandAck{ConsumerId: proto.Uint64(1), AckType: pulsarpb.CommandAck_Cumulative.Enum(), MessageId: []*pulsarpb.MessageIdData{msgID(pos.ledger, pos.entry)}}),
		rawclient.Cmd(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(0)}),
		rawclient.Cmd(&pulsarpb.CommandSubscribe{Topic: proto.String(pos.topic), Subscription: proto.String(sub), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
			ConsumerId: proto.Uint64(2), RequestId: proto.Uint64(13), Durable: proto.Bool(false), StartMessageId: msgID(1<<62, 1<<40)}),
	}
	picked := make([]*pulsarpb.BaseCommand, 3+r.IntN(10))
	for i := range picked {
		picked[i] = all[r.IntN(len(all))]
	}
	sendAfterClose := sendFrame(r, 1, 1, nil, randomBytes(r, 32))
	c := dialConnected(e)
	if c == nil {
		return
	}
	for _, cmd := range picked {
		if c.Send(cmd) != nil {
			break
		}
	}
	_ = c.Write(sendAfterClose)
	finish(c, r, shortDrain)
}

func attackTruncatedReset(e *hostileEnv, r *rand.Rand) {
	pos := e.storedPos(r)
	full := sendFrame(r, 1, 0, nil, randomBytes(r, 4096))
	if r.IntN(2) == 0 {
		full = rawclient.Frame(rawclient.Cmd(subscribe(pos.topic, hostileSub(r), 1, 1, randomSubType(r))))
	}
	cut := 1 + r.IntN(len(full)-1)
	inFlight := r.IntN(50)
	c := dialConnected(e)
	if c == nil {
		return
	}
	if inFlight > 0 {
		_ = c.Send(rawclient.Cmd(producerCmd(e.hostileTopics[r.IntN(len(e.hostileTopics))], 1, 1)))
		for i := range inFlight {
			_ = c.Write(sendFrame(r, 1, uint64(i), nil, randomBytes(r, 100)))
		}
	}
	_ = c.Write(full[:cut])
	_ = c.Reset()
}
