package storage

import (
	"bytes"
	"fmt"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Direct writes (SyncAlways): a ledger's large share of a group commit is written once.
//
// Normally every entry is written twice: into the journal, fsynced by the group commit, and after
// that fsync into its segment file through the page cache. When one group commit carries a lot of
// one ledger's data (a replicator catching up, a batching producer at full speed) the second copy
// halves the disk bandwidth the journal can use. So when a ledger's entries in one batch reach
// DirectWriteBytes, the sync loop writes them straight to the end of the ledger's segment file
// before the journal write, the journal gets one small jEntryRef record (ledger id, first entry,
// count, file offset, length) instead of the entries, and the batch's commit fdatasyncs that
// segment file alongside the journal (in parallel on the commit syncer). The batch is
// acknowledged only after both fsyncs, in order, exactly as before.
//
// Why the segment file can hold entries whose batch was never acknowledged, and how recovery
// copes:
//   - Before the first direct write to a segment in a journal file, a jDirectStart record for that
//     segment is made durable in that journal file (it rides an ordinary group commit, and the sync
//     loop waits for that commit and for the applier before the first direct write: "armed").
//     Recovery scans every segment named by a jDirectStart and, after replay, truncates whatever
//     follows its last valid entry. Without that record a crash could leave unacknowledged direct
//     data (pages landing out of order) behind the segment's valid entries, which loading would
//     take for corruption in the middle of the segment.
//   - A direct write starts only when every earlier entry of the segment is already in the file
//     (the applier has written all batches handed to it; from then on all of the ledger's entries go
//     direct until it leaves direct mode), so the segment's fdatasync makes the whole prefix durable:
//     an acknowledged direct write is always a contiguous valid prefix of the file.
//   - A jEntryRef whose entries recovery does not find (the crash came between the journal's fsync
//     and the segment's) was never acknowledged: recovery voids that ledger id from the first
//     missing entry on (later records of it in the journal were not acknowledged either:
//     acknowledgements are in commit order) and truncates the segment there.
//   - A failed write or fsync of a batch with direct writes fails it like a failed journal fsync
//     (fences, void records), and the sync loop truncates the segment back to the start of the
//     failed direct data, so a reopened ledger does not show entries that were reported failed; the
//     void records make recovery truncate there too.
//
// A ledger enters direct mode after two consecutive batches at or above the threshold and leaves
// it after eight consecutive batches below a quarter of it, and on any failure; entering it again
// costs one pipeline drain, so a stream hovering around the threshold does not flap. At a journal rotation the ledgers in
// direct mode stay in it: their jDirectStart records are the first records of the next journal file,
// fsynced before its first batch (carryDirect). Rotation still counts the full entry bytes (the journal size that
// triggers a checkpoint is computed when entries are queued), so recovery work stays bounded by
// JournalFileBytes of data whatever share of it was written directly.

// directWrites is the sync loop's direct-write state: per-ledger state, the count of batches
// planned, and whether the sync loop should let the applier catch up before the next batch.
type directWrites struct {
	ledgers map[*Ledger]*directState
	groups  map[groupKey]int
	recs    [][]byte // writeDirect's scratch list of one group's records
	planned uint64
	want    bool
}

// directState is the sync loop's view of one ledger's direct writes.
type directState struct {
	segID  int64
	seq    uint64 // journal file in which segID's jDirectStart is (armed: durable once the batch is)
	armed  bool   // jDirectStart written in journal file seq; no entry of segID is queued inline since
	active bool   // writing segID directly in journal file seq
	seg    *segment
	end    int64 // active: file offset after the last entry of segID committed so far
	next   int64 // active: next entry id of segID
	// lastUse is the plan count when the ledger last had entries in a batch (for pruning).
	lastUse uint64
	// large counts the ledger's consecutive batches through the journal with at least
	// DirectWriteBytes: it is armed at the second, so that a stream hovering around the threshold
	// does not pay a pipeline drain for every batch that crosses it once.
	large int
	// small counts the consecutive batches below a quarter of DirectWriteBytes while active: a
	// ledger leaves direct mode after smallBatchesToLeave of them (a dip in a stream does not cost
	// a re-entry; a stream that slowed down stops paying a segment fsync per commit).
	small int
}

// smallBatchesToLeave: see directState.small.
const smallBatchesToLeave = 8

type groupKey struct {
	l  *Ledger
	id int64
}

// entryGroup is one ledger segment's entries in a batch.
type entryGroup struct {
	key        groupKey
	bytes      int
	count      int
	firstEntry int64
}

// journalBuf is what the journal gets for batch b.
func journalBuf(b *batch) []byte {
	if len(b.direct) > 0 {
		return b.jbuf
	}
	return b.buf
}

// planDirect decides for each ledger with entries in batch b whether they go to the journal or
// straight to the segment file, writes the direct ones, and builds b.jbuf (sync loop only, before
// b's journal write). allowed: b goes to the current journal file as it is (no void records or
// announcements prepended, not rotated away).
func (e *Engine) planDirect(b *batch, allowed bool) {
	b.jbuf = b.jbuf[:0]
	b.dbuf = b.dbuf[:0]
	e.syncLoop.direct.want = false
	enter := e.opts.DirectWriteBytes
	if enter <= 0 {
		return
	}
	e.syncLoop.direct.planned++
	if len(e.syncLoop.direct.ledgers) == 0 && len(b.buf) < enter {
		return
	}
	if e.syncLoop.direct.ledgers == nil {
		e.syncLoop.direct.ledgers = map[*Ledger]*directState{}
		e.syncLoop.direct.groups = map[groupKey]int{}
	}
	if e.syncLoop.direct.planned%64 == 0 {
		for l, st := range e.syncLoop.direct.ledgers {
			if e.syncLoop.direct.planned-st.lastUse > 64 {
				delete(e.syncLoop.direct.ledgers, l)
			}
		}
	}
	groups := e.groupEntries(b)
	if len(groups) == 0 {
		return
	}
	e.queue.mu.Lock()
	caughtUp := len(e.syncLoop.pipeline.inflight) == 0 && e.queue.appliedJobs == e.syncLoop.handedJobs
	e.queue.mu.Unlock()
	stay := max(enter/4, 1)
	var arms []byte
	for i := range groups {
		g := &groups[i]
		l := g.key.l
		st := e.syncLoop.direct.ledgers[l]
		if st != nil {
			st.lastUse = e.syncLoop.direct.planned
			if st.seq != b.seq || st.segID != g.key.id {
				if st.active && g.key.id > st.segID {
					// The ledger rolled while in direct mode: arm the new segment at once.
					st.large = max(st.large, 1)
				}
				st.armed, st.active = false, false
			}
		}
		ok := allowed && l.Err() == nil
		switch {
		case ok && st != nil && st.active && st.next == g.firstEntry && (g.bytes >= stay || st.small < smallBatchesToLeave):
			if g.bytes >= stay {
				st.small = 0
			} else {
				st.small++
			}
		case ok && st != nil && st.armed && caughtUp && g.bytes >= enter && e.activate(l, st, g):
			st.small = 0
		default:
			ok = false
		}
		if ok && e.writeDirect(b, st, g) {
			st.large = 0
			continue
		}
		// Inline: the applier writes these entries after the fsync.
		if st != nil {
			st.armed, st.active = false, false
			if g.bytes < enter {
				st.large = 0
			}
		}
		if g.bytes >= enter {
			if st == nil {
				st = &directState{lastUse: e.syncLoop.direct.planned}
				e.syncLoop.direct.ledgers[l] = st
			}
			st.large++
		}
		if allowed && !b.rotate && g.bytes >= enter && st.large >= 2 && l.Err() == nil && !e.deleteMayBeReplayed(l.name) {
			st.segID, st.seq, st.armed = g.key.id, b.seq, true
			arms = appendDirectStart(arms, l.slot, g.key.id)
			// Let this batch's fsync finish and the applier write it before the next batch is cut,
			// so the next one can go direct.
			e.syncLoop.direct.want = true
		}
	}
	if len(b.direct) > 0 {
		e.buildJournalBuf(b, groups)
		b.jbuf = append(b.jbuf, arms...)
	} else {
		b.buf = append(b.buf, arms...)
	}
}

// carryDirect keeps the ledgers in direct mode across a journal rotation: their directstart
// records are written first into the next journal file and fsynced before any batch of that file,
// so its first batch can go direct again (sync loop only; the rotated file oldSeq was just closed
// and nothing is in flight). Without it every rotation (64 MiB of entries) cost a drain and an
// inline batch per ledger: with the 13 MB group commits of a catch-up, 40% of the data went
// through the journal. A failure here drops the ledgers' direct state: the next batch opens (or
// abandons) the file as usual.
func (e *Engine) carryDirect(oldSeq uint64) {
	e.queue.mu.Lock()
	stopping := e.queue.stopping
	e.queue.mu.Unlock()
	var recs []byte
	var carried []*directState
	for l, st := range e.syncLoop.direct.ledgers {
		if !st.active || st.seq != oldSeq || stopping {
			delete(e.syncLoop.direct.ledgers, l)
			continue
		}
		// The slot is announced again in the new file (a later announcement is harmless).
		recs = appendAnnounce(recs, l.slot, l.name)
		recs = appendDirectStart(recs, l.slot, st.segID)
		carried = append(carried, st)
	}
	if len(carried) == 0 {
		return
	}
	seq := oldSeq + 1
	err := e.openJournal(seq)
	if err == nil {
		sealJournalRecords(recs, journalSeed(seq))
		if err = e.writeJournal(recs); err != nil {
			err = fmt.Errorf("storage: journal write: %w", err)
		} else {
			e.syncLoop.journalOff += int64(len(recs))
			e.m.bytesWritten.Add(int64(len(recs)))
			err = e.syncJournal()
		}
		if err != nil {
			e.abandonJournal(seq, err)
		}
	}
	if err != nil {
		e.log.Warn("direct write: keeping ledgers in direct mode across a journal rotation failed", "seq", seq, "err", err)
		clear(e.syncLoop.direct.ledgers)
		return
	}
	for _, st := range carried {
		st.seq = seq
	}
}

// groupEntries collects batch b's entries per ledger segment, in order of first appearance.
func (e *Engine) groupEntries(b *batch) []entryGroup {
	clear(e.syncLoop.direct.groups)
	var groups []entryGroup
	for i := range b.items {
		it := &b.items[i]
		if it.kind != kEntry || it.l == nil {
			continue
		}
		k := groupKey{it.l, it.ledgerID}
		gi, ok := e.syncLoop.direct.groups[k]
		if !ok {
			gi = len(groups)
			e.syncLoop.direct.groups[k] = gi
			groups = append(groups, entryGroup{key: k, firstEntry: it.entryID})
		}
		g := &groups[gi]
		if g.firstEntry+int64(g.count) != it.entryID {
			// Entries of one segment are queued with consecutive ids; anything else stays inline.
			g.bytes = -1 << 40
		}
		g.bytes += it.n
		g.count++
	}
	return groups
}

// activate puts ledger l into direct mode for group g's segment (sync loop only; every batch handed
// to the applier has been applied, so the segment file holds all earlier entries and the applier
// is idle). The segment file and its directory entries are made durable first: from now on an
// acknowledgement may rest on the file alone. Not while a journal file to replay may delete the
// ledger's directory (TestRecreatedLedgerSurvivesReplayOfItsDelete).
func (e *Engine) activate(l *Ledger, st *directState, g *entryGroup) bool {
	if e.deleteMayBeReplayed(l.name) {
		// A ledger of this name was deleted in a journal file not retired yet: replaying the
		// delete after a crash removes the directory, this ledger's included. Entries that went
		// through the journal are replayed after the delete; direct ones would be gone.
		return false
	}
	l.mu.Lock()
	seg := l.segByIDLocked(g.key.id)
	if seg == nil || l.err != nil || l.closed || seg.sealed || seg.entries != g.firstEntry {
		l.mu.Unlock()
		return false
	}
	created, end := seg.created, max(seg.size, headerSize)
	l.mu.Unlock()
	if !created {
		if err := l.createSegmentFile(g.key.id); err != nil {
			e.log.Warn("direct write: create segment failed; writing through the journal", "ledger", l.name, "err", err)
			return false
		}
		l.mu.Lock()
		seg.created = true
		l.mu.Unlock()
		end = headerSize
	}
	for _, d := range []string{l.dirPath(), e.ledgersDir} {
		if err := e.fs.SyncDir(d); err != nil {
			e.log.Warn("direct write: directory fsync failed; writing through the journal", "ledger", l.name, "err", err)
			return false
		}
	}
	st.active, st.seg, st.end, st.next = true, seg, end, g.firstEntry
	return true
}

// writeDirect writes group g's records to the end of its segment file (one write) and attaches
// the write to the group's items; on failure the group stays inline (sync loop only).
func (e *Engine) writeDirect(b *batch, st *directState, g *entryGroup) bool {
	l := g.key.l
	recs := e.syncLoop.direct.recs[:0]
	shareable := e.cache.limit > 0
	for i := range b.items {
		it := &b.items[i]
		if it.kind == kEntry && it.l == l && it.ledgerID == g.key.id {
			recs = append(recs, b.buf[it.off:it.off+it.n])
			if int64(it.n-segRecordOverhead)+cacheEntryOverhead > e.cache.limit/4 {
				shareable = false
			}
		}
	}
	size := 0
	for _, r := range recs {
		size += len(r)
	}
	var buf, block []byte
	blockOff := vfs.AlignDown(st.end)
	switch {
	case e.bypassCache(size):
		// Around the page cache, in whole blocks (unbuffered.go).
		pre := int(st.end - blockOff)
		block = directBlock(b, recs, pre, shareable)
		buf = block[pre : pre+size : pre+size]
	case shareable:
		// The entry cache keeps slices of buf: it must be memory of its own. bytes.Join
		// allocates it without zeroing (every byte is copied over at once); a make and appends
		// cleared it first: ~5 % of the catch-up's CPU was clearing and copying here.
		buf = bytes.Join(recs, nil)
	default:
		// Nothing refers to buf once b is applied (the cache gets copies): it goes into b's own
		// direct buffer, reused with b (recently used memory, not fresh; see takeFreeBatch).
		buf = appendDirectRecs(b, recs)
	}
	// The scratch list is kept, not what it pointed to: a batch buffer dropped by
	// batchDemand.trim must not stay reachable through it.
	clear(recs)
	e.syncLoop.direct.recs = recs[:0]
	p := segPath(l.dirPath(), g.key.id)
	// The fdatasync that makes this write durable runs on a descriptor opened before it, of its
	// own: another fsync of the file (a later batch's, the checkpoint's) cannot take its error
	// (pipelinesync.go).
	sf, err := e.fs.OpenFile(p, vfs.ReadOnly)
	var cf *cachedFile
	if err == nil {
		cf, err = e.files.acquire(p, false)
		if err != nil {
			_ = sf.Close()
		}
	}
	if err == nil {
		fallback := block == nil
		if !fallback {
			fallback, err = e.writeAround(cf, st.seg, block, blockOff, st.end, st.end+int64(size))
		}
		if fallback {
			_, err = cf.f.WriteAt(buf, st.end)
		}
		if err != nil {
			e.files.release(cf)
			_ = sf.Close()
		}
	}
	if err != nil {
		e.log.Warn("direct write failed; writing through the journal", "ledger", l.name, "segment", g.key.id, "err", err)
		delete(e.syncLoop.direct.ledgers, l)
		return false
	}
	w := &segWrite{l: l, seg: st.seg, off: st.end, size: len(buf), buf: buf, direct: true, cf: cf, sf: sf, shareable: shareable}
	off := st.end
	for i := range b.items {
		it := &b.items[i]
		if it.kind == kEntry && it.l == l && it.ledgerID == g.key.id {
			it.w, it.fileOff = w, off
			off += int64(it.n)
		}
	}
	st.end += int64(len(buf))
	st.next += int64(g.count)
	b.direct = append(b.direct, w)
	e.m.directWrites.Add(1)
	e.m.directBytes.Add(int64(len(buf)))
	return true
}

// appendDirectRecs copies recs to the end of b's direct buffer and returns them there. When the
// buffer must grow, the groups already in it keep the old array.
func appendDirectRecs(b *batch, recs [][]byte) []byte {
	size := 0
	for _, r := range recs {
		size += len(r)
	}
	if cap(b.dbuf)-len(b.dbuf) < size {
		b.dbuf = make([]byte, 0, max(size, 2*cap(b.dbuf)))
	}
	start := len(b.dbuf)
	for _, r := range recs {
		b.dbuf = append(b.dbuf, r...)
	}
	return b.dbuf[start:len(b.dbuf):len(b.dbuf)]
}

// buildJournalBuf copies b's journal records into b.jbuf, replacing each direct group's entry
// records by one jEntryRef record at the place of its first entry.
func (e *Engine) buildJournalBuf(b *batch, groups []entryGroup) {
	jb := b.jbuf[:0]
	pos := 0
	for i := range b.items {
		it := &b.items[i]
		if it.kind != kEntry || it.w == nil || !it.w.direct {
			continue
		}
		start := it.off - entryRecordHead
		jb = append(jb, b.buf[pos:start]...)
		pos = it.off + it.n
		if it.fileOff != it.w.off {
			continue
		}
		g := &groups[e.syncLoop.direct.groups[groupKey{it.l, it.ledgerID}]]
		jb = appendEntryRef(jb, it.l.slot, it.ledgerID, g.firstEntry, g.count, it.w.off, int64(it.w.size))
	}
	b.jbuf = append(jb, b.buf[pos:]...)
}

// syncDirect fdatasyncs the segment files of b's direct writes.
func syncDirect(b *batch) error {
	var err error
	for _, w := range b.direct {
		if e2 := vfs.DataSync(w.sf); e2 != nil && err == nil {
			err = fmt.Errorf("storage: segment fsync: %w", e2)
		} else if e2 == nil {
			dropBehind(w)
		}
	}
	return err
}

// dropBehind drops the clean pages of the bytes written before w from the page cache
// (docs/storage.md, "Page cache"). Not w's own: right after their fdatasync most of its pages
// cannot be dropped yet (on ext4 only a later call frees them), so each direct write drops what
// the ones before it wrote, looking back at least 4 MiB and twice its own size.
func dropBehind(w *segWrite) {
	back := max(4<<20, 2*int64(w.size))
	from := max(0, w.off-back)
	if w.off > from {
		_ = vfs.DropCache(w.cf.f, from, w.off-from)
	}
}

// syncCommit makes a written batch durable: the journal file and, in parallel, the segment files
// it wrote directly.
func syncCommit(jf vfs.File, b *batch) error {
	if len(b.direct) == 0 {
		return vfs.DataSync(jf)
	}
	done := make(chan error, 1)
	go func() { done <- syncDirect(b) }()
	err := vfs.DataSync(jf)
	if e2 := <-done; e2 != nil && err == nil {
		err = e2
	}
	return err
}

// releaseDirect releases the segment files of b's direct writes (sync loop only, after their fsync).
func (e *Engine) releaseDirect(b *batch) {
	for _, w := range b.direct {
		if w.cf != nil {
			e.files.release(w.cf)
			w.cf = nil
		}
		if w.sf != nil {
			_ = w.sf.Close()
			w.sf = nil
		}
	}
}

// undoDirect truncates the segment files of failed batches back to where their direct data
// starts and drops those ledgers' direct state (sync loop only). The batches fail and their
// ledgers are fenced; a ledger reopened from these files must not show entries reported failed.
func (e *Engine) undoDirect(bs ...*batch) {
	from := map[*cachedFile]int64{}
	var order []*cachedFile
	for _, b := range bs {
		for _, w := range b.direct {
			if w.cf == nil {
				continue
			}
			if v, ok := from[w.cf]; !ok || w.off < v {
				if !ok {
					order = append(order, w.cf)
				}
				from[w.cf] = w.off
			}
			delete(e.syncLoop.direct.ledgers, w.l)
		}
	}
	for _, cf := range order {
		if size, err := cf.f.Size(); err == nil && size <= from[cf] {
			// An earlier undo (of the batches in flight, drainCommits) already cut below it:
			// truncating would fill the gap with zeros again.
			continue
		}
		if err := cf.f.Truncate(from[cf]); err != nil {
			e.log.Error("direct write: truncating failed direct data failed; recovery truncates it on the next start",
				"file", cf.path, "offset", from[cf], "err", err)
		}
	}
	for _, b := range bs {
		e.releaseDirect(b)
	}
}
