package client

import (
	"fmt"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// MessageID identifies a message: the stored entry (ledger, entry) plus the message's index in a
// batch (-1 when the entry is not a batch) and the partition index (-1 when unknown or not
// partitioned).
type MessageID struct {
	LedgerID   uint64
	EntryID    uint64
	BatchIndex int32
	BatchSize  int32
	Partition  int32
}

// Earliest and Latest are the start positions of non-durable subscriptions.
var (
	Earliest = MessageID{LedgerID: wire.EarliestLedgerID, EntryID: wire.EarliestEntryID, BatchIndex: -1, Partition: -1}
	Latest   = MessageID{LedgerID: wire.LatestLedgerID, EntryID: wire.LatestEntryID, BatchIndex: -1, Partition: -1}
)

// String renders ledger:entry:batchIndex, as the Pulsar tools do.
func (id MessageID) String() string {
	return fmt.Sprintf("%d:%d:%d", int64(id.LedgerID), int64(id.EntryID), id.BatchIndex)
}

// Proto converts the id to the wire form.
func (id MessageID) Proto() *pulsarpb.MessageIdData {
	m := &pulsarpb.MessageIdData{LedgerId: ptr(id.LedgerID), EntryId: ptr(id.EntryID)}
	if id.Partition >= 0 {
		m.Partition = ptr(id.Partition)
	}
	if id.BatchIndex >= 0 {
		m.BatchIndex = ptr(id.BatchIndex)
		if id.BatchSize > 0 {
			m.BatchSize = ptr(id.BatchSize)
		}
	}
	return m
}

// idFromProto converts a wire id.
func idFromProto(m *pulsarpb.MessageIdData) MessageID {
	return MessageID{
		LedgerID:   m.GetLedgerId(),
		EntryID:    m.GetEntryId(),
		BatchIndex: m.GetBatchIndex(),
		BatchSize:  m.GetBatchSize(),
		Partition:  m.GetPartition(),
	}
}

// entryLess orders ids by (ledger, entry) only, as the broker's positions are ordered.
func entryLess(a, b MessageID) bool {
	if a.LedgerID != b.LedgerID {
		return a.LedgerID < b.LedgerID
	}
	return a.EntryID < b.EntryID
}

// Less orders ids by entry, then batch index.
func (id MessageID) Less(o MessageID) bool {
	if id.LedgerID != o.LedgerID || id.EntryID != o.EntryID {
		return entryLess(id, o)
	}
	return id.BatchIndex < o.BatchIndex
}
