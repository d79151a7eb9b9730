package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// BatchMessage is one message of a batch body.
type BatchMessage struct {
	// Index is the message's batch index (0-based), the index ack_set bits refer to.
	Index int
	// Metadata is the message's SingleMessageMetadata.
	Metadata *pulsarpb.SingleMessageMetadata
	// Payload is the message's bytes; it aliases the body.
	Payload []byte
}

// maxBatchPrealloc bounds the capacity allocated from a count the sender claims.
const maxBatchPrealloc = 1024

// ParseBatch splits an uncompressed batch body of count records
// [u32 size][SingleMessageMetadata][payload]. It fails on a record that does not fit, on payload
// sizes that do not fit, and on trailing bytes.
func ParseBatch(body []byte, count int) ([]BatchMessage, error) {
	if count < 0 {
		return nil, fmt.Errorf("%w: batch count %d", ErrMalformedPayload, count)
	}
	out := make([]BatchMessage, 0, min(count, maxBatchPrealloc))
	for i := 0; i < count; i++ {
		if len(body) < 4 {
			return nil, fmt.Errorf("%w: batch record %d of %d: truncated size", ErrMalformedPayload, i, count)
		}
		n := binary.BigEndian.Uint32(body)
		if int64(n) > int64(len(body)-4) {
			return nil, fmt.Errorf("%w: batch record %d: metadata size %d exceeds the %d bytes left", ErrMalformedPayload, i, n, len(body)-4)
		}
		smm := &pulsarpb.SingleMessageMetadata{}
		if err := unmarshalPartial.Unmarshal(body[4:4+n], smm); err != nil {
			return nil, fmt.Errorf("%w: batch record %d: %v", ErrMalformedPayload, i, err)
		}
		body = body[4+n:]
		ps := smm.GetPayloadSize()
		if ps < 0 || int64(ps) > int64(len(body)) {
			return nil, fmt.Errorf("%w: batch record %d: payload size %d with %d bytes left", ErrMalformedPayload, i, ps, len(body))
		}
		out = append(out, BatchMessage{Index: i, Metadata: smm, Payload: body[:ps:ps]})
		body = body[ps:]
	}
	if len(body) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after %d batch records", ErrMalformedPayload, len(body), count)
	}
	return out, nil
}

// EntryMessages decodes an entry's metadata and its messages. A non-batched entry yields one
// message with nil Metadata and the whole body. A compressed batch cannot be split here (wire
// carries no codecs) and returns ErrCompressed together with the metadata.
func EntryMessages(entry []byte) (*pulsarpb.MessageMetadata, []BatchMessage, error) {
	p, err := ParseEntry(entry)
	if err != nil {
		return nil, nil, err
	}
	md := &pulsarpb.MessageMetadata{}
	if err := unmarshalPartial.Unmarshal(p.Metadata, md); err != nil {
		return nil, nil, fmt.Errorf("%w: metadata: %v", ErrMalformedPayload, err)
	}
	if md.NumMessagesInBatch == nil {
		return md, []BatchMessage{{Index: 0, Payload: p.Body}}, nil
	}
	if md.GetCompression() != pulsarpb.CompressionType_NONE {
		return md, nil, fmt.Errorf("%w (%s)", ErrCompressed, md.GetCompression())
	}
	msgs, err := ParseBatch(p.Body, int(md.GetNumMessagesInBatch()))
	if err != nil {
		return md, nil, err
	}
	return md, msgs, nil
}

// AppendBatchRecord appends one batch record [u32 size][SingleMessageMetadata][payload]; the
// metadata's payload_size is set to len(payload).
func AppendBatchRecord(dst []byte, smm *pulsarpb.SingleMessageMetadata, payload []byte) ([]byte, error) {
	size := int32(len(payload))
	smm.PayloadSize = &size
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	var err error
	dst, err = marshalOpts.MarshalAppend(dst, smm)
	if err != nil {
		return dst[:start], fmt.Errorf("wire: encode single message metadata: %w", err)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return append(dst, payload...), nil
}

// AckSetIsAcked reports whether batch index i is acknowledged in an ack_set (little-endian 64-bit
// words, set bit = still unacknowledged). An empty set carries no batch-index information and an
// index beyond the set's words is not covered by it: both report false.
func AckSetIsAcked(ackSet []int64, i int) bool {
	if len(ackSet) == 0 || i < 0 {
		return false
	}
	w := i / 64
	if w >= len(ackSet) {
		return false
	}
	return uint64(ackSet[w])&(1<<(uint(i)%64)) == 0
}
