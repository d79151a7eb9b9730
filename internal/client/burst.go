package client

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// The connection's writer sends every frame queued since its last write in one system call
// (writev): frame heads and small payloads are copied into one buffer, payloads of more than
// inlinePayloadMax bytes are referenced where they are, so a batch entry of 100 KiB is never
// copied on its way to the socket. Before, every burst was appended into one growing buffer,
// which with the replicator's 32 MiB in flight meant re-growing (and zeroing) megabytes per
// write: a fifth of the CPU of a batched catch-up.

// inlinePayloadMax is the largest payload copied into the head buffer rather than sent from
// its own slice; copying a few KiB costs less than an extra iovec.
const inlinePayloadMax = 8 << 10

// burstRetain bounds the head buffer kept between bursts; a burst is written out early once its
// inline bytes reach burstInlineMax, its total burstMax or its parts burstPartsMax (a writev takes
// at most 1024).
const (
	burstRetain    = 1 << 20
	burstInlineMax = 256 << 10
	burstMax       = 8 << 20
	burstPartsMax  = 500
)

type burstWriter struct {
	w    io.Writer
	buf  []byte    // heads and inline payloads
	ext  []extPart // payloads sent from their own slices, in order
	iov  net.Buffers
	size int // bytes in the burst
}

// extPart is a payload sent from its own slice after buf[:at].
type extPart struct {
	at int
	b  []byte
}

func newBurstWriter(w io.Writer) *burstWriter {
	return &burstWriter{w: w, buf: make([]byte, 0, 16<<10)}
}

// add appends one frame to the burst.
func (bw *burstWriter) add(f outFrame) error {
	switch {
	case f.head != nil:
		bw.buf = append(bw.buf, f.head...)
		bw.addPayload(f.payload)
		bw.addPayload(f.tail)
	case len(f.payload) > inlinePayloadMax || len(f.tail) > 0:
		b, err := wire.AppendFrameHeader(bw.buf, f.cmd, len(f.payload)+len(f.tail))
		if err != nil {
			return err
		}
		bw.buf = b
		bw.addPayload(f.payload)
		bw.addPayload(f.tail)
	default:
		b, err := wire.AppendFrame(bw.buf, f.cmd, f.payload)
		if err != nil {
			return err
		}
		bw.buf = b
	}
	return nil
}

func (bw *burstWriter) addPayload(p []byte) {
	if len(p) <= inlinePayloadMax {
		bw.buf = append(bw.buf, p...)
		return
	}
	bw.ext = append(bw.ext, extPart{at: len(bw.buf), b: p})
	bw.size += len(p)
}

// full reports whether the burst should be written before more is added.
func (bw *burstWriter) full() bool {
	return len(bw.buf) >= burstInlineMax || len(bw.buf)+bw.size >= burstMax || len(bw.ext) >= burstPartsMax
}

// flush writes the burst: one Write when everything is in buf, else one writev (net.Buffers
// falls back to one Write per part on connections that cannot writev).
func (bw *burstWriter) flush() error {
	defer bw.reset()
	if len(bw.ext) == 0 {
		if len(bw.buf) == 0 {
			return nil
		}
		_, err := bw.w.Write(bw.buf)
		return err
	}
	iov := bw.iov[:0]
	start := 0
	for _, e := range bw.ext {
		if e.at > start {
			iov = append(iov, bw.buf[start:e.at])
		}
		iov = append(iov, e.b)
		start = e.at
	}
	if start < len(bw.buf) {
		iov = append(iov, bw.buf[start:])
	}
	bw.iov = iov
	_, err := iov.WriteTo(bw.w) // consumes its copy of the slice header, not bw.iov
	return err
}

func (bw *burstWriter) reset() {
	clear(bw.ext) // release the payloads
	bw.ext = bw.ext[:0]
	clear(bw.iov)
	bw.iov = bw.iov[:0]
	bw.size = 0
	if cap(bw.buf) > burstRetain {
		bw.buf = make([]byte, 0, 16<<10)
	} else {
		bw.buf = bw.buf[:0]
	}
}

// sendHead is the pre-encoded head of a SEND frame (sizes and BaseCommand) for a payload of a
// known size; the producer builds it once per entry and reuses it when it resends after a
// reconnection (producer id and sequence id do not change).
type sendFields struct {
	producerID, sequenceID uint64
	numMessages            int32 // when hasNumMessages
	hasNumMessages         bool
	highestSequenceID      uint64 // when hasHighestSequenceID
	hasHighestSequenceID   bool
	isChunk, marker        bool
}

// RawInfo is what the SEND of a forwarded entry says about it, from the entry's metadata.
type RawInfo struct {
	// Known: the caller filled in the fields below from the entry's metadata (a forwarder that
	// has scanned it already); otherwise the client scans the metadata itself (ScanRawInfo).
	Known                bool
	NumMessages          int32 // num_messages_in_batch, when HasNumMessages
	HasNumMessages       bool
	HighestSequenceID    uint64 // highest_sequence_id, when HasHighestSequenceID
	HasHighestSequenceID bool
	Chunked              bool // num_chunks_from_msg > 1
	Marker               bool // marker_type is present
}

// ScanRawInfo reads an encoded entry's RawInfo (Known set), as the client does for a RawMessage
// whose Info is not Known.
func ScanRawInfo(entry []byte) (RawInfo, error) {
	f, err := scanSendFields(entry)
	if err != nil {
		return RawInfo{}, err
	}
	return RawInfo{Known: true, NumMessages: f.numMessages, HasNumMessages: f.hasNumMessages,
		HighestSequenceID: f.highestSequenceID, HasHighestSequenceID: f.hasHighestSequenceID,
		Chunked: f.isChunk, Marker: f.marker}, nil
}

// sendFieldsOf is the SEND of an entry with info.
func sendFieldsOf(info RawInfo) sendFields {
	return sendFields{numMessages: info.NumMessages, hasNumMessages: info.HasNumMessages,
		highestSequenceID: info.HighestSequenceID, hasHighestSequenceID: info.HasHighestSequenceID,
		isChunk: info.Chunked, marker: info.Marker}
}

// sendHeadCap holds any head appendSendHead encodes (8 + 2 + 2 + 5 varints of at most 10 bytes and
// their tags), so one allocation suffices.
const sendHeadCap = 80

// appendSendHead appends the head of a SEND frame whose payload has payloadSize bytes. The bytes
// equal wire.AppendFrameHeader of the same command (fields in number order, as protobuf-go
// encodes them); a test checks this.
func appendSendHead(dst []byte, s sendFields, payloadSize int) ([]byte, error) {
	send, base := &wire.SendField, &wire.BaseCommandField
	var inner [64]byte
	in := inner[:0]
	in = protowire.AppendTag(in, send.ProducerID, protowire.VarintType)
	in = protowire.AppendVarint(in, s.producerID)
	in = protowire.AppendTag(in, send.SequenceID, protowire.VarintType)
	in = protowire.AppendVarint(in, s.sequenceID)
	if s.hasNumMessages {
		in = protowire.AppendTag(in, send.NumMessages, protowire.VarintType)
		in = protowire.AppendVarint(in, uint64(int64(s.numMessages)))
	}
	if s.hasHighestSequenceID {
		in = protowire.AppendTag(in, send.HighestSequenceID, protowire.VarintType)
		in = protowire.AppendVarint(in, s.highestSequenceID)
	}
	if s.isChunk {
		in = protowire.AppendTag(in, send.IsChunk, protowire.VarintType)
		in = protowire.AppendVarint(in, 1)
	}
	if s.marker {
		in = protowire.AppendTag(in, send.Marker, protowire.VarintType)
		in = protowire.AppendVarint(in, 1)
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	dst = protowire.AppendTag(dst, base.Type, protowire.VarintType)
	dst = protowire.AppendVarint(dst, uint64(pulsarpb.BaseCommand_SEND))
	dst = protowire.AppendTag(dst, base.Send, protowire.BytesType)
	dst = protowire.AppendBytes(dst, in)
	cmdSize := len(dst) - start - 8
	total := uint64(cmdSize) + 4 + uint64(payloadSize)
	if payloadSize < 0 || total > math.MaxUint32 {
		return dst[:start], fmt.Errorf("%w: payload of %d bytes", wire.ErrFrameTooLarge, payloadSize)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(total))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(cmdSize))
	return dst, nil
}

// scanSendFields reads what the SEND of an encoded entry must say about it from the entry's
// metadata, without decoding the metadata into a message: num_messages (num_messages_in_batch when
// present), highest_sequence_id, is_chunk (more than one chunk) and marker (marker_type present,
// as Pulsar's replicator flags it). Like protobuf, the last occurrence of a field wins and a field
// with an unexpected wire type is treated as unknown.
func scanSendFields(entry []byte) (sendFields, error) {
	var f sendFields
	parts, err := wire.ParseEntry(entry)
	if err != nil {
		return f, err
	}
	b := parts.Metadata
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 {
			return f, fmt.Errorf("%w: metadata: %v", wire.ErrMalformedPayload, protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber { // protobuf refuses larger field numbers
			return f, fmt.Errorf("%w: metadata: field number %d out of range", wire.ErrMalformedPayload, num)
		}
		b = b[n:]
		if code := sendScanCodes.Code(num); code != 0 && typ == protowire.VarintType {
			v, n := wire.ConsumeVarint(b)
			if n < 0 {
				return f, fmt.Errorf("%w: metadata: %v", wire.ErrMalformedPayload, protowire.ParseError(n))
			}
			b = b[n:]
			switch code {
			case scanNumMessages:
				f.numMessages, f.hasNumMessages = int32(v), true
			case scanHighestSeq:
				f.highestSequenceID, f.hasHighestSequenceID = v, true
			case scanNumChunks:
				f.isChunk = int32(v) > 1
			case scanMarkerType:
				f.marker = true
			}
			continue
		}
		n = wire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return f, fmt.Errorf("%w: metadata: %v", wire.ErrMalformedPayload, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return f, nil
}

// The MessageMetadata fields scanSendFields reads (all varints).
const (
	scanNumMessages = 1 + iota
	scanHighestSeq
	scanNumChunks
	scanMarkerType
)

var sendScanCodes = wire.NewFieldCodes(map[protowire.Number]uint8{
	wire.MetadataField.NumMessagesInBatch: scanNumMessages,
	wire.MetadataField.HighestSequenceID:  scanHighestSeq,
	wire.MetadataField.NumChunksFromMsg:   scanNumChunks,
	wire.MetadataField.MarkerType:         scanMarkerType,
})

// command is the SEND as a protobuf message (for the rare SENDs that carry more than
// appendSendHead encodes).
func (s sendFields) command() *pulsarpb.CommandSend {
	c := &pulsarpb.CommandSend{ProducerId: ptr(s.producerID), SequenceId: ptr(s.sequenceID)}
	if s.hasNumMessages {
		c.NumMessages = ptr(s.numMessages)
	}
	if s.hasHighestSequenceID {
		c.HighestSequenceId = ptr(s.highestSequenceID)
	}
	if s.isChunk {
		c.IsChunk = ptr(true)
	}
	if s.marker {
		c.Marker = ptr(true)
	}
	return c
}
