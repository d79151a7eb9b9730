package broker

import (
	"fmt"
	"math/bits"

	"github.com/meridian-mq/meridian/internal/wire"
)

// Batch-index acknowledgements name messages of a batch entry by index. How many messages the
// entry holds is a fact of the stored entry (its metadata's num_messages_in_batch), never of the
// client's ACK: the broker sizes loops and the cursor's bitset from it, and the cursor persists that
// bitset, so a client-chosen size would let one ACK allocate and persist what it likes.

// maxBatchMessages is the largest batch the broker dispatches and tracks (wire.MaxBatchMessages,
// the storage reader's bound on a batch-acknowledgement bitset).
const maxBatchMessages = wire.MaxBatchMessages

// batchMessages is the message count the broker uses for an entry whose metadata claims n: at
// least 1, at most maxBatchMessages (publishes above it are refused; only an entry stored by an
// older version can claim more).
func batchMessages(n int) int {
	return min(max(n, 1), maxBatchMessages)
}

// checkBatchAck refuses a batch-index acknowledgement that does not fit the entry it names: a
// batch size other than the entry's (0 = not given), or an ack set with more words than the
// entry's messages need. size is the entry's message count (batchMessages).
func checkBatchAck(a Ack, size int) error {
	if a.BatchSize != 0 && a.BatchSize != size {
		return fmt.Errorf("ack of %s with batch size %d, but the entry holds %d messages: %w", a.Position, a.BatchSize, size, ErrInvalidRequest)
	}
	if words := (size + 63) / 64; len(a.AckSet) > words {
		return fmt.Errorf("ack of %s with an ack set of %d words, but the entry's %d messages need %d: %w", a.Position, len(a.AckSet), size, words, ErrInvalidRequest)
	}
	return nil
}

// batchAckIndexes returns the indexes an ack set acknowledges (bit clear = acknowledged; words
// beyond the set count as unacknowledged) among size messages, and how many stay unacknowledged.
// It costs one step per word of the set plus one per acknowledged index.
func batchAckIndexes(ackSet []int64, size int) (acked []int, left int) {
	for w, word := range ackSet {
		rest := size - w*64
		if rest <= 0 {
			break
		}
		valid := ^uint64(0)
		if rest < 64 {
			valid = 1<<uint(rest) - 1
		}
		done := ^uint64(word) & valid
		for done != 0 {
			b := bits.TrailingZeros64(done)
			acked = append(acked, w*64+b)
			done &= done - 1
		}
	}
	return acked, size - len(acked)
}
