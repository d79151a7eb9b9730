package wire

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Hot-path costs: a SEND decoded by the broker, a receipt and a MESSAGE encoded for a client.

func benchEntry(b *testing.B) []byte {
	b.Helper()
	e, err := EncodeEntry(testMetadata(), bytes.Repeat([]byte("x"), 1024))
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func BenchmarkEncodeSendReceipt(b *testing.B) {
	w := NewWriter(io.Discard)
	cmd := &pulsarpb.CommandSendReceipt{
		ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1),
		MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(7), EntryId: proto.Uint64(1)},
	}
	base := Command(cmd)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		*cmd.SequenceId = uint64(i)
		if err := w.WriteCommand(base); err != nil {
			b.Fatal(err)
		}
		if w.Buffered() > 64*1024 {
			_ = w.Flush()
		}
	}
}

func BenchmarkEncodeMessage1KiB(b *testing.B) {
	entry := benchEntry(b)
	w := NewWriter(io.Discard)
	msg := &pulsarpb.CommandMessage{ConsumerId: proto.Uint64(1), MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(7), EntryId: proto.Uint64(0)}}
	base := Command(msg)
	b.SetBytes(int64(len(entry)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		*msg.MessageId.EntryId = uint64(i)
		if err := w.WritePayloadCommand(base, entry); err != nil {
			b.Fatal(err)
		}
		if w.Buffered() > 64*1024 {
			_ = w.Flush()
		}
	}
}

// BenchmarkMessageFrameHeader: the broker's hand-encoded MESSAGE head for every entry delivered,
// against building the command and encoding it with protobuf (what it replaced).
func BenchmarkMessageFrameHeader(b *testing.B) {
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			h := MessageHead{ConsumerID: 1, LedgerID: 7, EntryID: uint64(i), Partition: -1}
			if _, err := AppendMessageFrameHeader(make([]byte, 0, 48), &h, 1100); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			msg := &pulsarpb.CommandMessage{ConsumerId: proto.Uint64(1), MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(7), EntryId: proto.Uint64(uint64(i))}}
			if _, err := EncodeFrame(Command(msg)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReadSend1KiB reads SEND frames of 1 KiB messages from a stream and verifies their checksum,
// as the broker does for each publish.
func BenchmarkReadSend1KiB(b *testing.B) {
	entry := benchEntry(b)
	frame, err := EncodeFrame(sendCmd(1), entry)
	if err != nil {
		b.Fatal(err)
	}
	const perChunk = 256
	stream := bytes.Repeat(frame, perChunk)
	src := bytes.NewReader(stream)
	r := NewReader(src, 0)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if n == perChunk {
			src.Reset(stream)
			n = 0
		}
		f, err := r.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		if err := VerifyChecksum(f.Payload); err != nil {
			b.Fatal(err)
		}
		n++
	}
}

func BenchmarkDecodeMetadata(b *testing.B) {
	entry := benchEntry(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeMetadata(entry); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanDispatchMetadata reads what the dispatcher needs of a replicated entry (the
// replicated_from and source-position property a replicator sets), which DecodeMetadata unmarshals.
func BenchmarkScanDispatchMetadata(b *testing.B) {
	for _, replicated := range []bool{false, true} {
		entry := benchEntry(b)
		if replicated {
			var err error
			if entry, err = SetReplicatedFrom(entry, "east", "12:34"); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("replicated=%v/scan", replicated), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ScanDispatchMetadata(entry); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("replicated=%v/decode", replicated), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeMetadata(entry); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSetReplicatedFrom1KiB(b *testing.B) {
	entry := benchEntry(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SetReplicatedFrom(entry, "east", "12:34"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadSend1KiBReused is BenchmarkReadSend1KiB with ReusePayloads, as the broker's
// connections read: the payload (and the decoded SEND) are reused for the next frame.
func BenchmarkReadSend1KiBReused(b *testing.B) {
	entry := benchEntry(b)
	frame, err := EncodeFrame(sendCmd(1), entry)
	if err != nil {
		b.Fatal(err)
	}
	const perChunk = 256
	stream := bytes.Repeat(frame, perChunk)
	src := bytes.NewReader(stream)
	r := NewReader(src, 0)
	r.ReusePayloads(true)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if n == perChunk {
			src.Reset(stream)
			n = 0
		}
		f, err := r.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		if err := VerifyChecksum(f.Payload); err != nil {
			b.Fatal(err)
		}
		n++
	}
}

// BenchmarkScanPublishMetadata: the broker's metadata scan of each SEND, here of a replicated
// 1 KiB message (producer name, sequence id, publish time, replicated_from, a property, sizes).
func BenchmarkScanPublishMetadata(b *testing.B) {
	md := &pulsarpb.MessageMetadata{
		ProducerName: proto.String("a-1-17"), SequenceId: proto.Uint64(123456), PublishTime: proto.Uint64(1764400000000),
		ReplicatedFrom:   proto.String("a"),
		Properties:       []*pulsarpb.KeyValue{{Key: proto.String("meridian.repl.source"), Value: proto.String("12:34567")}},
		UncompressedSize: proto.Uint32(1024),
	}
	e, err := EncodeEntry(md, bytes.Repeat([]byte("x"), 1024))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if pm, err := ScanPublishMetadataReusing(e, "a-1-17"); err != nil || pm.PublishTime == 0 {
			b.Fatal(pm, err)
		}
	}
}

// BenchmarkAppendSendReceiptFrame: the broker's hand-encoded receipt for every SEND.
func BenchmarkAppendSendReceiptFrame(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for i := uint64(0); b.Loop(); i++ {
		if f := AppendSendReceiptFrame(buf[:0], 1, 123456+i, 17, 345678+i, 0); len(f) == 0 {
			b.Fatal("empty frame")
		}
	}
}

// BenchmarkReadSend1MiB reads SEND frames of 1 MiB, larger than the stream buffer, so each is read
// from the stream rather than handed out of the buffer: with ReusePayloads (the broker) into the
// reused buffer, without it into a buffer of its own that grows as the frame's bytes arrive.
func BenchmarkReadSend1MiB(b *testing.B) {
	entry, err := EncodeEntry(testMetadata(), bytes.Repeat([]byte("x"), 1<<20))
	if err != nil {
		b.Fatal(err)
	}
	frame, err := EncodeFrame(sendCmd(1), entry)
	if err != nil {
		b.Fatal(err)
	}
	const perChunk = 8
	stream := bytes.Repeat(frame, perChunk)
	for _, reuse := range []bool{false, true} {
		b.Run(fmt.Sprintf("reuse=%v", reuse), func(b *testing.B) {
			src := bytes.NewReader(stream)
			r := NewReader(src, 0)
			r.ReusePayloads(reuse)
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if n == perChunk {
					src.Reset(stream)
					n = 0
				}
				f, err := r.ReadFrame()
				if err != nil {
					b.Fatal(err)
				}
				if len(f.Payload) != len(entry) {
					b.Fatalf("payload of %d bytes, want %d", len(f.Payload), len(entry))
				}
				n++
			}
		})
	}
}
