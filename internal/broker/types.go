package broker

import (
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
)

// Delivery is one entry handed to a consumer's sink: the server sends it as one MESSAGE command
// followed by Data unchanged.
type Delivery struct {
	// Position is the entry's (ledgerId, entryId).
	Position mtypes.Position
	// Partition is the topic's partition index, -1 for a non-partitioned topic.
	Partition int32
	// NumMessages is the number of messages in the entry (num_messages_in_batch, or 1): the permits
	// it used.
	NumMessages int
	// AckSet, when non-nil, is the bitset (little-endian 64-bit words, bit set = still unacknowledged)
	// of a partially acknowledged batch; the server copies it into CommandMessage.ack_set.
	AckSet []int64
	// RedeliveryCount is how often this entry was delivered to the subscription before.
	RedeliveryCount uint32
	// Data is the stored entry (magic, checksum, metadata size, metadata, payload). Read-only: it may
	// be shared with the storage cache and other subscriptions.
	Data []byte
}

// Ack acknowledges one entry, or some messages of a batch entry.
type Ack struct {
	Position mtypes.Position
	// AckSet as sent by the client with batch-index acknowledgement: bit i set = message i is still
	// unacknowledged. nil acknowledges the whole entry.
	AckSet []int64
	// BatchSize from the client's message id, if known (0 otherwise); the broker prefers the
	// size it dispatched.
	BatchSize int
}

// ConsumerSink receives what the broker sends to one consumer. The server implements it per
// consumer. Methods must not block (queue and return) and must not call back into the broker
// synchronously. Calls for one consumer are serialised (never concurrent), and nothing is sent after
// Closed or after Consumer.Close/Unsubscribe returned.
type ConsumerSink interface {
	// SendMessages delivers entries, in order. The consumer's permits already account for them.
	SendMessages(msgs []Delivery)
	// ActiveConsumerChanged tells a Failover consumer whether it is now the active one
	// (ACTIVE_CONSUMER_CHANGE): right after it subscribes, and whenever the active consumer of the
	// subscription changes (every consumer is told). Not called for other subscription types.
	ActiveConsumerChanged(active bool)
	// Closed tells the server that the broker closed the consumer (after a seek, a forced unsubscribe
	// by another consumer, topic unload or deletion): send CLOSE_CONSUMER so the client reconnects.
	// Not called when the consumer was closed by Consumer.Close or Consumer.Unsubscribe. to names
	// the broker the topic moved to, when it did (Broker.UnloadTopicTo).
	Closed(to Reassigned)
}

// Reassigned names the broker a closed topic's clients reconnect to directly, without a lookup
// (assignedBrokerServiceUrl of CLOSE_PRODUCER and CLOSE_CONSUMER): the broker its bundle moves to.
// Empty when the topic closed for another reason: clients look it up again.
type Reassigned struct{ ServiceURL, ServiceURLTLS string }

// PublishRequest is one SEND.
type PublishRequest struct {
	// Entry is the payload of the SEND frame from the magic on (magic, checksum, metadata size,
	// metadata, payload), already checksum-verified by the server. It is stored byte for byte. The
	// broker keeps a reference until done is called (and the storage cache may keep it longer):
	// the caller must not modify it afterwards.
	Entry []byte
	// SequenceID and HighestSequenceID are CommandSend's fields (HighestSequenceID 0 = unset).
	SequenceID        int64
	HighestSequenceID int64
	// NumMessages is CommandSend.num_messages (1 if unset); above wire.MaxBatchMessages the
	// publish is refused (ErrNotAllowed).
	NumMessages int
	// PublishTime is MessageMetadata.publish_time (unix ms); 0 = now.
	PublishTime int64
	// ProducerName is MessageMetadata.producer_name. Optional and informational: producer dedup is
	// keyed by the broker-side producer name; replicator producers (names with the replicator
	// prefix) skip producer dedup and go through Deps.ReplicatedIndex instead.
	ProducerName string
	// Chunk is set for a chunked message's chunk; LastChunk for its last chunk. Dedup records a
	// chunked message with its last chunk, and answers every chunk of a message already recorded
	// as a duplicate (a resent message is stored once, with no orphan chunks).
	Chunk, LastChunk bool
	// Marker is CommandSend.marker or MessageMetadata.marker_type set: never deduplicated.
	Marker bool
	// Origin, when HasOrigin, is what the server's scan of the metadata found for the replicated
	// entry index (wire.ScanPublishMetadataOrigin; it aliases Entry): an index implementing
	// OriginAdmitter then does not scan the entry again. Only looked at for replicator producers.
	Origin    wire.ReplicatedOrigin
	HasOrigin bool
}

// PublishResult completes a PublishRequest.
type PublishResult struct {
	// Position is where the entry was stored; (-1,-1) for a duplicate (dedup), as Pulsar answers.
	Position mtypes.Position
	// Duplicate is set when dedup dropped the entry.
	Duplicate bool
	// SequenceID and HighestSequenceID echo the request; HighestSequenceID is normalised: the
	// request's when set, else SequenceID + NumMessages - 1 (a batch's last message).
	SequenceID        int64
	HighestSequenceID int64
	// Err is non-nil if the publish failed; it wraps a sentinel of errors.go or a storage error.
	Err error
}

// LastMessageID answers GET_LAST_MESSAGE_ID.
type LastMessageID struct {
	// Position of the last stored entry; EntryID is -1 (and LedgerID may be -1) when the topic is empty.
	Position mtypes.Position
	// BatchIndex is num_messages_in_batch-1 for a batched last entry, -1 otherwise.
	BatchIndex int32
	// MarkDelete is the subscription's mark-delete position (always filled; (-1,-1) if none).
	MarkDelete mtypes.Position
}
