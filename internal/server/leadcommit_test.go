package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/storage"
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
