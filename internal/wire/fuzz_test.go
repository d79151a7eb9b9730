package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Fuzz targets for every decoder. `go test` runs them over the seeds below and the committed
// corpus in testdata/fuzz/<Target> (the fuzz smoke); `go test -fuzz=<Target> -fuzztime 60s` explores.
// Each asserts: no panic, bounded work, and errors of the documented kinds.

func seedEntries(f *testing.F) [][]byte {
	f.Helper()
	single, _ := EncodeEntry(testMetadata(), []byte("hello"))
	var body []byte
	for i := 0; i < 3; i++ {
		body, _ = AppendBatchRecord(body, &pulsarpb.SingleMessageMetadata{PartitionKey: proto.String("k")}, []byte{byte(i)})
	}
	md := testMetadata()
	md.NumMessagesInBatch = proto.Int32(3)
	batch, _ := EncodeEntry(md, body)
	return [][]byte{single, batch, single[6:], {0x0e, 0x01}, {0x0e, 0x02, 0, 0, 0, 0}}
}

func FuzzReadFrame(f *testing.F) {
	ping, _ := EncodeFrame(Command(&pulsarpb.CommandPing{}))
	entries := seedEntries(f)
	send, _ := EncodeFrame(sendCmd(1), entries[0])
	connect, _ := EncodeFrame(Command(&pulsarpb.CommandConnect{
		ClientVersion: proto.String("Pulsar-Go-version-unknown"), ProtocolVersion: proto.Int32(20),
		FeatureFlags: &pulsarpb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true), SupportsBrokerEntryMetadata: proto.Bool(true)},
	}))
	f.Add(ping)
	f.Add(append(append(bytes.Clone(send), ping...), connect...))
	f.Add([]byte{0, 0, 0, 6, 0, 0, 0, 2, 0x08, 0x63})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), 64*1024)
		// A reader reusing payloads and SEND commands reads the same frames.
		// Over the whole input, frames are mostly wholly buffered (payload handed out from the
		// stream buffer); over one or a few bytes per read, mostly not (payload copied out).
		var others []*Reader
		for _, src := range []io.Reader{bytes.NewReader(data), iotest.OneByteReader(bytes.NewReader(data)), iotest.HalfReader(bytes.NewReader(data))} {
			rr := NewReader(src, 64*1024)
			rr.ReusePayloads(true)
			others = append(others, rr)
		}
		// So do readers whose frame buffers start at a few bytes and grow as the bytes arrive
		// (with the 64 KiB of FrameReadChunk, fuzz inputs are too short to need growing).
		for _, reuse := range []bool{false, true} {
			rr := NewReader(iotest.HalfReader(bytes.NewReader(data)), 64*1024)
			rr.chunk = 3
			rr.ReusePayloads(reuse)
			others = append(others, rr)
		}
		for i := 0; i < 1000; i++ {
			fr, err := r.ReadFrame()
			for j, rr := range others {
				rf, rerr := rr.ReadFrame()
				if (err == nil) != (rerr == nil) || (err == nil && (!proto.Equal(fr.Cmd, rf.Cmd) || !bytes.Equal(fr.Payload, rf.Payload))) {
					t.Fatalf("reader %d differs: %v / %v", j, err, rerr)
				}
				if cap(rf.Payload) != len(rf.Payload) {
					t.Fatalf("payload of %d bytes with capacity %d: appending would overwrite the stream", len(rf.Payload), cap(rf.Payload))
				}
			}
			if err == io.EOF {
				return
			}
			if err != nil {
				if !Recoverable(err) {
					if !errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrMalformedFrame) && !errors.Is(err, ErrTruncated) {
						t.Fatalf("unexpected error kind: %v", err)
					}
					return
				}
				continue
			}
			if fr.WireSize > 4+64*1024 {
				t.Fatalf("frame of %d bytes passed a 64 KiB limit", fr.WireSize)
			}
			// A decoded frame re-encodes and decodes to the same command.
			again, err := EncodeFrame(fr.Cmd, fr.Payload)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			back, err := DecodeFrame(again, 1<<20)
			if err != nil || !proto.Equal(back.Cmd, fr.Cmd) || !bytes.Equal(back.Payload, fr.Payload) {
				t.Fatalf("round trip: %v", err)
			}
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	ping, _ := EncodeFrame(Command(&pulsarpb.CommandPing{}))
	f.Add(ping)
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = DecodeFrame(data, 1<<16)
	})
}

func FuzzEntry(f *testing.F) {
	for _, e := range seedEntries(f) {
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseEntry(data)
		if err == nil && len(p.Metadata)+len(p.Body) > len(data) {
			t.Fatal("parts larger than input")
		}
		verr := VerifyChecksum(data)
		md, mderr := DecodeMetadata(data)
		if mderr == nil {
			_ = CheckMetadata(md)
			_ = NumMessages(md)
		}
		_, _, _ = EntryMessages(data)
		norm, nerr := NormalizeEntry(data)
		if nerr == nil && verr == nil {
			if err := VerifyChecksum(norm); err != nil {
				t.Fatalf("normalized entry fails its checksum: %v", err)
			}
		}
		out, rerr := SetReplicatedFrom(data, "remote", "1:2")
		if rerr == nil {
			if err := VerifyChecksum(out); err != nil {
				t.Fatalf("rewritten entry fails its checksum: %v", err)
			}
			got, err := DecodeMetadata(out)
			if err != nil || got.GetReplicatedFrom() != "remote" {
				t.Fatalf("rewritten metadata: %v", err)
			}
		}
	})
}

func FuzzParseBatch(f *testing.F) {
	var body []byte
	for i := 0; i < 3; i++ {
		body, _ = AppendBatchRecord(body, &pulsarpb.SingleMessageMetadata{}, []byte{byte(i)})
	}
	f.Add(body, 3)
	f.Add([]byte{0, 0, 0, 2, 0x18, 0x7f}, 1)
	f.Add([]byte{}, 1<<30)
	f.Fuzz(func(t *testing.T, data []byte, count int) {
		msgs, err := ParseBatch(data, count)
		if err != nil {
			return
		}
		total := 0
		for _, m := range msgs {
			total += len(m.Payload)
		}
		if total > len(data) {
			t.Fatal("payloads larger than body")
		}
	})
}

func FuzzSplitBrokerEntryMetadata(f *testing.F) {
	entries := seedEntries(f)
	prefix, _ := AppendBrokerEntryMetadata(nil, &pulsarpb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(1), Index: proto.Uint64(2)})
	f.Add(append(prefix, entries[0]...))
	f.Add(entries[0])
	f.Add([]byte{0x0e, 0x02, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		bem, rest, err := SplitBrokerEntryMetadata(data)
		if err != nil {
			return
		}
		if bem == nil && !bytes.Equal(rest, data) {
			t.Fatal("payload without prefix changed")
		}
		if len(rest) > len(data) {
			t.Fatal("rest larger than input")
		}
	})
}
