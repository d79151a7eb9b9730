// Package handover is the wire format of a bundle hand-over between two brokers of one cluster
// (docs/cluster.md, "Moving a bundle"): one topic's ledger per stream, sent by the bundle's owner
// to the broker taking it over as the body of one HTTP request.
//
// A stream is a magic and version, a length-prefixed JSON header (the topic, its segments and its
// cursor records) and then every entry of every segment in order, each framed as
//
//	u32 data length | i64 publish time (ms) | u32 CRC-32C of data | data
//
// The header says how many entries each segment has, so the reader knows where the stream ends;
// bytes after the last entry, a short stream, a bad checksum or a length over the bound are errors.
// The writer enforces every bound the reader does.
package handover

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Version is the stream format's version; a reader refuses any other.
const Version = 1

// MaxHeaderBytes bounds the JSON header (cursor records included).
const MaxHeaderBytes = 64 << 20

// maxSegments bounds the segments of one ledger.
const maxSegments = 1 << 20

// maxLedgerID bounds a segment's ledger id: ids start below 2^47 and grow by one per segment, so a
// larger one is damage or a lie, and would push the receiving broker's id counter out of range.
const maxLedgerID = 1 << 53

var magic = [4]byte{'M', 'H', 'O', 'V'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrMalformed: the stream breaks the format (the sender's fault, or damage on the way).
var ErrMalformed = errors.New("handover: malformed stream")

// Header describes one topic's ledger.
type Header struct {
	From     string    `json:"from"`     // the broker handing the bundle over
	Epoch    int64     `json:"epoch"`    // the bundle record's epoch of this move: a stream of an earlier move is refused
	Bundle   string    `json:"bundle"`   // tenant/namespace/0xlower_0xupper
	Topic    string    `json:"topic"`    // the full topic name
	Segments []Segment `json:"segments"` // oldest first, each with at least one entry
	Cursors  [][]byte  `json:"cursors"`  // storage cursor records, opaque here
}

// Segment is one segment of the ledger: its ledger id, the storage incarnation that id belongs to,
// and its entries, numbered from 0 (storage trims whole segments, so a stored segment always
// starts at entry 0).
type Segment struct {
	ID          int64  `json:"id"`
	Incarnation uint64 `json:"incarnation"`
	Entries     int64  `json:"entries"`
}

func (h *Header) check() error {
	if h.Topic == "" || h.Bundle == "" || h.From == "" {
		return fmt.Errorf("%w: header without topic, bundle or sender", ErrMalformed)
	}
	if len(h.Segments) > maxSegments {
		return fmt.Errorf("%w: %d segments", ErrMalformed, len(h.Segments))
	}
	for i, s := range h.Segments {
		if s.Entries <= 0 || s.ID < 0 || s.ID >= maxLedgerID || i > 0 && s.ID <= h.Segments[i-1].ID {
			return fmt.Errorf("%w: segment %d (id %d, %d entries)", ErrMalformed, i, s.ID, s.Entries)
		}
	}
	return nil
}

// Writer writes one stream.
type Writer struct {
	w        *bufio.Writer
	h        Header
	maxEntry int
	seg      int   // the segment being written
	left     int64 // entries still due in it
	frame    [16]byte
}

// NewWriter writes the header; maxEntry bounds each entry's data (the reader's bound).
func NewWriter(w io.Writer, h Header, maxEntry int) (*Writer, error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(body) > MaxHeaderBytes {
		return nil, fmt.Errorf("handover: header of %d bytes is over the %d-byte bound", len(body), MaxHeaderBytes)
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	var pre [9]byte
	copy(pre[:4], magic[:])
	pre[4] = Version
	binary.BigEndian.PutUint32(pre[5:], uint32(len(body)))
	if _, err := bw.Write(pre[:]); err != nil {
		return nil, err
	}
	if _, err := bw.Write(body); err != nil {
		return nil, err
	}
	wr := &Writer{w: bw, h: h, maxEntry: maxEntry, seg: -1}
	wr.advance()
	return wr, nil
}

// advance moves to the next segment with entries due.
func (w *Writer) advance() {
	for w.left == 0 && w.seg+1 < len(w.h.Segments) {
		w.seg++
		w.left = w.h.Segments[w.seg].Entries
	}
}

// WriteEntry writes the next entry.
func (w *Writer) WriteEntry(data []byte, publishTime int64) error {
	if w.left == 0 {
		return errors.New("handover: more entries than the header declares")
	}
	if len(data) > w.maxEntry {
		return fmt.Errorf("handover: entry of %d bytes is over the %d-byte bound", len(data), w.maxEntry)
	}
	binary.BigEndian.PutUint32(w.frame[0:], uint32(len(data)))
	binary.BigEndian.PutUint64(w.frame[4:], uint64(publishTime))
	binary.BigEndian.PutUint32(w.frame[12:], crc32.Checksum(data, castagnoli))
	if _, err := w.w.Write(w.frame[:]); err != nil {
		return err
	}
	if _, err := w.w.Write(data); err != nil {
		return err
	}
	w.left--
	w.advance()
	return nil
}

// Close checks that every declared entry was written and flushes.
func (w *Writer) Close() error {
	if w.left != 0 || w.seg+1 < len(w.h.Segments) {
		return errors.New("handover: fewer entries than the header declares")
	}
	return w.w.Flush()
}

// Reader reads one stream.
type Reader struct {
	r        *bufio.Reader
	h        Header
	maxEntry int
	seg      int
	left     int64
	next     int64 // the next entry id in the segment
	buf      []byte
}

// Entry is one entry read from a stream; Data is valid until the next call of Next.
type Entry struct {
	Segment     int   // index into Header.Segments
	LedgerID    int64 // that segment's ledger id
	EntryID     int64
	PublishTime int64
	Data        []byte
}

// NewReader reads and checks the header. maxEntry bounds each entry's data.
func NewReader(r io.Reader, maxEntry int) (*Reader, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	var pre [9]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return nil, fmt.Errorf("%w: short preamble: %v", ErrMalformed, err)
	}
	if [4]byte(pre[:4]) != magic {
		return nil, fmt.Errorf("%w: bad magic", ErrMalformed)
	}
	if pre[4] != Version {
		return nil, fmt.Errorf("%w: version %d, this broker reads %d", ErrMalformed, pre[4], Version)
	}
	n := binary.BigEndian.Uint32(pre[5:])
	if n > MaxHeaderBytes {
		return nil, fmt.Errorf("%w: header of %d bytes is over the %d-byte bound", ErrMalformed, n, MaxHeaderBytes)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return nil, fmt.Errorf("%w: short header: %v", ErrMalformed, err)
	}
	rd := &Reader{r: br, maxEntry: maxEntry, seg: -1}
	if err := json.Unmarshal(body, &rd.h); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	if err := rd.h.check(); err != nil {
		return nil, err
	}
	rd.advance()
	return rd, nil
}

// Header is the stream's header.
func (r *Reader) Header() Header { return r.h }

func (r *Reader) advance() {
	for r.left == 0 && r.seg+1 < len(r.h.Segments) {
		r.seg++
		r.left = r.h.Segments[r.seg].Entries
		r.next = 0
	}
}

// Next reads the next entry; io.EOF after the last one, when the stream also ends there.
func (r *Reader) Next() (Entry, error) {
	if r.left == 0 {
		if _, err := r.r.ReadByte(); err != io.EOF {
			return Entry{}, fmt.Errorf("%w: bytes after the last entry", ErrMalformed)
		}
		return Entry{}, io.EOF
	}
	var frame [16]byte
	if _, err := io.ReadFull(r.r, frame[:]); err != nil {
		return Entry{}, fmt.Errorf("%w: short entry frame: %v", ErrMalformed, err)
	}
	n := binary.BigEndian.Uint32(frame[0:])
	if int64(n) > int64(r.maxEntry) {
		return Entry{}, fmt.Errorf("%w: entry of %d bytes is over the %d-byte bound", ErrMalformed, n, r.maxEntry)
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	data := r.buf[:n]
	if _, err := io.ReadFull(r.r, data); err != nil {
		return Entry{}, fmt.Errorf("%w: short entry: %v", ErrMalformed, err)
	}
	if crc32.Checksum(data, castagnoli) != binary.BigEndian.Uint32(frame[12:]) {
		return Entry{}, fmt.Errorf("%w: entry checksum mismatch", ErrMalformed)
	}
	s := r.h.Segments[r.seg]
	e := Entry{Segment: r.seg, LedgerID: s.ID, EntryID: r.next, PublishTime: int64(binary.BigEndian.Uint64(frame[4:])), Data: data}
	r.next++
	r.left--
	r.advance()
	return e, nil
}
