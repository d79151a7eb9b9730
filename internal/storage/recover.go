package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// recover opens the data directory and replays the journal files after the last checkpoint
// into the ledgers' segment and cursor files. Replay is idempotent (entries already in a segment
// are skipped), so a crash during recovery is harmless. Its cost is proportional to the journal
// tail (at most about JournalFileBytes) plus the segments it touches.
func (e *Engine) recover(ctx context.Context) error {
	// Every directory created here has its entry synced in its parent before anything is
	// acknowledged: a power loss could otherwise take a new data directory, and every
	// acknowledged entry in it, with an ancestor's unsynced entry.
	if err := vfs.MkdirAllDurable(e.fs, e.dir); err != nil {
		return fmt.Errorf("storage: create %s: %w", e.dir, err)
	}
	for _, d := range []string{e.ledgersDir, e.journalDir, e.trashDir()} {
		if err := e.fs.MkdirAll(d); err != nil {
			return fmt.Errorf("storage: create %s: %w", d, err)
		}
	}
	for _, d := range []string{path.Dir(e.dir), e.dir} {
		if err := e.fs.SyncDir(d); err != nil {
			return fmt.Errorf("storage: sync data dir: %w", err)
		}
	}
	_ = e.fs.Remove(e.dir + "/" + stateFile + ".tmp")
	if err := e.removeImportStaging(); err != nil {
		return err
	}
	st := engineState{ledgerIDLimit: 1, firstJournal: 1}
	if f, err := e.fs.OpenFile(e.dir+"/"+stateFile, vfs.ReadOnly); err == nil {
		b := make([]byte, 256)
		n, _ := f.ReadAt(b, 0)
		_ = f.Close()
		if st, err = decodeEngineState(b[:n]); err != nil {
			return fmt.Errorf("storage: %s: %w", stateFile, err)
		}
	} else if !vfs.IsNotExist(err) {
		return fmt.Errorf("storage: read state: %w", err)
	} else if err := e.refuseMissingState(); err != nil {
		return err
	} else {
		// A new data directory: its ledger ids start at random (firstledgerid.go).
		first, err := randomFirstLedgerID()
		if err != nil {
			return err
		}
		st.ledgerIDLimit = uint64(first)
	}
	e.nextLedgerID, e.ledgerIDLimit, e.firstJournal = int64(st.ledgerIDLimit), int64(st.ledgerIDLimit), st.firstJournal
	e.inc.durable = st.incarnations

	des, err := e.fs.ReadDir(e.journalDir)
	if err != nil {
		return fmt.Errorf("storage: list journal: %w", err)
	}
	if err := e.findLegacyDirs(); err != nil {
		return err
	}
	var seqs []uint64
	retired := false
	for _, de := range des {
		if isFreeJournalName(de.Name) {
			e.adoptFreeJournal(de.Name)
			continue
		}
		id, ok := parseHexName(de.Name, ".jnl")
		switch {
		case !ok:
		case uint64(id) < st.firstJournal:
			e.retireJournal(uint64(id)) // left over from an interrupted checkpoint
			retired = true
		default:
			seqs = append(seqs, uint64(id))
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	// Journal files at the end that hold no valid record were made ahead of rotation and never
	// written (nextjournal.go), or never got a durable header: the file before them is the last
	// one, and its torn tail was never acknowledged. They are retired with the others.
	var unwritten []uint64
	for len(seqs) > 1 && !e.journalHasRecords(seqs[len(seqs)-1]) {
		unwritten = append(unwritten, seqs[len(seqs)-1])
		seqs = seqs[:len(seqs)-1]
	}
	r := &replayer{e: e, segs: map[int64]*replaySeg{}, logs: map[string]int64{}, files: map[string]struct{}{},
		dirs: map[string]struct{}{}, gaps: map[int64]replayGap{},
		deletedSlots: map[uint32]bool{}, voidFrom: map[int64]int64{}, cursorBodies: journalCursorBodies{}}
	// Void records name entries that were never acknowledged (their ledger was fenced before
	// they were applied); they may precede the void record, so collect them first.
	for _, seq := range seqs {
		r.collectVoids(seq)
	}
	for i, seq := range seqs {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The next journal file with a valid header says whether this one was abandoned (files
		// whose header never became valid were never written to: openJournal syncs the header
		// before the first record).
		nextUnclean := false
		for _, next := range seqs[i+1:] {
			if flags, ok := e.journalFlags(next); ok {
				if flags&journalFlagPrevUnclean == 0 && !e.journalHasRecords(next) {
					// Made ahead of rotation and never used (nextjournal.go): it says nothing
					// about file seq. This happens when seq was abandoned, the prepared file was
					// not adopted (it lacks the flag) and remaking it with the flag failed: the
					// next file made says that the files before it may end torn.
					continue
				}
				nextUnclean = flags&journalFlagPrevUnclean != 0
				break
			}
		}
		if err := r.replayFile(seq, i == len(seqs)-1, nextUnclean); err != nil {
			return err
		}
	}
	if err := r.cutHoleTails(); err != nil {
		return err
	}
	if err := r.truncateDirectTails(); err != nil {
		return err
	}
	for _, g := range r.remainingGaps() {
		e.log.Error("ledger fenced by recovery: entries missing between its segment and the journal", "ledger", g.name, "detail", g.why)
		if err := e.writeFenceMarker(g.name, g.why); err != nil {
			return err
		}
	}
	last := st.firstJournal - 1
	if len(seqs) > 0 {
		last = seqs[len(seqs)-1]
	}
	if len(unwritten) > 0 {
		last = unwritten[0] // the highest: sequence numbers are never reused
		seqs = append(seqs, unwritten...)
	}
	if len(seqs) > 0 || r.maxLedgerID >= e.ledgerIDLimit {
		if failed, err := e.syncFiles(r.files, r.dirs); err != nil || len(failed) > 0 {
			return errors.Join(append(mapErrors(failed), err)...)
		}
		if err := e.recoveryWritebackErr(); err != nil {
			return err
		}
		e.firstJournal = last + 1
		if r.maxLedgerID >= e.ledgerIDLimit {
			e.nextLedgerID, e.ledgerIDLimit = r.maxLedgerID+1, r.maxLedgerID+1
		}
		if err := e.writeState(); err != nil {
			return err
		}
		for _, s := range seqs {
			e.retireJournal(s)
		}
		retired = retired || len(seqs) > 0
		e.log.Info("journal replayed", "files", len(seqs), "entries", r.applied, "rewritten", r.rewritten, "skipped", r.skipped, "tornTails", r.torn)
	}
	if retired {
		e.syncRetired()
	}
	if err := e.startIncarnation(st.incarnations); err != nil {
		return err
	}
	e.files.closeAll()
	e.queue.pendingSeq = e.firstJournal
	e.queue.pending.seq = e.firstJournal
	e.queue.journalSize = headerSize
	return nil
}

func (e *Engine) journalFlags(seq uint64) (uint32, bool) {
	f, err := e.fs.OpenFile(e.journalPath(seq), vfs.ReadOnly)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	b := make([]byte, headerSize)
	if n, _ := f.ReadAt(b, 0); n < headerSize {
		return 0, false
	}
	hseq, flags, err := parseHeaderFlags(b, magicJournal)
	if err != nil || hseq != seq {
		return 0, false
	}
	return flags, true
}

func (e *Engine) writeFenceMarker(name, why string) error {
	dir := e.ledgerDir(name)
	if err := e.fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("storage: fence marker: %w", err)
	}
	if err := writeFileDurably(e.fs, dir+"/FENCED", []byte(why+"\n")); err != nil {
		return fmt.Errorf("storage: fence marker: %w", err)
	}
	return nil
}

type replaySeg struct {
	id     int64
	path   string
	dir    string
	next   int64 // next entry id expected
	end    int64 // end of the last valid record
	badOff int64 // first invalid record, -1 if none
	skip   bool
	// offs: the file offset of each entry the segment holds (replayrewrite.go).
	offs []int64
	// directTail: a jDirectStart names this segment, so what follows its last valid entry after
	// replay was never acknowledged and is truncated (directwrite.go).
	directTail bool
	// lostHeader: the header was not valid and was written again (scanSegment).
	lostHeader bool
	// refilling: the replay writes journal entries where the valid records stopped, and what
	// follows was not valid yet (adoptAfterHole).
	refilling bool
}

// replayGap is why the replay fences ledger name: the journal continues one of its segments past
// the entries the segment holds, and nothing replayed says those entries were never acknowledged.
type replayGap struct {
	name, why string
}

// remainingGaps lists the gaps that fence their ledgers, one per ledger, by ledger id. Every gap
// the replay records misses acknowledged entries: a fenced ledger's journal may continue past
// what its segment holds, but only with entries from its void record's first voided one on,
// which were never acknowledged, and the replay skips those before it looks for a gap (the void
// records are read first). So no void record takes a gap back; a later trim or delete of the
// segment does (the replay then drops the gap).
func (r *replayer) remainingGaps() []replayGap {
	ids := make([]int64, 0, len(r.gaps))
	for id := range r.gaps {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]replayGap, 0, len(ids))
	seen := map[string]bool{}
	for _, id := range ids {
		if g := r.gaps[id]; !seen[g.name] {
			seen[g.name] = true
			out = append(out, g)
		}
	}
	return out
}

type replayer struct {
	e     *Engine
	segs  map[int64]*replaySeg
	logs  map[string]int64 // cursor log path -> valid end
	files map[string]struct{}
	dirs  map[string]struct{}
	// gaps: segments the journal continues past the entries they hold, by ledger id (a later trim
	// or delete of the segment in the replayed journal takes its gap back: remainingGaps).
	gaps        map[int64]replayGap
	maxLedgerID int64
	// Slots are unique within one engine run, and every replayed journal file is from the last run.
	deletedSlots map[uint32]bool
	voidFrom     map[int64]int64 // ledger id -> first entry that was never acknowledged
	// cursorBodies: the cursor-log bodies the replayed journal files hold (cursorlogcheck.go).
	cursorBodies journalCursorBodies

	applied, skipped, rewritten, torn int
}

func (r *replayer) replayFile(seq uint64, last, nextUnclean bool) error {
	e := r.e
	p := e.journalPath(seq)
	f, err := e.fs.OpenFile(p, vfs.ReadOnly)
	if err != nil {
		return fmt.Errorf("storage: open journal: %w", err)
	}
	size, err := f.Size()
	if err != nil {
		_ = f.Close()
		return err
	}
	data := make([]byte, size)
	n, rerr := f.ReadAt(data, 0)
	_ = f.Close()
	if rerr != nil && rerr != io.EOF {
		return fmt.Errorf("storage: read journal %s: %w", p, rerr)
	}
	data = data[:n]
	hseq, _, seed, err := parseJournalHeader(data)
	if err == nil && hseq != seq {
		// A recycled file whose new header never became durable: openJournal syncs the header
		// before the first record, so nothing in it belongs to journal seq.
		e.log.Warn("ignoring recycled journal file whose new header is not durable", "file", p, "headerSeq", hseq)
		return nil
	}
	if err != nil {
		if errors.Is(err, errUnsupportedVersion) {
			return fmt.Errorf("storage: journal %s: %w", p, err)
		}
		if !recordsFollowHeader(data, seq) {
			// Its header never became durable (records are written only after it is), so no
			// record in it was ever acknowledged: what follows is zeros, or bytes of the file's
			// previous use when the new header of a recycled file was torn (its fsync failed, and
			// a later fsync of the journal directory made its new name durable).
			e.log.Warn("ignoring journal file with a torn header", "file", p, "size", len(data))
			return nil
		}
		return fmt.Errorf("%w: journal %s header: %v", ErrCorrupt, p, err)
	}
	slots := map[uint32]string{}
	off := headerSize
	for off < len(data) {
		body, sz, err := decodeJournalRecord(data[off:], seed)
		if err == nil && len(body) > 0 && body[0] == jEnd {
			return nil // the file was rotated here; anything after is from its previous use
		}
		if err != nil {
			if last || nextUnclean {
				if !allZero(data[off:]) {
					e.log.Warn("journal ends with a torn record (never acknowledged); ignored", "file", p, "offset", off, "size", len(data))
				}
				return nil
			}
			return fmt.Errorf("%w: journal %s: bad record at offset %d of %d in the middle of the journal", ErrCorrupt, p, off, len(data))
		}
		if err := r.apply(slots, body); err != nil {
			return fmt.Errorf("storage: replay %s offset %d: %w", p, off, err)
		}
		off += sz
	}
	return nil
}

func (r *replayer) collectVoids(seq uint64) {
	f, err := r.e.fs.OpenFile(r.e.journalPath(seq), vfs.ReadOnly)
	if err != nil {
		return
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return
	}
	data := make([]byte, size)
	n, _ := f.ReadAt(data, 0)
	data = data[:n]
	hseq, _, seed, err := parseJournalHeader(data)
	if err != nil || hseq != seq {
		return
	}
	for off := headerSize; off < len(data); {
		body, sz, err := decodeJournalRecord(data[off:], seed)
		if err != nil || (len(body) > 0 && body[0] == jEnd) {
			return
		}
		off += sz
		if len(body) >= 5 && (body[0] == jCursor || body[0] == jDelCursor) {
			r.cursorBodies.add(body[5:])
		}
		if len(body) < 5 || body[0] != jVoid {
			continue
		}
		for p := body[5:]; len(p) >= 16; p = p[16:] {
			id, from := int64(binary.LittleEndian.Uint64(p)), int64(binary.LittleEndian.Uint64(p[8:]))
			if v, ok := r.voidFrom[id]; !ok || from < v {
				r.voidFrom[id] = from
			}
		}
	}
}

// recordsFollowHeader reports whether journal file seq (data, its whole content) holds a valid
// record right after its header, checksummed for this sequence number (or unseeded, as in a
// version-1 file): then its header was durable once, and an invalid header is corruption. A
// file's first record always starts right after the header.
func recordsFollowHeader(data []byte, seq uint64) bool {
	if len(data) <= headerSize {
		return false
	}
	for _, seed := range [][]byte{journalSeed(seq), nil} {
		if _, _, err := decodeJournalRecord(data[headerSize:], seed); err == nil {
			return true
		}
	}
	return false
}

// decodeJournalRecord is decodeRecord for a journal file. A journal record body is never empty
// (a type and a slot at least), so an empty one is invalid like a record that fails its checksum:
// zeros after the last record (a zero-filled file, nextjournal.go; a torn tail) read as a body
// length of 0 with a checksum of 0, which is the seeded checksum of an empty body for about one
// sequence number in 2^32.
func decodeJournalRecord(b, seed []byte) (body []byte, size int, err error) {
	body, size, err = decodeRecord(b, seed)
	if err == nil && len(body) == 0 {
		return nil, 0, errTorn
	}
	return body, size, err
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (r *replayer) apply(slots map[uint32]string, body []byte) error {
	e := r.e
	if len(body) < 5 {
		return fmt.Errorf("%w: short journal record", ErrCorrupt)
	}
	typ, slot, rest := body[0], binary.LittleEndian.Uint32(body[1:5]), body[5:]
	if typ == jAnnounce {
		slots[slot] = string(rest)
		return nil
	}
	name, ok := slots[slot]
	if !ok {
		return fmt.Errorf("%w: journal record for unannounced slot %d", ErrCorrupt, slot)
	}
	if r.deletedSlots[slot] {
		// Records a deleted ledger's handle queued after the delete were never acknowledged.
		return nil
	}
	dir := e.ledgerDir(name)
	switch typ {
	case jEntry:
		if len(rest) < 8 {
			return fmt.Errorf("%w: short entry record", ErrCorrupt)
		}
		id := int64(binary.LittleEndian.Uint64(rest))
		rec := rest[8:]
		segBody, _, err := decodeRecord(rec, nil)
		if err != nil {
			return fmt.Errorf("%w: entry record inside journal record", ErrCorrupt)
		}
		eid, _, _, err := parseSegBody(segBody)
		if err != nil {
			return err
		}
		r.maxLedgerID = max(r.maxLedgerID, id)
		return r.applyEntry(name, dir, id, eid, rec)
	case jCursor, jDelCursor:
		if st, err := decodeCursorState(rest[1:]); err == nil && typ == jCursor {
			e.log.Debug("replay cursor", "ledger", name, "cursor", st.name, "md", st.markDelete.String())
		}
		return r.appendCursorLog(name, dir, rest)
	case jTrim:
		if len(rest) < 8 {
			return fmt.Errorf("%w: short trim record", ErrCorrupt)
		}
		id := int64(binary.LittleEndian.Uint64(rest))
		e.log.Debug("replay trim", "ledger", name, "segment", id)
		delete(r.segs, id)
		// Entries of this segment the replay could not apply (the segment file was removed by this
		// trim, and a later fsync of the ledger's directory made the removal durable before the
		// crash) are removed by the trim anyway: no gap.
		delete(r.gaps, id)
		for _, p := range []string{segPath(dir, id), idxPath(dir, id)} {
			e.files.forget(p)
			if err := e.fs.Remove(p); err != nil && !vfs.IsNotExist(err) {
				return fmt.Errorf("storage: replay trim: %w", err)
			}
		}
		r.dirs[dir] = struct{}{}
	case jDelLedger:
		r.deletedSlots[slot] = true
		for id, s := range r.segs {
			if s.dir == dir {
				delete(r.segs, id)
			}
		}
		delete(r.logs, cursorLogPath(dir))
		for id, g := range r.gaps {
			if g.name == name {
				delete(r.gaps, id)
			}
		}
		e.files.forgetPrefix(dir)
		if err := e.fs.RemoveAll(dir); err != nil {
			return fmt.Errorf("storage: replay delete: %w", err)
		}
		e.legacyDirs.forget(name)
		r.dirs[e.ledgersDir] = struct{}{}
	case jVoid:
		// A failed batch's direct writes may still be in the segment: scanning it truncates
		// them (scanSegment stops at the first voided entry).
		for p := rest; len(p) >= 16; p = p[16:] {
			id := int64(binary.LittleEndian.Uint64(p))
			if _, err := e.fs.Stat(segPath(dir, id)); err != nil {
				continue
			}
			if _, err := r.segment(name, dir, id); err != nil {
				return err
			}
		}
	case jEntryRef:
		ref, err := parseEntryRef(rest)
		if err != nil {
			return err
		}
		r.maxLedgerID = max(r.maxLedgerID, ref.ledgerID)
		return r.applyEntryRef(name, dir, ref)
	case jDirectStart:
		if len(rest) != 8 {
			return fmt.Errorf("%w: direct-start record of %d bytes", ErrCorrupt, len(rest))
		}
		id := int64(binary.LittleEndian.Uint64(rest))
		r.maxLedgerID = max(r.maxLedgerID, id)
		rs, err := r.segment(name, dir, id)
		if err != nil {
			return err
		}
		rs.directTail = true
	case jCreate:
		return r.ensureDir(name, dir)
	default:
		return fmt.Errorf("%w: unknown journal record type %d", ErrCorrupt, typ)
	}
	return nil
}

func (r *replayer) ensureDir(name, dir string) error {
	r.touchDir(name, dir)
	if _, err := r.e.fs.Stat(dir); err == nil {
		return r.e.checkNameFile(name, dir)
	}
	if err := r.e.ensureLedgerDir(name, dir); err != nil {
		return err
	}
	for d := range r.e.applier.dirtyDirs {
		r.dirs[d] = struct{}{}
	}
	for f := range r.e.applier.dirtyFiles {
		r.files[f] = struct{}{}
	}
	clear(r.e.applier.dirtyDirs)
	clear(r.e.applier.dirtyFiles)
	return nil
}

// segment returns the replay state of segment id, scanning the file the first time.
func (r *replayer) segment(name, dir string, id int64) (*replaySeg, error) {
	rs := r.segs[id]
	if rs != nil {
		return rs, nil
	}
	rs = &replaySeg{id: id, path: segPath(dir, id), dir: dir, badOff: -1}
	r.segs[id] = rs
	if err := r.ensureDir(name, dir); err != nil {
		return nil, err
	}
	if err := r.scanSegment(rs, id); err != nil {
		return nil, err
	}
	// The segment changes: its index (if any) is stale.
	_ = r.e.fs.Remove(idxPath(dir, id))
	return rs, nil
}

// applyEntryRef checks that the entries a jEntryRef names are in their segment: they were
// written there and fsynced before the batch was acknowledged. If they are not, the crash came
// before that fsync finished: nothing from that batch on was acknowledged, so the ledger id is
// voided from the first missing entry and the segment truncated there (directwrite.go).
func (r *replayer) applyEntryRef(name, dir string, ref entryRef) error {
	e := r.e
	rs, err := r.segment(name, dir, ref.ledgerID)
	if err != nil {
		return err
	}
	v, voided := r.voidFrom[ref.ledgerID]
	switch {
	case rs.skip || (voided && ref.first >= v):
		r.skipped += int(ref.count)
	case ref.first > rs.next:
		rs.skip = true
		r.gaps[ref.ledgerID] = replayGap{name, fmt.Sprintf("segment %d holds entries up to %d, the journal references direct writes from %d", ref.ledgerID, rs.next-1, ref.first)}
	case rs.next >= ref.first+ref.count:
		r.skipped += int(ref.count)
	default:
		e.log.Warn("journal references direct-written entries the segment does not hold (never acknowledged); dropped from there",
			"ledger", name, "segment", ref.ledgerID, "first", ref.first, "count", ref.count, "have", rs.next)
		if !voided || rs.next < v {
			r.voidFrom[ref.ledgerID] = rs.next
		}
		if err := r.truncateSeg(rs, false); err != nil {
			return err
		}
		r.torn++
		e.m.tornTails.Add(1)
	}
	return nil
}

// openSegment acquires segment rs's file (creating it with create) and returns its size; the
// caller releases the file.
func (r *replayer) openSegment(rs *replaySeg, create bool) (*cachedFile, int64, error) {
	cf, err := r.e.files.acquire(rs.path, create)
	if err != nil {
		return nil, 0, fmt.Errorf("storage: replay open segment: %w", err)
	}
	size, err := cf.f.Size()
	if err != nil {
		r.e.files.release(cf)
		return nil, 0, err
	}
	return cf, size, nil
}

// truncateSeg cuts segment rs after its last valid entry (counted as a torn tail with count).
func (r *replayer) truncateSeg(rs *replaySeg, count bool) error {
	e := r.e
	cf, size, err := r.openSegment(rs, false)
	if err != nil {
		return err
	}
	defer e.files.release(cf)
	if size > rs.end {
		if err := cf.f.Truncate(rs.end); err != nil {
			return fmt.Errorf("storage: replay truncate: %w", err)
		}
		if count {
			r.torn++
			e.m.tornTails.Add(1)
		}
		r.files[rs.path] = struct{}{}
	}
	rs.badOff = -1
	return nil
}

// cutHoleTails cuts, after the replay, what follows the last valid entry of the segments the
// replay wrote entries into where their valid records stopped (adoptAfterHole) and of those
// whose header was lost and got no entry back: nothing there was acknowledged, as no journal
// record filled it and no valid entry continued it.
func (r *replayer) cutHoleTails() error {
	for _, rs := range r.segs {
		if (rs.refilling && rs.badOff >= 0) || (rs.lostHeader && rs.next == 0) {
			if err := r.truncateSeg(rs, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// truncateDirectTails cuts the segments that got direct writes after their last valid entry:
// anything there was never acknowledged (directwrite.go).
func (r *replayer) truncateDirectTails() error {
	for _, rs := range r.segs {
		if rs.directTail && !rs.skip {
			if err := r.truncateSeg(rs, true); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *replayer) applyEntry(name, dir string, id, eid int64, rec []byte) error {
	e := r.e
	rs, err := r.segment(name, dir, id)
	if err != nil {
		return err
	}
	if v, ok := r.voidFrom[id]; rs.skip || (ok && eid >= v) {
		r.skipped++
		return nil
	}
	if eid < rs.next {
		return r.rewriteEntry(rs, eid, rec)
	}
	if rs.next == 0 || eid == 0 {
		e.log.Debug("replay entry", "ledger", name, "segment", id, "entry", eid, "next", rs.next)
	}
	if eid > rs.next {
		rs.skip = true
		r.gaps[id] = replayGap{name, fmt.Sprintf("segment %d holds entries up to %d, the journal continues at %d", id, rs.next-1, eid)}
		return nil
	}
	cf, err := e.files.acquire(rs.path, false)
	if err != nil {
		return fmt.Errorf("storage: replay open segment: %w", err)
	}
	defer e.files.release(cf)
	if err := rs.writeHeaderWithFirst(cf.f, eid, rs.end); err != nil {
		return err
	}
	// Where the segment's valid records stopped (rs.badOff == rs.end), the journal's record is
	// written in place over what is there.
	if _, err := cf.f.WriteAt(rec, rs.end); err != nil {
		return fmt.Errorf("storage: replay write: %w", err)
	}
	rs.offs = append(rs.offs, rs.end)
	rs.end += int64(len(rec))
	rs.next++
	r.applied++
	r.files[rs.path] = struct{}{}
	if rs.badOff >= 0 {
		return r.adoptAfterHole(rs, cf)
	}
	return nil
}

// adoptAfterHole runs after the journal's record filled the place where segment rs's valid
// records stopped. The records after it are kept when they continue the entry ids: the hole was
// data lost to a failed writeback of the segment that no fsync reported before a later direct
// write's fdatasync (its own descriptor) made the bytes after it durable and acknowledged
// (directwrite.go); the journal holds the lost entries, so replay fills the hole entry by entry.
// Otherwise what follows is a torn tail and is cut, as before any entry was replayed into it.
func (r *replayer) adoptAfterHole(rs *replaySeg, cf *cachedFile) error {
	e := r.e
	size, err := cf.f.Size()
	if err != nil {
		return fmt.Errorf("storage: replay segment size: %w", err)
	}
	voidFrom, hasVoid := r.voidFrom[rs.id]
	from, adopted, voided := rs.end, 0, false
	var bad int64
	continues, err := recordContinuesAt(cf.f, from, size, rs.next)
	if err != nil {
		return fmt.Errorf("storage: replay scan: %w", err)
	}
	if continues {
		bad, err = scanRecords(cf.f, from, size, func(off int64, body []byte) bool {
			eid, _, _, err := parseSegBody(body)
			if err != nil || eid != rs.next {
				return false
			}
			if hasVoid && eid >= voidFrom {
				voided = true
				return false
			}
			rs.offs = append(rs.offs, off)
			rs.next++
			rs.end = off + int64(recHeaderSize+len(body))
			adopted++
			return true
		})
		if err != nil {
			return fmt.Errorf("storage: replay scan: %w", err)
		}
	}
	switch {
	case voided:
		rs.badOff = bad
		return r.truncateSeg(rs, true)
	case adopted == 0:
		// The hole goes on (the next journal entry fills it further), or this is a torn tail:
		// cutHoleTails cuts what is still not filled after the replay.
		rs.refilling = true
		rs.badOff = -1
		if rs.end < size {
			rs.badOff = rs.end
		}
		return nil
	}
	e.log.Warn("replay: refilled entries missing in the middle of a segment from the journal; the entries after them are kept",
		"segment", rs.path, "from", from, "kept", adopted)
	rs.badOff = bad
	if bad < 0 {
		rs.refilling = false
	}
	return nil
}

// recordContinuesAt reports whether the record at off in f (size bytes long) may be entry next:
// its length fits in the file and its body starts with that entry id. adoptAfterHole scans only
// then: a hole refilled entry by entry is usually zeros after each refilled entry, and a scan of
// the rest of the file per entry would read the hole once per entry.
func recordContinuesAt(f vfs.File, off, size, next int64) (bool, error) {
	var head [recHeaderSize + 8]byte
	if size-off < int64(len(head)) {
		return false, nil
	}
	if n, err := f.ReadAt(head[:], off); n < len(head) {
		if err == nil || err == io.EOF {
			return false, nil
		}
		return false, err
	}
	bodyLen := int64(binary.LittleEndian.Uint32(head[:]))
	return bodyLen >= segBodyPrefix && bodyLen <= maxRecordBody && off+recHeaderSize+bodyLen <= size &&
		int64(binary.LittleEndian.Uint64(head[recHeaderSize:])) == next, nil
}

// scanSegment finds how much of a segment is valid (creating it if missing).
func (r *replayer) scanSegment(rs *replaySeg, id int64) error {
	e := r.e
	cf, size, err := r.openSegment(rs, true)
	if err != nil {
		return err
	}
	defer e.files.release(cf)
	hdr := make([]byte, headerSize)
	n, _ := cf.f.ReadAt(hdr, 0)
	headerLost := false
	if hid, herr := parseHeader(hdr[:n], magicSegment); herr != nil || int64(hid) != id {
		if size > headerSize && herr == nil {
			return fmt.Errorf("%w: segment %s has id %d", ErrCorrupt, rs.path, hid)
		}
		if errors.Is(herr, errUnsupportedVersion) {
			return fmt.Errorf("storage: segment %s: %w", rs.path, herr)
		}
		// New, or its header never became durable, or damaged: the header is written again in
		// place. When entry 0's record follows it, the header alone was lost (damaged after its
		// entries were checkpointed): the records are scanned as in any segment (each has its
		// own checksum and id), else they may be the only copy of acknowledged entries the
		// journal no longer holds. Otherwise what follows is kept only if the journal refills
		// entry 0 and valid entries continue after that (adoptAfterHole: the header was lost
		// with the first entries to a failed writeback, later direct writes were made durable);
		// else cutHoleTails cuts it.
		if _, err := cf.f.WriteAt(appendHeader(nil, magicSegment, uint64(id)), 0); err != nil {
			return fmt.Errorf("storage: replay segment header: %w", err)
		}
		r.files[rs.path] = struct{}{}
		r.dirs[rs.dir] = struct{}{}
		rs.end = headerSize
		if size <= headerSize {
			return nil
		}
		entries, err := recordContinuesAt(cf.f, headerSize, size, 0)
		if err != nil {
			return fmt.Errorf("storage: replay scan: %w", err)
		}
		if !entries {
			rs.badOff, rs.lostHeader = headerSize, true
			return nil
		}
		e.log.Warn("replay: segment header unreadable, entry 0 behind it; header written again", "segment", rs.path)
		headerLost = true
	}
	rs.end = headerSize
	voidFrom, hasVoid := r.voidFrom[id]
	voidedAt := int64(-1)
	bad, err := scanRecords(cf.f, headerSize, size, func(off int64, body []byte) bool {
		eid, _, _, err := parseSegBody(body)
		if err != nil || eid != rs.next {
			return false
		}
		if hasVoid && eid >= voidFrom {
			voidedAt = off
			return false
		}
		rs.offs = append(rs.offs, off)
		rs.next++
		rs.end = off + int64(recHeaderSize+len(body))
		return true
	})
	if err != nil {
		return fmt.Errorf("storage: replay scan: %w", err)
	}
	if bad >= 0 && voidedAt < 0 && isBlockPadding(cf.f, bad, size) {
		// The zeros after a block written around the page cache (unbuffered.go), not a torn tail.
		if err := cf.f.Truncate(bad); err != nil {
			return fmt.Errorf("storage: replay truncate padding: %w", err)
		}
		r.files[rs.path] = struct{}{}
		bad = -1
	}
	rs.badOff = bad
	if headerLost && rs.next == 0 && bad >= 0 {
		rs.lostHeader = true // entry 0's record did not check out: as if it was lost with the header
	}
	if voidedAt >= 0 || (hasVoid && bad >= 0 && rs.next >= voidFrom) {
		// Entries a void record says were never acknowledged, written to the segment before their
		// ledger was fenced (direct writes of a failed batch, directwrite.go, or the applier's
		// write of a segment after another segment's write failed in the same batch): cut them
		// off (rs.end is voidedAt). A torn record where the first voided entry would start is such
		// an entry whose write the crash interrupted; left in place, loading would take it for
		// corruption and fence the ledger.
		return r.truncateSeg(rs, true)
	}
	return nil
}

func (r *replayer) appendCursorLog(name, dir string, body []byte) error {
	e := r.e
	p := cursorLogPath(dir)
	end, ok := r.logs[p]
	if err := r.ensureDir(name, dir); err != nil {
		return err
	}
	cf, err := e.files.acquire(p, true)
	if err != nil {
		return fmt.Errorf("storage: replay cursor log: %w", err)
	}
	defer e.files.release(cf)
	if !ok {
		if end, err = r.cursorLogEnd(name, p, cf.f); err != nil {
			return err
		}
	}
	rec := appendPlainRecord(nil, body)
	if _, err := cf.f.WriteAt(rec, end); err != nil {
		return fmt.Errorf("storage: replay cursor log write: %w", err)
	}
	r.logs[p] = end + int64(len(rec))
	r.files[p] = struct{}{}
	return nil
}

// cursorLogEnd returns where the replay appends to the cursor log at p (first touch): after its
// last valid record, cutting a torn tail or a torn header (cursorlogcheck.go), once it has written
// the valid records again. A damaged log is
// left as it is and the replayed records go after its end: nothing the journal holds is lost, and
// loading the ledger then reports the damage.
func (r *replayer) cursorLogEnd(name, p string, f vfs.File) (int64, error) {
	e := r.e
	data, err := readWholeFile(e.fs, p)
	if err != nil {
		return 0, fmt.Errorf("storage: replay cursor log %s: %w", p, err)
	}
	scan := scanCursorLog(data)
	damaged := scan.damaged(data, r.cursorBodies.has)
	if e.opts.Sync == SyncInterval {
		// Cursor-log writes may run ahead of the journal: only a garbage header is damage.
		damaged = scan.garbageHeader(data)
	}
	switch {
	case damaged:
		e.log.Error("cursor log damaged; the journal's records are appended after the damage and the ledger will not load until it is repaired",
			"ledger", name, "file", p, "detail", scan.describe())
		return scan.size, nil
	case scan.headerErr != nil:
		if err := f.Truncate(0); err != nil {
			return 0, err
		}
		if _, err := f.WriteAt(appendHeader(nil, magicCursors, 0), 0); err != nil {
			return 0, err
		}
		r.dirs[path.Dir(p)] = struct{}{}
		return headerSize, nil
	}
	end := scan.end
	if scan.bad >= 0 {
		end = scan.bad
		if err := f.Truncate(end); err != nil {
			return 0, err
		}
	}
	// The records the log holds are written again, in place, as replay writes the entries a
	// segment holds again (replayrewrite.go): after a failed writeback the page cache shows
	// records the disk does not have, the replay's fsync would write only what it appends, and a
	// power loss would then leave a hole before the replayed records, which makes the log damaged.
	if _, err := f.WriteAt(data[:end], 0); err != nil {
		return 0, fmt.Errorf("storage: replay cursor log rewrite: %w", err)
	}
	return end, nil
}
