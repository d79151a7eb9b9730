package replication

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/crc32c"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// checkFastMatchesGeneral asserts that the append-only fast path and the decode-edit-encode path
// agree on the decision and on the resulting message.
func checkFastMatchesGeneral(t *testing.T, e mtypes.Entry) {
	t.Helper()
	fast, fr, ok := prepareFast(e, "a", "b", nil, nil)
	gen, gr, gerr := prepareGeneral(e, "a", "b")
	if !ok {
		return // the general path decides alone
	}
	if gerr != nil && fr == SkipNone && len(fast.Body) > 0 && wire.VerifyChecksum(e.Data) != nil {
		// A large entry whose stored checksum is wrong: the fast path does not read the body, and
		// what it produces must then fail the remote's checksum check (never pass as valid).
		if wire.VerifyChecksum(fast.Bytes()) == nil {
			t.Fatal("corrupt large entry forwarded with a valid checksum")
		}
		return
	}
	if gerr != nil {
		t.Fatalf("fast path accepted what the general path rejects: %v", gerr)
	}
	if fr != gr {
		t.Fatalf("decision: fast %q, general %q", fr, gr)
	}
	if fr != SkipNone {
		return
	}
	pf, err := ParseEntry(fast.Bytes())
	if err != nil {
		t.Fatalf("fast output does not parse: %v", err)
	}
	pg, err := ParseEntry(gen.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(pf.Metadata, pg.Metadata) || !bytes.Equal(pf.Payload, pg.Payload) {
		t.Fatalf("outputs differ:\nfast    %v\ngeneral %v", pf.Metadata, pg.Metadata)
	}
	if fast.Messages != gen.Messages || fast.Marker != gen.Marker || fast.ChunkID != gen.ChunkID {
		t.Fatalf("outbound fields differ: %+v vs %+v", fast, gen)
	}
	// What the fast path tells the client about the SEND is what the client's own scan finds.
	want, err := client.ScanRawInfo(fast.Bytes())
	if err != nil {
		t.Fatalf("client cannot scan the fast output: %v", err)
	}
	if fast.Info != want {
		t.Fatalf("send info: fast path %+v, client scan %+v", fast.Info, want)
	}
	// Carving heads from shared headroom gives the same bytes.
	var headroom []byte
	carved, cr, cok := prepareFast(e, "a", "b", &headroom, nil)
	if !cok || cr != fr || !bytes.Equal(carved.Bytes(), fast.Bytes()) || cap(carved.Data) != len(carved.Data) {
		t.Fatalf("carved head differs: %q %v %x", cr, cok, carved.Data)
	}
	// So does deriving the checksum from the stored one with a shift table (the second lookup of
	// a body length finds its table).
	var shifts crc32c.ShiftCache
	for i := 0; i < 2; i++ {
		derived, dr, dok := prepareFast(e, "a", "b", &headroom, &shifts)
		if !dok || dr != fr || !bytes.Equal(derived.Bytes(), fast.Bytes()) {
			t.Fatalf("derived checksum differs (lookup %d): %q %v %x", i, dr, dok, derived.Data)
		}
	}
}

func TestPrepareFastMatchesGeneral(t *testing.T) {
	cases := []func(*pulsarpb.MessageMetadata){
		nil,
		func(md *pulsarpb.MessageMetadata) { md.NumMessagesInBatch = proto.Int32(10) },
		func(md *pulsarpb.MessageMetadata) { md.ReplicateTo = []string{"b", "c"} },
		func(md *pulsarpb.MessageMetadata) { md.ReplicateTo = []string{"c"} },
		func(md *pulsarpb.MessageMetadata) { md.ReplicatedFrom = proto.String("x") },
		func(md *pulsarpb.MessageMetadata) { md.MarkerType = proto.Int32(10) },
		func(md *pulsarpb.MessageMetadata) { md.MarkerType = proto.Int32(12) },
		func(md *pulsarpb.MessageMetadata) { md.MarkerType = proto.Int32(SubscriptionStateMarker) },
		func(md *pulsarpb.MessageMetadata) { md.TxnidLeastBits = proto.Uint64(1) },
		func(md *pulsarpb.MessageMetadata) { md.ChunkId = proto.Int32(3); md.NumChunksFromMsg = proto.Int32(5) },
		func(md *pulsarpb.MessageMetadata) { md.NumChunksFromMsg = proto.Int32(1) },
		func(md *pulsarpb.MessageMetadata) {
			md.NumMessagesInBatch = proto.Int32(3)
			md.HighestSequenceId = proto.Uint64(44)
		},
		func(md *pulsarpb.MessageMetadata) {
			md.Properties = append(md.Properties, &pulsarpb.KeyValue{Key: proto.String(SourcePositionProperty), Value: proto.String("1:1")})
		},
		func(md *pulsarpb.MessageMetadata) {
			md.Properties = append(md.Properties, &pulsarpb.KeyValue{Key: proto.String(SourceIncarnationProperty), Value: proto.String("00000000000000aa")})
		},
		func(md *pulsarpb.MessageMetadata) {
			md.Compression = pulsarpb.CompressionType_LZ4.Enum()
			md.UncompressedSize = proto.Uint32(1000)
			md.PartitionKey = proto.String("key")
			md.EventTime = proto.Uint64(5)
		},
	}
	for i, tweak := range cases {
		for _, inc := range []uint64{0, 0x0123456789abcdef} { // unknown (no property) and known
			e := mkEntry(t, mtypes.Position{LedgerID: 3, EntryID: int64(i)}, "payload", tweak)
			e.Incarnation = inc
			checkFastMatchesGeneral(t, e)
			// The same with a body large enough to be sent in two parts (one checksum pass).
			e = mkEntry(t, mtypes.Position{LedgerID: 3, EntryID: int64(i)}, strings.Repeat("x", zeroCopyMinBody+i), tweak)
			e.Incarnation = inc
			checkFastMatchesGeneral(t, e)
		}
	}
	// The incarnation travels as 16 hex digits and the index reads it back.
	e := mkEntry(t, mtypes.Position{LedgerID: 3, EntryID: 1}, "payload", nil)
	e.Incarnation = 0xfeed
	prepared, _, _ := PrepareEntry(e, "a", "b")
	src, ok, err := replicatedSource(prepared.Bytes())
	if err != nil || !ok || src.incarnation != 0xfeed || src.pos != (mtypes.Position{LedgerID: 3, EntryID: 1}) || string(src.cluster) != "a" {
		t.Fatalf("source of the prepared entry: %+v %v %v", src, ok, err)
	}
	pe, _ := ParseEntry(prepared.Bytes())
	if inc, err := SourceIncarnationOf(pe.Metadata); err != nil || inc != 0xfeed {
		t.Fatalf("SourceIncarnationOf: %x %v", inc, err)
	}
	// A large entry whose body no longer matches its stored checksum is forwarded unread; the
	// remote's checksum check refuses it.
	e = mkEntry(t, mtypes.Position{LedgerID: 4, EntryID: 0}, strings.Repeat("y", 3*zeroCopyMinBody), nil)
	e.Data[len(e.Data)-1] ^= 1
	checkFastMatchesGeneral(t, e)
	if out, reason, err := PrepareEntry(e, "a", "b"); reason != SkipNone || err != nil || wire.VerifyChecksum(out.Bytes()) == nil {
		t.Fatalf("corrupt large entry: %q %v", reason, err)
	}
	// A small one is checked and skipped as corrupt.
	e = mkEntry(t, mtypes.Position{LedgerID: 4, EntryID: 0}, "small", nil)
	e.Data[len(e.Data)-1] ^= 1
	if _, reason, err := PrepareEntry(e, "a", "b"); reason != SkipCorrupt || err == nil {
		t.Fatalf("corrupt small entry: %q %v", reason, err)
	}
	// Two parts: Data + Body is a valid entry whose body aliases the stored one.
	e = mkEntry(t, mtypes.Position{LedgerID: 4, EntryID: 1}, strings.Repeat("z", zeroCopyMinBody), nil)
	out, _, _ := PrepareEntry(e, "a", "b")
	if len(out.Body) != zeroCopyMinBody || &out.Body[0] != &e.Data[len(e.Data)-zeroCopyMinBody] {
		t.Fatal("large body copied")
	}
	if err := wire.VerifyChecksum(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	// Small bodies are not copied either.
	e = mkEntry(t, mtypes.Position{LedgerID: 4, EntryID: 2}, "small body", nil)
	out, _, _ = PrepareEntry(e, "a", "b")
	if string(out.Body) != "small body" || &out.Body[0] != &e.Data[len(e.Data)-len("small body")] {
		t.Fatal("small body copied")
	}
	if err := wire.VerifyChecksum(out.Bytes()); err != nil {
		t.Fatal(err)
	}
}

func FuzzPrepareFastMatchesGeneral(f *testing.F) {
	f.Add(mkEntry(f, mtypes.Position{LedgerID: 1, EntryID: 1}, "payload", nil).Data)
	f.Add(mkEntry(f, mtypes.Position{LedgerID: 1, EntryID: 1}, "x", func(md *pulsarpb.MessageMetadata) { md.ReplicateTo = []string{"b"} }).Data)
	f.Add(mkEntry(f, mtypes.Position{LedgerID: 1, EntryID: 1}, "x", func(md *pulsarpb.MessageMetadata) { md.NumMessagesInBatch = proto.Int32(4) }).Data)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, incarnation := range []uint64{0, 0xabc} {
			checkFastMatchesGeneral(t, mtypes.Entry{Position: mtypes.Position{LedgerID: 7, EntryID: 9}, Data: b, Incarnation: incarnation})
		}
	})
}
