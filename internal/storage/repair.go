package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Repairs: rewriting a file whose latest data may not be on disk.
//
// A segment write that failed after its entries were acknowledged, or an fsync of a segment or
// cursor-log file that failed (at a checkpoint, or before the file cache closed a descriptor),
// leaves a file whose recent data may be missing on disk although the page cache still shows it
// (checkpoint.go says why an fsync is never simply retried). Every byte of it written since the
// last checkpoint is still in the journal files not yet retired, so the file is made a repair
// target: its ledger is fenced (appends fail, its owner reopens it), OpenLedger refuses it, no
// checkpoint runs, and the applier (which also writes segments, so nothing else touches the file
// meanwhile) rewrites it and fsyncs it:
//   - a segment gets every confirmed entry found in the journal files not yet retired written
//     again, in place, at its offset (the segment's records are contiguous: the offsets follow
//     from the segment's size in memory and the records' lengths), and its header if the journal
//     holds its first entry; entries before those are in retired journal files, whose checkpoint
//     made them durable. Entries written straight to the segment (directwrite.go) are not in the
//     journal: their own fdatasync made them durable before they were acknowledged;
//   - a cursor log is replaced (tmp file, fsync, rename) by the current state of its cursors in
//     memory, which is at least as new as anything the journal holds;
//   - a NAME file is written again.
//
// Writing the bytes again makes their pages dirty, so the next fsync does write them, and its
// success means they are on disk. A repair that fails (the disk is still full) is retried by the
// checkpointer; once every target is repaired, checkpoints resume and the ledgers can be opened
// again. A restart meanwhile is safe too: recovery rewrites every entry it replays (recover.go).

type repairKind uint8

const (
	repairSegment repairKind = iota
	repairCursorLog
	repairName
	repairUnknown
)

// fileRepair is one file waiting to be rewritten.
type fileRepair struct {
	path  string
	kind  repairKind
	segID int64   // repairSegment: the segment's ledger id
	l     *Ledger // the ledger whose file it is (open, or closed since the last checkpoint); nil: unknown
	cause error   // the failure that made it a target
	last  error   // the last attempt's failure
	tries int
}

// closedLedger is a ledger closed while its files may still be in a checkpoint that has not run:
// a repair of those files needs its segments' state (entries, size) and its cursors.
type closedLedger struct {
	l   *Ledger
	seq uint64 // the journal file in use when it was closed
}

// rememberClosed keeps l, just closed, until a checkpoint covers its last journal file.
func (e *Engine) rememberClosed(l *Ledger) {
	e.queue.mu.Lock()
	seq := e.queue.pendingSeq
	e.queue.mu.Unlock()
	dir := l.dirPath()
	e.io.repairs.mu.Lock()
	e.io.repairs.closed[dir] = append(e.io.repairs.closed[dir], closedLedger{l, seq})
	e.io.repairs.mu.Unlock()
}

// forgetClosedBefore drops the closed ledgers whose files a checkpoint up to journal file
// first-1 made durable.
func (e *Engine) forgetClosedBefore(first uint64) {
	e.io.repairs.mu.Lock()
	defer e.io.repairs.mu.Unlock()
	for dir, cls := range e.io.repairs.closed {
		kept := cls[:0]
		for _, c := range cls {
			if c.seq >= first {
				kept = append(kept, c)
			}
		}
		if len(kept) == 0 {
			delete(e.io.repairs.closed, dir)
		} else {
			e.io.repairs.closed[dir] = kept
		}
	}
}

// classifyFile says what kind of file p is.
func classifyFile(p string) (kind repairKind, segID int64, derived bool) {
	base := path.Base(p)
	if id, ok := parseHexName(base, ".seg"); ok {
		return repairSegment, id, false
	}
	if _, ok := parseHexName(base, ".idx"); ok {
		return repairUnknown, 0, true
	}
	switch base {
	case "cursors.log":
		return repairCursorLog, 0, false
	case "NAME":
		return repairName, 0, false
	}
	return repairUnknown, 0, false
}

// ledgerOfFile finds the ledger a file belongs to: an open one (holding the segment, for a
// segment), else one closed since the last checkpoint.
func (e *Engine) ledgerOfFile(p string, kind repairKind, segID int64) *Ledger {
	dir := path.Dir(p)
	has := func(l *Ledger) bool {
		if kind != repairSegment {
			return true
		}
		l.mu.RLock()
		defer l.mu.RUnlock()
		return l.segByIDLocked(segID) != nil
	}
	for _, l := range e.openLedgers() {
		if l.dirPath() == dir && has(l) {
			return l
		}
	}
	e.io.repairs.mu.Lock()
	cls := append([]closedLedger(nil), e.io.repairs.closed[dir]...)
	e.io.repairs.mu.Unlock()
	for i := len(cls) - 1; i >= 0; i-- {
		if has(cls[i].l) {
			return cls[i].l
		}
	}
	return nil
}

// needRepair makes p a repair target after cause (a failed write or fsync of it): see "Repairs".
// l is p's ledger when the caller knows it. Index files are derived data (checked against their
// segment when read, rebuilt if wrong): one whose fsync failed is removed instead.
func (e *Engine) needRepair(p string, l *Ledger, cause error) {
	kind, segID, derived := classifyFile(p)
	if derived {
		e.log.Warn("segment index fsync failed; removing it (it is rebuilt from the segment when needed)", "file", p, "err", cause)
		e.files.forget(p)
		_ = e.fs.Remove(p)
		return
	}
	if l == nil {
		l = e.ledgerOfFile(p, kind, segID)
	}
	if l == nil {
		if _, err := e.fs.Stat(p); vfs.IsNotExist(err) {
			return // removed since and held by no ledger (a trimmed segment): nothing to keep
		}
	}
	e.io.repairs.mu.Lock()
	_, known := e.io.repairs.targets[p]
	if !known {
		e.io.repairs.targets[p] = &fileRepair{path: p, kind: kind, segID: segID, l: l, cause: cause}
	}
	e.io.repairs.mu.Unlock()
	if !known {
		e.log.Error("I/O error on a ledger file: its ledger is fenced and the file is rewritten from the journal; no checkpoint until then",
			"file", p, "err", cause)
	}
	if l != nil && e.isOpen(l) {
		l.fence(cause)
		l.wakeWriteWaiters()
	}
	e.io.kickCheckpointer()
}

// isOpen reports whether l is the open ledger of its name.
func (e *Engine) isOpen(l *Ledger) bool {
	e.table.mu.Lock()
	defer e.table.mu.Unlock()
	return e.table.ledgers[l.name] == l
}

// repairsPending is the number of files waiting to be rewritten.
func (e *Engine) repairsPending() int {
	e.io.repairs.mu.Lock()
	defer e.io.repairs.mu.Unlock()
	return len(e.io.repairs.targets)
}

// firstRepairCause is the cause of one pending repair (the first by path), for error messages.
func (e *Engine) firstRepairCause() error {
	e.io.repairs.mu.Lock()
	defer e.io.repairs.mu.Unlock()
	var first *fileRepair
	for _, r := range e.io.repairs.targets {
		if first == nil || r.path < first.path {
			first = r
		}
	}
	if first == nil {
		return nil
	}
	if first.last != nil {
		return fmt.Errorf("%s: %w (last repair attempt: %v)", first.path, first.cause, first.last)
	}
	return fmt.Errorf("%s: %w", first.path, first.cause)
}

// repairPendingFor returns an error when a file of the ledger called name waits to be rewritten:
// loaded from its files now, the ledger could miss acknowledged entries.
func (e *Engine) repairPendingFor(name string) error {
	dir := e.ledgerDir(name)
	e.io.repairs.mu.Lock()
	defer e.io.repairs.mu.Unlock()
	for p, r := range e.io.repairs.targets {
		if path.Dir(p) == dir {
			return fmt.Errorf("storage: ledger %q: %w: its file %s is being rewritten from the journal after an I/O error (%v); retry later",
				name, ErrFenced, path.Base(p), r.cause)
		}
	}
	return nil
}

// requestRepairs runs the repairs on the applier (which orders them with every other write of a
// ledger's files) and waits for them (checkpointer only).
func (e *Engine) requestRepairs() {
	done := make(chan struct{})
	e.enqueue(nil, func(*batch) item {
		return item{kind: kRepair, done: func(mtypes.Position, error) { close(done) }}
	})
	<-done
}

// runRepairs tries to rewrite every repair target once (applier only, or after it stopped).
func (e *Engine) runRepairs() {
	e.io.repairs.mu.Lock()
	targets := make([]*fileRepair, 0, len(e.io.repairs.targets))
	for _, r := range e.io.repairs.targets {
		targets = append(targets, r)
	}
	e.io.repairs.mu.Unlock()
	sort.Slice(targets, func(i, j int) bool { return targets[i].path < targets[j].path })
	var segs []*fileRepair
	for _, r := range targets {
		var err error
		if _, serr := e.fs.Stat(r.path); vfs.IsNotExist(serr) {
			e.finishRepair(r, nil) // removed since (trimmed, or its ledger deleted): nothing to keep
			continue
		}
		switch {
		case r.l == nil:
			err = errors.New("the file's ledger is not known to this process: restart the broker (recovery rewrites it from the journal)")
		case r.kind == repairSegment:
			segs = append(segs, r)
			continue
		case r.kind == repairCursorLog:
			err = r.l.rewriteCursorLog(r.l.liveCursorRecords())
		case r.kind == repairName:
			err = e.rewriteNameFile(r.l)
		default:
			err = fmt.Errorf("no way to rewrite %s", r.path)
		}
		e.finishRepair(r, err)
	}
	if len(segs) > 0 {
		errs := e.repairSegments(segs)
		for i, r := range segs {
			e.finishRepair(r, errs[i])
		}
	}
}

// finishRepair records the outcome of one repair attempt.
func (e *Engine) finishRepair(r *fileRepair, err error) {
	e.io.repairs.mu.Lock()
	r.tries++
	r.last = err
	if err == nil && e.io.repairs.targets[r.path] == r {
		delete(e.io.repairs.targets, r.path)
	}
	e.io.repairs.mu.Unlock()
	switch {
	case err == nil:
		e.io.repaired.Add(1)
		e.log.Info("file rewritten from the journal and fsynced after an I/O error", "file", r.path, "attempts", r.tries)
	case r.tries == 1:
		e.io.repairFailures.Add(1)
		e.log.Warn("rewriting a file after an I/O error failed; retrying", "file", r.path, "err", err)
	default:
		e.io.repairFailures.Add(1)
		e.log.Debug("rewriting a file after an I/O error failed again", "file", r.path, "attempts", r.tries, "err", err)
	}
}

// rewriteNameFile writes l's NAME file again and makes it durable with its directory entry.
func (e *Engine) rewriteNameFile(l *Ledger) error {
	return e.writeNameFile(l.name, l.dirPath())
}

// segmentFix is the progress of one segment's repair through the journal, newest file first.
type segmentFix struct {
	r       *fileRepair
	cf      *cachedFile
	entries int64 // the segment's confirmed entries: those at or after are not rewritten
	end     int64 // file offset where the entries accounted for so far start
	next    int64 // the entry expected last in the next (older) journal file
	err     error
	gone    bool // the segment or its file no longer exists: nothing to repair
	matches []journalMatch
	buf     []byte
}

// journalMatch is one journal record of a segment under repair: an entry record (rec) or a
// reference to entries written directly (ref).
type journalMatch struct {
	eid int64
	rec []byte
	ref *entryRef
}

// repairSegments rewrites the segments of rs from the journal files not yet retired and fsyncs
// them; errs[i] is the outcome for rs[i] (applier only, or after it stopped).
func (e *Engine) repairSegments(rs []*fileRepair) []error {
	errs := make([]error, len(rs))
	fixes := map[int64]*segmentFix{}
	for i, r := range rs {
		f := &segmentFix{r: r}
		r.l.mu.RLock()
		seg := r.l.segByIDLocked(r.segID)
		if seg != nil {
			f.entries, f.end = seg.entries, seg.size
			if !seg.created {
				f.end = headerSize
			}
		}
		r.l.mu.RUnlock()
		cf, err := e.files.acquire(r.path, false)
		switch {
		case vfs.IsNotExist(err):
			f.gone = true
		case err != nil:
			errs[i] = fmt.Errorf("storage: repair open %s: %w", r.path, err)
			continue
		case seg == nil:
			e.files.release(cf)
			errs[i] = fmt.Errorf("storage: repair %s: segment %d is not known to its ledger", r.path, r.segID)
			continue
		default:
			f.cf = cf
		}
		f.next = f.entries - 1
		fixes[r.segID] = f
	}
	defer func() {
		for _, f := range fixes {
			if f.cf != nil {
				e.files.release(f.cf)
			}
		}
	}()
	e.stateMu.Lock()
	first := e.firstJournal
	e.stateMu.Unlock()
	e.queue.mu.Lock()
	last := e.queue.pendingSeq
	e.queue.mu.Unlock()
	var data []byte
	for seq := last; seq >= first && seq > 0 && pendingFixes(fixes); seq-- {
		var err error
		data, err = e.readJournalFile(seq, data)
		if err != nil {
			for _, f := range fixes {
				f.fail(err)
			}
			break
		}
		if len(data) == 0 {
			continue
		}
		e.collectMatches(seq, data, fixes)
		for _, f := range fixes {
			if f.err == nil && !f.gone && len(f.matches) > 0 {
				f.applyFile()
			}
			f.matches = f.matches[:0]
		}
	}
	for i, r := range rs {
		f := fixes[r.segID]
		if f == nil || errs[i] != nil {
			continue
		}
		if f.gone {
			continue
		}
		if f.err == nil && f.next < 0 {
			// The journal holds the segment's first entry: its header was written since the
			// last checkpoint too.
			if f.end != headerSize {
				f.fail(fmt.Errorf("the journal's entries of segment %d start at offset %d, not after its header", r.segID, f.end))
			} else {
				_, err := f.cf.f.WriteAt(appendHeader(nil, magicSegment, uint64(r.segID)), 0)
				f.fail(err)
			}
		}
		if f.err == nil {
			if err := vfs.DataSync(f.cf.f); err != nil {
				e.m.fsyncErrors.Add(1)
				f.fail(fmt.Errorf("fsync: %w", err))
			}
		}
		if f.err != nil {
			errs[i] = fmt.Errorf("storage: repair %s: %w", r.path, f.err)
		}
	}
	return errs
}

func pendingFixes(fixes map[int64]*segmentFix) bool {
	for _, f := range fixes {
		if f.err == nil && !f.gone && f.next >= 0 {
			return true
		}
	}
	return false
}

func (f *segmentFix) fail(err error) {
	if f.err == nil && err != nil {
		f.err = err
	}
}

// readJournalFile reads journal file seq whole into buf (reused); an empty result means there is
// no such file (a sequence number skipped when creating a file failed) or it was never written.
func (e *Engine) readJournalFile(seq uint64, buf []byte) ([]byte, error) {
	f, err := e.fs.OpenFile(e.journalPath(seq), vfs.ReadOnly)
	if vfs.IsNotExist(err) {
		return buf[:0], nil
	}
	if err != nil {
		return nil, fmt.Errorf("open journal %d: %w", seq, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if int64(cap(buf)) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("read journal %d: %w", seq, err)
	}
	return buf[:n], nil
}

// collectMatches finds the records of the segments under repair in journal file seq (data), in
// file order.
func (e *Engine) collectMatches(seq uint64, data []byte, fixes map[int64]*segmentFix) {
	hseq, _, seed, err := parseJournalHeader(data)
	if err != nil || hseq != seq {
		return // never written under this sequence number
	}
	for off := headerSize; off < len(data); {
		body, sz, err := decodeJournalRecord(data[off:], seed)
		if err != nil || (len(body) > 0 && body[0] == jEnd) {
			return // the end of what was written (and made durable) in this file
		}
		off += sz
		if len(body) < 5 {
			continue
		}
		rest := body[5:]
		switch body[0] {
		case jEntry:
			if len(rest) < 8 {
				continue
			}
			f := fixes[int64(binary.LittleEndian.Uint64(rest))]
			if f == nil || f.err != nil || f.gone {
				continue
			}
			rec := rest[8:]
			segBody, _, err := decodeRecord(rec, nil)
			if err != nil {
				f.fail(fmt.Errorf("journal %d: bad entry record", seq))
				continue
			}
			eid, _, _, err := parseSegBody(segBody)
			if err != nil {
				f.fail(fmt.Errorf("journal %d: %w", seq, err))
				continue
			}
			if eid < f.entries {
				f.matches = append(f.matches, journalMatch{eid: eid, rec: rec})
			}
		case jEntryRef:
			ref, err := parseEntryRef(rest)
			if err != nil {
				continue
			}
			if f := fixes[ref.ledgerID]; f != nil && f.err == nil && !f.gone && ref.first < f.entries {
				f.matches = append(f.matches, journalMatch{eid: ref.first, ref: &ref})
			}
		}
	}
}

// applyFile writes the entries one journal file holds for f's segment at their offsets: they end
// where the entries of the newer files start (f.end) and come right before them (applier only).
func (f *segmentFix) applyFile() {
	var total, count int64
	for i, m := range f.matches {
		if m.ref != nil {
			if m.ref.first+int64(m.ref.count) > f.entries {
				clipped, err := f.clipRef(*m.ref, i == len(f.matches)-1)
				if err != nil {
					f.fail(err)
					return
				}
				f.matches[i].ref, m.ref = &clipped, &clipped
			}
			total += m.ref.length
			count += int64(m.ref.count)
		} else {
			total += int64(len(m.rec))
			count++
		}
	}
	start, id := f.end-total, f.next-count+1
	if start < headerSize || id < 0 {
		f.fail(fmt.Errorf("the journal holds more of segment %d than its %d entries", f.r.segID, f.entries))
		return
	}
	off, runOff := start, start
	run := f.buf[:0]
	flush := func() {
		if len(run) > 0 && f.err == nil {
			if _, err := f.cf.f.WriteAt(run, runOff); err != nil {
				f.fail(fmt.Errorf("write: %w", err))
			}
		}
		run = run[:0]
	}
	for _, m := range f.matches {
		if m.eid != id {
			f.fail(fmt.Errorf("journal entries of segment %d out of sequence: %d where %d was expected", f.r.segID, m.eid, id))
			return
		}
		if m.ref != nil {
			flush()
			if m.ref.off != off {
				f.fail(fmt.Errorf("direct entries of segment %d at offset %d where %d was expected", f.r.segID, m.ref.off, off))
				return
			}
			off += m.ref.length
			id += int64(m.ref.count)
			runOff = off
			continue
		}
		run = append(run, m.rec...)
		off += int64(len(m.rec))
		id++
	}
	flush()
	f.buf = run[:0]
	f.end, f.next = start, id-count-1
}

// clipRef takes the confirmed part of a reference to direct entries that go past the segment's
// confirmed end: the ledger was fenced (a repair target of it appeared) while the applier was
// between the entries of that group, so the first ones are confirmed and acknowledged and the
// others failed. Only the newest confirmed entries can be such a group: it must be the last match
// of the newest journal file holding any (last), and its confirmed part ends where the confirmed
// entries end (f.end).
func (f *segmentFix) clipRef(ref entryRef, last bool) (entryRef, error) {
	n := f.entries - ref.first
	length := f.end - ref.off
	if !last || f.next != f.entries-1 || n <= 0 || length <= 0 || length > ref.length {
		return ref, fmt.Errorf("direct entries %d+%d straddle the confirmed end %d", ref.first, ref.count, f.entries)
	}
	ref.count, ref.length = n, length
	return ref, nil
}

// String names a repair kind (for logs and tests).
func (k repairKind) String() string {
	return [...]string{"segment", "cursor log", "NAME", "unknown"}[k]
}
