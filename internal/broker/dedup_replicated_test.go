package broker

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// replicatedEntry builds an entry as a replicator stores it: the origin's producer name and
// sequence id, and replicated_from set to the origin cluster.
func replicatedEntry(t testing.TB, producer string, seq uint64, from string) []byte {
	t.Helper()
	md := &pulsarpb.MessageMetadata{
		ProducerName:   proto.String(producer),
		SequenceId:     proto.Uint64(seq),
		PublishTime:    proto.Uint64(uint64(time.Now().UnixMilli())),
		ReplicatedFrom: proto.String(from),
	}
	b, err := wire.EncodeEntry(md, []byte("replicated"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDedupReplayIgnoresReplicatedEntries: active-active with dedup on, and the same producer name
// ("orders") in both clusters. One broker stands for cluster b: its local "orders" publishes seq
// 0..4, and a replicator producer stores a's "orders" entries up to seq 5000 (replicated_from "a").
// The live path never tracks replicated entries under producer dedup; after a crash the replay
// of the log must not either, or b's own "orders" would have seq 5..5000 dropped as duplicates.
func TestDedupReplayIgnoresReplicatedEntries(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true, DedupDefault: true, DedupSnapshotInterval: 1000})
	top := e.topic("active-active")
	local := addProducer(t, top, ProducerOptions{Name: "orders"})
	repl := addProducer(t, top, ProducerOptions{Name: "pulsar.repl.a-->b"})
	for i := 0; i < 5; i++ {
		if r := publishSync(t, local, PublishRequest{Entry: entry(t, "orders", uint64(i), 1, "local"), SequenceID: int64(i)}); r.Err != nil || r.Duplicate {
			t.Fatalf("local publish %d: %+v", i, r)
		}
		seq := uint64(1000 * (i + 1))
		if r := publishSync(t, repl, PublishRequest{Entry: replicatedEntry(t, "orders", seq, "a"), SequenceID: int64(seq)}); r.Err != nil || r.Duplicate {
			t.Fatalf("replicated publish %d: %+v", seq, r)
		}
	}
	// A crash: no final snapshot, so the reload replays the log.
	e.crash()
	top = e.topic("active-active")
	local = addProducer(t, top, ProducerOptions{Name: "orders"})
	if got := local.LastSequenceID(); got != 4 {
		t.Fatalf("after the reload LastSequenceID of the local producer = %d, want 4", got)
	}
	for seq := int64(5); seq < 8; seq++ {
		if r := publishSync(t, local, PublishRequest{Entry: entry(t, "orders", uint64(seq), 1, "local"), SequenceID: seq}); r.Err != nil || r.Duplicate {
			t.Fatalf("local seq %d after the reload: %+v (a local message was dropped)", seq, r)
		}
	}
}
