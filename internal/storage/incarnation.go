package storage

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Incarnations.
//
// Ledger ids are unique within one history of a data directory, but not across histories: a data
// directory restored from an old copy (or rebuilt) hands out again ledger ids that the lost
// history had used, and whose entries other clusters may have received. Every Open therefore
// starts a new incarnation: a random non-zero 64-bit number, recorded durably in the incarnations
// file together with the first ledger id that belongs to it (the id limit after recovery), before
// any ledger id of this open is handed out. Ledger ids from an incarnation's first id up to the
// next incarnation's first id belong to it. Every ledger load starts a new segment id for its
// appends, so no segment is appended to across opens: (incarnation, ledger id, entry id) names one
// entry, also after a restore (the restored copy's next open records a new incarnation).
//
// The incarnations file is append-only: header, then one record per open (incarnation u64, first
// ledger id u64). The state file counts the records that are durable; a record missing from that
// count is damage (ErrCorrupt naming the file), a bad record after them is the torn tail of an
// open that crashed while recording its incarnation (cut).

const (
	incarnationsFile = "incarnations"
	// incarnationRecordSize is one record in the file: record header and a 16-byte body.
	incarnationRecordSize = recHeaderSize + 16
)

// incarnationRecord says that ledger ids from firstLedgerID on belong to incarnation.
type incarnationRecord struct {
	incarnation   uint64
	firstLedgerID int64
}

// incarnationTable is the data directory's incarnations, fixed once Open returns.
type incarnationTable struct {
	current uint64
	// records: ascending firstLedgerID; of records with the same first id (an open that handed
	// out no id) the later one owns the ids.
	records []incarnationRecord
	// durable: records of the incarnations file known durable (written to the state file).
	durable uint64
}

// Incarnation returns this open's incarnation: a random non-zero number, new on every Open,
// that every ledger id handed out by this open belongs to.
func (e *Engine) Incarnation() uint64 { return e.inc.current }

// IncarnationOf returns the incarnation ledger id id belongs to: the open that handed it out.
// It is 0 for ids handed out before this data directory recorded incarnations.
func (e *Engine) IncarnationOf(id int64) uint64 {
	r := e.inc.records
	i := sort.Search(len(r), func(i int) bool { return r[i].firstLedgerID > id })
	if i == 0 {
		return 0
	}
	return r[i-1].incarnation
}

// IncarnationsBetween returns the incarnations that own ledger ids from fromID to toID (inclusive),
// in ledger id order, each once.
func (e *Engine) IncarnationsBetween(fromID, toID int64) []uint64 {
	out := []uint64{e.IncarnationOf(fromID)}
	for _, r := range e.inc.records {
		if r.firstLedgerID > fromID && r.firstLedgerID <= toID {
			if inc := e.IncarnationOf(r.firstLedgerID); inc != out[len(out)-1] {
				out = append(out, inc)
			}
		}
	}
	return out
}

// startIncarnation reads the incarnations file (durable: the records the state file counts),
// records a new incarnation whose first ledger id is the next id to be handed out, fsyncs it and
// writes the state file with the new count. Recovery calls it after the journal replay and before
// any ledger id is handed out.
func (e *Engine) startIncarnation(durable uint64) error {
	p := e.dir + "/" + incarnationsFile
	recs, end, created, err := e.readIncarnations(p, durable)
	if err != nil {
		return err
	}
	if n := len(recs); n > 0 && recs[n-1].firstLedgerID > e.nextLedgerID {
		// The state file is older than the incarnations file (restored separately): ids below
		// the last incarnation's first id may have been handed out.
		e.log.Warn("ledger id limit below the last incarnation's first id; moved up", "limit", e.nextLedgerID, "firstID", recs[n-1].firstLedgerID)
		e.nextLedgerID = recs[n-1].firstLedgerID
		e.ledgerIDLimit = e.nextLedgerID
	}
	inc, err := newIncarnation(recs)
	if err != nil {
		return err
	}
	rec := incarnationRecord{incarnation: inc, firstLedgerID: e.nextLedgerID}
	flags := vfs.ReadWrite | vfs.Create
	var b []byte
	if created {
		flags |= vfs.Trunc // new, or a torn header whose file is written anew
		b = appendHeader(nil, magicIncarn, 0)
	}
	f, err := e.fs.OpenFile(p, flags)
	if err != nil {
		return fmt.Errorf("storage: record incarnation: %w", err)
	}
	b = appendPlainRecord(b, rec.encode())
	_, err = f.WriteAt(b, end)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && created {
		err = e.fs.SyncDir(e.dir)
	}
	if err != nil {
		return fmt.Errorf("storage: record incarnation in %s: %w", p, err)
	}
	e.inc = incarnationTable{current: inc, records: append(recs, rec), durable: uint64(len(recs) + 1)}
	e.log.Info("storage incarnation", "incarnation", fmt.Sprintf("%016x", inc), "firstLedgerID", rec.firstLedgerID, "previous", len(recs))
	return e.writeState()
}

func (r incarnationRecord) encode() []byte {
	b := binary.LittleEndian.AppendUint64(nil, r.incarnation)
	return binary.LittleEndian.AppendUint64(b, uint64(r.firstLedgerID))
}

// newIncarnation draws a random non-zero incarnation unlike any earlier one.
func newIncarnation(earlier []incarnationRecord) (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("storage: new incarnation: %w", err)
		}
		v := binary.LittleEndian.Uint64(b[:])
		used := v == 0
		for _, r := range earlier {
			used = used || r.incarnation == v
		}
		if !used {
			return v, nil
		}
	}
}

// readIncarnations reads the incarnations file at p. It returns its records, the offset the next
// record goes to, and whether the file (or its header) must be written anew. Damage is
// ErrCorrupt naming the file: fewer valid records than durable, a bad record followed by a valid
// one, records out of order. A bad tail after durable valid records is cut (an open that crashed
// while recording its incarnation, before any of its ledger ids was handed out).
func (e *Engine) readIncarnations(p string, durable uint64) ([]incarnationRecord, int64, bool, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s (the ledger ids of the incarnations recorded there cannot be told apart any more; restore the file or run meridian repair)",
			ErrCorrupt, p, fmt.Sprintf(format, args...))
	}
	f, err := e.fs.OpenFile(p, vfs.ReadOnly)
	if vfs.IsNotExist(err) {
		if durable > 0 {
			return nil, 0, false, corrupt("missing, but %s counts %d incarnations in it", stateFile, durable)
		}
		return nil, 0, true, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("storage: read %s: %w", p, err)
	}
	size, err := f.Size()
	if err != nil {
		_ = f.Close()
		return nil, 0, false, fmt.Errorf("storage: read %s: %w", p, err)
	}
	if size > 64<<20 {
		_ = f.Close()
		return nil, 0, false, corrupt("%d bytes, more than any number of opens writes", size)
	}
	data := make([]byte, size)
	n, _ := f.ReadAt(data, 0)
	_ = f.Close()
	data = data[:n]
	if _, herr := parseHeader(data, magicIncarn); herr != nil {
		if durable == 0 && !incarnationRecordIn(data, 0) && (len(data) < headerSize || allZero(data[:headerSize])) {
			// Its creation was interrupted before anything in it became durable.
			e.log.Warn("incarnations file with a torn header; written anew", "file", p)
			return nil, 0, true, nil
		}
		return nil, 0, false, corrupt("header: %v", herr)
	}
	var recs []incarnationRecord
	off := headerSize
	for off < len(data) {
		body, sz, err := decodeRecord(data[off:], nil)
		if err != nil || len(body) != 16 {
			break
		}
		r := incarnationRecord{incarnation: binary.LittleEndian.Uint64(body), firstLedgerID: int64(binary.LittleEndian.Uint64(body[8:]))}
		if r.incarnation == 0 || r.firstLedgerID < 1 || (len(recs) > 0 && r.firstLedgerID < recs[len(recs)-1].firstLedgerID) {
			return nil, 0, false, corrupt("record %d (incarnation %016x, first ledger id %d) out of order", len(recs), r.incarnation, r.firstLedgerID)
		}
		recs = append(recs, r)
		off += sz
	}
	switch {
	case uint64(len(recs)) < durable:
		return nil, 0, false, corrupt("holds %d valid incarnation records, %s counts %d (a bad record at offset %d)", len(recs), stateFile, durable, off)
	case off < len(data) && incarnationRecordIn(data, off+1):
		return nil, 0, false, corrupt("bad record at offset %d with valid records after it", off)
	case off < len(data):
		e.log.Warn("incarnations file ends with a torn record (an open that crashed while recording its incarnation); cut", "file", p, "offset", off, "size", len(data))
		if err := truncateFile(e.fs, p, int64(off)); err != nil {
			return nil, 0, false, err
		}
	}
	return recs, int64(off), false, nil
}

// incarnationRecordIn reports whether a valid incarnation record starts at any offset from from on.
func incarnationRecordIn(data []byte, from int) bool {
	for i := max(from, 0); i+incarnationRecordSize <= len(data); i++ {
		if body, _, err := decodeRecord(data[i:], nil); err == nil && len(body) == 16 {
			return true
		}
	}
	return false
}

// WroteIncarnation reports whether incarnation inc is one of this data directory's own opens (0:
// ids from before incarnations were recorded, also this directory's): a segment of that
// incarnation was written here, not copied from another engine.
func (e *Engine) WroteIncarnation(inc uint64) bool {
	if inc == 0 {
		return true
	}
	for _, r := range e.inc.records {
		if r.incarnation == inc {
			return true
		}
	}
	return false
}
