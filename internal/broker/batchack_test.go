package broker

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// TestUnackedSetIsBoundedByTheBatchLimit: the MESSAGE ack set of a partially acknowledged batch is
// sized from the entry's message count, which a producer wrote; above the batch bound it is the
// bound's size, not the producer's claim (2^31 messages made it a 256 MiB slice and a 2^31-step loop).
func TestUnackedSetIsBoundedByTheBatchLimit(t *testing.T) {
	set, left := unackedSet([]uint64{1}, math.MaxInt32)
	if want := maxBatchMessages / 64; len(set) > want {
		t.Fatalf("ack set of %d words for a claimed 2^31 messages, want at most %d", len(set), want)
	}
	if left != maxBatchMessages-1 {
		t.Fatalf("left %d, want %d", left, maxBatchMessages-1)
	}
	if got := batchMessages(math.MaxInt32); got != maxBatchMessages {
		t.Fatalf("batchMessages(2^31-1) = %d", got)
	}
	if got := batchMessages(0); got != 1 {
		t.Fatalf("batchMessages(0) = %d", got)
	}
}

func TestCheckBatchAck(t *testing.T) {
	p := mtypes.Position{LedgerID: 1, EntryID: 2}
	for _, tc := range []struct {
		a    Ack
		size int
		ok   bool
	}{
		{Ack{Position: p, AckSet: []int64{-2}, BatchSize: 3}, 3, true},
		{Ack{Position: p, AckSet: []int64{-2}}, 3, true}, // no batch size given: the entry's
		{Ack{Position: p, AckSet: []int64{-2}, BatchSize: 1 << 31 >> 1}, 3, false},
		{Ack{Position: p, AckSet: []int64{-2}, BatchSize: 2}, 3, false},
		{Ack{Position: p, AckSet: []int64{-1, -1}}, 64, false},
		{Ack{Position: p, AckSet: []int64{-1, -1}}, 65, true},
	} {
		if err := checkBatchAck(tc.a, tc.size); (err == nil) != tc.ok {
			t.Errorf("checkBatchAck(%+v, %d) = %v, want ok=%v", tc.a, tc.size, err, tc.ok)
		}
	}
}

func TestBatchAckIndexes(t *testing.T) {
	// 3 messages, index 1 acknowledged (the Go client's ack_set [5]).
	acked, left := batchAckIndexes([]int64{5}, 3)
	if !slices.Equal(acked, []int{1}) || left != 2 {
		t.Fatalf("acked %v left %d", acked, left)
	}
	// Bits past the batch are ignored; a missing word leaves its messages unacknowledged.
	acked, left = batchAckIndexes([]int64{0}, 70)
	if len(acked) != 64 || left != 6 {
		t.Fatalf("acked %d left %d", len(acked), left)
	}
	acked, left = batchAckIndexes([]int64{0, 0}, 70)
	if len(acked) != 70 || left != 0 || acked[69] != 69 {
		t.Fatalf("acked %d left %d", len(acked), left)
	}
}

// TestPublishOfTooManyMessagesIsRefused: the broker core refuses an entry counting more messages
// than the batch bound, whoever calls it.
func TestPublishOfTooManyMessagesIsRefused(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	p := addProducer(t, e.topic("huge"), ProducerOptions{})
	r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 1, "x"), NumMessages: maxBatchMessages + 1})
	if !errors.Is(r.Err, ErrNotAllowed) {
		t.Fatalf("publish of 2^20+1 messages: %v", r.Err)
	}
	if r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 1, 1, "x"), SequenceID: 1}); r.Err != nil {
		t.Fatal(r.Err)
	}
}
