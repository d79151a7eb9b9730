package wire

import (
	"fmt"
	"reflect"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Field numbers of the PulsarApi.proto messages that the hand-written codecs read and write: the
// SEND decoder, the SEND_RECEIPT and MESSAGE encoders and the metadata scans here, the client's SEND head,
// receipt decoder and metadata scan (internal/client), the replicator's metadata scan and edits
// (internal/replication). Every codec takes its numbers from these tables, read from the
// generated descriptors when the package initialises: a table's field is the message's field of
// the same name (compared without case and underscores: ProducerID is producer_id). No codec can
// disagree with the schema, and a name the message lacks stops the program at start (and every
// test). Scans that read many fields of one message classify them with a FieldCodes table built
// from these numbers. Each codec is fuzzed against the generic protobuf decoder or encoder.
var (
	// BaseCommandField: BaseCommand's fields.
	BaseCommandField = fieldNumbers[struct{ Type, Send, SendReceipt, Message protowire.Number }](&pulsarpb.BaseCommand{})
	// SendField: CommandSend's fields.
	SendField = fieldNumbers[struct {
		ProducerID, SequenceID, NumMessages, HighestSequenceID, IsChunk, Marker protowire.Number
	}](&pulsarpb.CommandSend{})
	// SendReceiptField: CommandSendReceipt's fields.
	SendReceiptField = fieldNumbers[struct{ ProducerID, SequenceID, MessageID, HighestSequenceID protowire.Number }](&pulsarpb.CommandSendReceipt{})
	// MessageField: CommandMessage's fields.
	MessageField = fieldNumbers[struct{ ConsumerID, MessageID, RedeliveryCount, AckSet, ConsumerEpoch protowire.Number }](&pulsarpb.CommandMessage{})
	// MessageIDField: MessageIdData's fields.
	MessageIDField = fieldNumbers[struct{ LedgerID, EntryID, Partition, BatchIndex protowire.Number }](&pulsarpb.MessageIdData{})
	// MetadataField: MessageMetadata's fields.
	MetadataField = fieldNumbers[struct {
		ProducerName, PublishTime, Properties, ReplicatedFrom, ReplicateTo, NumMessagesInBatch,
		EncryptionKeys, SchemaVersion, MarkerType, TxnidLeastBits, TxnidMostBits, HighestSequenceID,
		NumChunksFromMsg, ChunkID, PartitionKey, OrderingKey, DeliverAtTime, UUID protowire.Number
	}](&pulsarpb.MessageMetadata{})
	// KeyValueField: KeyValue's fields (MessageMetadata.properties' elements).
	KeyValueField = fieldNumbers[struct{ Key, Value protowire.Number }](&pulsarpb.KeyValue{})
)

// fieldNumbers returns the table T (a struct of protowire.Number fields) filled from m's
// descriptor.
func fieldNumbers[T any](m proto.Message) T {
	var table T
	fillFieldNumbers(&table, m)
	return table
}

// fillFieldNumbers sets every field of the struct *table to the number of m's field of the same
// name; it panics if m has no such field.
func fillFieldNumbers(table any, m proto.Message) {
	desc := m.ProtoReflect().Descriptor()
	numbers := map[string]protowire.Number{}
	for i := range desc.Fields().Len() {
		fd := desc.Fields().Get(i)
		numbers[fieldKey(string(fd.Name()))] = fd.Number()
	}
	v := reflect.ValueOf(table).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		num, ok := numbers[fieldKey(name)]
		if !ok {
			panic(fmt.Sprintf("wire: %s has no field %s", desc.FullName(), name))
		}
		v.Field(i).SetInt(int64(num))
	}
}

// fieldKey is a field name without case and underscores.
func fieldKey(name string) string { return strings.ToLower(strings.ReplaceAll(name, "_", "")) }

// FieldCodes tells a scan which of the fields it reads it has met: the scan numbers those fields
// with small constants of its own, and one array load per field tells which (a switch on
// constants), where comparing the field number with each number of interest costs a comparison
// per field read. Field numbers above the table's range are never of interest (the scanned
// messages' fields of interest are all below 64).
type FieldCodes [64]uint8

// NewFieldCodes returns the table giving each field number its code (codes > 0, numbers below
// 64, each once); it panics otherwise, at init.
func NewFieldCodes(codes map[protowire.Number]uint8) *FieldCodes {
	var c FieldCodes
	for num, code := range codes {
		if num <= 0 || int(num) >= len(c) || code == 0 || c[num] != 0 {
			panic(fmt.Sprintf("wire: field codes: field %d code %d", num, code))
		}
		c[num] = code
	}
	return &c
}

// Code is num's code, 0 for a field the scan does not read.
func (c *FieldCodes) Code(num protowire.Number) uint8 {
	if uint64(num) < uint64(len(c)) {
		return c[num]
	}
	return 0
}
