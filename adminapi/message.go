package adminapi

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MessageID is the JSON message id of the admin API (`lastMessageId`, `messageid/{ts}`, subscription
// create and resetcursor bodies). BatchIndex is not part of Pulsar's JSON; -1 means "whole entry".
type MessageID struct {
	LedgerID       int64 `json:"ledgerId"`
	EntryID        int64 `json:"entryId"`
	PartitionIndex int   `json:"partitionIndex"`
	BatchIndex     int   `json:"batchIndex,omitempty"`
}

// The sentinels pulsaradmin uses for subscription start positions.
var (
	// Latest is after the last entry (ledger and entry = MaxInt64).
	Latest = MessageID{LedgerID: math.MaxInt64, EntryID: math.MaxInt64, PartitionIndex: -1, BatchIndex: -1}
	// Earliest is before the first entry.
	Earliest = MessageID{LedgerID: -1, EntryID: -1, PartitionIndex: -1, BatchIndex: -1}
)

// IsLatest reports whether id is the Latest sentinel.
func (id MessageID) IsLatest() bool {
	return id.LedgerID == math.MaxInt64 && id.EntryID == math.MaxInt64
}

// IsEarliest reports whether id is the Earliest sentinel.
func (id MessageID) IsEarliest() bool { return id.LedgerID == -1 && id.EntryID == -1 }

// String formats "ledger:entry:partition[:batch]" as the X-Pulsar-Message-ID header does.
func (id MessageID) String() string {
	s := strconv.FormatInt(id.LedgerID, 10) + ":" + strconv.FormatInt(id.EntryID, 10) + ":" + strconv.Itoa(id.PartitionIndex)
	if id.BatchIndex >= 0 {
		s += ":" + strconv.Itoa(id.BatchIndex)
	}
	return s
}

// ParseMessageID parses "ledger:entry[:partition[:batch]]".
func ParseMessageID(s string) (MessageID, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 4 {
		return MessageID{}, fmt.Errorf("message id %q: want ledgerId:entryId[:partition[:batch]]", s)
	}
	id := MessageID{PartitionIndex: -1, BatchIndex: -1}
	var err error
	if id.LedgerID, err = strconv.ParseInt(parts[0], 10, 64); err != nil {
		return MessageID{}, fmt.Errorf("message id %q: bad ledger id", s)
	}
	if id.EntryID, err = strconv.ParseInt(parts[1], 10, 64); err != nil {
		return MessageID{}, fmt.Errorf("message id %q: bad entry id", s)
	}
	if len(parts) > 2 {
		if id.PartitionIndex, err = strconv.Atoi(parts[2]); err != nil || id.PartitionIndex < -1 {
			return MessageID{}, fmt.Errorf("message id %q: bad partition index", s)
		}
	}
	if len(parts) > 3 {
		if id.BatchIndex, err = strconv.Atoi(parts[3]); err != nil || id.BatchIndex < -1 {
			return MessageID{}, fmt.Errorf("message id %q: bad batch index", s)
		}
	}
	return id, nil
}

// RawMessage is one stored entry as the peek and get-by-id endpoints return it: the payload as
// stored (for a batch, the concatenated single-message records, which the client splits) plus the
// metadata sent as X-Pulsar-* response headers.
type RawMessage struct {
	ID MessageID
	// Payload is the entry's body after the message metadata.
	Payload []byte
	// PublishTime and EventTime are in milliseconds since the epoch (0 = unset).
	PublishTime int64
	EventTime   int64
	// NumBatchMessages is num_messages_in_batch when present in the metadata; Batched reports
	// whether it was present (which is what makes the client split the payload).
	Batched          bool
	NumBatchMessages int
	Properties       map[string]string
	PartitionKey     string
	ProducerName     string
	SequenceID       int64
	ReplicatedFrom   string
	Compression      string
	UncompressedSize int
}

// PositionTranslation is the answer of `GET .../{topic}/translatePosition` (Meridian's addition): a
// position of another cluster mapped to this one.
type PositionTranslation struct {
	// MessageID is the position on this cluster.
	MessageID MessageID `json:"messageId"`
	// Method is how it was found: "index" (the origin position itself arrived here, exact),
	// "index-at-or-before" (the greatest origin position below it that arrived here) or
	// "publish-time" (the first message here published at or after the given time: approximate).
	Method string `json:"method"`
	Exact  bool   `json:"exact"`
	// OriginMessageID is the origin position that was mapped (for the index methods).
	OriginMessageID *MessageID `json:"originMessageId,omitempty"`
}
