package broker

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// TestSharedChunkRoutesEndWithTheirChunks: the route that keeps a chunked message on one Shared
// consumer lives as long as chunks of it are pending there. A message whose last chunk never
// comes (its producer died mid-message, or a resend's last chunk was a duplicate) leaves no route
// behind once its chunks are acknowledged or redelivered.
func TestSharedChunkRoutesEndWithTheirChunks(t *testing.T) {
	d := newDispatchState(mtypes.SubShared, -1, pos(1, 0))
	a, b := newDConsumer(1, "a", 0), newDConsumer(2, "b", 0)
	d.addConsumer(a, pos(1, -1))
	d.addConsumer(b, pos(1, -1))
	d.flow(a, 100)
	d.flow(b, 100)
	es := entries(1, 0, 3, 1)
	// Entries 0, 1: the first two chunks of "orphan" (its last chunk never arrives); entries 2, 3:
	// the first chunks of "left", whose consumer leaves.
	es[0].chunkUUID, es[1].chunkUUID = "orphan", "orphan"
	es[2].chunkUUID, es[3].chunkUUID = "left", "left"
	p, _ := d.plan(100, pos(1, 3), false, false)
	res := d.assign(p, es, nil, 0)
	got := deliveredTo(res)
	if len(got["a"])+len(got["b"]) != 4 || len(d.chunkOwner) != 2 {
		t.Fatalf("deliveries %v, routes %v", got, d.chunkOwner)
	}
	// The consumer holding "orphan" acknowledges (or, for a client, expires) its chunks.
	d.acked(pos(1, 0), pos(1, 1))
	if _, ok := d.chunkOwner["orphan"]; ok {
		t.Fatalf("route of an acknowledged orphan chunk set kept: %v", d.chunkOwner)
	}
	// The consumer holding "left" leaves: its chunks are redelivered, the route goes with it.
	leaver := d.owner[pos(1, 2)]
	d.removeConsumer(leaver, pos(1, -1))
	if len(d.chunkOwner) != 0 {
		t.Fatalf("routes left after the consumer left: %v", d.chunkOwner)
	}
	// The redelivered chunks start a new route at the remaining consumer.
	p, _ = d.plan(100, pos(1, 3), false, false)
	res = d.assign(p, []entryInfo{es[2], es[3]}, nil, 0)
	if len(res.deliveries) != 2 || d.chunkOwner["left"] == nil || d.chunkOwner["left"].to == leaver {
		t.Fatalf("redelivery %v, routes %v", res.deliveries, d.chunkOwner)
	}
}

// chunkEntry builds chunk id of n of a chunked message with sequence id seq.
func chunkEntry(t testing.TB, producer string, seq uint64, id, n int32) []byte {
	t.Helper()
	md := &pulsarpb.MessageMetadata{
		ProducerName:      proto.String(producer),
		SequenceId:        proto.Uint64(seq),
		PublishTime:       proto.Uint64(uint64(time.Now().UnixMilli())),
		Uuid:              proto.String(producer + "-" + "chunked"),
		ChunkId:           proto.Int32(id),
		NumChunksFromMsg:  proto.Int32(n),
		TotalChunkMsgSize: proto.Int32(3 * n),
	}
	b, err := wire.EncodeEntry(md, []byte("abc"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestResentChunkedMessageIsStoredOnce: a client that resends a chunked message after a
// reconnection (same sequence id, every chunk again) gets a duplicate answer for every chunk, and
// the log holds the message once: before, only the last chunk was recognised and the others were
// stored again as an orphan chunk set.
func TestResentChunkedMessageIsStoredOnce(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true, DedupDefault: true})
	top := e.topic("chunks")
	p := addProducer(t, top, ProducerOptions{Name: "chunker"})
	send := func(p *Producer, id int32) PublishResult {
		return publishSync(t, p, PublishRequest{Entry: chunkEntry(t, "chunker", 7, id, 3), SequenceID: 7, Chunk: true, LastChunk: id == 2})
	}
	for id := int32(0); id < 3; id++ {
		if r := send(p, id); r.Err != nil || r.Duplicate {
			t.Fatalf("chunk %d: %+v", id, r)
		}
	}
	entries := top.Ledger().Entries()
	// The client reconnects and resends the whole message.
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	p = addProducer(t, top, ProducerOptions{Name: "chunker", Epoch: 1})
	for id := int32(0); id < 3; id++ {
		r := send(p, id)
		if r.Err != nil || !r.Duplicate || r.Position != (mtypes.Position{LedgerID: -1, EntryID: -1}) {
			t.Fatalf("resent chunk %d: %+v, want a duplicate", id, r)
		}
	}
	if got := top.Ledger().Entries(); got != entries {
		t.Fatalf("%d entries after the resend, want %d", got, entries)
	}
	// The next message is stored.
	if r := publishSync(t, p, PublishRequest{Entry: entry(t, "chunker", 8, 1, "next"), SequenceID: 8}); r.Err != nil || r.Duplicate {
		t.Fatalf("next message: %+v", r)
	}
}
