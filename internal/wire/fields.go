package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Field numbers of the PulsarApi.proto messages that the hand-written codecs read and write: the
// SEND decoder, the SEND_RECEIPT encoder and the metadata scans here, the client's SEND head,
// receipt decoder and metadata scan (internal/client), the replicator's metadata scan and edits
// (internal/replication). Every codec takes its numbers from these tables, which are read from the
// generated descriptors when the package initialises: no codec can disagree with the schema, and a
// misspelt name stops the program at start (and every test). Each codec is fuzzed against the
// generic protobuf decoder.

// BaseCommandField holds BaseCommand's field numbers.
var BaseCommandField = struct {
	Type, Send, SendReceipt protowire.Number
}{
	Type:        fieldNumber(&pulsarpb.BaseCommand{}, "type"),
	Send:        fieldNumber(&pulsarpb.BaseCommand{}, "send"),
	SendReceipt: fieldNumber(&pulsarpb.BaseCommand{}, "send_receipt"),
}

// SendField holds CommandSend's field numbers.
var SendField = struct {
	ProducerID, SequenceID, NumMessages, HighestSequenceID, IsChunk, Marker protowire.Number
}{
	ProducerID:        fieldNumber(&pulsarpb.CommandSend{}, "producer_id"),
	SequenceID:        fieldNumber(&pulsarpb.CommandSend{}, "sequence_id"),
	NumMessages:       fieldNumber(&pulsarpb.CommandSend{}, "num_messages"),
	HighestSequenceID: fieldNumber(&pulsarpb.CommandSend{}, "highest_sequence_id"),
	IsChunk:           fieldNumber(&pulsarpb.CommandSend{}, "is_chunk"),
	Marker:            fieldNumber(&pulsarpb.CommandSend{}, "marker"),
}

// SendReceiptField holds CommandSendReceipt's field numbers.
var SendReceiptField = struct {
	ProducerID, SequenceID, MessageID, HighestSequenceID protowire.Number
}{
	ProducerID:        fieldNumber(&pulsarpb.CommandSendReceipt{}, "producer_id"),
	SequenceID:        fieldNumber(&pulsarpb.CommandSendReceipt{}, "sequence_id"),
	MessageID:         fieldNumber(&pulsarpb.CommandSendReceipt{}, "message_id"),
	HighestSequenceID: fieldNumber(&pulsarpb.CommandSendReceipt{}, "highest_sequence_id"),
}

// MessageIDField holds MessageIdData's field numbers.
var MessageIDField = struct {
	LedgerID, EntryID protowire.Number
}{
	LedgerID: fieldNumber(&pulsarpb.MessageIdData{}, "ledgerId"),
	EntryID:  fieldNumber(&pulsarpb.MessageIdData{}, "entryId"),
}

// MetadataField holds MessageMetadata's field numbers.
var MetadataField = struct {
	ProducerName, PublishTime, Properties, ReplicatedFrom, ReplicateTo, NumMessagesInBatch,
	EncryptionKeys, SchemaVersion, MarkerType, TxnidLeastBits, TxnidMostBits, HighestSequenceID,
	NumChunksFromMsg, ChunkID protowire.Number
}{
	ProducerName:       fieldNumber(&pulsarpb.MessageMetadata{}, "producer_name"),
	PublishTime:        fieldNumber(&pulsarpb.MessageMetadata{}, "publish_time"),
	Properties:         fieldNumber(&pulsarpb.MessageMetadata{}, "properties"),
	ReplicatedFrom:     fieldNumber(&pulsarpb.MessageMetadata{}, "replicated_from"),
	ReplicateTo:        fieldNumber(&pulsarpb.MessageMetadata{}, "replicate_to"),
	NumMessagesInBatch: fieldNumber(&pulsarpb.MessageMetadata{}, "num_messages_in_batch"),
	EncryptionKeys:     fieldNumber(&pulsarpb.MessageMetadata{}, "encryption_keys"),
	SchemaVersion:      fieldNumber(&pulsarpb.MessageMetadata{}, "schema_version"),
	MarkerType:         fieldNumber(&pulsarpb.MessageMetadata{}, "marker_type"),
	TxnidLeastBits:     fieldNumber(&pulsarpb.MessageMetadata{}, "txnid_least_bits"),
	TxnidMostBits:      fieldNumber(&pulsarpb.MessageMetadata{}, "txnid_most_bits"),
	HighestSequenceID:  fieldNumber(&pulsarpb.MessageMetadata{}, "highest_sequence_id"),
	NumChunksFromMsg:   fieldNumber(&pulsarpb.MessageMetadata{}, "num_chunks_from_msg"),
	ChunkID:            fieldNumber(&pulsarpb.MessageMetadata{}, "chunk_id"),
}

// KeyValueField holds KeyValue's field numbers (MessageMetadata.properties' elements).
var KeyValueField = struct {
	Key, Value protowire.Number
}{
	Key:   fieldNumber(&pulsarpb.KeyValue{}, "key"),
	Value: fieldNumber(&pulsarpb.KeyValue{}, "value"),
}

// fieldNumber is the number of m's field called name; it panics if m has none.
func fieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(name)
	if fd == nil {
		panic(fmt.Sprintf("wire: %s has no field %s", m.ProtoReflect().Descriptor().FullName(), name))
	}
	return fd.Number()
}
