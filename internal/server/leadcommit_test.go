package server

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// TestLightLoadSendsCommitOnTheReader: a producer that sends one SEND at a time and waits for its
// receipt gets every receipt, in order, and its group commits run on the connection's reader (a
// storage lead: Producer.PublishBatchChargedLast) instead of waking storage's sync loop.
func TestLightLoadSendsCommitOnTheReader(t *testing.T) {
	b, engine := newTestBrokerOn(t, broker.Config{Cluster: "test", AutoTopicCreation: true},
		storage.Options{CursorFlushInterval: time.Hour, TrimInterval: time.Hour})
	s := startServer(t, Options{Broker: b})
	c := dialRaw(t, s.addr)
	c.connect()
	name := c.createProducer("persistent://public/default/lead", 1, 1)
	var last int64 = -1
	for seq := range uint64(40) {
		c.sendMessage(1, seq, entry(t, name, seq, fmt.Appendf(nil, "message %d", seq)))
		r := c.expect(pulsarpb.BaseCommand_SEND_RECEIPT).Cmd.GetSendReceipt()
		if r.GetSequenceId() != seq || int64(r.GetMessageId().GetEntryId()) <= last {
			t.Fatalf("receipt %v after entry %d", r, last)
		}
		last = int64(r.GetMessageId().GetEntryId())
	}
	if n := engine.Metrics().LeadCommits; n == 0 {
		t.Fatal("no group commit ran on the reader")
	}
}

// TestReaderCommittingIsNotClientSilence: while a connection's reader runs a group commit that the
// disk stalls (a lead), the server is the one not reading, so the keepalive must not close the
// connection as silent: the client keeps talking meanwhile, and gets its receipt once the disk is
// back.
func TestReaderCommittingIsNotClientSilence(t *testing.T) {
	mem := vfs.NewMem()
	engine, err := storage.Open(t.Context(), storage.Options{Dir: "/data", FS: mem, Logger: testLogger(),
		CursorFlushInterval: time.Hour, TrimInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Config{Cluster: "test", AutoTopicCreation: true}, broker.Deps{Storage: engine, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// The disk: while a gate is set, every fsync waits for it to close.
	var (
		gateMu  sync.Mutex
		gate    chan struct{}
		waiting atomic.Int32 // fsyncs waiting at the gate
	)
	stall := func() {
		gateMu.Lock()
		defer gateMu.Unlock()
		gate = make(chan struct{})
	}
	unstall := func() {
		gateMu.Lock()
		defer gateMu.Unlock()
		if gate != nil {
			close(gate)
			gate = nil
		}
	}
	mem.SetInjector(func(op vfs.Op, _ string) error {
		gateMu.Lock()
		g := gate
		gateMu.Unlock()
		if op == vfs.OpSync && g != nil {
			waiting.Add(1)
			<-g
			waiting.Add(-1)
		}
		return nil
	})
	t.Cleanup(func() {
		unstall()
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		_ = b.Close(ctx)
		_ = engine.Close()
	})
	const interval = 200 * time.Millisecond
	s := startServer(t, Options{Broker: b, KeepAliveInterval: interval})
	t.Cleanup(unstall) // before the server closes: it waits for the publishes in flight
	c := dialRaw(t, s.addr)
	c.connect()
	name := c.createProducer("persistent://public/default/stalled-lead", 1, 1)

	// One SEND at a time until one is committed on the reader while the disk stalls: a SEND whose
	// commit the sync loop runs instead is let through and the next one tried.
	seq := uint64(0)
	for ; ; seq++ {
		if seq == 50 {
			t.Fatal("no SEND was committed on the reader")
		}
		before := engine.Metrics().LeadCommits
		stall()
		c.sendMessage(1, seq, entry(t, name, seq, fmt.Appendf(nil, "message %d", seq)))
		poll.Until(t, 10*time.Second, "the SEND's fsync to stall", func() bool { return waiting.Load() > 0 })
		if engine.Metrics().LeadCommits > before {
			break
		}
		unstall()
		c.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
	}

	// The client keeps pinging for three keepalive intervals, which the stalled reader cannot read.
	for deadline := time.Now().Add(3 * interval); time.Now().Before(deadline); time.Sleep(interval / 4) {
		c.send(&pulsarpb.CommandPing{})
	}
	unstall()
	if r := c.expect(pulsarpb.BaseCommand_SEND_RECEIPT).Cmd.GetSendReceipt(); r.GetSequenceId() != seq {
		t.Fatalf("receipt %v, want sequence %d", r, seq)
	}
	// Still open: the pings sent during the stall are answered.
	c.expect(pulsarpb.BaseCommand_PONG)
}
