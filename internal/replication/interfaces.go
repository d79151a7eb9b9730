package replication

import (
	"context"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// LocalTopic is what a replicator needs from the local topic (one topic or one partition).
// internal/node implements it over the broker's topic and its storage ledger.
type LocalTopic interface {
	// Name is the full topic name ("persistent://tenant/ns/name[-partition-i]").
	Name() string
	// OpenCursor opens the durable cursor called name, creating it at initial (Earliest, Latest or a
	// position) if it does not exist; created says whether it was created now.
	OpenCursor(ctx context.Context, name string, initial mtypes.Position) (c Cursor, created bool, err error)
	// DeleteCursor removes the cursor and its stored state (a missing cursor is not an error).
	DeleteCursor(ctx context.Context, name string) error
	// CursorNames lists the topic's durable cursors.
	CursorNames() []string
	// Read returns stored entries at or after from, in order, at most maxEntries and about maxBytes
	// (at least one if any). An empty slice means there is nothing at or after from yet.
	Read(ctx context.Context, from mtypes.Position, maxEntries int, maxBytes int64) ([]mtypes.Entry, error)
	// WaitForEntries returns a channel that is closed once an entry at or after from is stored
	// (immediately if one is). It must not leak when nobody waits: one pending notification per
	// caller is kept at most.
	WaitForEntries(from mtypes.Position) <-chan struct{}
	// LastConfirmed is the last stored entry ({ledger, -1} when empty).
	LastConfirmed() mtypes.Position
}

// Cursor is a durable replication cursor on the local topic.
type Cursor interface {
	// MarkDeletePosition: every entry at or before it is replicated (or skipped).
	MarkDeletePosition() mtypes.Position
	// MarkDelete moves the mark-delete position forward to p (persisted in batches by storage).
	MarkDelete(ctx context.Context, p mtypes.Position) error
	// Backlog is the number of stored entries after the mark-delete position.
	Backlog() int64
	// Properties returns a copy of the cursor's properties.
	Properties() map[string]string
	// SetProperties replaces the cursor's properties (persisted in batches by storage).
	SetProperties(ctx context.Context, props map[string]string) error
	// Flush persists the cursor's state now and returns once it is durable.
	Flush(ctx context.Context) error
}

// RemoteProducer sends prepared entries to one topic of the remote cluster.
type RemoteProducer interface {
	// Send sends out; done is called exactly once, in send order, with nil when the remote persisted
	// it (SEND_RECEIPT) or the error. done must not block; it may be called on any goroutine.
	Send(out Outbound, done func(err error))
	// Close closes the producer; sends still pending complete with an error.
	Close(ctx context.Context) error
}

// RemoteProducerFactory creates producers on remote clusters over the binary protocol
// (internal/client), named ProducerName(local, remote), batching off, no send timeout.
type RemoteProducerFactory interface {
	// NewProducer connects to cluster remote and creates a producer for topic. It returns when the
	// producer is ready (PRODUCER_SUCCESS) or failed; the error names the remote's reason (e.g. a
	// ServerError such as TopicNotFound or NotAllowed) so it can be shown as lastError.
	NewProducer(ctx context.Context, remote, topic, producerName string) (RemoteProducer, error)
}
