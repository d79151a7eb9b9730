package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// The MESSAGE command's hand-written codecs (see fastpath.go): the broker encodes one per entry it
// delivers, a consumer decodes one per entry it receives.

// MessageHead is a MESSAGE command as the broker sends it: Partition < 0 and RedeliveryCount 0 are
// left out, as unset fields.
type MessageHead struct {
	ConsumerID, LedgerID, EntryID uint64
	Partition                     int32
	RedeliveryCount               uint32
	AckSet                        []int64
}

// AppendMessageFrameHeader appends the head of a MESSAGE frame (sizes and command) whose payload
// of payloadSize bytes the caller sends after it: the same bytes as AppendFrameHeader of the
// equivalent CommandMessage, without protobuf's reflection and the eight allocations of building
// and encoding the command (BenchmarkMessageFrameHeader; one MESSAGE per entry delivered).
func AppendMessageFrameHeader(dst []byte, h *MessageHead, payloadSize int) ([]byte, error) {
	base, msg, id := &BaseCommandField, &MessageField, &MessageIDField
	msgID := protowire.SizeTag(id.LedgerID) + protowire.SizeVarint(h.LedgerID) + protowire.SizeTag(id.EntryID) + protowire.SizeVarint(h.EntryID)
	if h.Partition >= 0 {
		msgID += protowire.SizeTag(id.Partition) + protowire.SizeVarint(uint64(h.Partition))
	}
	body := protowire.SizeTag(msg.ConsumerID) + protowire.SizeVarint(h.ConsumerID) + protowire.SizeTag(msg.MessageID) + protowire.SizeBytes(msgID)
	if h.RedeliveryCount > 0 {
		body += protowire.SizeTag(msg.RedeliveryCount) + protowire.SizeVarint(uint64(h.RedeliveryCount))
	}
	for _, w := range h.AckSet {
		body += protowire.SizeTag(msg.AckSet) + protowire.SizeVarint(uint64(w))
	}
	cmd := protowire.SizeTag(base.Type) + protowire.SizeVarint(uint64(pulsarpb.BaseCommand_MESSAGE)) +
		protowire.SizeTag(base.Message) + protowire.SizeBytes(body)
	total := uint64(4+cmd) + uint64(payloadSize)
	if payloadSize < 0 || total > math.MaxUint32 {
		return dst, fmt.Errorf("%w: payload of %d bytes", ErrFrameTooLarge, payloadSize)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(total))
	dst = binary.BigEndian.AppendUint32(dst, uint32(cmd))
	dst = protowire.AppendTag(dst, base.Type, protowire.VarintType)
	dst = protowire.AppendVarint(dst, uint64(pulsarpb.BaseCommand_MESSAGE))
	dst = protowire.AppendTag(dst, base.Message, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(body))
	dst = protowire.AppendTag(dst, msg.ConsumerID, protowire.VarintType)
	dst = protowire.AppendVarint(dst, h.ConsumerID)
	dst = protowire.AppendTag(dst, msg.MessageID, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(msgID))
	dst = protowire.AppendTag(dst, id.LedgerID, protowire.VarintType)
	dst = protowire.AppendVarint(dst, h.LedgerID)
	dst = protowire.AppendTag(dst, id.EntryID, protowire.VarintType)
	dst = protowire.AppendVarint(dst, h.EntryID)
	if h.Partition >= 0 {
		dst = protowire.AppendTag(dst, id.Partition, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(h.Partition))
	}
	if h.RedeliveryCount > 0 {
		dst = protowire.AppendTag(dst, msg.RedeliveryCount, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(h.RedeliveryCount))
	}
	for _, w := range h.AckSet {
		dst = protowire.AppendTag(dst, msg.AckSet, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(w))
	}
	return dst, nil
}

// messageCommand holds a decoded MESSAGE in one allocation (its ack set, when present, is a
// second).
type messageCommand struct {
	base                                 pulsarpb.BaseCommand
	msg                                  pulsarpb.CommandMessage
	id                                   pulsarpb.MessageIdData
	typ                                  pulsarpb.BaseCommand_Type
	consumerID, ledgerID, entryID, epoch uint64
	partition, batchIndex                int32
	redelivery                           uint32
}

// decodeMessageFast decodes a BaseCommand holding only type = MESSAGE and a CommandMessage whose
// message id has at most ledgerId, entryId, partition and batch_index, and whose ack set is not
// packed (what brokers send). It reports false for anything else (other fields, a field given
// twice where protobuf would merge, a missing required field), and the caller decodes
// generically.
func decodeMessageFast(b []byte) (*pulsarpb.BaseCommand, bool) {
	body, ok := baseCommandBody(b, pulsarpb.BaseCommand_MESSAGE, BaseCommandField.Message)
	if !ok {
		return nil, false
	}
	c := &messageCommand{typ: pulsarpb.BaseCommand_MESSAGE}
	var idBytes []byte
	haveConsumer, haveID := false, false
	for len(body) > 0 {
		num, wt, n := ConsumeTag(body)
		if n < 0 {
			return nil, false
		}
		body = body[n:]
		if num == MessageField.MessageID && wt == protowire.BytesType && !haveID {
			v, n := ConsumeBytes(body)
			if n < 0 {
				return nil, false
			}
			idBytes, haveID, body = v, true, body[n:]
			continue
		}
		if wt != protowire.VarintType {
			return nil, false
		}
		v, n := ConsumeVarint(body)
		if n < 0 {
			return nil, false
		}
		body = body[n:]
		switch num {
		case MessageField.ConsumerID:
			c.consumerID, haveConsumer = v, true
			c.msg.ConsumerId = &c.consumerID
		case MessageField.RedeliveryCount:
			c.redelivery = uint32(v)
			c.msg.RedeliveryCount = &c.redelivery
		case MessageField.AckSet:
			c.msg.AckSet = append(c.msg.AckSet, int64(v))
		case MessageField.ConsumerEpoch:
			c.epoch = v
			c.msg.ConsumerEpoch = &c.epoch
		default:
			return nil, false
		}
	}
	if !haveConsumer || !haveID || !decodeMessageIDInto(idBytes, c) {
		return nil, false
	}
	c.msg.MessageId = &c.id
	c.base.Type = &c.typ
	c.base.Message = &c.msg
	return &c.base, true
}

// decodeMessageIDInto decodes a MessageIdData of ledgerId, entryId and optionally partition and
// batch_index into c.id; false for any other field or a missing required one.
func decodeMessageIDInto(b []byte, c *messageCommand) bool {
	haveLedger, haveEntry := false, false
	for len(b) > 0 {
		num, wt, n := ConsumeTag(b)
		if n < 0 || wt != protowire.VarintType {
			return false
		}
		b = b[n:]
		v, n := ConsumeVarint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case MessageIDField.LedgerID:
			c.ledgerID, haveLedger = v, true
			c.id.LedgerId = &c.ledgerID
		case MessageIDField.EntryID:
			c.entryID, haveEntry = v, true
			c.id.EntryId = &c.entryID
		case MessageIDField.Partition:
			c.partition = int32(v)
			c.id.Partition = &c.partition
		case MessageIDField.BatchIndex:
			c.batchIndex = int32(v)
			c.id.BatchIndex = &c.batchIndex
		default:
			return false
		}
	}
	return haveLedger && haveEntry
}
