package storage

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/bits"
	"sort"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// ackRange is a run of individually acknowledged entries from..to (inclusive) of one ledger id.
type ackRange struct{ ledger, from, to int64 }

// batchAck is a partially acknowledged batch entry: bit i of acked set = index i acknowledged.
type batchAck struct {
	size  int
	acked []uint64
}

// cursorState is a cursor's whole persisted state, as a pure value type: the decision logic
// (merging acks, moving the mark-delete position) lives here and takes the ledger's layout as a
// function, so it is testable without any I/O.
type cursorState struct {
	name       string
	markDelete mtypes.Position
	acked      []ackRange // sorted, disjoint, non-adjacent, all after markDelete
	ackedCount int64
	batches    map[mtypes.Position]*batchAck
	props      map[string]string
}

// maxPersistedRanges bounds the individually-acked ranges persisted per cursor (as Pulsar's
// managedLedgerMaxUnackedRangesToPersist); ranges beyond it are kept in memory only, so after a
// crash those entries are redelivered — the cursor moves back, never forward.
const maxPersistedRanges = 10000

// nextFunc returns the first stored entry after p, if any is stored (up to LastConfirmed).
type nextFunc func(p mtypes.Position) (mtypes.Position, bool)

func (s *cursorState) isAcked(p mtypes.Position) bool {
	if p.Compare(s.markDelete) <= 0 {
		return true
	}
	i := s.search(p)
	return i < len(s.acked) && s.acked[i].ledger == p.LedgerID && s.acked[i].from <= p.EntryID && p.EntryID <= s.acked[i].to
}

// search returns the index of the first range whose end is >= p.
func (s *cursorState) search(p mtypes.Position) int {
	return sort.Search(len(s.acked), func(i int) bool {
		r := s.acked[i]
		return mtypes.Position{LedgerID: r.ledger, EntryID: r.to}.Compare(p) >= 0
	})
}

// ack records p as individually acknowledged; p must be a stored position after markDelete.
func (s *cursorState) ack(p mtypes.Position) {
	if s.isAcked(p) {
		return
	}
	delete(s.batches, p)
	i := s.search(p)
	s.ackedCount++
	mergePrev := i > 0 && s.acked[i-1].ledger == p.LedgerID && s.acked[i-1].to+1 == p.EntryID
	mergeNext := i < len(s.acked) && s.acked[i].ledger == p.LedgerID && s.acked[i].from-1 == p.EntryID
	switch {
	case mergePrev && mergeNext:
		s.acked[i-1].to = s.acked[i].to
		s.acked = append(s.acked[:i], s.acked[i+1:]...)
	case mergePrev:
		s.acked[i-1].to = p.EntryID
	case mergeNext:
		s.acked[i].from = p.EntryID
	default:
		s.acked = append(s.acked, ackRange{})
		copy(s.acked[i+1:], s.acked[i:])
		s.acked[i] = ackRange{p.LedgerID, p.EntryID, p.EntryID}
	}
}

// setMarkDelete moves markDelete forward to p (p > markDelete), dropping acks it covers.
func (s *cursorState) setMarkDelete(p mtypes.Position) {
	s.markDelete = p
	i := 0
	for ; i < len(s.acked); i++ {
		r := &s.acked[i]
		if (mtypes.Position{LedgerID: r.ledger, EntryID: r.to}).Compare(p) <= 0 {
			s.ackedCount -= r.to - r.from + 1
			continue
		}
		if r.ledger == p.LedgerID && r.from <= p.EntryID {
			s.ackedCount -= p.EntryID - r.from + 1
			r.from = p.EntryID + 1
		}
		break
	}
	s.acked = append(s.acked[:0], s.acked[i:]...)
	for bp := range s.batches {
		if bp.Compare(p) <= 0 {
			delete(s.batches, bp)
		}
	}
}

// normalize moves markDelete over a contiguous prefix of acknowledged entries.
func (s *cursorState) normalize(next nextFunc) {
	for len(s.acked) > 0 {
		n, ok := next(s.markDelete)
		if !ok {
			return
		}
		r := s.acked[0]
		if r.ledger != n.LedgerID || r.from != n.EntryID {
			return
		}
		s.setMarkDelete(mtypes.Position{LedgerID: r.ledger, EntryID: r.to})
	}
}

// reset moves the cursor so that p is the next entry; clears acks.
func (s *cursorState) reset(markDelete mtypes.Position) {
	s.markDelete = markDelete
	s.acked = nil
	s.ackedCount = 0
	s.batches = nil
}

// ackBatch acknowledges some indexes of the batch at p; it reports true once all are acknowledged.
// A size the reader would refuse (checkAckBatchSize) leaves the state as it was.
func (s *cursorState) ackBatch(p mtypes.Position, size int, indexes []int) (bool, error) {
	if err := checkAckBatchSize(size); err != nil {
		return false, err
	}
	if size == 0 {
		return true, nil
	}
	b := s.batches[p]
	if b == nil || b.size != size {
		b = &batchAck{size: size, acked: make([]uint64, (size+63)/64)}
	}
	for _, i := range indexes {
		if i >= 0 && i < size {
			b.acked[i/64] |= 1 << (i % 64)
		}
	}
	n := 0
	for _, w := range b.acked {
		n += bits.OnesCount64(w)
	}
	if n >= size {
		delete(s.batches, p)
		return true, nil
	}
	if s.batches == nil {
		s.batches = map[mtypes.Position]*batchAck{}
	}
	s.batches[p] = b
	return false, nil
}

// setProperties replaces the properties (a copy of props); properties the reader would refuse
// (checkProperties) leave the state as it was.
func (s *cursorState) setProperties(props map[string]string) error {
	if err := checkProperties(props); err != nil {
		return err
	}
	s.props = maps.Clone(props)
	return nil
}

// Cursor state encoding (version 1), all integers as Go varints (zig-zag for signed):
//
//	version u8 (=1)
//	nameLen uvarint, name
//	markDelete.ledger varint, markDelete.entry varint
//	nRanges uvarint, then per range: ledger varint, from varint, (to-from) uvarint
//	nBatches uvarint, then per batch: ledger varint, entry varint, size uvarint, nWords uvarint, words u64 LE
//	nProps uvarint, then per property: keyLen uvarint, key, valueLen uvarint, value
//
// Only the first maxPersistedRanges ranges and the first batches within maxPersistedBatches and
// maxPersistedBatchWords are written (cursorlimits.go): the rest is redelivered after a restart.
func encodeCursorState(b []byte, s *cursorState) []byte {
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(s.name)))
	b = append(b, s.name...)
	b = binary.AppendVarint(b, s.markDelete.LedgerID)
	b = binary.AppendVarint(b, s.markDelete.EntryID)
	n := min(len(s.acked), maxPersistedRanges)
	b = binary.AppendUvarint(b, uint64(n))
	for _, r := range s.acked[:n] {
		b = binary.AppendVarint(b, r.ledger)
		b = binary.AppendVarint(b, r.from)
		b = binary.AppendUvarint(b, uint64(r.to-r.from))
	}
	keys := make([]mtypes.Position, 0, len(s.batches))
	for k := range s.batches {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Compare(keys[j]) < 0 })
	words := make([]int, len(keys))
	for i, k := range keys {
		words[i] = len(s.batches[k].acked)
	}
	keys = keys[:persistedBatches(words)]
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		v := s.batches[k]
		b = binary.AppendVarint(b, k.LedgerID)
		b = binary.AppendVarint(b, k.EntryID)
		b = binary.AppendUvarint(b, uint64(v.size))
		b = binary.AppendUvarint(b, uint64(len(v.acked)))
		for _, w := range v.acked {
			b = binary.LittleEndian.AppendUint64(b, w)
		}
	}
	pk := make([]string, 0, len(s.props))
	for k := range s.props {
		pk = append(pk, k)
	}
	sort.Strings(pk)
	b = binary.AppendUvarint(b, uint64(len(pk)))
	for _, k := range pk {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(s.props[k])))
		b = append(b, s.props[k]...)
	}
	return b
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: cursor state: bad %s", ErrCorrupt, what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length and checks that at least min bytes per item remain.
func (d *decoder) count(what string, minBytes int) int {
	v := d.uvarint(what)
	if d.err == nil && v > uint64(len(d.b)/minBytes) {
		d.fail(what)
		return 0
	}
	return int(v)
}

func (d *decoder) bytes(what string) []byte {
	n := d.count(what, 1)
	if d.err != nil {
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func decodeCursorState(b []byte) (*cursorState, error) {
	if len(b) == 0 || b[0] != 1 {
		return nil, fmt.Errorf("%w: cursor state: unknown version", ErrCorrupt)
	}
	d := &decoder{b: b[1:]}
	s := &cursorState{}
	s.name = string(d.bytes("name"))
	s.markDelete = mtypes.Position{LedgerID: d.varint("mark-delete ledger"), EntryID: d.varint("mark-delete entry")}
	n := d.count("range count", 3)
	if n > 0 {
		s.acked = make([]ackRange, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		r := ackRange{ledger: d.varint("range ledger"), from: d.varint("range start")}
		l := d.uvarint("range length")
		if l > 1<<62 || r.from < 0 || r.from > 1<<62 {
			d.fail("range length")
			break
		}
		r.to = r.from + int64(l)
		if p := len(s.acked); (p > 0 && (mtypes.Position{LedgerID: s.acked[p-1].ledger, EntryID: s.acked[p-1].to + 1}).Compare(mtypes.Position{LedgerID: r.ledger, EntryID: r.from}) >= 0) ||
			(mtypes.Position{LedgerID: r.ledger, EntryID: r.from}).Compare(s.markDelete) <= 0 {
			d.fail("range order")
			break
		}
		s.acked = append(s.acked, r)
		s.ackedCount += r.to - r.from + 1
	}
	nb := d.count("batch count", 4)
	for i := 0; i < nb && d.err == nil; i++ {
		p := mtypes.Position{LedgerID: d.varint("batch ledger"), EntryID: d.varint("batch entry")}
		size := d.uvarint("batch size")
		nw := d.count("batch words", 8)
		if d.err != nil {
			break
		}
		if size == 0 || size > 1<<20 || uint64(nw) != (size+63)/64 {
			d.fail("batch size")
			break
		}
		ba := &batchAck{size: int(size), acked: make([]uint64, nw)}
		for j := range ba.acked {
			ba.acked[j] = binary.LittleEndian.Uint64(d.b)
			d.b = d.b[8:]
		}
		if s.batches == nil {
			s.batches = map[mtypes.Position]*batchAck{}
		}
		s.batches[p] = ba
	}
	np := d.count("property count", 2)
	for i := 0; i < np && d.err == nil; i++ {
		k := d.bytes("property key")
		v := d.bytes("property value")
		if d.err != nil {
			break
		}
		if s.props == nil {
			s.props = map[string]string{}
		}
		s.props[string(k)] = string(v)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}
