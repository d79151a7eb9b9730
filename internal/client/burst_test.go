package client

import (
	"bytes"
	"net"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// appendSendHead must produce exactly what protobuf-go encodes for the same SEND.
func TestAppendSendHeadMatchesProtobuf(t *testing.T) {
	cases := []sendFields{
		{producerID: 1, sequenceID: 0},
		{producerID: 1 << 40, sequenceID: 1<<63 + 5},
		{producerID: 7, sequenceID: 9, numMessages: 100, hasNumMessages: true, highestSequenceID: 108, hasHighestSequenceID: true},
		{producerID: 7, sequenceID: 9, numMessages: -1, hasNumMessages: true},
		{producerID: 7, sequenceID: 9, isChunk: true},
		{producerID: 7, sequenceID: 9, marker: true, numMessages: 0, hasNumMessages: true},
		{producerID: 3, sequenceID: 4, numMessages: 2, hasNumMessages: true, highestSequenceID: 0, hasHighestSequenceID: true, isChunk: true, marker: true},
	}
	for _, f := range cases {
		for _, size := range []int{0, 1, 1024, 1 << 20} {
			got, err := appendSendHead([]byte("prefix"), f, size)
			if err != nil {
				t.Fatal(err)
			}
			want, err := wire.AppendFrameHeader([]byte("prefix"), wire.Command(f.command()), size)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%+v size %d:\n got %x\nwant %x", f, size, got, want)
			}
		}
	}
	worst := sendFields{producerID: 1<<64 - 1, sequenceID: 1<<64 - 1, numMessages: -1, hasNumMessages: true, highestSequenceID: 1<<64 - 1, hasHighestSequenceID: true, isChunk: true, marker: true}
	if h, _ := appendSendHead(nil, worst, 1<<31); len(h) > sendHeadCap {
		t.Fatalf("largest head %d bytes > sendHeadCap %d", len(h), sendHeadCap)
	}
	if _, err := appendSendHead(nil, sendFields{}, -1); err == nil {
		t.Fatal("negative payload size accepted")
	}
}

// scanSendFields agrees with decoding the metadata.
func TestScanSendFields(t *testing.T) {
	mds := []*pulsarpb.MessageMetadata{
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2)},
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2), NumMessagesInBatch: proto.Int32(10), HighestSequenceId: proto.Uint64(10)},
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2), NumChunksFromMsg: proto.Int32(3), ChunkId: proto.Int32(1)},
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2), NumChunksFromMsg: proto.Int32(1)},
		{ProducerName: proto.String("pulsar.marker"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(2), MarkerType: proto.Int32(10), ReplicateTo: []string{"b"}},
		{ProducerName: proto.String("pulsar.marker"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(2), MarkerType: proto.Int32(0)},
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2), Properties: []*pulsarpb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}}, NumMessagesInBatch: proto.Int32(-2)},
	}
	for _, md := range mds {
		entry, err := wire.EncodeEntry(md, []byte("body"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := scanSendFields(entry)
		if err != nil {
			t.Fatal(err)
		}
		if f.hasNumMessages != (md.NumMessagesInBatch != nil) || (f.hasNumMessages && f.numMessages != md.GetNumMessagesInBatch()) {
			t.Errorf("%v: num messages %v", md, f.numMessages)
		}
		if f.hasHighestSequenceID != (md.HighestSequenceId != nil) || (f.hasHighestSequenceID && f.highestSequenceID != md.GetHighestSequenceId()) {
			t.Errorf("%v: highest %v", md, f.highestSequenceID)
		}
		if f.isChunk != (md.GetNumChunksFromMsg() > 1) {
			t.Errorf("%v: chunk %v", md, f.isChunk)
		}
		if f.marker != wire.IsMarker(md) {
			t.Errorf("%v: marker %v", md, f.marker)
		}
	}
	// Garbage metadata is an error, as DecodeMetadata's is.
	bad := []byte{0, 0, 0, 3, 0xff, 0xff, 0xff}
	if _, err := scanSendFields(bad); err == nil {
		t.Fatal("garbage metadata accepted")
	}
	// A field number above protobuf's maximum (DecodeMetadata refuses it too).
	if _, err := scanSendFields([]byte("\x00\x00\x00\x06\xf5\xf5\xf5\xf5\x300")); err == nil {
		t.Fatal("out-of-range field number accepted")
	}
	if _, err := scanSendFields([]byte{1}); err == nil {
		t.Fatal("truncated entry accepted")
	}
}

// A burst written with writev (large payloads by reference) carries the same bytes as the frames
// encoded one after the other.
func TestBurstWriterBytes(t *testing.T) {
	server, clientSide := net.Pipe()
	defer server.Close()
	defer clientSide.Close()
	bw := newBurstWriter(clientSide)
	small := bytes.Repeat([]byte{1}, 100)
	large := bytes.Repeat([]byte{2}, inlinePayloadMax+1)
	huge := bytes.Repeat([]byte{3}, 300<<10)
	frames := []outFrame{
		{cmd: wire.Command(&pulsarpb.CommandPing{})},
		{cmd: wire.Command(&pulsarpb.CommandSend{ProducerId: ptr(uint64(1)), SequenceId: ptr(uint64(1))}), payload: small},
		{cmd: wire.Command(&pulsarpb.CommandSend{ProducerId: ptr(uint64(1)), SequenceId: ptr(uint64(2))}), payload: large},
	}
	for i, p := range [][]byte{small, large, huge, large} {
		head, err := appendSendHead(nil, sendFields{producerID: 2, sequenceID: uint64(i)}, len(p))
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, outFrame{head: head, payload: p})
	}
	frames = append(frames, outFrame{cmd: wire.Command(&pulsarpb.CommandPong{})})
	var want []byte
	for _, f := range frames {
		if f.head != nil {
			want = append(append(want, f.head...), f.payload...)
			continue
		}
		b, err := wire.AppendFrame(want, f.cmd, f.payload)
		if err != nil {
			t.Fatal(err)
		}
		want = b
	}
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, len(want))
		n := 0
		for n < len(buf) {
			m, err := server.Read(buf[n:])
			if err != nil {
				break
			}
			n += m
		}
		got <- buf[:n]
	}()
	for _, f := range frames {
		if err := bw.add(f); err != nil {
			t.Fatal(err)
		}
		if bw.full() {
			if err := bw.flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := bw.flush(); err != nil {
		t.Fatal(err)
	}
	if g := <-got; !bytes.Equal(g, want) {
		t.Fatalf("burst bytes differ: got %d bytes, want %d", len(g), len(want))
	}
	if len(bw.ext) != 0 || len(bw.iov) != 0 || len(bw.buf) != 0 {
		t.Fatal("burst writer not reset")
	}
}

// BenchmarkAppendSendHead: the head of every SEND a producer writes (batch fields set, as a
// replicator forwarding a batch entry sends it).
func BenchmarkAppendSendHead(b *testing.B) {
	f := sendFields{producerID: 3, sequenceID: 1 << 30, numMessages: 100, hasNumMessages: true, highestSequenceID: 1<<30 + 99, hasHighestSequenceID: true}
	buf := make([]byte, 0, sendHeadCap)
	b.ReportAllocs()
	for b.Loop() {
		h, err := appendSendHead(buf[:0], f, 1024)
		if err != nil || len(h) == 0 {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanRawInfo: the metadata scan of a forwarded entry whose SEND fields the caller did
// not supply (a 1 KiB batch entry with a property).
func BenchmarkScanRawInfo(b *testing.B) {
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("app-producer"), SequenceId: proto.Uint64(123456), PublishTime: proto.Uint64(1764400000000),
		Properties: []*pulsarpb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}}, NumMessagesInBatch: proto.Int32(100),
		HighestSequenceId: proto.Uint64(123555), UncompressedSize: proto.Uint32(1024)}
	entry, err := wire.EncodeEntry(md, bytes.Repeat([]byte("x"), 1024))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if info, err := ScanRawInfo(entry); err != nil || info.NumMessages != 100 {
			b.Fatal(info, err)
		}
	}
}

// FuzzScanSendFields: the client's metadata scan reads what the generic decoder reads.
func FuzzScanSendFields(f *testing.F) {
	for _, md := range []*pulsarpb.MessageMetadata{
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2)},
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2), NumMessagesInBatch: proto.Int32(10), HighestSequenceId: proto.Uint64(10)},
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2), NumChunksFromMsg: proto.Int32(3), ChunkId: proto.Int32(1)},
		{ProducerName: proto.String("pulsar.marker"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(2), MarkerType: proto.Int32(10), ReplicateTo: []string{"b"}},
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2), Properties: []*pulsarpb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}}},
	} {
		b, err := proto.Marshal(md)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, metadata []byte) {
		entry := wire.AppendRawEntry(nil, metadata, []byte("body"))
		got, gotErr := scanSendFields(entry)
		md, wantErr := wire.DecodeMetadata(entry)
		// The scan never refuses what the decoder reads; it need not refuse all the decoder does
		// (missing required fields, malformed nested messages it skips over).
		if gotErr != nil && wantErr == nil {
			t.Fatalf("scan error %v for metadata the decoder reads", gotErr)
		}
		if wantErr != nil {
			return
		}
		want := sendFields{isChunk: md.GetNumChunksFromMsg() > 1, marker: wire.IsMarker(md)}
		if md.NumMessagesInBatch != nil {
			want.numMessages, want.hasNumMessages = md.GetNumMessagesInBatch(), true
		}
		if md.HighestSequenceId != nil {
			want.highestSequenceID, want.hasHighestSequenceID = md.GetHighestSequenceId(), true
		}
		if got != want {
			t.Fatalf("scan %+v, decoder %+v", got, want)
		}
	})
}

// FuzzAppendSendHead: the hand-encoded SEND head is protobuf's encoding of the same command.
func FuzzAppendSendHead(f *testing.F) {
	f.Add(uint64(1), uint64(0), int32(0), false, uint64(0), false, false, false, 0)
	f.Add(uint64(1<<40), uint64(1<<63+5), int32(-1), true, uint64(108), true, true, true, 1<<20)
	f.Fuzz(func(t *testing.T, pid, seq uint64, num int32, hasNum bool, highest uint64, hasHighest, chunk, marker bool, size int) {
		s := sendFields{producerID: pid, sequenceID: seq, numMessages: num, hasNumMessages: hasNum,
			highestSequenceID: highest, hasHighestSequenceID: hasHighest, isChunk: chunk, marker: marker}
		size = max(size, 0) % (64 << 20)
		got, err := appendSendHead(nil, s, size)
		if err != nil {
			t.Fatal(err)
		}
		want, err := wire.AppendFrameHeader(nil, wire.Command(s.command()), size)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v size %d:\n got %x\nwant %x", s, size, got, want)
		}
	})
}
