package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// checkReaderMatchesWire reads stream with frameReader and with wire.Reader: the same frames (a
// fast-decoded receipt equals the generic decoding), the same errors.
func checkReaderMatchesWire(t *testing.T, stream []byte) (receipts int) {
	t.Helper()
	fast := newFrameReader(bytes.NewReader(stream), 1<<20)
	// A frame longer than a chunk is read into a buffer that grows as its bytes arrive: one whose
	// chunk is a few bytes reads the same frames (inputs are too short for FrameReadChunk).
	growing := newFrameReader(iotest.HalfReader(bytes.NewReader(stream)), 1<<20)
	growing.chunk = 3
	slow := wire.NewReader(bytes.NewReader(stream), 1<<20)
	for i := 0; ; i++ {
		var rc, grc receipt
		f, isReceipt, ferr := fast.next(&rc)
		gf, gIsReceipt, gferr := growing.next(&grc)
		if (ferr == nil) != (gferr == nil) || isReceipt != gIsReceipt || rc != grc ||
			(ferr == nil && (!proto.Equal(f.Cmd, gf.Cmd) || !bytes.Equal(f.Payload, gf.Payload))) {
			t.Fatalf("frame %d: growing reader differs: %v / %v", i, ferr, gferr)
		}
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

// TestFrameReaderMemoryFollowsBytesReceived: a remote may announce a frame as large as the limit
// and send only part of it. The reader's memory for the frame follows the bytes that arrive, and
// the cut frame ends in an ErrTruncated saying how much of it came. Payload frames and
// command-only frames alike.
func TestFrameReaderMemoryFollowsBytesReceived(t *testing.T) {
	const announced = 256 << 20 // totalSize: 256 MiB
	for _, tc := range []struct {
		name    string
		cmdSize uint32
	}{
		{"payload", 16},
		{"command only", announced - 4},
	} {
		for _, sent := range []int{1000, 300 << 10} { // body bytes that arrive
			t.Run(fmt.Sprintf("%s/%d bytes", tc.name, sent), func(t *testing.T) {
				stream := make([]byte, 8+sent)
				binary.BigEndian.PutUint32(stream, announced)
				binary.BigEndian.PutUint32(stream[4:], tc.cmdSize)
				r := newFrameReader(bytes.NewReader(stream), announced)
				grown := totalAllocDuring(func() {
					var rc receipt
					_, _, err := r.next(&rc)
					if !errors.Is(err, wire.ErrTruncated) || wire.Recoverable(err) {
						t.Fatalf("error %v, want ErrTruncated", err)
					}
					if want := fmt.Sprintf("%d of %d bytes", sent, announced-4); !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				})
				// The buffer starts at 64 KiB and doubles as it fills: the buffers add up to at most
				// four times what came, plus the first one and the error.
				t.Logf("%d KiB allocated", grown>>10)
				if limit := uint64(4*sent + 128<<10); grown > limit {
					t.Errorf("%d body bytes of an announced %d MiB frame made the reader allocate %d bytes (limit %d)",
						sent, announced>>20, grown, limit)
				}
			})
		}
	}
}

// TestRemoteAnnouncingHugeFramesCostsWhatItSends: a remote cluster (replication's peer, which may
// be hostile or broken) announces the largest max_message_size there is, which the client honours
// as Pulsar clients do, then a frame header of 512 MiB followed by a few bytes, and hangs up. The
// client's memory follows the bytes received, not the announced size.
func TestRemoteAnnouncingHugeFramesCostsWhatItSends(t *testing.T) {
	local, remote := net.Pipe()
	defer remote.Close()
	go func() {
		defer remote.Close()
		if _, err := wire.NewReader(remote, 0).ReadFrame(); err != nil { // CONNECT
			return
		}
		connected, _ := wire.EncodeFrame(wire.Command(&pulsarpb.CommandConnected{
			ServerVersion: ptr("hostile"), ProtocolVersion: ptr(int32(20)), MaxMessageSize: ptr(int32(math.MaxInt32)),
		}))
		hdr := make([]byte, 8+1000)
		binary.BigEndian.PutUint32(hdr, 512<<20)
		binary.BigEndian.PutUint32(hdr[4:], 16)
		_, _ = remote.Write(append(connected, hdr...))
	}()
	o := Options{Dialer: func(context.Context, string, string) (net.Conn, error) { return local, nil },
		Logger: slog.New(slog.DiscardHandler), OperationTimeout: 5 * time.Second}
	o.setDefaults()
	var c *conn
	grown := totalAllocDuring(func() {
		var err error
		if c, err = dialConn(testCtx(t), &o, "hostile:6650"); err != nil {
			t.Fatal(err)
		}
		select { // the remote hung up mid-frame: the reader has read all it sent
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection outlived the remote")
		}
	})
	c.close(nil)
	c.mu.Lock()
	reason := c.closeErr
	c.mu.Unlock()
	if !errors.Is(reason, wire.ErrTruncated) {
		t.Errorf("connection closed for %v, want ErrTruncated", reason)
	}
	if c.maxMsg != math.MaxInt32 {
		t.Errorf("max message size %d, want the remote's %d", c.maxMsg, math.MaxInt32)
	}
	t.Logf("%d KiB allocated", grown>>10)
	if grown > 16<<20 {
		t.Fatalf("a remote that sent about 1 KiB made the client allocate %d MiB", grown>>20)
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

// BenchmarkFrameReader reads a stream through frameReader.next as the connection's reader does:
// receipts (the replicator's per-entry frame), 1 KiB MESSAGEs (mostly handed out of the stream
// buffer's bytes in one read) and 1 MiB MESSAGEs (read as they arrive).
func BenchmarkFrameReader(b *testing.B) {
	message := func(size int) []byte {
		frame, err := wire.EncodeFrame(wire.Command(&pulsarpb.CommandMessage{ConsumerId: ptr(uint64(1)),
			MessageId: &pulsarpb.MessageIdData{LedgerId: ptr(uint64(1)), EntryId: ptr(uint64(2))}}), make([]byte, size))
		if err != nil {
			b.Fatal(err)
		}
		return frame
	}
	for _, bc := range []struct {
		name  string
		frame []byte
		n     int // frames per pass over the stream
	}{
		{"receipt", wire.AppendSendReceiptFrame(nil, 1, 123456, 17, 345678, 0), 1024},
		{"message-1KiB", message(1 << 10), 256},
		{"message-1MiB", message(1 << 20), 8},
	} {
		b.Run(bc.name, func(b *testing.B) {
			stream := bytes.Repeat(bc.frame, bc.n)
			src := bytes.NewReader(stream)
			r := newFrameReader(src, 0)
			b.SetBytes(int64(len(bc.frame)))
			b.ReportAllocs()
			var rc receipt
			n := 0
			for b.Loop() {
				if n == bc.n {
					src.Reset(stream)
					n = 0
				}
				if _, _, err := r.next(&rc); err != nil {
					b.Fatal(err)
				}
				n++
			}
		})
	}
}
