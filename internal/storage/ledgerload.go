package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

func (l *Ledger) load(ctx context.Context) error {
	e := l.e
	des, err := e.fs.ReadDir(l.dirPath())
	if err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("storage: open ledger %q: %w", l.name, err)
	}
	l.dirMade = err == nil
	if err := l.checkName(); err != nil {
		return err
	}
	var ids []int64
	idx := map[int64]bool{}
	hasCursors, hasIncarnations := false, false
	for _, de := range des {
		switch {
		case de.Name == importedIncarnationsFile:
			hasIncarnations = true
		case de.Name == "FENCED":
			l.err = fmt.Errorf("%w: ledger %q was fenced by recovery (see the log of that run)", ErrFenced, l.name)
			l.flags.Or(flagErrSet)
		case de.Name == "cursors.log":
			hasCursors = true
		default:
			if id, ok := parseHexName(de.Name, ".seg"); ok {
				ids = append(ids, id)
			} else if id, ok := parseHexName(de.Name, ".idx"); ok {
				idx[id] = true
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if hasIncarnations {
		if err := l.loadImportedIncarnations(); err != nil {
			return err
		}
	} else {
		e.setImportedIncarnations(l.name, nil)
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		seg, err := l.loadSegment(id, idx[id])
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				e.log.Error("ledger fenced: corrupt segment", "ledger", l.name, "segment", id, "err", err)
				if l.err == nil {
					l.err = fmt.Errorf("%w: %w", ErrFenced, err)
					l.flags.Or(flagErrSet)
				}
				if seg == nil {
					continue
				}
			} else {
				return err
			}
		}
		if seg.entries == 0 {
			if err == nil {
				// An empty segment (a current one the ledger never wrote to): nothing to keep.
				_ = e.fs.Remove(segPath(l.dirPath(), id))
				_ = e.fs.Remove(idxPath(l.dirPath(), id))
			} // else corrupt from its first record: kept for Repair, the ledger fenced
			continue
		}
		seg.written = seg.entries
		l.segs = append(l.segs, seg)
		l.entries += seg.entries
		l.bytes += seg.bytes
	}
	id, err := e.newLedgerID()
	if err != nil {
		return err
	}
	l.segs = append(l.segs, &segment{id: id})
	l.queue.curID = id
	if hasCursors {
		if err := l.loadCursors(); err != nil {
			return err
		}
	}
	return nil
}

func (l *Ledger) persistCreation(ctx context.Context) error {
	ch := make(chan error, 1)
	l.e.enqueue(l, func(b *batch) item {
		var start int
		b.buf, start = beginJournalRecord(b.buf, jCreate, l.slot)
		finishJournalRecord(b.buf, start)
		return item{kind: kCreate, done: func(_ mtypes.Position, err error) { ch <- err }}
	})
	select {
	case err := <-ch:
		if err != nil {
			return fmt.Errorf("storage: create ledger %q: %w", l.name, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// syncLoaded fsyncs segment file f (path p) after loading changed it. A failure is the
// segment's writeback failing. If a ledger of this process wrote the file since the last
// checkpoint (an earlier incarnation of this one, closed since: repair.go, ledgerOfFile), data
// it acknowledged may be lost on disk while the page cache still shows it, and this descriptor
// has taken the error that a later fsync (the checkpoint's) would otherwise report. So the file
// becomes a repair target, as a checkpoint's failed fsync makes it: no checkpoint retires the
// journal that holds the data until the file is rewritten from it. Otherwise everything in it
// was made durable before (by recovery or a checkpoint) and only the load's own cut is not: the
// open fails and the next one loads it again. A repair target there would have no ledger to
// rewrite it from and would hold back every checkpoint until a restart.
func (l *Ledger) syncLoaded(p string, f vfs.File) error {
	if err := f.Sync(); err != nil {
		kind, segID, _ := classifyFile(p)
		if wrote := l.e.ledgerOfFile(p, kind, segID); wrote != nil {
			l.e.needRepair(p, wrote, err)
		}
		return fmt.Errorf("storage: sync segment: %w", err)
	}
	return nil
}

// loadSegment reads a sealed segment's index, or rebuilds it by scanning the file.
func (l *Ledger) loadSegment(id int64, hasIdx bool) (*segment, error) {
	e := l.e
	p := segPath(l.dirPath(), id)
	st, err := e.fs.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("storage: stat segment: %w", err)
	}
	if hasIdx {
		if ix, err := l.readIndex(id); err == nil && ix.fileSize == st.Size && ix.ledgerID == id {
			return &segment{id: id, entries: ix.entries, bytes: ix.bytes, size: ix.fileSize, minTime: ix.minTime,
				maxTime: ix.maxTime, points: ix.points, created: true, sealed: true, idxSaved: true}, nil
		}
	}
	f, err := e.fs.OpenFile(p, vfs.ReadWrite)
	if err != nil {
		return nil, fmt.Errorf("storage: open segment: %w", err)
	}
	defer f.Close()
	seg := &segment{id: id, created: true, sealed: true}
	hdr := make([]byte, headerSize)
	if n, _ := f.ReadAt(hdr, 0); n < headerSize {
		// A segment whose header never became durable holds no entries.
		return seg, nil
	}
	lost := false
	if hid, herr := parseHeader(hdr, magicSegment); herr != nil || int64(hid) != id {
		if herr != nil && !errors.Is(herr, errUnsupportedVersion) {
			if lost, err = entryZeroFollowsHeader(f, st.Size); err != nil {
				return nil, fmt.Errorf("storage: scan segment %d: %w", id, err)
			}
		}
		if !lost {
			return nil, fmt.Errorf("%w: segment %d header: %v", ErrCorrupt, id, herr)
		}
	}
	// With SyncInterval a bad record is a torn tail (segment data may run ahead of the journal),
	// but not in a segment whose header was damaged after it became durable.
	interval := e.opts.Sync == SyncInterval && !lost
	seg.size = headerSize
	badAt, err := scanRecords(f, headerSize, st.Size, func(off int64, body []byte) bool {
		eid, pt, data, err := parseSegBody(body)
		if err != nil || eid != seg.entries {
			return false
		}
		seg.addEntry(off, int64(recHeaderSize+len(body)), pt, int64(len(data)))
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("storage: scan segment %d: %w", id, err)
	}
	switch verdict := classifyBadRecord(f, badAt, st.Size, interval); verdict {
	case recordsClean:
	case recordsPadded:
		// The zeros after a block written around the page cache (unbuffered.go), not a torn tail.
		if err := f.Truncate(badAt); err != nil {
			return nil, fmt.Errorf("storage: truncate segment padding: %w", err)
		}
		if err := l.syncLoaded(p, f); err != nil {
			return nil, err
		}
	case recordsDamagedTail, recordsDamagedMiddle, recordsDamagedUnsearched:
		return seg, fmt.Errorf("%w: segment %d: %s", ErrCorrupt, id, verdict.describe(badAt, st.Size, seg.entries))
	case recordsTornTail:
		e.log.Warn("truncating torn segment tail", "ledger", l.name, "segment", id, "offset", badAt, "size", st.Size)
		e.m.tornTails.Add(1)
		if err := f.Truncate(badAt); err != nil {
			return nil, fmt.Errorf("storage: truncate segment: %w", err)
		}
		if err := l.syncLoaded(p, f); err != nil {
			return nil, err
		}
	}
	if lost {
		// The header alone was damaged after the entries were written, and the records check
		// out: write it again, as replay does for a segment the journal names (scanSegment).
		e.log.Warn("segment header unreadable, entry 0 behind it; header written again", "ledger", l.name, "segment", p)
		if _, err := f.WriteAt(appendHeader(nil, magicSegment, uint64(id)), 0); err != nil {
			return nil, fmt.Errorf("storage: rewrite segment %d header: %w", id, err)
		}
		if err := l.syncLoaded(p, f); err != nil {
			return nil, err
		}
	}
	l.saveIndex(seg)
	return seg, nil
}

// recordsVerdict is what a segment's records are, for loading and Repair alike: a segment that no
// journal file names holds only checkpointed entries, so a bad record in it is damage unless it is
// the padding of a direct write or a torn tail (a short record, or zeros to the end of the file).
type recordsVerdict int

const (
	recordsClean         recordsVerdict = iota // every record reads to the end of the file
	recordsPadded                              // zeros that end a block written around the page cache: cut quietly
	recordsTornTail                            // a short record or zeros to the end: a torn write, cut
	recordsDamagedTail                         // non-zero bytes with no valid record after them: damage
	recordsDamagedMiddle                       // a bad record with valid records after it: damage
	// non-zero bytes after a bad record whose search for valid records gave up (validRecordAfter):
	// valid data may follow, so damage
	recordsDamagedUnsearched
)

// damaged reports whether the verdict is damage (the ledger is fenced; Repair cuts it).
func (v recordsVerdict) damaged() bool { return v >= recordsDamagedTail }

// classifyBadRecord says what the bad record at bad (-1: none) of a segment of size bytes is.
// With anyBadIsTorn (loading in SyncInterval mode, where segment data may run ahead of the durable
// journal) every bad record that is not padding is a torn tail, and nothing after it is read.
func classifyBadRecord(f vfs.File, bad, size int64, anyBadIsTorn bool) recordsVerdict {
	switch {
	case bad < 0:
		return recordsClean
	case isBlockPadding(f, bad, size):
		return recordsPadded
	case anyBadIsTorn:
		return recordsTornTail
	}
	switch validRecordAfter(f, bad, size) {
	case validFound:
		return recordsDamagedMiddle
	case validSearchGaveUp:
		return recordsDamagedUnsearched
	}
	if bad+int64(recHeaderSize) > size || tailIsZero(f, bad, size) {
		return recordsTornTail
	}
	return recordsDamagedTail
}

// describe names the damage for an error or a repair report; entries is the count of good
// entries before bad.
func (v recordsVerdict) describe(bad, size, entries int64) string {
	what := fmt.Sprintf("bad record at offset %d of %d after entry %d", bad, size, entries-1)
	switch v {
	case recordsDamagedMiddle:
		return what + ", valid data follows"
	case recordsDamagedTail:
		return what + ", non-zero bytes to the end of the file"
	case recordsDamagedUnsearched:
		return what + ", non-zero bytes after it that may hold valid records (too costly to search)"
	}
	return what
}

// validSearch is the outcome of validRecordAfter.
type validSearch int

const (
	validNone validSearch = iota
	validFound
	validSearchGaveUp
)

// validRecordAfter looks for any well-formed record starting after a bad one (a sign of
// corruption in the middle rather than a torn tail). It checks each byte offset up to 1 MiB on,
// checksumming at most resyncBudget of the window's size: crafted bytes whose every offset claims
// a record of megabytes would otherwise cost terabytes of checksums. A search that gives up
// cannot rule out valid data after the bad record, which counts as damage.
func validRecordAfter(f vfs.File, bad, size int64) validSearch {
	end := min(size, bad+1<<20+maxRecordBody)
	n := end - bad
	if n <= 0 {
		return validNone
	}
	buf := make([]byte, n)
	got, _ := f.ReadAt(buf, bad)
	buf = buf[:got]
	budget := resyncBudget(1 << 20)
	for i := 1; i < len(buf)-recHeaderSize && i < 1<<20; i++ {
		ln := binary.LittleEndian.Uint32(buf[i:])
		if ln >= segBodyPrefix && int(ln) <= len(buf)-i-recHeaderSize {
			if budget -= int(ln); budget < 0 {
				return validSearchGaveUp
			}
			if _, _, err := decodeRecord(buf[i:], nil); err == nil {
				return validFound
			}
		}
	}
	return validNone
}

func tailIsZero(f vfs.File, from, size int64) bool {
	buf := make([]byte, 64<<10)
	for off := from; off < size; {
		n, _ := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if n <= 0 {
			return true
		}
		for _, c := range buf[:n] {
			if c != 0 {
				return false
			}
		}
		off += int64(n)
	}
	return true
}

// entryZeroFollowsHeader reports whether a valid record of entry 0 starts right after a segment's
// header. A segment whose header does not read but whose entry 0 does had its header alone damaged
// after the entries were written: replay and loading write the header again and read the records,
// each checked by its own checksum and id (docs/storage.md, "Recovery").
func entryZeroFollowsHeader(f vfs.File, size int64) (bool, error) {
	if ok, err := recordContinuesAt(f, headerSize, size, 0); err != nil || !ok {
		return false, err
	}
	valid := false
	_, err := scanRecords(f, headerSize, size, func(_ int64, body []byte) bool {
		eid, _, _, perr := parseSegBody(body)
		valid = perr == nil && eid == 0
		return false // one record is the answer
	})
	return valid, err
}

// scanRecords calls fn for each valid record from off to size; it returns the offset of the
// first invalid record (or -1 if the file ends cleanly) — fn returning false also marks it invalid.
func scanRecords(f vfs.File, off, size int64, fn func(off int64, body []byte) bool) (int64, error) {
	buf := make([]byte, min(1<<20, max(size-off, recHeaderSize))) // grown for a larger record
	for off < size {
		want := min(int64(len(buf)), size-off)
		n, err := f.ReadAt(buf[:want], off)
		if err != nil && err != io.EOF {
			return -1, err
		}
		chunk := buf[:n]
		pos := 0
		for pos < len(chunk) {
			body, sz, err := decodeRecord(chunk[pos:], nil)
			if err != nil {
				if pos == 0 && len(chunk) >= recHeaderSize {
					// A record larger than the buffer: grow and retry.
					need := int64(binary.LittleEndian.Uint32(chunk)) + recHeaderSize
					if need <= maxRecordBody+recHeaderSize && need > int64(len(buf)) && off+need <= size {
						buf = make([]byte, need)
						break
					}
				}
				if pos > 0 && len(chunk) < int(want) {
					return off + int64(pos), nil
				}
				if pos > 0 {
					break // refill from this record
				}
				return off, nil
			}
			if !fn(off+int64(pos), body) {
				return off + int64(pos), nil
			}
			pos += sz
		}
		if pos == 0 && n < int(want) {
			return off, nil
		}
		off += int64(pos)
		if n == 0 {
			return off, nil
		}
	}
	return -1, nil
}

func (l *Ledger) readIndex(id int64) (*segIndex, error) {
	f, err := l.e.fs.OpenFile(idxPath(l.dirPath(), id), vfs.ReadOnly)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sz, err := f.Size()
	if err != nil {
		return nil, err
	}
	if sz > 64<<20 {
		return nil, fmt.Errorf("%w: index too large", ErrCorrupt)
	}
	b := make([]byte, sz)
	if n, _ := f.ReadAt(b, 0); int64(n) != sz {
		return nil, fmt.Errorf("%w: short index read", ErrCorrupt)
	}
	return decodeIndex(b)
}

// saveIndex writes a sealed segment's index file. It is derived data: written without fsync
// (the checkpoint syncs it), checked against the segment's size when read, rebuilt if wrong.
func (l *Ledger) saveIndex(seg *segment) {
	if seg.entries == 0 || seg.idxSaved || seg.size < minIndexedSegment {
		return
	}
	ix := &segIndex{ledgerID: seg.id, entries: seg.entries, bytes: seg.bytes, fileSize: seg.size,
		minTime: seg.minTime, maxTime: seg.maxTime, points: seg.points}
	p := idxPath(l.dirPath(), seg.id)
	f, err := l.e.fs.OpenFile(p, vfs.ReadWrite|vfs.Create|vfs.Trunc)
	if err == nil {
		_, err = f.WriteAt(encodeIndex(ix), 0)
		_ = f.Close()
	}
	if err != nil {
		l.e.log.Warn("cannot write segment index; it will be rebuilt on next open", "ledger", l.name, "segment", seg.id, "err", err)
		_ = l.e.fs.Remove(p)
		return
	}
	seg.idxSaved = true
}
