package e2e

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
	"google.golang.org/protobuf/proto"
)

// protoConn speaks the binary protocol by hand (internal/wire) for what a well-behaved client never
// sends: bad checksums, commands the broker does not support, oversized frames.
type protoConn struct {
	t    *testing.T
	conn net.Conn
	r    *wire.Reader
}

func dialProto(t *testing.T, addr string) *protoConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &protoConn{t: t, conn: conn, r: wire.NewReader(conn, 0)}
}

func (c *protoConn) send(body proto.Message, payload ...[]byte) {
	c.t.Helper()
	b, err := wire.EncodeFrame(wire.Command(body), payload...)
	if err != nil {
		c.t.Fatalf("encode %T: %v", body, err)
	}
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("write %T: %v", body, err)
	}
}

// next returns the next command other than PING (which it answers), within 10 s.
func (c *protoConn) next() (*pulsarpb.BaseCommand, error) {
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := c.r.ReadFrame()
		if err != nil {
			return nil, err
		}
		if f.Cmd.GetType() == pulsarpb.BaseCommand_PING {
			c.send(&pulsarpb.CommandPong{})
			continue
		}
		return f.Cmd, nil
	}
}

func (c *protoConn) expect(want pulsarpb.BaseCommand_Type) *pulsarpb.BaseCommand {
	c.t.Helper()
	cmd, err := c.next()
	if err != nil {
		c.t.Fatalf("waiting for %v: %v", want, err)
	}
	if cmd.GetType() != want {
		c.t.Fatalf("got %v (%v), want %v", cmd.GetType(), cmd, want)
	}
	return cmd
}

func rawEntry(t *testing.T, producer string, seq int64, body []byte) []byte {
	t.Helper()
	e, err := wire.EncodeEntry(&pulsarpb.MessageMetadata{
		ProducerName: proto.String(producer),
		SequenceId:   proto.Uint64(uint64(seq)),
		PublishTime:  proto.Uint64(uint64(time.Now().UnixMilli())),
	}, body)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestRawProtocolBadInput checks, on a real `meridian standalone` and over one connection: CONNECTED
// advertises --max-message-size; a SEND whose checksum does not match gets SEND_ERROR ChecksumError and
// the connection lives on; a command the broker does not implement gets an error answer and the
// connection lives on; a frame over the limit closes the connection. What was stored is exactly the
// good messages, intact.
func TestRawProtocolBadInput(t *testing.T) {
	const maxMessageSize = 128 * 1024
	p := harness.StartStandalone(t, harness.Options{MaxMessageSize: maxMessageSize})
	topic := harness.Topic(t)
	c := dialProto(t, strings.TrimPrefix(p.ServiceURL(), "pulsar://"))

	c.send(&pulsarpb.CommandConnect{ClientVersion: proto.String("meridian-e2e"), ProtocolVersion: proto.Int32(20)})
	connected := c.expect(pulsarpb.BaseCommand_CONNECTED).GetConnected()
	if connected.GetMaxMessageSize() != maxMessageSize {
		t.Fatalf("CONNECTED max_message_size = %d, want %d", connected.GetMaxMessageSize(), maxMessageSize)
	}

	c.send(&pulsarpb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)})
	name := c.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS).GetProducerSuccess().GetProducerName()
	if name == "" {
		t.Fatal("PRODUCER_SUCCESS without a producer name")
	}

	sendEntry := func(seq int64, e []byte) {
		c.send(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(uint64(seq)), NumMessages: proto.Int32(1)}, e)
	}
	sendEntry(0, rawEntry(t, name, 0, checker.Payload("raw", 0, 100)))
	if r := c.expect(pulsarpb.BaseCommand_SEND_RECEIPT).GetSendReceipt(); r.GetSequenceId() != 0 {
		t.Fatalf("receipt for sequence %d, want 0", r.GetSequenceId())
	}

	bad := rawEntry(t, name, 1, checker.Payload("raw", 1, 100))
	bad[len(bad)-1] ^= 0xff // body byte changed after the checksum was computed
	sendEntry(1, bad)
	se := c.expect(pulsarpb.BaseCommand_SEND_ERROR).GetSendError()
	if se.GetError() != pulsarpb.ServerError_ChecksumError || se.GetSequenceId() != 1 {
		t.Fatalf("SEND_ERROR %v for sequence %d, want ChecksumError for 1", se.GetError(), se.GetSequenceId())
	}
	sendEntry(2, rawEntry(t, name, 2, checker.Payload("raw", 2, 100)))
	if r := c.expect(pulsarpb.BaseCommand_SEND_RECEIPT).GetSendReceipt(); r.GetSequenceId() != 2 {
		t.Fatalf("after a checksum error: receipt for sequence %d, want 2", r.GetSequenceId())
	}

	// A command Meridian does not implement (transactions) is answered with an error, not ignored.
	c.send(&pulsarpb.CommandNewTxn{RequestId: proto.Uint64(7), TcId: proto.Uint64(0)})
	cmd, err := c.next()
	if err != nil {
		t.Fatalf("after NEW_TXN: %v", err)
	}
	switch cmd.GetType() {
	case pulsarpb.BaseCommand_ERROR:
		if cmd.GetError().GetRequestId() != 7 {
			t.Fatalf("ERROR for request %d, want 7", cmd.GetError().GetRequestId())
		}
	case pulsarpb.BaseCommand_NEW_TXN_RESPONSE:
		if cmd.GetNewTxnResponse().Error == nil {
			t.Fatalf("NEW_TXN_RESPONSE without an error: %v", cmd)
		}
	default:
		t.Fatalf("NEW_TXN answered with %v", cmd.GetType())
	}
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG)

	// A frame larger than the limit: the broker must close the connection without reading it.
	huge := make([]byte, 8)
	binary.BigEndian.PutUint32(huge[0:], uint32(wire.MaxFrameSize(maxMessageSize)+1))
	binary.BigEndian.PutUint32(huge[4:], 16)
	if _, err := c.conn.Write(huge); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := c.next(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("connection still open 10 s after an oversized frame")
			}
			if !errors.Is(err, io.EOF) && !isConnClosed(err) {
				t.Logf("connection ended with %v", err)
			}
			break
		}
	}

	// Stored: exactly messages 0 and 2, intact.
	client := harness.NewClient(t, p, nil)
	chk := checker.New()
	for _, seq := range []int64{0, 2} {
		chk.Sent("raw", seq, 100)
		chk.Acked("raw", seq, "")
	}
	chk.Sent("raw", 1, 100)
	r := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	ctx := testCtx(t, 30*time.Second)
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		chk.Received("stored", m.Payload(), m.ID().String())
	}
	rep := chk.Verify("stored", checker.Expect{})
	if !rep.OK() || rep.Distinct != 2 {
		t.Fatalf("stored: %s", rep)
	}
}
