package storage

import (
	"errors"
	"fmt"
)

// Bounds on what a cursor's state may hold. The reader (decodeCursorState, decodeRecord) refuses a
// record beyond them as corrupt, and a record refused at recovery loses the cursor's state, so
// the writer applies every one of them first:
//
//   - a batch acknowledgement names a batch of at most MaxAckBatchSize messages (the decoder's
//     limit; AckBatchIndexes refuses a larger one before allocating anything for it);
//   - properties hold at most MaxCursorPropertiesBytes (SetProperties refuses more);
//   - cursor names are at most MaxCursorNameBytes, ledger names at most MaxLedgerNameBytes (the
//     reader of a hashed ledger directory's NAME file refuses longer ones);
//   - of the individually acknowledged ranges the first maxPersistedRanges are persisted, of the
//     partially acknowledged batches the first maxPersistedBatches, up to maxPersistedBatchWords
//     bitset words in all (by position). What is not persisted is kept in memory only: after a
//     restart those entries are delivered again, never skipped.
//
// Together an encoded state stays below maxCursorStateBytes, well inside maxRecordBody
// (TestCursorStateBound).
const (
	// MaxAckBatchSize is the largest batch (messages in one entry) a batch-index acknowledgement
	// may name.
	MaxAckBatchSize = 1 << 20
	// MaxCursorPropertiesBytes bounds a cursor's properties: the lengths of every key and value
	// plus PropertyOverheadBytes per property. It leaves room for the broker's largest dedup
	// snapshot (10,000 producers with 256-byte names: about 3 MiB) and the replication index
	// snapshot (about 350 KiB).
	MaxCursorPropertiesBytes = 8 << 20
	// PropertyOverheadBytes is what each property counts towards MaxCursorPropertiesBytes beyond
	// its key and value.
	PropertyOverheadBytes = 16
	// MaxCursorNameBytes bounds a cursor's name.
	MaxCursorNameBytes = 4 << 10
	// MaxLedgerNameBytes bounds a ledger's name (the NAME file of a hashed directory is read up
	// to this size).
	MaxLedgerNameBytes = 64 << 10

	// maxPersistedBatches and maxPersistedBatchWords bound the partially acknowledged batches
	// persisted per cursor: 10,000 batches, 4 MiB of bitsets.
	maxPersistedBatches    = 10_000
	maxPersistedBatchWords = 4 << 20 / 8
	// maxCursorStateBytes is an upper bound of an encoded cursor state within the bounds above.
	maxCursorStateBytes = 1 + 5 + MaxCursorNameBytes + 2*10 + // version, name, mark-delete
		5 + maxPersistedRanges*3*10 + // ranges: three varints each
		5 + maxPersistedBatches*4*10 + maxPersistedBatchWords*8 + // batches: four varints each, bitsets
		5 + MaxCursorPropertiesBytes // properties: two lengths of at most 8 bytes each fit the overhead
)

// Every encoded state fits a journal record (type, slot) and a cursor-log record (type).
var _ [maxRecordBody - 5 - maxCursorStateBytes]struct{}

// ErrCursorStateTooLarge: a change would take a cursor's state beyond the bounds the reader
// accepts (a batch acknowledgement over MaxAckBatchSize, properties over MaxCursorPropertiesBytes,
// a name over MaxCursorNameBytes). The state is left as it was.
var ErrCursorStateTooLarge = errors.New("storage: cursor state too large")

// checkAckBatchSize refuses a batch acknowledgement the reader could not read back.
func checkAckBatchSize(size int) error {
	if size < 0 || size > MaxAckBatchSize {
		return fmt.Errorf("%w: batch size %d (allowed: 0 to %d)", ErrCursorStateTooLarge, size, MaxAckBatchSize)
	}
	return nil
}

// PropertiesSize is what props count towards MaxCursorPropertiesBytes.
func PropertiesSize(props map[string]string) int {
	n := 0
	for k, v := range props {
		n += len(k) + len(v) + PropertyOverheadBytes
	}
	return n
}

func checkProperties(props map[string]string) error {
	if n := PropertiesSize(props); n > MaxCursorPropertiesBytes {
		return fmt.Errorf("%w: %d properties of %d bytes (limit %d)", ErrCursorStateTooLarge, len(props), n, MaxCursorPropertiesBytes)
	}
	return nil
}

func checkCursorName(name string) error {
	if len(name) > MaxCursorNameBytes {
		return fmt.Errorf("%w: cursor name of %d bytes (limit %d)", ErrCursorStateTooLarge, len(name), MaxCursorNameBytes)
	}
	return nil
}

// ErrNameTooLong: a ledger name over MaxLedgerNameBytes.
var ErrNameTooLong = errors.New("storage: ledger name too long")

func checkLedgerName(name string) error {
	if name == "" {
		return errors.New("storage: empty ledger name")
	}
	if len(name) > MaxLedgerNameBytes {
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrNameTooLong, len(name), MaxLedgerNameBytes)
	}
	return nil
}

// persistedBatches returns how many of the partially acknowledged batches, in position order
// (sizes: their bitset words), are persisted: at most maxPersistedBatches, and no more bitset
// words than maxPersistedBatchWords.
func persistedBatches(words []int) int {
	total := 0
	for i, w := range words {
		if i == maxPersistedBatches || total+w > maxPersistedBatchWords {
			return i
		}
		total += w
	}
	return len(words)
}

// maxEntrySizeLimit is the largest entry whose records the reader accepts: its journal record
// (type, slot, ledger id, then the segment record with its header and prefix) within
// maxRecordBody.
const maxEntrySizeLimit = maxRecordBody - (1 + 4 + 8 + recHeaderSize + segBodyPrefix)

func checkOptions(o Options) error {
	if o.Dir == "" {
		return errors.New("storage: Options.Dir is empty")
	}
	if o.MaxEntrySize > maxEntrySizeLimit {
		return fmt.Errorf("storage: MaxEntrySize %d over the limit %d (the largest record the reader accepts)", o.MaxEntrySize, maxEntrySizeLimit)
	}
	return nil
}
