package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func genericDecode(b []byte) (*pulsarpb.BaseCommand, error) {
	cmd := &pulsarpb.BaseCommand{}
	if err := unmarshalPartial.Unmarshal(b, cmd); err != nil {
		return nil, err
	}
	return cmd, proto.CheckInitialized(cmd)
}

func sendVariants() []*pulsarpb.CommandSend {
	return []*pulsarpb.CommandSend{
		{ProducerId: proto.Uint64(0), SequenceId: proto.Uint64(0)},
		{ProducerId: proto.Uint64(7), SequenceId: proto.Uint64(1 << 40), NumMessages: proto.Int32(128)},
		{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(5), NumMessages: proto.Int32(-1), HighestSequenceId: proto.Uint64(9),
			IsChunk: proto.Bool(true), Marker: proto.Bool(false)},
		{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(5), Marker: proto.Bool(true)},
	}
}

func TestDecodeSendFastMatchesGeneric(t *testing.T) {
	for i, send := range sendVariants() {
		b, err := proto.Marshal(Command(send))
		if err != nil {
			t.Fatal(err)
		}
		fast, ok := decodeSendFast(b)
		if !ok {
			t.Fatalf("variant %d: fast path not taken", i)
		}
		slow, err := genericDecode(b)
		if err != nil || !proto.Equal(fast, slow) {
			t.Fatalf("variant %d: fast %v, generic %v (%v)", i, fast, slow, err)
		}
	}
	// Fields the fast path leaves to the generic decoder.
	for i, send := range []*pulsarpb.CommandSend{
		{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2), TxnidLeastBits: proto.Uint64(3)},
		{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2), MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}},
		{ProducerId: proto.Uint64(1)}, // missing required sequence_id: the generic path reports it
	} {
		b, _ := proto.MarshalOptions{AllowPartial: true}.Marshal(Command(send))
		if _, ok := decodeSendFast(b); ok {
			t.Fatalf("unusual variant %d took the fast path", i)
		}
	}
}

func TestSendReceiptFrameMatchesGeneric(t *testing.T) {
	for _, c := range []struct{ pid, seq, ledger, entry, highest uint64 }{
		{0, 0, 0, 0, 0}, {1, 2, 3, 4, 0}, {1 << 60, 1<<63 + 5, 1 << 33, 1 << 20, 1<<63 + 9}, {3, 10, 7, 0, 12},
	} {
		r := &pulsarpb.CommandSendReceipt{ProducerId: proto.Uint64(c.pid), SequenceId: proto.Uint64(c.seq),
			MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(c.ledger), EntryId: proto.Uint64(c.entry)}}
		if c.highest > 0 {
			r.HighestSequenceId = proto.Uint64(c.highest)
		}
		want, err := EncodeFrame(Command(r))
		if err != nil {
			t.Fatal(err)
		}
		got := AppendSendReceiptFrame([]byte("x"), c.pid, c.seq, c.ledger, c.entry, c.highest)
		if !bytes.Equal(got[1:], want) {
			t.Fatalf("%+v: hand-encoded %x, protobuf %x", c, got[1:], want)
		}
		f, err := DecodeFrame(got[1:], DefaultMaxFrameSize)
		if err != nil || !proto.Equal(f.Cmd.GetSendReceipt(), r) {
			t.Fatalf("%+v: decodes to %v, %v", c, f.Cmd, err)
		}
	}
}

func FuzzDecodeSendFast(f *testing.F) {
	for _, send := range sendVariants() {
		b, _ := proto.Marshal(Command(send))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeSendFast(b)
		if !ok {
			return
		}
		slow, err := genericDecode(b)
		if err != nil || !proto.Equal(fast, slow) {
			t.Fatalf("fast %v, generic %v (%v)", fast, slow, err)
		}
	})
}

func FuzzScanPublishMetadata(f *testing.F) {
	for _, md := range []*pulsarpb.MessageMetadata{
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1700000000000)},
		{ProducerName: proto.String("chunky"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5), ChunkId: proto.Int32(2),
			NumChunksFromMsg: proto.Int32(3), NumMessagesInBatch: proto.Int32(100), ReplicatedFrom: proto.String("east")},
		{ProducerName: proto.String("r"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5), ReplicatedFrom: proto.String("west"),
			Properties: []*pulsarpb.KeyValue{{Key: proto.String("a"), Value: proto.String("b")},
				{Key: proto.String(ReplSourcePositionProperty), Value: proto.String("12:345")}}},
		{ProducerName: proto.String("m"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5), MarkerType: proto.Int32(12)},
		{ProducerName: proto.String("kv"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5),
			Properties: []*pulsarpb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}}},
	} {
		b, _ := proto.Marshal(md)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, metadata []byte) {
		entry := AppendRawEntry(nil, metadata, []byte("body"))
		got, gotErr := ScanPublishMetadata(entry)
		md, wantErr := DecodeMetadata(entry)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("scan error %v, decode error %v", gotErr, wantErr)
		}
		if wantErr == nil && got != publishMetadataOf(md) {
			t.Fatalf("scan %+v, decode %+v", got, publishMetadataOf(md))
		}
		checkOrigin(t, entry, got, gotErr, md)
		// Reusing a name (equal or not to the metadata's) changes nothing in the result.
		for _, name := range []string{"", "p", got.ProducerName, got.ProducerName + "x"} {
			again, againErr := ScanPublishMetadataReusing(entry, name)
			if again != got || (againErr != nil) != (gotErr != nil) {
				t.Fatalf("reusing %q: %+v %v, want %+v %v", name, again, againErr, got, gotErr)
			}
		}
	})
}

// FuzzScanDispatchMetadata: the dispatcher's scan answers as the generic decoder does, for any
// metadata (the seeds: the publish scan's, plus keys, a delivery time and chunks).
func FuzzScanDispatchMetadata(f *testing.F) {
	for _, md := range []*pulsarpb.MessageMetadata{
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1700000000000)},
		{ProducerName: proto.String("k"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5), PartitionKey: proto.String("user-7"),
			OrderingKey: []byte{0, 1, 2}, DeliverAtTime: proto.Int64(1700000000123), NumMessagesInBatch: proto.Int32(10)},
		{ProducerName: proto.String("c"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5), Uuid: proto.String("c-1-5"),
			ChunkId: proto.Int32(1), NumChunksFromMsg: proto.Int32(3), TotalChunkMsgSize: proto.Int32(3 << 20)},
		{ProducerName: proto.String("r"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5), ReplicatedFrom: proto.String("west"),
			Properties:    []*pulsarpb.KeyValue{{Key: proto.String(ReplSourcePositionProperty), Value: proto.String("12:345")}},
			DeliverAtTime: proto.Int64(-1)},
		{ProducerName: proto.String("m"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5), MarkerType: proto.Int32(12)},
		{ProducerName: proto.String("e"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5),
			EncryptionKeys: []*pulsarpb.EncryptionKeys{{Key: proto.String("k"), Value: []byte("v")}}, PartitionKey: proto.String("x")},
	} {
		b, _ := proto.Marshal(md)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, metadata []byte) {
		entry := AppendRawEntry(nil, metadata, []byte("body"))
		got, gotErr := ScanDispatchMetadata(entry)
		md, wantErr := DecodeMetadata(entry)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("scan error %v, decode error %v", gotErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		want := dispatchMetadataOf(md)
		if got.PublishMetadata != want.PublishMetadata || got.DeliverAtTime != want.DeliverAtTime ||
			!bytes.Equal(got.PartitionKey, want.PartitionKey) || !bytes.Equal(got.OrderingKey, want.OrderingKey) ||
			!bytes.Equal(got.UUID, want.UUID) {
			t.Fatalf("scan %+v, decode %+v", got, want)
		}
	})
}

// TestScanDispatchMetadataAllocs: a replicated entry's metadata (properties, replicated_from, a
// key) is read for dispatch without allocating.
func TestScanDispatchMetadataAllocs(t *testing.T) {
	md, _ := proto.Marshal(&pulsarpb.MessageMetadata{ProducerName: proto.String("producer-1"), SequenceId: proto.Uint64(1),
		PublishTime: proto.Uint64(5), ReplicatedFrom: proto.String("west"), PartitionKey: proto.String("user-7"),
		Properties: []*pulsarpb.KeyValue{{Key: proto.String(ReplSourcePositionProperty), Value: proto.String("12:345")}}})
	entry := AppendRawEntry(nil, md, []byte("body"))
	if n := testing.AllocsPerRun(100, func() {
		if dm, err := ScanDispatchMetadata(entry); err != nil || string(dm.PartitionKey) != "user-7" {
			t.Fatal(dm, err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func TestScanPublishMetadataReusingAllocs(t *testing.T) {
	md, _ := proto.Marshal(&pulsarpb.MessageMetadata{ProducerName: proto.String("producer-1"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5)})
	entry := AppendRawEntry(nil, md, []byte("body"))
	name := "producer-1"
	if n := testing.AllocsPerRun(100, func() {
		if pm, err := ScanPublishMetadataReusing(entry, name); err != nil || pm.ProducerName != name {
			t.Fatal(pm, err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations with the same name", n)
	}
}

// TestScanPublishMetadataProperties: well-formed and malformed property elements give the same
// result through the scan as through the generic decoder.
func TestScanPublishMetadataProperties(t *testing.T) {
	head := func() []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		b = protowire.AppendString(b, "prod")
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		return protowire.AppendVarint(b, 42)
	}
	prop := func(elem []byte) []byte {
		b := protowire.AppendTag(head(), 4, protowire.BytesType)
		return protowire.AppendBytes(b, elem)
	}
	kv := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "k")
	kv = protowire.AppendString(protowire.AppendTag(kv, 2, protowire.BytesType), "v")
	for name, md := range map[string][]byte{
		"key-value":         prop(kv),
		"empty element":     prop(nil),
		"unknown field":     prop(protowire.AppendVarint(protowire.AppendTag(kv, 9, protowire.VarintType), 1)),
		"wrong wire type":   prop(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)),
		"truncated varint":  prop([]byte{0x08, 0x80}),
		"truncated string":  prop([]byte{0x0a, 0x05, 'a'}),
		"group":             prop([]byte{0x1b, 0x08, 0x01, 0x1c}),
		"stray end group":   prop([]byte{0x1c}),
		"field zero":        prop([]byte{0x00, 0x01}),
		"two properties":    append(prop(kv), prop(kv)[len(head()):]...),
		"huge field number": prop([]byte{0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01}),
	} {
		entry := AppendRawEntry(nil, md, []byte("body"))
		got, gotErr := ScanPublishMetadata(entry)
		want, wantErr := DecodeMetadata(entry)
		if (gotErr != nil) != (wantErr != nil) || (wantErr == nil && got != publishMetadataOf(want)) {
			t.Fatalf("%s: scan %+v, %v; decode %v, %v", name, got, gotErr, want, wantErr)
		}
		if _, fast := scanPublishMetadata(md, "", nil, nil); fast && wantErr != nil {
			t.Fatalf("%s: the scan accepted what the decoder refuses", name)
		}
	}
	if _, fast := scanPublishMetadata(prop(kv), "", nil, nil); !fast {
		t.Fatal("a property sent the scan to the generic decoder")
	}
}

// With ReusePayloads, consecutive SENDs are decoded into one reused command, each correctly
// (no field of an earlier SEND survives into a later one), and other frames are unaffected.
func TestReaderReusesSendCommands(t *testing.T) {
	var stream []byte
	var want []*pulsarpb.BaseCommand
	entry, err := EncodeEntry(testMetadata(), []byte("body"))
	if err != nil {
		t.Fatal(err)
	}
	for _, send := range append(sendVariants(), sendVariants()[2], sendVariants()[0],
		&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2), TxnidLeastBits: proto.Uint64(3)}) {
		cmd := Command(send)
		want = append(want, cmd)
		if stream, err = AppendFrame(stream, cmd, entry); err != nil {
			t.Fatal(err)
		}
		ping := Command(&pulsarpb.CommandPing{})
		want = append(want, ping)
		if stream, err = AppendFrame(stream, ping); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(bytes.NewReader(stream), DefaultMaxFrameSize)
	r.ReusePayloads(true)
	var firstSend *pulsarpb.BaseCommand
	for i, w := range want {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !proto.Equal(f.Cmd, w) {
			t.Fatalf("frame %d: %v, want %v", i, f.Cmd, w)
		}
		if f.Type() == pulsarpb.BaseCommand_SEND && f.Cmd.GetSend().TxnidLeastBits == nil {
			if firstSend == nil {
				firstSend = f.Cmd
			} else if f.Cmd != firstSend {
				t.Fatalf("frame %d: SEND command not reused", i)
			}
		}
	}
}

// chunkReader returns at most n bytes per Read, so frames straddle the reader's refills.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// NextFrameBuffered is true exactly when the next frame is wholly buffered, and then ReadFrame
// leaves the payloads of the frames read before it intact: a run of buffered SENDs can be kept and
// handed on together.
func TestReaderNextFrameBufferedKeepsPayloads(t *testing.T) {
	var stream []byte
	var bodies [][]byte
	for i := range 300 {
		body := bytes.Repeat([]byte{byte(i)}, 200+i*7%900)
		entry, err := EncodeEntry(testMetadata(), body)
		if err != nil {
			t.Fatal(err)
		}
		if stream, err = AppendFrame(stream, Command(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(uint64(i))}), entry); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	for _, chunk := range []int{1000, 5000, 70000, 1 << 20} {
		r := NewReader(&chunkReader{b: stream, n: chunk}, DefaultMaxFrameSize)
		r.ReusePayloads(true)
		var run [][]byte // payloads of the frames read since the last unbuffered one
		var first []int  // their sequence ids
		check := func() {
			for j, p := range run {
				parts, err := ParseEntry(p)
				if err != nil || !bytes.Equal(parts.Body, bodies[first[j]]) {
					t.Fatalf("chunk %d: payload of SEND %d changed after later buffered reads", chunk, first[j])
				}
			}
		}
		grouped := 0
		for i := range bodies {
			buffered := r.NextFrameBuffered()
			if !buffered {
				check()
				run, first = run[:0], first[:0]
			} else {
				grouped++
			}
			before := r.Buffered()
			f, err := r.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if buffered != (f.WireSize <= before) {
				t.Fatalf("chunk %d frame %d: NextFrameBuffered %v with %d buffered for a %d-byte frame", chunk, i, buffered, before, f.WireSize)
			}
			if got := f.Cmd.GetSend().GetSequenceId(); got != uint64(i) {
				t.Fatalf("chunk %d: frame %d has sequence id %d", chunk, i, got)
			}
			run, first = append(run, f.Payload), append(first, i)
		}
		check()
		if chunk > 4096 && grouped == 0 {
			t.Fatalf("chunk %d: no frame was ever wholly buffered", chunk)
		}
	}
}

// checkOrigin checks ScanPublishMetadataOrigin against the scan without origin and the decoded
// metadata md (nil when it does not decode): same PublishMetadata and error, and, when the scan
// collected it, the origin fields as the decoded message has them (the last source-position
// property, replicated_from, num_messages_in_batch).
func checkOrigin(t *testing.T, entry []byte, want PublishMetadata, wantErr error, md *pulsarpb.MessageMetadata) {
	t.Helper()
	pm, origin, ok, err := ScanPublishMetadataOrigin(entry, "")
	if pm != want || (err != nil) != (wantErr != nil) {
		t.Fatalf("with origin: %+v %v, without: %+v %v", pm, err, want, wantErr)
	}
	if !ok {
		if !reflect.DeepEqual(origin, ReplicatedOrigin{}) {
			t.Fatalf("origin %+v without ok", origin)
		}
		return
	}
	if md == nil {
		t.Fatal("origin collected from metadata that does not decode")
	}
	if origin.HasFrom != (md.ReplicatedFrom != nil) || string(origin.From) != md.GetReplicatedFrom() {
		t.Fatalf("replicated_from %q (%v), decoded %v", origin.From, origin.HasFrom, md.ReplicatedFrom)
	}
	var pos, inc *string
	for _, kv := range md.GetProperties() {
		v := kv.Value
		if v == nil {
			v = proto.String("")
		}
		switch kv.GetKey() {
		case ReplSourcePositionProperty:
			pos = v
		case ReplSourceIncarnationProperty:
			inc = v
		}
	}
	if origin.HasPosition != (pos != nil) || (pos != nil && string(origin.Position) != *pos) {
		t.Fatalf("source position %q (%v), decoded %v", origin.Position, origin.HasPosition, pos)
	}
	if origin.HasIncarnation != (inc != nil) || (inc != nil && string(origin.Incarnation) != *inc) {
		t.Fatalf("source incarnation %q (%v), decoded %v", origin.Incarnation, origin.HasIncarnation, inc)
	}
	if origin.HasNumMessages != (md.NumMessagesInBatch != nil) || (origin.HasNumMessages && origin.NumMessages != md.GetNumMessagesInBatch()) {
		t.Fatalf("num_messages_in_batch %d (%v), decoded %v", origin.NumMessages, origin.HasNumMessages, md.NumMessagesInBatch)
	}
}

// The origin of a replicated entry is collected in the scan without allocating, and repeated
// fields count by their last occurrence.
func TestScanPublishMetadataOrigin(t *testing.T) {
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("pulsar.repl.a-->b"), SequenceId: proto.Uint64(7), PublishTime: proto.Uint64(5),
		ReplicatedFrom: proto.String("a"), NumMessagesInBatch: proto.Int32(3),
		Properties: []*pulsarpb.KeyValue{{Key: proto.String(ReplSourcePositionProperty), Value: proto.String("1:2")},
			{Key: proto.String(ReplSourceIncarnationProperty), Value: proto.String("00000000000000ff")},
			{Key: proto.String("x"), Value: proto.String("y")}, {Key: proto.String(ReplSourcePositionProperty), Value: proto.String("3:4")}}}
	entry, err := EncodeEntry(md, []byte("body"))
	if err != nil {
		t.Fatal(err)
	}
	want, wantErr := ScanPublishMetadata(entry)
	checkOrigin(t, entry, want, wantErr, md)
	_, origin, ok, _ := ScanPublishMetadataOrigin(entry, "")
	if !ok || string(origin.From) != "a" || string(origin.Position) != "3:4" || origin.NumMessages != 3 ||
		!origin.HasIncarnation || string(origin.Incarnation) != "00000000000000ff" {
		t.Fatalf("origin %+v ok %v", origin, ok)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _, _ = ScanPublishMetadataOrigin(entry, "pulsar.repl.a-->b") }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	// Not replicated: nothing to find, still ok.
	plain, err := EncodeEntry(&pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, origin, ok, err := ScanPublishMetadataOrigin(plain, ""); !ok || err != nil || !reflect.DeepEqual(origin, ReplicatedOrigin{}) {
		t.Fatalf("plain entry: %+v %v %v", origin, ok, err)
	}
}

// The incarnation property is 16 hexadecimal digits; anything else is refused, without a panic.
func TestIncarnationFormat(t *testing.T) {
	for _, v := range []uint64{0, 1, 0xff, 0x0123456789abcdef, ^uint64(0)} {
		s := FormatIncarnation(v)
		if len(s) != 16 {
			t.Fatalf("%x formats as %q", v, s)
		}
		if got, err := ParseIncarnation([]byte(s)); err != nil || got != v {
			t.Fatalf("%q parses as %x %v", s, got, err)
		}
	}
	if got, err := ParseIncarnation([]byte("0123456789ABCDEF")); err != nil || got != 0x0123456789abcdef {
		t.Fatalf("upper case: %x %v", got, err)
	}
	for _, bad := range []string{"", "123", "0123456789abcdeg", "0123456789abcdef0", " 123456789abcdef"} {
		if _, err := ParseIncarnation([]byte(bad)); !errors.Is(err, ErrMalformedPayload) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	entry, err := EncodeEntry(&pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(5)}, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := SetReplicatedSource(entry, "east", "3:4", 0xabc)
	if err != nil {
		t.Fatal(err)
	}
	_, origin, ok, err := ScanPublishMetadataOrigin(out, "")
	if err != nil || !ok || string(origin.From) != "east" || string(origin.Position) != "3:4" || string(origin.Incarnation) != "0000000000000abc" {
		t.Fatalf("SetReplicatedSource: %+v %v %v", origin, ok, err)
	}
	out, err = SetReplicatedSource(out, "east", "3:4", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, origin, _, _ := ScanPublishMetadataOrigin(out, ""); origin.HasIncarnation {
		t.Fatal("incarnation 0 leaves the property")
	}
}

// FuzzSendReceiptFrame: the hand-encoded receipt is protobuf's encoding of the same receipt, and
// decodes to it.
func FuzzSendReceiptFrame(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint64(1<<60), uint64(1<<63+5), uint64(1<<33), uint64(1<<20), uint64(1<<63+9))
	f.Fuzz(func(t *testing.T, pid, seq, ledger, entry, highest uint64) {
		r := &pulsarpb.CommandSendReceipt{ProducerId: proto.Uint64(pid), SequenceId: proto.Uint64(seq),
			MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(ledger), EntryId: proto.Uint64(entry)}}
		if highest > 0 {
			r.HighestSequenceId = proto.Uint64(highest)
		}
		want, err := EncodeFrame(Command(r))
		if err != nil {
			t.Fatal(err)
		}
		got := AppendSendReceiptFrame(nil, pid, seq, ledger, entry, highest)
		if !bytes.Equal(got, want) {
			t.Fatalf("hand-encoded %x, protobuf %x", got, want)
		}
		fr, err := DecodeFrame(got, DefaultMaxFrameSize)
		if err != nil || !proto.Equal(fr.Cmd.GetSendReceipt(), r) {
			t.Fatalf("decodes to %v, %v", fr.Cmd, err)
		}
	})
}

// FuzzMessageFrameHeader: the hand-encoded MESSAGE head is protobuf's encoding of the same command,
// and the frame decodes to it.
func FuzzMessageFrameHeader(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(0), int32(-1), uint32(0), []byte{}, uint16(0))
	f.Add(uint64(7), uint64(1<<40), uint64(1<<63+3), int32(12), uint32(3), []byte{1, 0, 0, 0, 0, 0, 0, 128, 255}, uint16(1024))
	f.Fuzz(func(t *testing.T, consumer, ledger, entry uint64, partition int32, redelivery uint32, ackWords []byte, payloadSize uint16) {
		h := MessageHead{ConsumerID: consumer, LedgerID: ledger, EntryID: entry, Partition: partition, RedeliveryCount: redelivery}
		for i := 0; i+8 <= len(ackWords); i += 8 {
			h.AckSet = append(h.AckSet, int64(binary.LittleEndian.Uint64(ackWords[i:])))
		}
		id := &pulsarpb.MessageIdData{LedgerId: proto.Uint64(ledger), EntryId: proto.Uint64(entry)}
		if partition >= 0 {
			id.Partition = proto.Int32(partition)
		}
		m := &pulsarpb.CommandMessage{ConsumerId: proto.Uint64(consumer), MessageId: id, AckSet: h.AckSet}
		if redelivery > 0 {
			m.RedeliveryCount = proto.Uint32(redelivery)
		}
		want, err := AppendFrameHeader([]byte("x"), Command(m), int(payloadSize))
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendMessageFrameHeader([]byte("x"), &h, int(payloadSize))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("hand-encoded %x (%v), protobuf %x", got, err, want)
		}
		frame := append(got[1:], make([]byte, payloadSize)...)
		fr, err := DecodeFrame(frame, DefaultMaxFrameSize)
		if err != nil || !proto.Equal(fr.Cmd.GetMessage(), m) || len(fr.Payload) != int(payloadSize) {
			t.Fatalf("decodes to %v with %d payload bytes, %v", fr.Cmd, len(fr.Payload), err)
		}
	})
}

// FuzzDecodeMessageFast: whatever the MESSAGE fast path decodes, the generic decoder decodes to the
// same command (the seeds: what brokers send, and forms the fast path leaves to the generic one).
func FuzzDecodeMessageFast(f *testing.F) {
	id := func(ledger, entry uint64) *pulsarpb.MessageIdData {
		return &pulsarpb.MessageIdData{LedgerId: proto.Uint64(ledger), EntryId: proto.Uint64(entry)}
	}
	withPartition := id(1<<40, 3)
	withPartition.Partition, withPartition.BatchIndex = proto.Int32(7), proto.Int32(-1)
	withSize := id(5, 6)
	withSize.BatchSize = proto.Int32(10)
	for _, m := range []*pulsarpb.CommandMessage{
		{ConsumerId: proto.Uint64(1), MessageId: id(7, 0)},
		{ConsumerId: proto.Uint64(1 << 62), MessageId: withPartition, RedeliveryCount: proto.Uint32(4), AckSet: []int64{-1, 0, 1 << 40},
			ConsumerEpoch: proto.Uint64(2)},
		{ConsumerId: proto.Uint64(3), MessageId: withSize},
	} {
		b, _ := proto.Marshal(Command(m))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeMessageFast(b)
		if !ok {
			return
		}
		slow, err := genericDecode(b)
		if err != nil || !proto.Equal(fast, slow) {
			t.Fatalf("fast %v, generic %v (%v)", fast, slow, err)
		}
	})
}

// TestDecodeMessageFastTakesWhatBrokersSend: the broker's MESSAGE heads take the fast path.
func TestDecodeMessageFastTakesWhatBrokersSend(t *testing.T) {
	for _, h := range []MessageHead{
		{ConsumerID: 1, LedgerID: 7, EntryID: 9, Partition: -1},
		{ConsumerID: 2, LedgerID: 1 << 40, EntryID: 1 << 33, Partition: 3, RedeliveryCount: 2, AckSet: []int64{5, -1}},
	} {
		frame, err := AppendMessageFrameHeader(nil, &h, 0)
		if err != nil {
			t.Fatal(err)
		}
		cmd := frame[8:]
		fast, ok := decodeMessageFast(cmd)
		if !ok {
			t.Fatalf("%+v: not decoded by the fast path", h)
		}
		slow, err := genericDecode(cmd)
		if err != nil || !proto.Equal(fast, slow) {
			t.Fatalf("fast %v, generic %v (%v)", fast, slow, err)
		}
	}
}
