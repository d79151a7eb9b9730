package broker

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func TestDedupDecisions(t *testing.T) {
	d := newDedupState(func() int64 { return 0 })
	steps := []struct {
		op       string // "check" or "persist" or "fail"
		producer string
		seq      int64
		want     dedupStatus
	}{
		{"check", "p", 0, dedupNew},
		{"check", "p", 1, dedupNew},
		{"check", "p", 1, dedupUnknown}, // pushed, not persisted
		{"persist", "p", 0, 0},
		{"check", "p", 0, dedupDuplicate},
		{"check", "p", 1, dedupUnknown},
		{"persist", "p", 1, 0},
		{"check", "p", 1, dedupDuplicate},
		{"check", "q", 0, dedupNew},
		{"fail", "", 0, 0}, // q's 0 never persisted: forgotten
		{"check", "q", 0, dedupNew},
		{"check", "p", 2, dedupNew},
	}
	for i, s := range steps {
		switch s.op {
		case "check":
			if got := d.check(s.producer, s.seq, s.seq); got != s.want {
				t.Fatalf("step %d: check(%s,%d) = %v, want %v", i, s.producer, s.seq, got, s.want)
			}
		case "persist":
			d.persistedEntry(s.producer, s.seq)
		case "fail":
			d.failed()
		}
	}
	if got := d.lastSequenceID("p"); got != 1 {
		t.Fatalf("lastSequenceID = %d", got)
	}
	if got := d.lastSequenceID("nobody"); got != -1 {
		t.Fatalf("lastSequenceID(nobody) = %d", got)
	}
}

func TestDedupSnapshotRoundTripAndReplay(t *testing.T) {
	d := newDedupState(func() int64 { return 0 })
	d.persistedEntry("a", 41)
	d.persistedEntry("b:with:colons", 7)
	props := d.snapshot()
	props["unrelated"] = "x"
	props[dedupPropPrefix+"bad"] = "not-a-number"

	r := newDedupState(func() int64 { return 0 })
	r.restore(props)
	if r.lastSequenceID("a") != 41 || r.lastSequenceID("b:with:colons") != 7 || r.lastSequenceID("bad") != -1 {
		t.Fatalf("restored %v", r.persisted)
	}
	// Replay: a batch recorded by max(sequence_id, highest_sequence_id); non-last chunks and markers ignored.
	r.replay(&pulsarpb.MessageMetadata{ProducerName: proto.String("a"), SequenceId: proto.Uint64(42), HighestSequenceId: proto.Uint64(45)})
	r.replay(&pulsarpb.MessageMetadata{ProducerName: proto.String("c"), SequenceId: proto.Uint64(3), ChunkId: proto.Int32(0), NumChunksFromMsg: proto.Int32(2)})
	r.replay(&pulsarpb.MessageMetadata{ProducerName: proto.String("m"), SequenceId: proto.Uint64(3), MarkerType: proto.Int32(10)})
	// A batch without highest_sequence_id (the Go client): recorded as sequence_id + n - 1.
	r.replay(&pulsarpb.MessageMetadata{ProducerName: proto.String("g"), SequenceId: proto.Uint64(10), NumMessagesInBatch: proto.Int32(5)})
	if r.lastSequenceID("g") != 14 {
		t.Fatalf("batch recorded as %d, want 14", r.lastSequenceID("g"))
	}
	if r.lastSequenceID("a") != 45 || r.lastSequenceID("c") != -1 || r.lastSequenceID("m") != -1 {
		t.Fatalf("after replay %v", r.persisted)
	}
	r.replay(&pulsarpb.MessageMetadata{ProducerName: proto.String("c"), SequenceId: proto.Uint64(3), ChunkId: proto.Int32(1), NumChunksFromMsg: proto.Int32(2)})
	if r.lastSequenceID("c") != 3 {
		t.Fatalf("last chunk not recorded: %v", r.persisted)
	}
	if got := r.check("a", 45, 45); got != dedupDuplicate {
		t.Fatalf("check after replay = %v", got)
	}
}

func TestDedupForgetsInactiveProducers(t *testing.T) {
	now := int64(0)
	d := newDedupState(func() int64 { return now })
	d.persistedEntry("old", 5)
	now = dedupInactivity.Milliseconds() / 2
	d.persistedEntry("recent", 7)
	now = dedupInactivity.Milliseconds() + 1
	props := d.snapshot()
	if _, ok := props[dedupPropPrefix+"old"]; ok || d.lastSequenceID("old") != -1 {
		t.Fatalf("inactive producer kept: %v", props)
	}
	if d.lastSequenceID("recent") != 7 {
		t.Fatal("active producer forgotten")
	}
}
