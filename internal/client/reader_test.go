package client

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// checkReaderMatchesWire reads stream with frameReader and with wire.Reader: the same frames (a
// fast-decoded receipt equals the generic decoding), the same errors.
func checkReaderMatchesWire(t *testing.T, stream []byte) (receipts int) {
	t.Helper()
	fast := newFrameReader(bytes.NewReader(stream), 1<<20)
	slow := wire.NewReader(bytes.NewReader(stream), 1<<20)
	for i := 0; ; i++ {
		var rc receipt
		f, isReceipt, ferr := fast.next(&rc)
		g, gerr := slow.ReadFrame()
		if (ferr == nil) != (gerr == nil) {
			t.Fatalf("frame %d: fast err %v, wire err %v", i, ferr, gerr)
		}
		if ferr != nil {
			if wire.Recoverable(ferr) != wire.Recoverable(gerr) {
				t.Fatalf("frame %d: recoverable differs: %v / %v", i, ferr, gerr)
			}
			if errors.Is(gerr, io.EOF) || !wire.Recoverable(gerr) {
				return receipts
			}
			continue
		}
		if isReceipt {
			receipts++
			if g.Type() != pulsarpb.BaseCommand_SEND_RECEIPT || rc != receiptOf(g.Cmd.GetSendReceipt()) {
				t.Fatalf("frame %d: fast receipt %+v, wire %v", i, rc, g.Cmd)
			}
			continue
		}
		if !proto.Equal(f.Cmd, g.Cmd) || !bytes.Equal(f.Payload, g.Payload) {
			t.Fatalf("frame %d: fast %v, wire %v", i, f.Cmd, g.Cmd)
		}
	}
}

// checkBufferedReceiptsMatchWire reads stream as the connection's reader does (next, then
// every receipt already buffered through bufferedReceipt) and checks it against wire.Reader.
func checkBufferedReceiptsMatchWire(t *testing.T, stream []byte, bufSize int) {
	t.Helper()
	fast := newFrameReader(bytes.NewReader(stream), 1<<20)
	fast.br = bufio.NewReaderSize(bytes.NewReader(stream), bufSize) // small buffers split frames
	slow := wire.NewReader(bytes.NewReader(stream), 1<<20)
	for i := 0; ; i++ {
		var rc receipt
		f, isReceipt, ferr := fast.next(&rc)
		g, gerr := slow.ReadFrame()
		if (ferr == nil) != (gerr == nil) {
			t.Fatalf("frame %d: fast err %v, wire err %v", i, ferr, gerr)
		}
		if ferr != nil {
			if errors.Is(gerr, io.EOF) || !wire.Recoverable(gerr) {
				return
			}
			continue
		}
		if !isReceipt {
			if !proto.Equal(f.Cmd, g.Cmd) || !bytes.Equal(f.Payload, g.Payload) {
				t.Fatalf("frame %d: fast %v, wire %v", i, f.Cmd, g.Cmd)
			}
			continue
		}
		for {
			if g.Type() != pulsarpb.BaseCommand_SEND_RECEIPT || rc != receiptOf(g.Cmd.GetSendReceipt()) {
				t.Fatalf("frame %d: fast receipt %+v, wire %v", i, rc, g.Cmd)
			}
			if !fast.bufferedReceipt(&rc) {
				break
			}
			i++
			if g, gerr = slow.ReadFrame(); gerr != nil {
				t.Fatalf("frame %d: buffered receipt %+v, wire error %v", i, rc, gerr)
			}
		}
	}
}

func TestBufferedReceiptsMatchWire(t *testing.T) {
	var stream []byte
	for i := range 50 {
		var err error
		stream, err = wire.AppendFrame(stream, wire.Command(&pulsarpb.CommandSendReceipt{ProducerId: ptr(uint64(1 + i%2)), SequenceId: ptr(uint64(i)),
			MessageId: &pulsarpb.MessageIdData{LedgerId: ptr(uint64(3)), EntryId: ptr(uint64(i))}}))
		if err != nil {
			t.Fatal(err)
		}
	}
	stream = append(stream, receiptStream(t)...)
	for _, size := range []int{16, 37, 64, 4096} {
		checkBufferedReceiptsMatchWire(t, stream, size)
	}
}

func receiptStream(t testing.TB) []byte {
	var b []byte
	add := func(cmd *pulsarpb.BaseCommand, payload ...[]byte) {
		var err error
		if b, err = wire.AppendFrame(b, cmd, payload...); err != nil {
			t.Fatal(err)
		}
	}
	add(wire.Command(&pulsarpb.CommandSendReceipt{ProducerId: ptr(uint64(1)), SequenceId: ptr(uint64(0)), MessageId: &pulsarpb.MessageIdData{LedgerId: ptr(uint64(3)), EntryId: ptr(uint64(4))}}))
	add(wire.Command(&pulsarpb.CommandSendReceipt{ProducerId: ptr(uint64(1 << 50)), SequenceId: ptr(uint64(1<<63 + 1)), HighestSequenceId: ptr(uint64(9))}))
	add(wire.Command(&pulsarpb.CommandSendReceipt{ProducerId: ptr(uint64(2)), SequenceId: ptr(uint64(5)), MessageId: &pulsarpb.MessageIdData{LedgerId: ptr(uint64(3)), EntryId: ptr(uint64(4)), Partition: ptr(int32(-1)), BatchIndex: ptr(int32(2))}}))
	add(wire.Command(&pulsarpb.CommandSendReceipt{ProducerId: ptr(uint64(2)), SequenceId: ptr(uint64(6)), MessageId: &pulsarpb.MessageIdData{LedgerId: ptr(uint64(3)), EntryId: ptr(uint64(4)), FirstChunkMessageId: &pulsarpb.MessageIdData{LedgerId: ptr(uint64(1)), EntryId: ptr(uint64(1))}}}))
	add(wire.Command(&pulsarpb.CommandPing{}))
	add(wire.Command(&pulsarpb.CommandMessage{ConsumerId: ptr(uint64(1)), MessageId: &pulsarpb.MessageIdData{LedgerId: ptr(uint64(1)), EntryId: ptr(uint64(2))}}), []byte("payload"))
	add(wire.Command(&pulsarpb.CommandSendError{ProducerId: ptr(uint64(1)), SequenceId: ptr(uint64(2)), Error: pulsarpb.ServerError_PersistenceError.Enum(), Message: ptr("x")}))
	return b
}

func TestFrameReaderMatchesWire(t *testing.T) {
	stream := receiptStream(t)
	if n := checkReaderMatchesWire(t, stream); n != 3 {
		t.Fatalf("%d receipts on the fast path, want 3 (the one with a nested chunk id goes the generic way)", n)
	}
	// A receipt missing its required sequence id is refused exactly as the generic decoder does.
	bad, _ := proto.Marshal(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pulsarpb.CommandSendReceipt{ProducerId: ptr(uint64(1))}})
	frame := append([]byte{0, 0, 0, byte(4 + len(bad)), 0, 0, 0, byte(len(bad))}, bad...)
	checkReaderMatchesWire(t, append(frame, stream...))
	// Truncated streams.
	for _, cut := range []int{1, 5, 9, len(stream) - 1} {
		checkReaderMatchesWire(t, stream[:cut])
	}
}

func FuzzFrameReaderMatchesWire(f *testing.F) {
	f.Add(receiptStream(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkReaderMatchesWire(t, b)
		checkBufferedReceiptsMatchWire(t, b, 64)
	})
}

// BenchmarkDecodeReceipt: the client's per-SEND receipt decode (fast path, no protobuf message).
func BenchmarkDecodeReceipt(b *testing.B) {
	frame := wire.AppendSendReceiptFrame(nil, 1, 123456, 17, 345678, 0)
	cmd := frame[8:]
	b.ReportAllocs()
	var rc receipt
	for b.Loop() {
		if !decodeReceipt(cmd, &rc) || rc.sequenceID != 123456 {
			b.Fatal(rc)
		}
	}
}
