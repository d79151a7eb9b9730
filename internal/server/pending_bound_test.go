package server

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// TestPipeliningProducerIsBoundedPerConnection: a raw-protocol producer pipelines SENDs while
// storage is stalled (every fsync blocks), without reading anything. Its connection stops being
// read once it has MaxPendingSendBytes (plus one frame) in flight at most: it cannot take the
// broker-wide publish budget, so another client on the same broker is still served (PING, LOOKUP)
// while storage is stalled, and publishes once it is back. The flood is four times the broker
// budget (a server without the per-connection bound would read until the budget is spent). The
// bounds are a sixteenth of the defaults, whose presence TestPendingSendBytesBoundedByDefault
// checks: the bound is the same code at any size, and the defaults would make every run store
// hundreds of MiB. In a few runs the reader catches up with the flood before the bound and stops
// in its own group commit instead (TestReaderCommittingIsNotClientSilence); the bound holds then too.
func TestPipeliningProducerIsBoundedPerConnection(t *testing.T) {
	mem := vfs.NewMem()
	engine, err := storage.Open(t.Context(), storage.Options{Dir: "/data", FS: mem, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	const (
		perConnection  = DefaultMaxPendingSendBytes / 16
		maxMessageSize = DefaultMaxMessageSize / 16
		// The broker-wide budget is twice the per-connection bound: one connection alone must
		// not exhaust it.
		brokerBudget = 2 * perConnection
		bodySize     = maxMessageSize / 2
	)
	b, err := broker.New(broker.Config{Cluster: "test", AutoTopicCreation: true, MaxPublishBytesInFlight: brokerBudget},
		broker.Deps{Storage: engine, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate) }) }
	t.Cleanup(func() {
		release()
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		_ = b.Close(ctx)
		_ = engine.Close()
	})
	s := startServer(t, Options{Broker: b, MaxPendingSendBytes: perConnection, MaxMessageSize: maxMessageSize})
	t.Cleanup(release) // before the server closes: it waits for the publishes in flight

	const topic = "persistent://public/default/flood"
	hostile := dialRaw(t, s.addr)
	hostile.connect()
	name := hostile.createProducer(topic, 1, 1)
	other := dialRaw(t, s.addr)
	other.connect()
	otherName := other.createProducer("persistent://public/default/other", 1, 1)

	// Storage stalls: every fsync waits for the gate.
	mem.SetInjector(func(op vfs.Op, _ string) error {
		if op == vfs.OpSync {
			<-gate
		}
		return nil
	})
	body := make([]byte, bodySize)
	frames := make([][]byte, 0, 4*brokerBudget/bodySize)
	for seq := range uint64(cap(frames)) {
		f, err := wire.EncodeFrame(wire.Command(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq)}), entry(t, name, seq, body))
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	// The flood: written until the server stops reading and TCP's buffers fill; the write then
	// blocks until the connection is closed at the end of the test.
	flooding := make(chan struct{})
	go func() {
		defer close(flooding)
		for _, f := range frames {
			if _, err := hostile.nc.Write(f); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = hostile.nc.Close()
		<-flooding
	})

	limiter := b.PublishLimiter()
	// The flooding connection's reader stops: throttled at the bound, or earlier, when it caught up
	// with the socket and runs the group commit of what it read itself (a lead), which the stalled
	// disk holds; the other connection's reader, with nothing in flight, goes on reading.
	poll.Until(t, 20*time.Second, "the flooding connection's reader to pause", func() bool { return s.pausedReaders() > 0 })
	// Paused: give the reader no chance to read more, then look at what it holds.
	inUse, _ := limiter.InUse()
	const frameBound = maxMessageSize + FramePadding
	if inUse > perConnection+frameBound {
		t.Fatalf("one connection holds %d bytes of publishes in flight; the per-connection bound is %d (+ one frame)", inUse, perConnection)
	}
	if limiter.Over() {
		t.Fatalf("one connection exhausted the broker-wide publish budget (%d of %d bytes)", inUse, brokerBudget)
	}

	// Another client on the same broker is read and answered while storage is stalled.
	other.send(&pulsarpb.CommandPing{})
	other.expect(pulsarpb.BaseCommand_PONG)
	other.send(&pulsarpb.CommandLookupTopic{Topic: proto.String(topic), RequestId: proto.Uint64(2)})
	other.expect(pulsarpb.BaseCommand_LOOKUP_RESPONSE)
	if after, _ := limiter.InUse(); after > perConnection+frameBound {
		t.Fatalf("the flooding connection holds %d bytes after more time", after)
	}

	// Storage back: the other client's publish is stored and receipted.
	release()
	other.sendMessage(1, 0, entry(t, otherName, 0, []byte("after the stall")))
	for {
		f := other.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
		if f.Cmd.GetSendReceipt().GetSequenceId() == 0 {
			break
		}
	}
}

// pausedReaders counts the connections whose reader is paused on the server's account.
func (s *Server) pausedReaders() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if c.paused.Load() {
			n++
		}
	}
	return n
}

// TestPendingSendBytesBoundedByDefault: a server built without the option bounds each connection's
// publishes in flight, in bytes as in count.
func TestPendingSendBytesBoundedByDefault(t *testing.T) {
	o := Options{Broker: newTestBroker(t), ServiceURL: "pulsar://127.0.0.1:6650"}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if o.MaxPendingSendBytes != DefaultMaxPendingSendBytes || o.MaxPendingSends != DefaultMaxPendingSends || o.MaxOutboundBytes != DefaultMaxOutboundBytes {
		t.Fatalf("defaults: %d bytes, %d sends, %d outbound", o.MaxPendingSendBytes, o.MaxPendingSends, o.MaxOutboundBytes)
	}
}
