package client

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// frameReader reads frames like wire.Reader (same limits, same errors) and decodes SEND_RECEIPT
// itself: a replicator gets one receipt per forwarded entry, and decoding each into protobuf
// messages cost as much as the rest of the client's receive path. Anything that is not a plain
// receipt (other commands, unexpected fields) takes wire.DecodeFrame, so the fast path never
// accepts what the generic one would refuse.
type frameReader struct {
	br       *bufio.Reader
	maxFrame int
	chunk    int // wire.FrameReadChunk; smaller in tests, so that short inputs exercise the growth
	hdr      [8]byte
	buf      []byte // frames without payload, reused
}

// receipt is a SEND_RECEIPT's content.
type receipt struct {
	producerID, sequenceID uint64
	hasMessageID           bool
	ledgerID, entryID      uint64
}

func receiptOf(r *pulsarpb.CommandSendReceipt) receipt {
	rc := receipt{producerID: r.GetProducerId(), sequenceID: r.GetSequenceId()}
	if m := r.GetMessageId(); m != nil {
		rc.hasMessageID, rc.ledgerID, rc.entryID = true, m.GetLedgerId(), m.GetEntryId()
	}
	return rc
}

const (
	readerBufferSize = 64 << 10
	readerRetain     = 64 << 10
)

func newFrameReader(r io.Reader, maxFrame int) *frameReader {
	if maxFrame <= 0 {
		maxFrame = wire.DefaultMaxFrameSize
	}
	return &frameReader{br: bufio.NewReaderSize(r, readerBufferSize), maxFrame: maxFrame, chunk: wire.FrameReadChunk}
}

func (r *frameReader) setMaxFrameSize(n int) {
	if n > 0 {
		r.maxFrame = n
	}
}

// next reads one frame. For a SEND_RECEIPT it fills rc and returns isReceipt (f is empty);
// otherwise f is the decoded frame. Errors are wire.Reader's (wire.Recoverable tells whether the
// stream is still usable).
func (r *frameReader) next(rc *receipt) (f wire.Frame, isReceipt bool, err error) {
	hdr := r.hdr[:]
	if _, err := io.ReadFull(r.br, hdr[:4]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return f, false, fmt.Errorf("%w: in frame size", wire.ErrTruncated)
		}
		return f, false, err
	}
	total := binary.BigEndian.Uint32(hdr[:4])
	if int64(total) > int64(r.maxFrame) {
		return f, false, fmt.Errorf("%w: %d > %d", wire.ErrFrameTooLarge, total, r.maxFrame)
	}
	if total < 4 {
		return f, false, fmt.Errorf("%w: totalSize %d too small", wire.ErrMalformedFrame, total)
	}
	if _, err := io.ReadFull(r.br, hdr[4:8]); err != nil {
		return f, false, truncated(err, "in command size")
	}
	cmdSize := binary.BigEndian.Uint32(hdr[4:8])
	if cmdSize == 0 || cmdSize > total-4 {
		return f, false, fmt.Errorf("%w: commandSize %d with totalSize %d", wire.ErrMalformedFrame, cmdSize, total)
	}
	// The frame is read into memory that grows as its bytes arrive (wire.ReadAppend): total is
	// what the broker announces, bounded only by the max_message_size it announced itself.
	n := int(total - 4)
	first := 8 + min(n, r.chunk)
	var b []byte
	if n > int(cmdSize) {
		b = make([]byte, 8, first) // the payload is handed to the caller
	} else {
		if cap(r.buf) < first {
			r.buf = make([]byte, 0, first)
		}
		b = r.buf[:8]
	}
	copy(b, hdr)
	b, err = wire.ReadAppend(r.br, b, n, r.chunk)
	if n == int(cmdSize) {
		r.buf = b
	}
	if err != nil {
		return f, false, truncated(err, fmt.Sprintf("in command or payload: %d of %d bytes", len(b)-8, n))
	}
	if total-4 == cmdSize && decodeReceipt(b[8:], rc) {
		return f, true, nil
	}
	f, err = wire.DecodeFrame(b, r.maxFrame)
	if cap(r.buf) > readerRetain {
		r.buf = nil
	}
	return f, false, err
}

// bufferedReceipt decodes the next frame into rc and consumes it if it is a plain SEND_RECEIPT
// that is already buffered in full (it never reads from the connection); otherwise it reports
// false and leaves the stream as it was, for next.
func (r *frameReader) bufferedReceipt(rc *receipt) bool {
	if r.br.Buffered() < 8 {
		return false
	}
	hdr, err := r.br.Peek(8)
	if err != nil {
		return false
	}
	total := binary.BigEndian.Uint32(hdr[:4])
	cmdSize := binary.BigEndian.Uint32(hdr[4:8])
	if total < 4 || int64(total) > int64(r.maxFrame) || cmdSize == 0 || total-4 != cmdSize || int64(r.br.Buffered()) < 4+int64(total) {
		return false
	}
	b, err := r.br.Peek(4 + int(total))
	if err != nil || !decodeReceipt(b[8:], rc) {
		return false
	}
	_, _ = r.br.Discard(4 + int(total))
	return true
}

func truncated(err error, where string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s", wire.ErrTruncated, where)
	}
	return err
}

// decodeReceipt decodes cmd if it is a SEND_RECEIPT made only of the fields a broker sends
// (type, producer_id, sequence_id, message_id{ledgerId, entryId, ...}, highest_sequence_id); it
// reports false for anything else, which the generic decoder then handles.
func decodeReceipt(cmd []byte, rc *receipt) bool {
	*rc = receipt{}
	var isReceipt, hasBody bool
	for len(cmd) > 0 {
		num, typ, n := wire.ConsumeTag(cmd)
		if n < 0 || num > protowire.MaxValidNumber { // protobuf refuses larger field numbers
			return false
		}
		cmd = cmd[n:]
		switch {
		case num == wire.BaseCommandField.Type && typ == protowire.VarintType:
			v, n := wire.ConsumeVarint(cmd)
			if n < 0 {
				return false
			}
			cmd = cmd[n:]
			isReceipt = v == uint64(pulsarpb.BaseCommand_SEND_RECEIPT)
		case num == wire.BaseCommandField.SendReceipt && typ == protowire.BytesType && !hasBody:
			v, n := wire.ConsumeBytes(cmd)
			if n < 0 || !decodeReceiptBody(v, rc) {
				return false
			}
			cmd = cmd[n:]
			hasBody = true
		default:
			return false
		}
	}
	return isReceipt && hasBody
}

func decodeReceiptBody(b []byte, rc *receipt) bool {
	var hasProducer, hasSequence bool
	f := &wire.SendReceiptField
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber { // protobuf refuses larger field numbers
			return false
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && (num == f.ProducerID || num == f.SequenceID || num == f.HighestSequenceID):
			v, n := wire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case f.ProducerID:
				rc.producerID, hasProducer = v, true
			case f.SequenceID:
				rc.sequenceID, hasSequence = v, true
			}
		case num == f.MessageID && typ == protowire.BytesType && !rc.hasMessageID:
			v, n := wire.ConsumeBytes(b)
			if n < 0 || !decodeMessageID(v, rc) {
				return false
			}
			b = b[n:]
			rc.hasMessageID = true
		default:
			return false
		}
	}
	return hasProducer && hasSequence
}

// decodeMessageID reads ledgerId and entryId (both required); other scalar fields of
// MessageIdData (partition, batch index, ...) are skipped, as the receipt path ignores them.
func decodeMessageID(b []byte, rc *receipt) bool {
	var hasLedger, hasEntry bool
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber { // protobuf refuses larger field numbers
			return false
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == wire.MessageIDField.LedgerID || num == wire.MessageIDField.EntryID) {
			v, n := wire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == wire.MessageIDField.LedgerID {
				rc.ledgerID, hasLedger = v, true
			} else {
				rc.entryID, hasEntry = v, true
			}
			continue
		}
		if typ != protowire.VarintType {
			return false // a nested message (chunk id) or anything odd: the generic decoder checks it
		}
		n = wire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return hasLedger && hasEntry
}
