package server

import (
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// BenchmarkPublishPipelined measures the publish path end to end on one connection: SEND frames
// written back to back by one client, through checksum verification, the broker and storage (fsync
// before every receipt, group-committed), to SEND_RECEIPTs read in order. One op = one SEND of one
// message (batch: num_messages=100 messages of size/100 bytes each, as a batching client sends).
func BenchmarkPublishPipelined(b *testing.B) {
	for _, bc := range []struct {
		name   string
		size   int
		perMsg int // messages per SEND
	}{
		{"1KiB-single", 1024, 1},
		{"100KiB-batch-of-100", 100 * 1024, 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := startServer(b, Options{})
			c := dialRaw(b, s.addr)
			c.connect()
			name := c.createProducer(fmt.Sprintf("persistent://public/default/bench-%s", bc.name), 1, 1)
			body := make([]byte, bc.size)
			md := &pulsarpb.MessageMetadata{ProducerName: proto.String(name), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}
			if bc.perMsg > 1 {
				md.NumMessagesInBatch = proto.Int32(int32(bc.perMsg))
			}
			payload, err := wire.EncodeEntry(md, body)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			writeErr := make(chan error, 1)
			go func() {
				w := wire.NewWriter(c.nc)
				for i := 0; i < b.N; i++ {
					send := &pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(uint64(i))}
					if bc.perMsg > 1 {
						send.NumMessages = proto.Int32(int32(bc.perMsg))
					}
					if err := w.WritePayloadCommand(wire.Command(send), payload); err != nil {
						writeErr <- err
						return
					}
					if w.Buffered() > 256*1024 || i == b.N-1 {
						if err := w.Flush(); err != nil {
							writeErr <- err
							return
						}
					}
				}
				writeErr <- nil
			}()
			for i := 0; i < b.N; i++ {
				_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
				f, err := c.r.ReadFrame()
				if err != nil {
					b.Fatal(err)
				}
				if f.Type() != pulsarpb.BaseCommand_SEND_RECEIPT || f.Cmd.GetSendReceipt().GetSequenceId() != uint64(i) {
					b.Fatalf("frame %d: %s %v", i, f.Type(), f.Cmd)
				}
			}
			b.StopTimer()
			if err := <-writeErr; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N*bc.perMsg)/b.Elapsed().Seconds(), "msgs/s")
			_ = c.nc.Close()
		})
	}
}

// BenchmarkPublishWindowed is the shape of pulsar-perf's default run: batches of 128 x 1 KiB
// messages (its 128 KiB batch limit) with at most 8 SENDs (~1000 messages, its queue size)
// awaiting receipts. Throughput is then the window over the round trip, so it measures the
// publish path's latency under load (group commit, fsync, apply) more than its CPU cost.
// One op = one message.
func BenchmarkPublishWindowed(b *testing.B) {
	const perSend, msgSize, window = 128, 1024, 8
	s := startServer(b, Options{})
	c := dialRaw(b, s.addr)
	c.connect()
	name := c.createProducer("persistent://public/default/bench-windowed", 1, 1)
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String(name), SequenceId: proto.Uint64(0),
		PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), NumMessagesInBatch: proto.Int32(perSend)}
	payload, err := wire.EncodeEntry(md, make([]byte, perSend*(msgSize+8)))
	if err != nil {
		b.Fatal(err)
	}
	sends := (b.N + perSend - 1) / perSend
	b.SetBytes(msgSize)
	b.ResetTimer()
	credits := make(chan struct{}, window)
	for i := 0; i < window; i++ {
		credits <- struct{}{}
	}
	writeErr := make(chan error, 1)
	go func() {
		w := wire.NewWriter(c.nc)
		for i := 0; i < sends; i++ {
			<-credits
			send := &pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(uint64(i)), NumMessages: proto.Int32(perSend)}
			if err := w.WritePayloadCommand(wire.Command(send), payload); err != nil {
				writeErr <- err
				return
			}
			if err := w.Flush(); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	}()
	for i := 0; i < sends; i++ {
		_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		f, err := c.r.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		if f.Type() != pulsarpb.BaseCommand_SEND_RECEIPT || f.Cmd.GetSendReceipt().GetSequenceId() != uint64(i) {
			b.Fatalf("frame %d: %s %v", i, f.Type(), f.Cmd)
		}
		credits <- struct{}{}
	}
	b.StopTimer()
	if err := <-writeErr; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(sends*perSend)/b.Elapsed().Seconds(), "msgs/s")
	_ = c.nc.Close()
}

// BenchmarkSendMessage queues one delivered entry's MESSAGE (head and a 1 KiB payload) and, every
// thousand, lets the writer take the queue: the dispatcher's per-entry cost in the server.
func BenchmarkSendMessage(b *testing.B) {
	c := &conn{s: &Server{opts: Options{MaxOutboundBytes: 1 << 30}}, out: newOutbox()}
	payload := make([]byte, 1024)
	head := wire.MessageHead{ConsumerID: 7, LedgerID: 1 << 40, Partition: -1}
	var spare net.Buffers
	b.ReportAllocs()
	for i := range b.N {
		head.EntryID = uint64(i)
		c.sendMessage(&head, payload)
		if i%1000 == 999 {
			spare, _ = c.out.take(spare)
			c.out.wrote()
		}
	}
}
