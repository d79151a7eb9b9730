package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Ledger import: a ledger copied from another engine (Ledger.Export there) with the same
// positions, so that message ids, acknowledgements and every cursor stay valid.
//
// The import writes the ledger's files (segments in their usual record format with index files,
// cursors.log, NAME for a hashed directory name, INCARNATIONS) into a staging directory,
// ledgers/.import-<incarnation>-<n>, which no ledger's directory name can be. Commit fsyncs them
// and the staging directory, raises the engine's ledger id counter above the imported ids
// (recorded in the state file), retires journal files that may still hold records of an earlier
// ledger of that name (transfer_state.go), then renames the staging directory to the ledger's
// directory and fsyncs ledgers/. That rename, in one directory, is the commit: a crash before it
// is durable leaves only the staging directory, which the next Open removes; a crash after it
// finds the complete ledger. The journal holds nothing of the import, so replay neither applies
// anything to it nor can find a gap in it. Until Commit returns, OpenLedger of that name fails
// with ErrImporting. An import started with ImportLedgerReplacing replaces an existing ledger of
// that name instead (transfer_replace.go).

// Errors of imports.
var (
	// ErrLedgerExists: ImportLedger of a name whose ledger exists (delete it first), or Commit of
	// an ImportLedgerReplacing while that ledger is open (close it first).
	ErrLedgerExists = errors.New("storage: ledger exists")
	// ErrImporting: the ledger is being imported (OpenLedger, a second ImportLedger).
	ErrImporting = errors.New("storage: ledger being imported")
)

// maxImportCursors bounds the cursor records of one import (the cursor log is read whole when the
// ledger loads).
const maxImportCursors = 100_000

// importBufBytes is how much of a segment the importer buffers before it writes.
const importBufBytes = 1 << 20

// LedgerImport writes one imported ledger; see Engine.ImportLedger. Its methods are safe for
// concurrent use but the entries must come in order: it is meant for one goroutine.
type LedgerImport struct {
	e       *Engine
	name    string
	staging string
	// replace: the import may replace a ledger of that name (ImportLedgerReplacing).
	replace bool

	mu        sync.Mutex
	finished  bool // committed or aborted
	err       error
	cur       *segment // the segment being written (nil before the first StartSegment)
	curInc    uint64
	file      vfs.File // cur's file (created with its first entry)
	buf       []byte   // cur's bytes not yet written to file
	flushed   int64    // cur's bytes in file
	lastID    int64    // the last segment started (-1: none)
	maxID     int64    // the greatest segment id started
	incs      importedIncarnations
	entries   []int64 // entries of each segment in incs
	cursors   [][]byte
	hasCursor bool
	// keepReserved: a failed commit could not put the replaced ledger back (transfer_replace.go)
	// or make the take-back of its own directory durable; the name stays reserved until Open
	// resolves the directories.
	keepReserved bool
}

// ImportLedger starts importing the ledger called name: StartSegment and Append its entries,
// SetCursors, then Commit (or Abort). After Commit, OpenLedger loads the ledger with the same
// segment ids, entries, publish times and cursor states as the exported one, and its next segment
// id (every load starts one) is above every imported id. It fails with ErrLedgerExists if a
// ledger of that name exists (open or on disk; the caller deletes a stale one first with
// DeleteLedger), with ErrImporting if it is being imported already.
func (e *Engine) ImportLedger(ctx context.Context, name string) (*LedgerImport, error) {
	return e.beginImport(ctx, name, false)
}

// beginImport reserves name and creates the staging directory. Without replace, an open ledger
// of that name or its directory fails it with ErrLedgerExists; with replace, both may exist (the
// ledger must be closed by Commit).
func (e *Engine) beginImport(ctx context.Context, name string, replace bool) (*LedgerImport, error) {
	if err := checkLedgerName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.table.mu.Lock()
	switch {
	case e.table.closed:
		e.table.mu.Unlock()
		return nil, ErrClosed
	case e.table.ledgers[name] != nil && !replace:
		e.table.mu.Unlock()
		return nil, fmt.Errorf("%w: %q is open", ErrLedgerExists, name)
	}
	if _, busy := e.table.importing[name]; busy {
		e.table.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrImporting, name)
	}
	if e.table.importing == nil {
		e.table.importing = map[string]struct{}{}
	}
	e.table.importing[name] = struct{}{}
	e.table.mu.Unlock()
	im := &LedgerImport{e: e, name: name, replace: replace, lastID: -1, maxID: -1,
		staging: fmt.Sprintf("%s/%s%016x-%d", e.ledgersDir, stagingPrefix, e.inc.current, e.imports.staged.Add(1))}
	if err := im.start(); err != nil {
		im.release()
		return nil, err
	}
	return im, nil
}

func (im *LedgerImport) start() error {
	e := im.e
	dir := e.ledgerDir(im.name)
	if _, err := e.fs.Stat(dir); err == nil {
		if !im.replace {
			return fmt.Errorf("%w: %q has a directory (%s)", ErrLedgerExists, im.name, dir)
		}
	} else if !vfs.IsNotExist(err) {
		return fmt.Errorf("storage: import %q: stat %s: %w", im.name, dir, err)
	}
	if err := e.fs.MkdirAll(im.staging); err != nil {
		return fmt.Errorf("storage: import %q: create %s: %w", im.name, im.staging, err)
	}
	return nil
}

// release gives the name back (the import is over).
func (im *LedgerImport) release() {
	im.e.table.mu.Lock()
	delete(im.e.table.importing, im.name)
	im.e.table.mu.Unlock()
}

// check returns why the import cannot go on (mu held).
func (im *LedgerImport) check() error {
	if im.finished {
		return fmt.Errorf("storage: import %q: already committed or aborted", im.name)
	}
	return im.err
}

// fail records err as the import's error (mu held): every later call fails with it.
func (im *LedgerImport) fail(err error) error {
	if im.err == nil {
		im.err = err
	}
	return err
}

// StartSegment starts the next segment: ledger id id (greater than the previous one's) of
// incarnation incarnation. Its entries follow with Append, from entry 0.
func (im *LedgerImport) StartSegment(id int64, incarnation uint64) error {
	im.mu.Lock()
	defer im.mu.Unlock()
	if err := im.check(); err != nil {
		return err
	}
	if id < 0 || id <= im.lastID {
		return fmt.Errorf("storage: import %q: segment %d after segment %d (ids must ascend)", im.name, id, im.lastID)
	}
	if err := im.finishSegment(); err != nil {
		return im.fail(err)
	}
	im.cur = &segment{id: id}
	im.curInc = incarnation
	im.lastID, im.maxID = id, id
	return nil
}

// Append adds the next entry of the current segment (its entry id is the number of entries
// appended to the segment before). Data over the engine's MaxEntrySize is refused with
// ErrEntryTooLarge, as Ledger.Append refuses it.
func (im *LedgerImport) Append(ctx context.Context, data []byte, publishTime int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	if err := im.check(); err != nil {
		return err
	}
	if im.cur == nil {
		return fmt.Errorf("storage: import %q: Append before StartSegment", im.name)
	}
	if len(data) > im.e.opts.MaxEntrySize {
		return fmt.Errorf("%w: import %q: entry %d of segment %d: %d bytes > %d", ErrEntryTooLarge, im.name, im.cur.entries, im.cur.id, len(data), im.e.opts.MaxEntrySize)
	}
	s := im.cur
	if s.size == 0 {
		f, err := im.e.fs.OpenFile(segPath(im.staging, s.id), vfs.ReadWrite|vfs.Create|vfs.Trunc)
		if err != nil {
			return im.fail(fmt.Errorf("storage: import %q: create segment %d: %w", im.name, s.id, err))
		}
		im.file, im.flushed = f, 0
		im.buf = appendHeader(im.buf[:0], magicSegment, uint64(s.id))
		s.size = headerSize
	}
	off := s.size
	before := len(im.buf)
	im.buf = appendSegRecord(im.buf, s.entries, publishTime, data)
	s.addEntry(off, int64(len(im.buf)-before), publishTime, int64(len(data)))
	if len(im.buf) >= importBufBytes {
		if err := im.flushBuf(); err != nil {
			return im.fail(err)
		}
	}
	return nil
}

// flushBuf writes the buffered bytes of the current segment (mu held).
func (im *LedgerImport) flushBuf() error {
	if len(im.buf) == 0 || im.file == nil {
		return nil
	}
	if _, err := im.file.WriteAt(im.buf, im.flushed); err != nil {
		return fmt.Errorf("storage: import %q: write segment %d: %w", im.name, im.cur.id, err)
	}
	im.flushed += int64(len(im.buf))
	im.buf = im.buf[:0]
	return nil
}

// finishSegment writes the rest of the current segment, fsyncs and closes it, and writes its
// index file when the segment is large enough to get one (mu held). A segment without entries
// leaves no file.
func (im *LedgerImport) finishSegment() error {
	s := im.cur
	if s == nil || s.entries == 0 {
		return nil
	}
	err := im.flushBuf()
	if err == nil {
		if err = im.file.Sync(); err != nil {
			err = fmt.Errorf("storage: import %q: sync segment %d: %w", im.name, s.id, err)
		}
	}
	if cerr := im.file.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("storage: import %q: close segment %d: %w", im.name, s.id, cerr)
	}
	im.file = nil
	if err != nil {
		return err
	}
	if s.size >= minIndexedSegment {
		ix := &segIndex{ledgerID: s.id, entries: s.entries, bytes: s.bytes, fileSize: s.size,
			minTime: s.minTime, maxTime: s.maxTime, points: s.points}
		if err := writeFileSynced(im.e.fs, idxPath(im.staging, s.id), encodeIndex(ix)); err != nil {
			return fmt.Errorf("storage: import %q: write index of segment %d: %w", im.name, s.id, err)
		}
	}
	im.incs = append(im.incs, importedIncarnation{id: s.id, incarnation: im.curInc})
	im.entries = append(im.entries, s.entries)
	im.cur = nil
	return nil
}

// SetCursors sets the cursor states the ledger gets (LedgerExport.Cursors; replacing any set
// before). Every record is checked as the cursor log's reader would read it, and within the
// bounds a persisted state keeps (cursorlimits.go); a record that is not, or two of one cursor,
// fail the call with ErrCorrupt and leave the cursors as they were.
func (im *LedgerImport) SetCursors(records [][]byte) error {
	if err := validateImportedCursors(records); err != nil {
		return fmt.Errorf("storage: import %q: %w", im.name, err)
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	if err := im.check(); err != nil {
		return err
	}
	im.cursors = make([][]byte, len(records))
	for i, r := range records {
		im.cursors[i] = append([]byte(nil), r...)
	}
	im.hasCursor = len(records) > 0
	return nil
}

// validateImportedCursors checks cursor-state records from another engine: each must be a state
// record the cursor log's reader accepts and the writer could have written (name, ranges,
// batches and properties within their bounds), and no cursor may appear twice.
func validateImportedCursors(records [][]byte) error {
	if len(records) > maxImportCursors {
		return fmt.Errorf("%w: %d cursor records (limit %d)", ErrCorrupt, len(records), maxImportCursors)
	}
	seen := make(map[string]struct{}, len(records))
	for i, r := range records {
		if len(r) < 2 || r[0] != cState {
			return fmt.Errorf("%w: cursor record %d is not a cursor state", ErrCorrupt, i)
		}
		if len(r) > maxRecordBody {
			return fmt.Errorf("%w: cursor record %d: %d bytes (limit %d)", ErrCorrupt, i, len(r), maxRecordBody)
		}
		st, err := decodeCursorState(r[1:])
		if err != nil {
			return fmt.Errorf("cursor record %d: %w", i, err)
		}
		if err := checkImportedCursorState(st); err != nil {
			return fmt.Errorf("%w: cursor record %d (%.64q): %v", ErrCorrupt, i, st.name, err)
		}
		if _, dup := seen[st.name]; dup {
			return fmt.Errorf("%w: cursor record %d: cursor %.64q appears twice", ErrCorrupt, i, st.name)
		}
		seen[st.name] = struct{}{}
	}
	return nil
}

// checkImportedCursorState applies to a decoded state the bounds the writer keeps.
func checkImportedCursorState(st *cursorState) error {
	if st.name == "" {
		return errors.New("empty cursor name")
	}
	if err := checkCursorName(st.name); err != nil {
		return err
	}
	if len(st.acked) > maxPersistedRanges {
		return fmt.Errorf("%d acknowledged ranges (limit %d)", len(st.acked), maxPersistedRanges)
	}
	words := 0
	for _, b := range st.batches {
		words += len(b.acked)
	}
	if len(st.batches) > maxPersistedBatches || words > maxPersistedBatchWords {
		return fmt.Errorf("%d partially acknowledged batches with %d bitset words (limits %d, %d)", len(st.batches), words, maxPersistedBatches, maxPersistedBatchWords)
	}
	return checkProperties(st.props)
}

// Commit makes the import durable and visible: after it returns, OpenLedger loads the ledger,
// also after a crash. A crash before that leaves no ledger of that name (the replaced one, for
// ImportLedgerReplacing), or, once the final rename became durable, the complete new one; never
// a part. If it fails, the import is aborted.
func (im *LedgerImport) Commit(ctx context.Context) error {
	im.mu.Lock()
	defer im.mu.Unlock()
	if err := im.check(); err != nil {
		return err
	}
	err := im.commit(ctx)
	if err != nil {
		im.abortLocked()
		return fmt.Errorf("storage: import %q: %w", im.name, err)
	}
	im.finished = true
	im.release()
	return nil
}

func (im *LedgerImport) commit(ctx context.Context) error {
	e := im.e
	if im.replace {
		if err := e.checkNotOpen(im.name); err != nil {
			return err
		}
	}
	if err := im.finishSegment(); err != nil {
		return err
	}
	if len(im.incs) > 0 {
		if err := writeFileSynced(e.fs, im.staging+"/"+importedIncarnationsFile, encodeImportedIncarnations(im.incs)); err != nil {
			return fmt.Errorf("write %s: %w", importedIncarnationsFile, err)
		}
	}
	if im.hasCursor {
		b := appendHeader(nil, magicCursors, 0)
		for _, r := range im.cursors {
			b = appendPlainRecord(b, r)
		}
		if err := writeFileSynced(e.fs, cursorLogPath(im.staging), b); err != nil {
			return fmt.Errorf("write cursor log: %w", err)
		}
	}
	if _, hashed := dirName(im.name); hashed {
		if err := writeFileSynced(e.fs, im.staging+"/NAME", []byte(im.name)); err != nil {
			return fmt.Errorf("write NAME: %w", err)
		}
	}
	if err := e.fs.SyncDir(im.staging); err != nil {
		return fmt.Errorf("sync %s: %w", im.staging, err)
	}
	if err := e.raiseLedgerIDs(im.maxID); err != nil {
		return err
	}
	dir := e.ledgerDir(im.name)
	replacing := false
	if im.replace {
		if _, err := e.fs.Stat(dir); err == nil {
			replacing = true
		} else if !vfs.IsNotExist(err) {
			return fmt.Errorf("stat %s: %w", dir, err)
		}
	}
	// A replaced ledger may have records in the journal whenever it was open since the last
	// checkpoint (opening alone journals a new segment): always retire them.
	if replacing || e.journalMayHoldRecordsOf(im.name) {
		if err := e.retireJournalForImport(ctx, im.name); err != nil {
			return err
		}
	}
	e.table.mu.Lock()
	closed := e.table.closed
	e.table.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if replacing {
		return im.swapIn(dir)
	}
	if _, err := e.fs.Stat(dir); err == nil {
		return fmt.Errorf("%w: %q got a directory (%s) during the import", ErrLedgerExists, im.name, dir)
	}
	if err := e.fs.Rename(im.staging, dir); err != nil {
		return fmt.Errorf("rename %s to %s: %w", im.staging, dir, err)
	}
	if err := e.fs.SyncDir(e.ledgersDir); err != nil {
		// Whether the rename is durable is unknown: take it back, so that the failed import
		// leaves no ledger (the next Open removes a staging directory that survives a crash).
		cause := fmt.Errorf("sync %s: %w", e.ledgersDir, err)
		if rerr := e.fs.Rename(dir, im.staging); rerr != nil {
			e.log.Error("cannot take back a ledger import whose commit failed; removing it", "ledger", im.name, "err", rerr)
			if err := e.fs.RemoveAll(dir); err != nil {
				// The import's directory may still stand under the name: nothing may load it.
				im.keepReserved = true
				e.log.Error("cannot remove a ledger import whose commit failed; the name stays unavailable until the engine is opened again", "ledger", im.name, "dir", dir, "err", err)
				return fmt.Errorf("%w; taking %s back failed (%w) and so did removing it (%w): the name stays unavailable until the engine is opened again", cause, dir, rerr, err)
			}
		}
		// The take-back is made durable before the name is free again: a ledger created under
		// the name next would otherwise, after a power loss, have its journaled entries replayed
		// into the failed import's directory (TestFailedImportTakeBackIsDurable).
		if serr := e.fs.SyncDir(e.ledgersDir); serr != nil {
			im.keepReserved = true
			e.log.Error("cannot make the take-back of a failed ledger import durable; the name stays unavailable until the engine is opened again", "ledger", im.name, "dir", dir, "err", serr)
			return fmt.Errorf("%w; taking %s back could not be made durable either (%w): the name stays unavailable until the engine is opened again", cause, dir, serr)
		}
		return cause
	}
	return nil
}

// Abort discards the import: everything written so far is removed and the name is free again.
// It does nothing after Commit returned nil, or a second time.
func (im *LedgerImport) Abort() {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.finished {
		return
	}
	im.abortLocked()
}

func (im *LedgerImport) abortLocked() {
	im.finished = true
	if im.file != nil {
		_ = im.file.Close()
		im.file = nil
	}
	if err := im.e.fs.RemoveAll(im.staging); err != nil {
		// Open removes it.
		im.e.log.Warn("cannot remove an aborted ledger import; it is removed at the next start", "dir", im.staging, "err", err)
	}
	if im.keepReserved {
		return
	}
	im.release()
}
