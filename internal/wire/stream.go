package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Reader reads frames from a byte stream. It is not safe for concurrent use; one goroutine (the
// connection's reader) owns it.
type Reader struct {
	br       *bufio.Reader
	maxFrame int
	chunk    int // FrameReadChunk; smaller in tests, so that short inputs exercise the growth
	hdr      [8]byte
	scratch  []byte // command bytes of simple frames, reused
	// reuse: frames with a payload are read into buf, reused by the next ReadFrame.
	reuse bool
	buf   []byte
	send  *sendCommand // with reuse: the decoded SEND, reused by the next ReadFrame
}

// payloadRetain bounds the reused payload buffer kept between frames.
const payloadRetain = 2 << 20

// ReusePayloads makes ReadFrame read frames with a payload into one buffer that the next
// ReadFrame reuses (or, for a frame already wholly buffered, hand out the stream buffer itself),
// so a frame's Payload is valid only until then; so is the decoded command of a
// SEND (the commonest frame with a payload), which is decoded into one reused message. For readers
// that handle a SEND before reading on and copy what they keep: the broker's SEND path (storage
// copies each entry before Publish returns) saves two allocations per SEND, one of them the
// ~500-byte BaseCommand.
func (r *Reader) ReusePayloads(on bool) {
	r.reuse = on
	r.buf = nil
	r.send = nil
	if on {
		r.send = &sendCommand{}
	}
}

// readerBufferSize is the bufio buffer: large enough that a stream of small frames costs few reads.
const readerBufferSize = 64 * 1024

// scratchRetain bounds the reused command buffer so that one large command does not pin memory.
const scratchRetain = 64 * 1024

// NewReader returns a Reader refusing frames whose totalSize exceeds maxFrameSize (use
// MaxFrameSize(maxMessageSize)); maxFrameSize <= 0 means DefaultMaxFrameSize.
func NewReader(r io.Reader, maxFrameSize int) *Reader {
	if maxFrameSize <= 0 {
		maxFrameSize = DefaultMaxFrameSize
	}
	return &Reader{br: bufio.NewReaderSize(r, readerBufferSize), maxFrame: maxFrameSize, chunk: FrameReadChunk}
}

// FrameReadChunk is the memory a reader sets aside for a frame when its header arrives; a larger
// frame gets more as its bytes arrive (ReadAppend). The limit is the largest frame a peer may send,
// not what it does send: allocating what a header announces would let a peer that sends 8 bytes
// make the reader allocate up to the limit (5 MiB by default on the broker, 2 GiB on a client
// whose broker announces the largest max_message_size).
const FrameReadChunk = 64 << 10

// ReadAppend appends n bytes read from r to buf and returns the extended buffer. The memory follows
// the bytes that arrive: buf is read into as far as it has room, and whenever that room is less
// than chunk (and than what is still to come), buf grows to twice its capacity, or by chunk if
// that is more, never beyond the n bytes. Reading n bytes so allocates at most about three times
// n, and a peer that announces n bytes and sends fewer costs at most about four times what it
// sent, plus chunk, however large n. With room for all n bytes, buf is read into as it is. On
// error the result holds the bytes that did arrive, and the error is io.ReadFull's.
func ReadAppend(r io.Reader, buf []byte, n, chunk int) ([]byte, error) {
	need := len(buf) + n
	chunk = max(chunk, 1)
	for len(buf) < need {
		if cap(buf)-len(buf) < min(need-len(buf), chunk) {
			grown := make([]byte, len(buf), min(need, max(2*cap(buf), len(buf)+chunk)))
			copy(grown, buf)
			buf = grown
		}
		m, err := io.ReadFull(r, buf[len(buf):min(need, cap(buf))])
		buf = buf[:len(buf)+m]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// Buffered is the number of bytes read from the stream but not yet returned in frames: a frame
// whose WireSize exceeds what was buffered before ReadFrame needed a read from the stream.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// NextFrameBuffered reports whether the next frame is wholly in the read buffer, so that
// ReadFrame returns it without reading from the stream. Such a ReadFrame neither refills nor moves
// the buffer, so with ReusePayloads the payloads of the frames read before it stay valid (the
// decoded SEND command is still reused): a reader may collect a run of buffered SENDs and hand them
// on together, as long as it asks before each ReadFrame.
func (r *Reader) NextFrameBuffered() bool {
	n := r.br.Buffered()
	if n < 4 {
		return false
	}
	hdr, err := r.br.Peek(4)
	if err != nil {
		return false
	}
	return 4+uint64(binary.BigEndian.Uint32(hdr)) <= uint64(n)
}

// SetMaxFrameSize changes the limit (a client learns the broker's max message size from CONNECTED).
func (r *Reader) SetMaxFrameSize(n int) {
	if n > 0 {
		r.maxFrame = n
	}
}

// ReadFrame reads the next frame. It returns io.EOF only at a clean frame boundary. The limit is
// checked before anything is allocated for the frame, and a frame larger than FrameReadChunk is read
// into memory that grows as its bytes arrive (ReadAppend). See the package documentation for which
// errors leave the stream usable.
func (r *Reader) ReadFrame() (Frame, error) {
	if _, err := io.ReadFull(r.br, r.hdr[:4]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: in frame size", ErrTruncated)
		}
		return Frame{}, err // io.EOF at a boundary, or the transport's error
	}
	total := binary.BigEndian.Uint32(r.hdr[:4])
	if int64(total) > int64(r.maxFrame) {
		return Frame{}, fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, total, r.maxFrame)
	}
	if total < 4 {
		return Frame{}, fmt.Errorf("%w: totalSize %d too small", ErrMalformedFrame, total)
	}
	if _, err := io.ReadFull(r.br, r.hdr[4:8]); err != nil {
		return Frame{}, truncated(err, "in command size")
	}
	cmdSize := binary.BigEndian.Uint32(r.hdr[4:8])
	if cmdSize == 0 || cmdSize > total-4 {
		return Frame{}, fmt.Errorf("%w: commandSize %d with totalSize %d", ErrMalformedFrame, cmdSize, total)
	}
	f := Frame{WireSize: 4 + int(total)}
	var cmdBytes []byte
	if n := int(total - 4); n > int(cmdSize) {
		// One buffer holds command and payload; the payload slice is handed to the caller.
		var buf []byte
		if r.reuse && r.br.Buffered() >= n {
			// Already buffered: hand out the bufio buffer itself (valid until the next
			// ReadFrame, as the reused buffer is), saving the copy of the payload.
			buf, _ = r.br.Peek(n)
			_, _ = r.br.Discard(n)
		} else {
			var dst []byte
			if r.reuse {
				// A buffer grown past payloadRetain by one large frame is not kept for the
				// next; a new one of a chunk serves every frame up to that size.
				if dst = r.buf[:0]; cap(dst) > payloadRetain || cap(dst) < min(n, r.chunk) {
					dst = make([]byte, 0, r.chunk)
				}
			}
			var err error
			buf, err = ReadAppend(r.br, dst, n, r.chunk)
			if r.reuse {
				r.buf = buf
			}
			if err != nil {
				return Frame{}, truncated(err, fmt.Sprintf("in command or payload: %d of %d bytes", len(buf), n))
			}
		}
		buf = buf[:n:n] // appending to the payload must not write over the next frames
		cmdBytes, f.Payload = buf[:cmdSize], buf[cmdSize:]
	} else {
		var err error
		r.scratch, err = ReadAppend(r.br, r.scratch[:0], int(cmdSize), r.chunk)
		if err != nil {
			return Frame{}, truncated(err, fmt.Sprintf("in command: %d of %d bytes", len(r.scratch), cmdSize))
		}
		cmdBytes = r.scratch
	}
	var send *sendCommand
	if f.Payload != nil {
		send = r.send // nil unless payloads (and with them SEND commands) are reused
	}
	cmd, err := decodeCommandInto(cmdBytes, send)
	if cap(r.scratch) > scratchRetain {
		r.scratch = nil
	}
	f.Cmd = cmd
	return f, err
}

func truncated(err error, where string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s", ErrTruncated, where)
	}
	return err
}

// Writer collects frames in a buffer and writes them with one Write call per Flush, so a burst of
// receipts or messages costs one system call. It is not safe for concurrent use; the connection's
// writer goroutine owns it (typically: drain the outbound queue into the Writer, then Flush).
type Writer struct {
	w   io.Writer
	buf []byte
}

// writerRetain bounds the buffer kept between flushes.
const writerRetain = 1 << 20

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, buf: make([]byte, 0, 16*1024)} }

// WriteCommand buffers a simple frame.
func (w *Writer) WriteCommand(cmd *pulsarpb.BaseCommand) error {
	buf, err := AppendFrame(w.buf, cmd)
	w.buf = buf
	return err
}

// WritePayloadCommand buffers a frame with a payload made of the given parts.
func (w *Writer) WritePayloadCommand(cmd *pulsarpb.BaseCommand, payload ...[]byte) error {
	buf, err := AppendFrame(w.buf, cmd, payload...)
	w.buf = buf
	return err
}

// Buffered is the number of bytes waiting for Flush.
func (w *Writer) Buffered() int { return len(w.buf) }

// Flush writes everything buffered in one Write. On error the buffer is dropped: the stream is
// broken anyway.
func (w *Writer) Flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.w.Write(w.buf)
	if cap(w.buf) > writerRetain {
		w.buf = make([]byte, 0, 16*1024)
	} else {
		w.buf = w.buf[:0]
	}
	if err != nil {
		return fmt.Errorf("wire: write: %w", err)
	}
	return nil
}
