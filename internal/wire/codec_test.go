package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func testMetadata() *pulsarpb.MessageMetadata {
	return &pulsarpb.MessageMetadata{
		ProducerName: proto.String("p-1"),
		SequenceId:   proto.Uint64(7),
		PublishTime:  proto.Uint64(1700000000000),
		Properties:   []*pulsarpb.KeyValue{{Key: proto.String("a"), Value: proto.String("b")}},
	}
}

func sendCmd(seq uint64) *pulsarpb.BaseCommand {
	return Command(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(seq)})
}

func TestSimpleFrameRoundTrip(t *testing.T) {
	cmd := Command(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(3), MessagePermits: proto.Uint32(1000)})
	b, err := EncodeFrame(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint32(b); int(got) != len(b)-4 {
		t.Fatalf("totalSize %d for %d bytes", got, len(b))
	}
	f, err := DecodeFrame(b, DefaultMaxFrameSize)
	if err != nil {
		t.Fatal(err)
	}
	if f.Type() != pulsarpb.BaseCommand_FLOW || f.Cmd.GetFlow().GetMessagePermits() != 1000 || f.Payload != nil {
		t.Fatalf("decoded %v payload %v", f.Cmd, f.Payload)
	}
	if f.WireSize != len(b) {
		t.Fatalf("WireSize %d, want %d", f.WireSize, len(b))
	}
}

func TestPayloadFrameRoundTripAndChecksum(t *testing.T) {
	entry, err := EncodeEntry(testMetadata(), []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if binary.BigEndian.Uint16(entry) != MagicCRC32C {
		t.Fatal("entry does not start with the magic")
	}
	if err := VerifyChecksum(entry); err != nil {
		t.Fatal(err)
	}
	b, err := EncodeFrame(sendCmd(7), entry)
	if err != nil {
		t.Fatal(err)
	}
	f, err := DecodeFrame(b, DefaultMaxFrameSize)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Payload, entry) {
		t.Fatal("payload differs from the entry bytes")
	}
	md, err := DecodeMetadata(f.Payload)
	if err != nil || md.GetProducerName() != "p-1" || md.GetSequenceId() != 7 {
		t.Fatalf("metadata %v, %v", md, err)
	}
	if err := CheckMetadata(md); err != nil {
		t.Fatal(err)
	}
	p, _ := ParseEntry(entry)
	if string(p.Body) != "hello" || !p.HasChecksum {
		t.Fatalf("parts %+v", p)
	}

	// Flip one body byte: checksum error, mapped to ChecksumError.
	bad := bytes.Clone(entry)
	bad[len(bad)-1] ^= 1
	err = VerifyChecksum(bad)
	if !errors.Is(err, ErrChecksum) || ServerErrorOf(err) != pulsarpb.ServerError_ChecksumError {
		t.Fatalf("corrupt entry: %v", err)
	}
}

func TestPayloadWithoutMagicIsAcceptedAndNormalized(t *testing.T) {
	entry, _ := EncodeEntry(testMetadata(), []byte("x"))
	bare := entry[6:] // [metadataSize][metadata][body]
	if err := VerifyChecksum(bare); err != nil {
		t.Fatalf("payload without checksum refused: %v", err)
	}
	norm, err := NormalizeEntry(bare)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(norm, entry) {
		t.Fatal("normalized payload differs from the encoded entry")
	}
	same, _ := NormalizeEntry(entry)
	if &same[0] != &entry[0] {
		t.Fatal("NormalizeEntry copied an entry that already had a checksum")
	}
}

func TestRawEntryEqualsEncoded(t *testing.T) {
	md := testMetadata()
	mdb, _ := proto.Marshal(md)
	raw := AppendRawEntry(nil, mdb, []byte("body"))
	enc, _ := EncodeEntry(md, []byte("body"))
	if !bytes.Equal(raw, enc) {
		t.Fatal("AppendRawEntry and EncodeEntry differ")
	}
}

func TestRewriteMetadataKeepsPresenceAndBody(t *testing.T) {
	single := testMetadata()
	batch := testMetadata()
	batch.NumMessagesInBatch = proto.Int32(1) // present with the default value: must stay present
	for name, md := range map[string]*pulsarpb.MessageMetadata{"single": single, "batch": batch} {
		entry, _ := EncodeEntry(md, []byte("payload"))
		out, err := SetReplicatedFrom(entry, "east", "12:34")
		if err != nil {
			t.Fatal(err)
		}
		if err := VerifyChecksum(out); err != nil {
			t.Fatalf("%s: rewritten entry has a bad checksum: %v", name, err)
		}
		got, _ := DecodeMetadata(out)
		if got.GetReplicatedFrom() != "east" {
			t.Fatalf("%s: replicated_from %q", name, got.GetReplicatedFrom())
		}
		if (got.NumMessagesInBatch != nil) != (md.NumMessagesInBatch != nil) {
			t.Fatalf("%s: num_messages_in_batch presence changed", name)
		}
		var pos string
		for _, kv := range got.Properties {
			if kv.GetKey() == ReplSourcePositionProperty {
				pos = kv.GetValue()
			}
		}
		if pos != "12:34" {
			t.Fatalf("%s: source position %q", name, pos)
		}
		p, _ := ParseEntry(out)
		if string(p.Body) != "payload" {
			t.Fatalf("%s: body %q", name, p.Body)
		}
		// Idempotent: a second rewrite updates the property instead of adding another.
		again, _ := SetReplicatedFrom(out, "east", "12:35")
		md2, _ := DecodeMetadata(again)
		if len(md2.Properties) != len(got.Properties) {
			t.Fatalf("%s: property duplicated", name)
		}
	}
}

func TestBatchRoundTrip(t *testing.T) {
	var body []byte
	keys := []string{"k0", "k1", "k2"}
	for i, k := range keys {
		var err error
		body, err = AppendBatchRecord(body, &pulsarpb.SingleMessageMetadata{PartitionKey: proto.String(k)}, []byte{byte(i), byte(i)})
		if err != nil {
			t.Fatal(err)
		}
	}
	md := testMetadata()
	md.NumMessagesInBatch = proto.Int32(int32(len(keys)))
	entry, _ := EncodeEntry(md, body)
	gotMD, msgs, err := EntryMessages(entry)
	if err != nil {
		t.Fatal(err)
	}
	if NumMessages(gotMD) != 3 || len(msgs) != 3 {
		t.Fatalf("%d messages", len(msgs))
	}
	for i, m := range msgs {
		if m.Index != i || m.Metadata.GetPartitionKey() != keys[i] || !bytes.Equal(m.Payload, []byte{byte(i), byte(i)}) {
			t.Fatalf("message %d: %+v", i, m)
		}
	}
	if _, err := ParseBatch(body, 4); !errors.Is(err, ErrMalformedPayload) {
		t.Fatalf("count too high: %v", err)
	}
	if _, err := ParseBatch(body, 2); !errors.Is(err, ErrMalformedPayload) {
		t.Fatalf("trailing record: %v", err)
	}
	md.Compression = pulsarpb.CompressionType_LZ4.Enum()
	entry, _ = EncodeEntry(md, body)
	if _, _, err := EntryMessages(entry); !errors.Is(err, ErrCompressed) {
		t.Fatalf("compressed batch: %v", err)
	}
	single, _ := EncodeEntry(testMetadata(), []byte("one"))
	smd, msgs, err := EntryMessages(single)
	if err != nil || NumMessages(smd) != 1 || len(msgs) != 1 || string(msgs[0].Payload) != "one" {
		t.Fatalf("single: %v %v", msgs, err)
	}
}

func TestAckSet(t *testing.T) {
	// Acking index 1 of 3 leaves bits 0 and 2 set: word 5 (observed from the Go client).
	set := []int64{5}
	for i, want := range []bool{false, true, false} {
		if AckSetIsAcked(set, i) != want {
			t.Fatalf("index %d", i)
		}
	}
	if AckSetIsAcked(nil, 0) || AckSetIsAcked(set, 64) || AckSetIsAcked(set, -1) {
		t.Fatal("uncovered indexes must read as not acked")
	}
}

func TestBrokerEntryMetadata(t *testing.T) {
	entry, _ := EncodeEntry(testMetadata(), []byte("b"))
	prefix, err := AppendBrokerEntryMetadata(nil, &pulsarpb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(5), Index: proto.Uint64(9)})
	if err != nil {
		t.Fatal(err)
	}
	payload := append(prefix, entry...)
	bem, rest, err := SplitBrokerEntryMetadata(payload)
	if err != nil || bem.GetIndex() != 9 || bem.GetBrokerTimestamp() != 5 || !bytes.Equal(rest, entry) {
		t.Fatalf("split: %v %v", bem, err)
	}
	bem, rest, err = SplitBrokerEntryMetadata(entry)
	if err != nil || bem != nil || !bytes.Equal(rest, entry) {
		t.Fatal("payload without prefix changed")
	}
	if _, err := ParseEntry(payload); !errors.Is(err, ErrBadMagic) {
		t.Fatalf("ParseEntry on prefixed payload: %v", err)
	}
	if _, _, err := SplitBrokerEntryMetadata(payload[:8]); !errors.Is(err, ErrMalformedPayload) {
		t.Fatalf("truncated prefix: %v", err)
	}
}

func TestCommandCoversEverySubCommand(t *testing.T) {
	fields := baseDesc.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Kind() != protoreflect.MessageKind {
			continue
		}
		if _, ok := pulsarpb.BaseCommand_Type_name[int32(fd.Number())]; !ok {
			t.Fatalf("field %s has no type value", fd.Name())
		}
		body := newMessage(fd)
		cmd := Command(body)
		if int32(cmd.GetType()) != int32(fd.Number()) {
			t.Fatalf("%s: type %s", fd.Name(), cmd.GetType())
		}
		got, err := CommandBody(cmd)
		if err != nil || got != body {
			t.Fatalf("%s: body %v %v", fd.Name(), got, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Command accepted a non-command")
		}
	}()
	Command(&pulsarpb.KeyValue{})
}

func newMessage(fd protoreflect.FieldDescriptor) proto.Message {
	return (&pulsarpb.BaseCommand{}).ProtoReflect().NewField(fd).Message().Interface()
}

func TestDecodeErrors(t *testing.T) {
	good, _ := EncodeFrame(Command(&pulsarpb.CommandPing{}))
	cases := map[string]struct {
		b    []byte
		want error
	}{
		"empty":           {nil, ErrTruncated},
		"too large":       {be32(DefaultMaxFrameSize + 1), ErrFrameTooLarge},
		"total too small": {append(be32(2), 0, 0), ErrMalformedFrame},
		"cmd size zero":   {append(be32(4), be32(0)...), ErrMalformedFrame},
		"cmd size large":  {append(be32(6), append(be32(9), 0, 0)...), ErrMalformedFrame},
		"truncated":       {good[:len(good)-1], ErrTruncated},
		"trailing":        {append(bytes.Clone(good), 0), ErrMalformedFrame},
		"garbage":         {append(be32(7), append(be32(3), 0xff, 0xff, 0xff)...), ErrMalformedCommand},
		"no body":         {frameOf(t, []byte{0x08, 0x12}), ErrMalformedCommand},                         // type=PING, no ping
		"unknown type":    {frameOf(t, []byte{0x08, 0x63}), ErrUnknownCommand},                           // type=99
		"missing field":   {frameOf(t, []byte{0x08, 0x0b, 0x5a, 0x02, 0x08, 0x01}), ErrMalformedCommand}, // FLOW without permits
		"send no body":    {frameOf(t, []byte{0x08, 0x06}), ErrMalformedCommand},                         // SEND without send
		"ping ok":         {frameOf(t, []byte{0x08, 0x12, 0x92, 0x01, 0x00}), nil},                       // type=PING, ping={}
	}
	for name, c := range cases {
		_, err := DecodeFrame(c.b, DefaultMaxFrameSize)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
}

func be32(v int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

// frameOf wraps raw command bytes in a simple frame.
func frameOf(t *testing.T, cmd []byte) []byte {
	t.Helper()
	b := be32(4 + len(cmd))
	b = append(b, be32(len(cmd))...)
	return append(b, cmd...)
}

func TestReaderStream(t *testing.T) {
	var stream bytes.Buffer
	w := NewWriter(&stream)
	entry, _ := EncodeEntry(testMetadata(), bytes.Repeat([]byte("z"), 100_000))
	for i := 0; i < 50; i++ {
		if err := w.WritePayloadCommand(sendCmd(uint64(i)), entry); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteCommand(Command(&pulsarpb.CommandPing{})); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// An unknown command in the middle is reported and skipped.
	stream.Write(frameOf(t, []byte{0x08, 0x63}))
	if err := w.WriteCommand(Command(&pulsarpb.CommandPong{})); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}

	r := NewReader(&stream, 0)
	for i := 0; i < 50; i++ {
		f, err := r.ReadFrame()
		if err != nil || f.Type() != pulsarpb.BaseCommand_SEND || f.Cmd.GetSend().GetSequenceId() != uint64(i) || !bytes.Equal(f.Payload, entry) {
			t.Fatalf("frame %d: %v %v", i, f.Type(), err)
		}
		f, err = r.ReadFrame()
		if err != nil || f.Type() != pulsarpb.BaseCommand_PING {
			t.Fatalf("ping %d: %v", i, err)
		}
	}
	_, err := r.ReadFrame()
	if !errors.Is(err, ErrUnknownCommand) || !Recoverable(err) {
		t.Fatalf("unknown command: %v", err)
	}
	f, err := r.ReadFrame()
	if err != nil || f.Type() != pulsarpb.BaseCommand_PONG {
		t.Fatalf("after unknown: %v %v", f.Type(), err)
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

func TestReaderLimitsBeforeAllocating(t *testing.T) {
	// A header claiming 4 GiB must fail at once, not try to read or allocate.
	r := NewReader(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1}), 1024)
	if _, err := r.ReadFrame(); !errors.Is(err, ErrFrameTooLarge) || Recoverable(err) {
		t.Fatalf("oversized: %v", err)
	}
	r = NewReader(bytes.NewReader([]byte{0, 0}), 1024)
	if _, err := r.ReadFrame(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("partial header: %v", err)
	}
	good, _ := EncodeFrame(sendCmd(1), []byte("payload"))
	r = NewReader(bytes.NewReader(good[:len(good)-2]), 1024)
	if _, err := r.ReadFrame(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated payload: %v", err)
	}
	r = NewReader(bytes.NewReader(good), 1024)
	r.SetMaxFrameSize(8)
	if _, err := r.ReadFrame(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("after SetMaxFrameSize: %v", err)
	}
}

// TestReaderMemoryFollowsBytesReceived: a header may announce a frame as large as the limit, and
// a peer may then send only part of it. The reader's memory for the frame follows the bytes that
// arrive, not the size announced, and the cut frame ends in an ErrTruncated saying how much of it
// came. Payload frames (with and without ReusePayloads) and command-only frames alike.
func TestReaderMemoryFollowsBytesReceived(t *testing.T) {
	const announced = 256 << 20 // totalSize: 256 MiB
	for _, tc := range []struct {
		name    string
		cmdSize uint32
		reuse   bool
	}{
		{"payload", 16, false},
		{"payload reused", 16, true},
		{"command only", announced - 4, false},
	} {
		for _, sent := range []int{1000, 300 << 10} { // body bytes that arrive
			t.Run(fmt.Sprintf("%s/%d bytes", tc.name, sent), func(t *testing.T) {
				stream := make([]byte, 8+sent)
				binary.BigEndian.PutUint32(stream, announced)
				binary.BigEndian.PutUint32(stream[4:], tc.cmdSize)
				r := NewReader(bytes.NewReader(stream), announced)
				r.ReusePayloads(tc.reuse)
				grown := totalAllocDuring(func() {
					_, err := r.ReadFrame()
					if !errors.Is(err, ErrTruncated) || Recoverable(err) {
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

// TestReadAppend: the bytes arrive after what buf holds, whatever the chunk and however the
// reader splits them; a buffer with room is read into without allocating; a cut stream returns
// what came.
func TestReadAppend(t *testing.T) {
	data := make([]byte, 10_000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, chunk := range []int{0, 1, 3, 100, 64 << 10} {
		for _, n := range []int{0, 1, 99, 100, 101, 5000, len(data)} {
			got, err := ReadAppend(iotest.HalfReader(bytes.NewReader(data)), []byte("head"), n, chunk)
			if err != nil || string(got[:4]) != "head" || !bytes.Equal(got[4:], data[:n]) {
				t.Fatalf("chunk %d, n %d: %d bytes, %v", chunk, n, len(got), err)
			}
		}
	}
	buf := make([]byte, 0, len(data))
	src := bytes.NewReader(data)
	if allocs := testing.AllocsPerRun(10, func() {
		src.Reset(data)
		if _, err := ReadAppend(src, buf, len(data), 16); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("%v allocations reading into a buffer with room", allocs)
	}
	got, err := ReadAppend(bytes.NewReader(data[:300]), nil, len(data), 64)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(got, data[:300]) {
		t.Errorf("cut stream: %d bytes, %v", len(got), err)
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

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestWriterBatchesAndReportsErrors(t *testing.T) {
	var calls countingWriter
	w := NewWriter(&calls)
	for i := 0; i < 100; i++ {
		_ = w.WriteCommand(Command(&pulsarpb.CommandPing{}))
	}
	if w.Buffered() == 0 {
		t.Fatal("nothing buffered")
	}
	if err := w.Flush(); err != nil || calls.n != 1 || w.Buffered() != 0 {
		t.Fatalf("flush: %v, %d writes", err, calls.n)
	}
	if err := w.Flush(); err != nil || calls.n != 1 {
		t.Fatal("empty flush wrote")
	}
	// A command missing a required field is refused and leaves the buffer as it was.
	if err := w.WriteCommand(Command(&pulsarpb.CommandFlow{})); err == nil || w.Buffered() != 0 {
		t.Fatalf("invalid command: %v, %d buffered", err, w.Buffered())
	}
	w = NewWriter(failWriter{io.ErrClosedPipe})
	_ = w.WriteCommand(Command(&pulsarpb.CommandPing{}))
	if err := w.Flush(); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("write error: %v", err)
	}
}

type countingWriter struct {
	n int
	bytes.Buffer
}

func (c *countingWriter) Write(p []byte) (int, error) { c.n++; return c.Buffer.Write(p) }

func TestAppendFrameHeaderMatchesAppendFrame(t *testing.T) {
	entry, _ := EncodeEntry(testMetadata(), []byte("body"))
	cmd := Command(&pulsarpb.CommandMessage{ConsumerId: proto.Uint64(1), MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}})
	whole, err := AppendFrame(nil, cmd, entry)
	if err != nil {
		t.Fatal(err)
	}
	head, err := AppendFrameHeader([]byte("x"), cmd, len(entry))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(head[1:], entry...), whole) {
		t.Fatal("header + payload differs from AppendFrame")
	}
	if _, err := AppendFrameHeader(nil, cmd, -1); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("negative size: %v", err)
	}
}
