package wire

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// The tables hold PulsarApi.proto's numbers (a few checked by hand), and a name a message lacks
// stops the program instead of leaving a zero number.
func TestFieldNumbers(t *testing.T) {
	for _, c := range []struct {
		what      string
		got, want protowire.Number
	}{
		{"BaseCommand.type", BaseCommandField.Type, 1},
		{"BaseCommand.send", BaseCommandField.Send, 6},
		{"BaseCommand.send_receipt", BaseCommandField.SendReceipt, 7},
		{"CommandSend.highest_sequence_id", SendField.HighestSequenceID, 6},
		{"CommandSend.marker", SendField.Marker, 8},
		{"CommandSendReceipt.message_id", SendReceiptField.MessageID, 3},
		{"MessageIdData.entryId", MessageIDField.EntryID, 2},
		{"MessageMetadata.replicated_from", MetadataField.ReplicatedFrom, 5},
		{"MessageMetadata.schema_version", MetadataField.SchemaVersion, 16},
		{"MessageMetadata.chunk_id", MetadataField.ChunkID, 29},
		{"KeyValue.value", KeyValueField.Value, 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}

	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "no field ProducerNmae") {
			t.Fatalf("a misspelt field: recovered %v", r)
		}
	}()
	var misspelt struct{ ProducerNmae protowire.Number }
	fillFieldNumbers(&misspelt, &pulsarpb.MessageMetadata{})
}

func TestFieldCodes(t *testing.T) {
	c := NewFieldCodes(map[protowire.Number]uint8{MetadataField.ReplicatedFrom: 1, MetadataField.ChunkID: 2})
	for num, want := range map[protowire.Number]uint8{MetadataField.ReplicatedFrom: 1, MetadataField.ChunkID: 2, MetadataField.ProducerName: 0,
		63: 0, 64: 0, protowire.MaxValidNumber: 0, 0: 0} {
		if got := c.Code(num); got != want {
			t.Errorf("Code(%d) = %d, want %d", num, got, want)
		}
	}
	for _, bad := range []map[protowire.Number]uint8{{64: 1}, {0: 1}, {5: 0}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewFieldCodes(%v) accepted", bad)
				}
			}()
			NewFieldCodes(bad)
		}()
	}
}
