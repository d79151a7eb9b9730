package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func TestConnectAdvertisesMaxMessageSize(t *testing.T) {
	s := startServer(t, Options{MaxMessageSize: 1048576})
	c := dialRaw(t, s.addr)
	connected := c.connect()
	if got := connected.GetMaxMessageSize(); got != 1048576 {
		t.Errorf("max_message_size = %d, want 1048576", got)
	}
	if got := connected.GetProtocolVersion(); got != 20 {
		t.Errorf("protocol_version = %d, want 20", got)
	}
	if connected.GetServerVersion() == "" {
		t.Error("server_version is empty")
	}
}

func TestProtocolVersionIsNegotiatedDown(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.send(&pulsarpb.CommandConnect{ClientVersion: proto.String("old"), ProtocolVersion: proto.Int32(13)})
	f := c.expect(pulsarpb.BaseCommand_CONNECTED)
	if got := f.Cmd.GetConnected().GetProtocolVersion(); got != 13 {
		t.Errorf("protocol_version = %d, want the client's 13", got)
	}
}

func TestAncientProtocolVersionIsRefused(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.send(&pulsarpb.CommandConnect{ClientVersion: proto.String("ancient"), ProtocolVersion: proto.Int32(2)})
	f := c.expect(pulsarpb.BaseCommand_ERROR)
	if got := f.Cmd.GetError().GetError(); got != pulsarpb.ServerError_UnsupportedVersionError {
		t.Errorf("error = %s, want UnsupportedVersionError", got)
	}
	c.expectClosed()
}

func TestPingPong(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG)
}

func TestServerPingsIdleClientAndClosesSilentOne(t *testing.T) {
	s := startServer(t, Options{KeepAliveInterval: 100 * time.Millisecond})
	c := dialRaw(t, s.addr)
	// The server counts idleness from its read of CONNECT: start before sending it, so a slow
	// CONNECTED under load cannot make the close look early.
	start := time.Now()
	c.connect()
	c.expect(pulsarpb.BaseCommand_PING) // the server checks on us
	// We never answer: the server must give up after about two intervals.
	c.expectClosed()
	if elapsed := time.Since(start); elapsed < 150*time.Millisecond {
		t.Errorf("closed after %v, before two keepalive intervals", elapsed)
	}
}

func TestClientAnsweringPingsStaysConnected(t *testing.T) {
	// The interval is generous: under load the answer to a PING may take a while, and this test
	// is about a client that answers, not about how fast.
	s := startServer(t, Options{KeepAliveInterval: time.Second})
	c := dialRaw(t, s.addr)
	c.connect()
	for i := 0; i < 3; i++ { // 3 pings ≈ 3 intervals > 2 intervals of silence
		c.expect(pulsarpb.BaseCommand_PING)
		c.send(&pulsarpb.CommandPong{})
	}
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG)
}

func TestCommandBeforeConnectClosesConnection(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.send(&pulsarpb.CommandPing{})
	c.expectClosed()
	poll.Until(t, 10*time.Second, "bad frame counted", func() bool { return s.Stats().BadFrames == 1 })
}

func TestNoConnectWithinKeepAliveClosesConnection(t *testing.T) {
	s := startServer(t, Options{KeepAliveInterval: 100 * time.Millisecond})
	c := dialRaw(t, s.addr)
	c.expectClosed()
}

func TestOversizedFrameClosesConnection(t *testing.T) {
	s := startServer(t, Options{MaxMessageSize: 1024 * 1024})
	c := dialRaw(t, s.addr)
	c.connect()
	// Announce a frame one byte over the limit; the server must not wait for (or allocate) it.
	c.writeRaw(frameHeader(1024*1024+10*1024+1, 10))
	c.expectClosed()
	poll.Until(t, 10*time.Second, "bad frame counted", func() bool { return s.Stats().BadFrames == 1 })
}

// TestFrameHeadersCostWhatTheClientSends: a frame's memory follows the bytes that arrive, not
// the size its header announces. Twenty connections announce a frame of the full max frame size
// and send a few bytes of it, before CONNECT (unauthenticated: the header alone is over the bound
// before CONNECT, so the connection closes at once) and after (the frame is within the bound; the
// client then hangs up mid-frame). What the server allocated for them all stays small.
func TestFrameHeadersCostWhatTheClientSends(t *testing.T) {
	for _, connected := range []bool{false, true} {
		t.Run(fmt.Sprintf("connected=%v", connected), func(t *testing.T) {
			s := startServer(t, Options{})
			const conns = 20
			clients := make([]*rawClient, conns)
			for i := range clients {
				clients[i] = dialRaw(t, s.addr)
				if connected {
					clients[i].connect()
				}
			}
			grown := totalAllocDuring(func() {
				for _, c := range clients {
					c.writeRaw(append(frameHeader(uint32(wire.DefaultMaxFrameSize), 16), make([]byte, 1000)...))
					if err := c.nc.(*net.TCPConn).CloseWrite(); err != nil {
						t.Fatal(err)
					}
				}
				for _, c := range clients {
					c.expectClosed() // the server has read what the client sent
				}
			})
			t.Logf("%d connections: %d KiB allocated", conns, grown>>10)
			if grown > 16<<20 {
				t.Fatalf("%d connections sending 1 KiB each made the server allocate %d MiB", conns, grown>>20)
			}
			if !connected {
				poll.Until(t, 10*time.Second, "every header counted as a bad frame", func() bool { return s.Stats().BadFrames == conns })
			}
		})
	}
}

// totalAllocDuring returns the bytes allocated while f ran.
func totalAllocDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestFrameBeforeConnectIsBounded: before CONNECT frames are read with a small bound, as the
// client is not authenticated yet. A header announcing more closes the connection at once (the
// server does not wait for the frame) with a log line. A CONNECT carrying two tokens of the largest
// size the authenticator accepts (a proxy's and its client's) fits, and after CONNECT frames up to
// the max frame size are read again.
func TestFrameBeforeConnectIsBounded(t *testing.T) {
	var logs syncBuffer
	s := startServer(t, Options{Authenticator: tokenAuthenticator(t, ""), Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	c := dialRaw(t, s.addr)
	c.writeRaw(frameHeader(preConnectMaxFrame+1, 16))
	c.expectClosed()
	poll.Until(t, 10*time.Second, "bad frame counted", func() bool { return s.Stats().BadFrames == 1 })
	if l := logs.String(); !strings.Contains(l, "closing connection: bad frame") || !strings.Contains(l, "before CONNECT") {
		t.Errorf("no log line for the frame over the bound before CONNECT:\n%s", l)
	}

	// A signed token padded to nearly auth.MaxTokenBytes.
	token := testToken(t, testSecret, jwt.MapClaims{"sub": "app", "pad": strings.Repeat("x", auth.MaxTokenBytes*3/4-200)})
	if len(token) > auth.MaxTokenBytes || len(token) < auth.MaxTokenBytes-1024 {
		t.Fatalf("token of %d bytes, want just under %d", len(token), auth.MaxTokenBytes)
	}
	c = dialRaw(t, s.addr)
	c.send(&pulsarpb.CommandConnect{
		ClientVersion: proto.String("raw-test"), ProtocolVersion: proto.Int32(20),
		AuthMethodName: proto.String("token"), AuthData: []byte(token),
		OriginalPrincipal: proto.String("app"), OriginalAuthMethod: proto.String("token"), OriginalAuthData: proto.String(token),
	})
	c.expect(pulsarpb.BaseCommand_CONNECTED)
	name := c.createProducer("persistent://public/default/after-connect", 1, 1)
	c.sendMessage(1, 0, entry(t, name, 0, make([]byte, 1<<20)))
	c.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
}

func TestMalformedFrameSizesCloseConnection(t *testing.T) {
	s := startServer(t, Options{})
	for name, frame := range map[string][]byte{
		"command size zero":         frameHeader(4, 0),
		"command larger than frame": append(frameHeader(8, 100), 0, 0, 0, 0),
		"total size too small":      {0, 0, 0, 2, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, s.addr)
			c.connect()
			c.writeRaw(frame)
			c.expectClosed()
		})
	}
}

func TestGarbageProtobufClosesConnection(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	garbage := []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x34}
	c.writeRaw(append(frameHeader(uint32(4+len(garbage)), uint32(len(garbage))), garbage...))
	c.expectClosed()
	poll.Until(t, 10*time.Second, "bad frame counted", func() bool { return s.Stats().BadFrames == 1 })
}

func TestUnknownCommandTypeGetsErrorAndConnectionLives(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	// BaseCommand{type: 999}: field 1, varint 999.
	cmd := []byte{0x08, 0xe7, 0x07}
	c.writeRaw(append(frameHeader(uint32(4+len(cmd)), uint32(len(cmd))), cmd...))
	c.expect(pulsarpb.BaseCommand_ERROR)
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG)
}

func TestUnsupportedCommandGetsErrorWithItsRequestID(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	c.send(&pulsarpb.CommandNewTxn{RequestId: proto.Uint64(77), TcId: proto.Uint64(0)})
	f := c.expect(pulsarpb.BaseCommand_ERROR)
	if got := f.Cmd.GetError().GetRequestId(); got != 77 {
		t.Errorf("request_id = %d, want 77", got)
	}
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG)
}

func TestLookupAnswersThisBroker(t *testing.T) {
	s := startServer(t, Options{ServiceURL: "pulsar://broker.example:6650"})
	c := dialRaw(t, s.addr)
	c.connect()
	for i, topic := range []string{"short", "public/default/three-part", "persistent://public/default/full", "persistent://public/default/p-partition-3"} {
		c.send(&pulsarpb.CommandLookupTopic{Topic: proto.String(topic), RequestId: proto.Uint64(uint64(i + 1)), AdvertisedListenerName: proto.String("")})
		r := c.expect(pulsarpb.BaseCommand_LOOKUP_RESPONSE).Cmd.GetLookupTopicResponse()
		if r.GetRequestId() != uint64(i+1) || r.GetResponse() != pulsarpb.CommandLookupTopicResponse_Connect ||
			r.GetBrokerServiceUrl() != "pulsar://broker.example:6650" || !r.GetAuthoritative() {
			t.Errorf("lookup %q: %v", topic, r)
		}
	}
	c.send(&pulsarpb.CommandLookupTopic{Topic: proto.String("a/b/c/d"), RequestId: proto.Uint64(9)})
	r := c.expect(pulsarpb.BaseCommand_LOOKUP_RESPONSE).Cmd.GetLookupTopicResponse()
	if r.GetResponse() != pulsarpb.CommandLookupTopicResponse_Failed || r.GetError() != pulsarpb.ServerError_InvalidTopicName {
		t.Errorf("invalid topic: %v", r)
	}
}

func TestPartitionedMetadataWithoutCatalogIsZero(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	c.send(&pulsarpb.CommandPartitionedTopicMetadata{Topic: proto.String("persistent://public/default/x"), RequestId: proto.Uint64(3)})
	r := c.expect(pulsarpb.BaseCommand_PARTITIONED_METADATA_RESPONSE).Cmd.GetPartitionMetadataResponse()
	if r.GetRequestId() != 3 || r.GetPartitions() != 0 || r.Error != nil {
		t.Errorf("got %v", r)
	}
}

func TestServerCloseDisconnectsClients(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.expectClosed()
}

func TestCommandsTheClientDoesNotHandleAreNeverSent(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	var sc *conn
	poll.Until(t, 10*time.Second, "connection registered", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for x := range s.conns {
			sc = x
		}
		return sc != nil
	})
	for _, body := range []proto.Message{
		&pulsarpb.CommandReachedEndOfTopic{ConsumerId: proto.Uint64(1)},
		&pulsarpb.CommandWatchTopicListSuccess{RequestId: proto.Uint64(1), WatcherId: proto.Uint64(1)},
		&pulsarpb.CommandWatchTopicUpdate{WatcherId: proto.Uint64(1)},
	} {
		if sc.sendCommand(body) {
			t.Errorf("%T was queued", body)
		}
	}
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG) // nothing else came first
}

func TestActiveConsumerChangeWaitsForTheConsumersFirstFlow(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	c.send(&pulsarpb.CommandSubscribe{Topic: proto.String("persistent://public/default/failover"), Subscription: proto.String("f"),
		SubType: pulsarpb.CommandSubscribe_Failover.Enum(), ConsumerId: proto.Uint64(7), RequestId: proto.Uint64(1)})
	c.expect(pulsarpb.BaseCommand_SUCCESS)
	// Before FLOW nothing but our own PONG may come: the client could not route the event yet.
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG)
	c.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(7), MessagePermits: proto.Uint32(10)})
	ac := c.expect(pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE).Cmd.GetActiveConsumerChange()
	if ac.GetConsumerId() != 7 || !ac.GetIsActive() {
		t.Fatalf("ACTIVE_CONSUMER_CHANGE %v", ac)
	}
}

// TestConsumerThatStopsReadingIsDisconnected grants huge permits and never reads: the server must
// drop that connection once its outbound queue passes the bound, and keep serving the producer.
func TestConsumerThatStopsReadingIsDisconnected(t *testing.T) {
	s := startServer(t, Options{MaxOutboundBytes: 64 * 1024})
	topic := "persistent://public/default/not-reading"
	sub := dialRaw(t, s.addr)
	sub.connect()
	sub.send(&pulsarpb.CommandSubscribe{Topic: proto.String(topic), Subscription: proto.String("s"),
		SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(), ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1)})
	sub.expect(pulsarpb.BaseCommand_SUCCESS)
	sub.send(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(1 << 31)})
	// From now on the subscriber reads nothing.

	pub := dialRaw(t, s.addr)
	pub.connect()
	name := pub.createProducer(topic, 1, 1)
	body := make([]byte, 64*1024)
	open := func() int64 { return s.Stats().ConnectionsOpen }
	for seq := uint64(0); seq < 2000 && open() == 2; seq++ {
		pub.sendMessage(1, seq, entry(t, name, seq, body))
		pub.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
	}
	poll.Until(t, 10*time.Second, "the non-reading consumer's connection to close", func() bool { return open() == 1 })
	pub.send(&pulsarpb.CommandPing{})
	pub.expect(pulsarpb.BaseCommand_PONG)
}
