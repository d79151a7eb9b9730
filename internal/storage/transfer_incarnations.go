package storage

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Incarnations of imported segments.
//
// A ledger id belongs to the incarnation of the engine that handed it out (incarnation.go). A
// segment imported from another broker's engine keeps its ledger id, and so its incarnation is
// that engine's, which this engine's incarnations file does not know. The ledger's directory
// therefore holds a file, INCARNATIONS, written with the imported segments (and never changed
// afterwards), that names the incarnation of each imported segment:
//
//	header (32 bytes, magic "MRDN-IMP", format version 1, id 0)
//	one record: per imported segment, ascending by id: ledger id u64, incarnation u64
//
// Ledger.IncarnationOf answers from it for those ids (also after a trim removed the segment) and
// from the engine's incarnations for every other id. A damaged file stops the ledger's load with
// ErrCorrupt naming it: the incarnations would otherwise silently become this engine's.

const importedIncarnationsFile = "INCARNATIONS"

var magicImported = [8]byte{'M', 'R', 'D', 'N', '-', 'I', 'M', 'P'}

// importedIncarnation is the incarnation of one imported segment.
type importedIncarnation struct {
	id          int64
	incarnation uint64
}

// importedIncarnations is a ledger's imported segments, ascending by id.
type importedIncarnations []importedIncarnation

// lookup returns the incarnation of imported segment id.
func (t importedIncarnations) lookup(id int64) (uint64, bool) {
	i := sort.Search(len(t), func(i int) bool { return t[i].id >= id })
	if i < len(t) && t[i].id == id {
		return t[i].incarnation, true
	}
	return 0, false
}

func encodeImportedIncarnations(t importedIncarnations) []byte {
	b := appendHeader(nil, magicImported, 0)
	body := make([]byte, 0, 16*len(t))
	for _, r := range t {
		body = binary.LittleEndian.AppendUint64(body, uint64(r.id))
		body = binary.LittleEndian.AppendUint64(body, r.incarnation)
	}
	return appendPlainRecord(b, body)
}

// decodeImportedIncarnations checks and decodes the content of an INCARNATIONS file.
func decodeImportedIncarnations(b []byte) (importedIncarnations, error) {
	if _, err := parseHeader(b, magicImported); err != nil {
		return nil, err
	}
	body, n, err := decodeRecord(b[headerSize:], nil)
	if err != nil {
		return nil, fmt.Errorf("%w: record: %v", ErrCorrupt, err)
	}
	if headerSize+n != len(b) {
		return nil, fmt.Errorf("%w: %d bytes after the record", ErrCorrupt, len(b)-headerSize-n)
	}
	if len(body)%16 != 0 {
		return nil, fmt.Errorf("%w: record of %d bytes", ErrCorrupt, len(body))
	}
	t := make(importedIncarnations, 0, len(body)/16)
	for p := body; len(p) > 0; p = p[16:] {
		r := importedIncarnation{id: int64(binary.LittleEndian.Uint64(p)), incarnation: binary.LittleEndian.Uint64(p[8:])}
		if r.id < 0 || (len(t) > 0 && r.id <= t[len(t)-1].id) {
			return nil, fmt.Errorf("%w: segment ids out of order", ErrCorrupt)
		}
		t = append(t, r)
	}
	return t, nil
}

// loadImportedIncarnations reads the ledger's INCARNATIONS file (load). A damaged file is
// ErrCorrupt naming it.
func (l *Ledger) loadImportedIncarnations() error {
	p := l.dirPath() + "/" + importedIncarnationsFile
	f, err := l.e.fs.OpenFile(p, vfs.ReadOnly)
	if err != nil {
		return fmt.Errorf("storage: ledger %q: read %s: %w", l.name, p, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("storage: ledger %q: read %s: %w", l.name, p, err)
	}
	if size > maxRecordBody+headerSize+recHeaderSize {
		return fmt.Errorf("%w: ledger %q: %s: %d bytes, more than one record holds", ErrCorrupt, l.name, p, size)
	}
	data := make([]byte, size)
	if n, _ := f.ReadAt(data, 0); int64(n) != size {
		return fmt.Errorf("%w: ledger %q: %s: short read", ErrCorrupt, l.name, p)
	}
	t, err := decodeImportedIncarnations(data)
	if err != nil {
		return fmt.Errorf("ledger %q: %s (the incarnations of its imported segments are unknown; restore the file): %w", l.name, p, err)
	}
	l.e.setImportedIncarnations(l.name, t)
	return nil
}

// IncarnationOf returns the incarnation ledger id id of this ledger belongs to: for a segment
// imported from another engine (ImportLedger) the one recorded with it, for any other id the
// engine's (Engine.IncarnationOf). Read reports it with every entry.
func (l *Ledger) IncarnationOf(id int64) uint64 {
	if inc, ok := l.e.importedIncarnations(l.name).lookup(id); ok {
		return inc
	}
	return l.e.IncarnationOf(id)
}

// IncarnationsBetween returns the incarnations that own this ledger's ledger ids from fromID to
// toID (inclusive) as IncarnationOf names them, in ledger id order, each run once (like
// Engine.IncarnationsBetween, with imported segments' incarnations).
func (l *Ledger) IncarnationsBetween(fromID, toID int64) []uint64 {
	t := l.e.importedIncarnations(l.name)
	if len(t) == 0 {
		return l.e.IncarnationsBetween(fromID, toID)
	}
	// IncarnationOf can change only at an imported id, right after one, or where an engine
	// incarnation starts.
	points := []int64{fromID}
	for _, r := range t {
		if r.id > fromID && r.id <= toID {
			points = append(points, r.id)
		}
		if r.id+1 > fromID && r.id+1 <= toID {
			points = append(points, r.id+1)
		}
	}
	for _, r := range l.e.inc.records {
		if r.firstLedgerID > fromID && r.firstLedgerID <= toID {
			points = append(points, r.firstLedgerID)
		}
	}
	sort.Slice(points, func(i, j int) bool { return points[i] < points[j] })
	out := []uint64{}
	for i, p := range points {
		if i > 0 && p == points[i-1] {
			continue
		}
		if inc := l.IncarnationOf(p); len(out) == 0 || out[len(out)-1] != inc {
			out = append(out, inc)
		}
	}
	return out
}
