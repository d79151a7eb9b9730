package mtypes

// AckRange is a run of acknowledged entries From..To (inclusive) of one ledger id.
type AckRange struct {
	LedgerID int64
	From, To int64
}

// PositionRange is a closed range of positions, possibly across ledgers.
type PositionRange struct{ From, To Position }

// BatchAck is a partially acknowledged batch entry: bit i of Acked set = index i acknowledged.
type BatchAck struct {
	Position Position
	Size     int
	Acked    []uint64
}

// AckState is a copy of a cursor's acknowledgement state.
type AckState struct {
	MarkDelete Position
	// Ranges are the acknowledged runs after MarkDelete, sorted; at most as many as asked for.
	Ranges []AckRange
	// Batches are the partially acknowledged batches, sorted by position; at most as many as
	// asked for.
	Batches []BatchAck
	// Truncated says that ranges or batches beyond the limits were left out.
	Truncated bool
	// Version changes with every change of the cursor's state (acknowledgements, properties,
	// resets): equal versions mean an equal state.
	Version uint64
}

// SubscriptionAckState is what a replicated subscription's state marker carries, in local
// positions: the cursor's acknowledgement state and the subscription's type and properties.
type SubscriptionAckState struct {
	AckState
	Type       SubType
	Properties map[string]string
	Replicated bool
	Consumers  int // consumers attached when the state was taken (0: final until one attaches)
}

// ReplicatedState is a replicated subscription's state from another cluster, translated to the
// local topic's positions, for the broker to apply.
type ReplicatedState struct {
	// Type and Properties of the subscription on the source (Properties nil: not carried).
	Type       SubType
	Properties map[string]string
	// Ranges to acknowledge, sorted; Batches: batch-index acknowledgements of entries not in Ranges.
	Ranges  []PositionRange
	Batches []BatchAck
	// SyncRecord is persisted with the subscription (meridian.sync) when not empty ("" keeps the
	// one persisted).
	SyncRecord string
	// MaxEntries bounds the entries acknowledged one by one in one application (ranges that move
	// the mark-delete position are not counted); 0 means 100,000.
	MaxEntries int
}

// ReplicatedApplyResult says what applying a ReplicatedState did.
type ReplicatedApplyResult struct {
	Created   bool  // the subscription did not exist and was created
	Acked     int64 // entries newly acknowledged
	Truncated bool  // MaxEntries was reached: some ranges are not (all) applied
}
