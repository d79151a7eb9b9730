package node

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// TestMoveSendsClientsToTheTarget: when a bundle moves, its producers and consumers get
// CLOSE_PRODUCER and CLOSE_CONSUMER naming the target (assignedBrokerServiceUrl), and a PRODUCER
// sent straight to the target is answered once the move ends, without a lookup.
func TestMoveSendsClientsToTheTarget(t *testing.T) {
	n1, n2 := startPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic, bundle := topicServedBy(t, n1, "redirect")

	conn := dialPulsar(t, n1.ServiceURL())
	conn.send(&pulsarpb.CommandProducer{Topic: proto.String(topic.String()), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)})
	conn.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS)
	conn.send(&pulsarpb.CommandSubscribe{Topic: proto.String(topic.String()), Subscription: proto.String("s"),
		SubType: pulsarpb.CommandSubscribe_Shared.Enum(), ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2)})
	conn.expect(pulsarpb.BaseCommand_SUCCESS)

	target, _ := n1.components.member.coord.HandOverTarget(bundle)
	moved := make(chan error, 1)
	go func() { moved <- n1.handOver(ctx, bundle, target) }()
	want := n2.ServiceURL()
	if got := conn.expect(pulsarpb.BaseCommand_CLOSE_PRODUCER).Cmd.GetCloseProducer().GetAssignedBrokerServiceUrl(); got != want {
		t.Fatalf("CLOSE_PRODUCER names %q, want the target %q", got, want)
	}
	if got := conn.expect(pulsarpb.BaseCommand_CLOSE_CONSUMER).Cmd.GetCloseConsumer().GetAssignedBrokerServiceUrl(); got != want {
		t.Fatalf("CLOSE_CONSUMER names %q, want the target %q", got, want)
	}
	// Straight to the target, as the client does, while the move may still run: held until it ends.
	// (A target whose view has not yet seen the move refuses, and the client looks the topic up.)
	coord2 := n2.components.member.coord
	poll.Until(t, 10*time.Second, "b2 to see the move", func() bool {
		return coord2.Incoming("public/default", topic.String()) || coord2.Owns("public/default", topic.String())
	})
	at := dialPulsar(t, want)
	at.send(&pulsarpb.CommandProducer{Topic: proto.String(topic.String()), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(3)})
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	at.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS)
}

// pulsarConn is a bare binary-protocol connection for tests that look at single commands.
type pulsarConn struct {
	t  *testing.T
	nc net.Conn
	rd *wire.Reader
}

func dialPulsar(t *testing.T, serviceURL string) *pulsarConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(serviceURL, "pulsar://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &pulsarConn{t: t, nc: nc, rd: wire.NewReader(nc, wire.MaxFrameSize(5<<20))}
	c.send(&pulsarpb.CommandConnect{ClientVersion: proto.String("test"), ProtocolVersion: proto.Int32(21)})
	c.expect(pulsarpb.BaseCommand_CONNECTED)
	return c
}

func (c *pulsarConn) send(body proto.Message) {
	c.t.Helper()
	b, err := wire.EncodeFrame(wire.Command(body))
	if err == nil {
		_, err = c.nc.Write(b)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// expect reads frames until one of type want (skipping pings and the like), within 30 s.
func (c *pulsarConn) expect(want pulsarpb.BaseCommand_Type) wire.Frame {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		f, err := c.rd.ReadFrame()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", want, err)
		}
		switch f.Type() {
		case want:
			return f
		case pulsarpb.BaseCommand_ERROR:
			c.t.Fatalf("waiting for %s: %v", want, f.Cmd.GetError())
		}
	}
}
