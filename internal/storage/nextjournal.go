package storage

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// The next journal file is made ahead of rotation, off the sync loop.
//
// Making a journal file costs two flushes: its header is fsynced and then its directory (a
// recycled file is renamed). Done inline at rotation, every append queued behind the rotation
// would wait for them; on a disk whose flushes stall for hundreds of milliseconds, one such
// rotation holds receipts for as long (80-189 ms in measured runs). So as soon as journal file seq
// is opened, a preparer goroutine makes file seq+1 (header written and fsynced, directory fsynced)
// and the rotation adopts it.
//
// A prepared file holds a header and no record until it is adopted. Recovery therefore ignores
// journal files at the end of the sequence that hold no valid record (recover.go): the file
// before them is the last one, whose torn tail was never acknowledged. Header flags: in
// SyncInterval mode a prepared file always carries journalFlagPrevUnclean (its predecessor's
// final fsync may still run when it is adopted, and a torn tail is acceptable in that mode); in
// SyncAlways mode it carries none and is adopted only when its predecessor was not abandoned
// (otherwise the file is made inline, with the flag).

// Journal files are made full size (prefill).
//
// A group commit that appends to a journal file grows it: its fdatasync must also commit the
// file's new size and blocks (an ext4 journal commit, which waits for other files' ordered data
// such as the segment files written behind the journal). Overwriting a file that is already
// allocated changes no metadata, which is why journal files are recycled (recycle.go). A fresh
// data directory has nothing to recycle, so without a fill its first journal files would append
// for their whole life (at a low rate, hours), and a benchmark on a fresh directory would measure
// something else than the steady state. A 5 KiB append + fdatasync every 1 ms has a p50 of
// 0.36-0.82 ms appending and 0.25-0.35 ms into a zero-filled file (4 alternating pairs of 5 s);
// the replication latency test has 61-141 fsyncs over 10 ms with the fill against 160-320 without
// (docs/performance.md, "Storage and replication internals").
//
// So the preparer fills a file it makes with zeros up to JournalFileBytes (from the size a
// recycled file already has) before the sync loop adopts it. The fill is paced: each chunk is
// written and fdatasynced on its own, then the preparer rests twice as long as the chunk took, so
// the journal's group commits never queue behind more than one chunk of zeros and the fill takes
// at most about a third of the disk's time (a 64 MiB burst is what made the checkpoint a latency
// spike; see paceWriteback). A current file that is not full size (the first file of a fresh
// directory, a file made inline) has its successor prepared once it holds prefillAfter bytes, and
// is rotated as soon as that successor is ready, so appending lasts a few MiB. Workloads that
// write less than that (most tests) never pay for a fill. If the sync loop needs the prepared
// file before its fill is done (a full current file, or Close), the fill stops where it is
// (hurry) and the file is used as it is: a fill never holds up a rotation for longer than a chunk.
// Under a sustained high rate, journal files written to their end are full size themselves once
// recycled, so fills are short-lived there.
//
// Zeros after the last record are what recovery already expects of a torn tail (recover.go): they
// read as an empty record, which is never valid (decodeJournalRecord), and end the last file
// silently; a file that is not the last still ends with its end record, so a bad record before it
// is still corruption (package doc, "Files").
//
// The early rotation makes checkpoints more frequent, and a checkpoint fsyncs the directories of
// the ledgers it covers while the current journal file still covers their newer, unsynced segment
// files. Recovery handles what a crash then leaves behind: a torn segment write of a voided entry,
// and entries of a segment trimmed later in the replayed journal (recovery_test.go).

// prefillChunk is how much of a journal file is zero-filled and fdatasynced at a time.
const prefillChunk = 1 << 20

// prefillAfter is how much the engine writes into a journal file that is not full size before it
// prepares a full-size successor and moves to it.
func (e *Engine) prefillAfter() int64 { return min(4<<20, e.opts.JournalFileBytes/8) }

// nextJournalState is the sync loop's part for the journal file made ahead of rotation.
type nextJournalState struct {
	prepared *preparedJournal // being made, or made, by a preparer goroutine
	// successorReady: the current file is not full size and its full-size successor is ready,
	// latched once per sync-loop round (noteSuccessorReady)
	successorReady bool
	preparers      sync.WaitGroup
}

// preparedJournal is a journal file made ahead of use by a preparer goroutine.
type preparedJournal struct {
	seq   uint64
	f     vfs.File
	err   error
	full  bool          // the file is at least JournalFileBytes long (set with f)
	hurry chan struct{} // closed when the sync loop waits for the file: stop filling
	done  chan struct{} // closed when f and err are set
}

// hurryUp tells the preparer that the file is needed now (sync loop only, once per file).
func (p *preparedJournal) hurryUp() { close(p.hurry) }

// ready reports whether the preparation finished (sync loop only).
func (p *preparedJournal) ready() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// makeJournalFile creates journal file seq with its header, durable with its directory entry.
// With prefill (a preparer), the file is first zero-filled to JournalFileBytes unless hurry is
// set; full reports whether it reached that size.
func (e *Engine) makeJournalFile(seq uint64, flags uint32, prefill bool, hurry <-chan struct{}) (_ vfs.File, full bool, _ error) {
	f, err := e.createJournalFile(seq)
	if err != nil {
		return nil, false, fmt.Errorf("storage: create journal: %w", err)
	}
	// A file whose making failed holds no record: it is removed (recovery would skip it), so that
	// a disk that stays full does not collect one per failed attempt.
	fail := func(what string, err error) (vfs.File, bool, error) {
		_ = f.Close()
		_ = e.fs.Remove(e.journalPath(seq))
		return nil, false, fmt.Errorf("storage: %s: %w", what, err)
	}
	if prefill {
		full, err = e.fillJournalFile(f, e.journalPath(seq), hurry)
		if err != nil {
			return fail("fill journal", err)
		}
	}
	hdr := appendHeaderFlags(nil, magicJournal, seq, flags)
	if _, err := f.WriteAt(hdr, 0); err != nil {
		return fail("write journal header", err)
	}
	if err := f.Sync(); err != nil {
		return fail("sync journal", err)
	}
	if err := e.fs.SyncDir(e.journalDir); err != nil {
		return fail("sync journal dir", err)
	}
	return f, full, nil
}

// fillJournalFile writes zeros from f's size up to JournalFileBytes, a chunk at a time (written,
// fdatasynced, then a rest twice as long), and stops early when hurry is closed. It reports
// whether f reached full size. The zeros bypass the page cache where they can (whole blocks from
// f's size on, if that is block-aligned; unbuffered.go): they are there only to allocate the
// file's blocks, and through the page cache each 64 MiB file costs 64 MiB of new page-cache pages
// (12% of the unbatched catch-up's CPU, which rotates journal files every few seconds).
func (e *Engine) fillJournalFile(f vfs.File, path string, hurry <-chan struct{}) (bool, error) {
	size, err := f.Size()
	if err != nil {
		return false, err
	}
	target := e.opts.JournalFileBytes
	if size >= target {
		return true, nil
	}
	var zeros []byte
	var df vfs.File // the same file for direct writes, while the fill is block-aligned
	if e.opts.BypassCacheBytes > 0 && !e.bypassOff.Load() && size%vfs.DirectAlign == 0 {
		if df, err = vfs.OpenDirect(e.fs, path); err == nil {
			defer df.Close()
			zeros = vfs.AlignedBuffer(prefillChunk)
		} else {
			df = nil
		}
	}
	if zeros == nil {
		zeros = make([]byte, prefillChunk)
	}
	rest := time.NewTimer(0)
	defer rest.Stop()
	for off := size; off < target; {
		select {
		case <-hurry:
			return false, nil
		case <-rest.C:
		}
		start := time.Now()
		n := min(int64(len(zeros)), target-off)
		w := f
		if df != nil && n%vfs.DirectAlign == 0 {
			w = df
		}
		if _, err := w.WriteAt(zeros[:n], off); err != nil {
			return false, err
		}
		if err := vfs.DataSync(f); err != nil {
			return false, err
		}
		off += n
		rest.Reset(2 * time.Since(start))
	}
	e.m.journalFills.Add(1)
	return true, nil
}

// prepareJournal starts making journal file seq in the background (sync loop only).
func (e *Engine) prepareJournal(seq uint64) {
	if e.syncLoop.next.prepared != nil {
		return
	}
	var flags uint32
	if e.opts.Sync == SyncInterval {
		flags = journalFlagPrevUnclean
	}
	p := &preparedJournal{seq: seq, hurry: make(chan struct{}), done: make(chan struct{})}
	e.syncLoop.next.prepared = p
	e.syncLoop.next.preparers.Add(1)
	go func() {
		defer e.syncLoop.next.preparers.Done()
		defer close(p.done)
		p.f, p.full, p.err = e.makeJournalFile(seq, flags, true, p.hurry)
	}()
}

// fullSize reports whether journal file f is at least JournalFileBytes long (an error counts as
// not).
func (e *Engine) fullSize(f vfs.File) bool {
	size, err := f.Size()
	return err == nil && size >= e.opts.JournalFileBytes
}

// prepareFullSuccessor starts preparing a full-size successor of a current journal file that is
// not full size once it holds prefillAfter bytes (sync loop only, queue.mu held; see "Journal files are
// made full size").
func (e *Engine) prepareFullSuccessor() {
	if e.syncLoop.journal != nil && !e.syncLoop.journalFull && e.syncLoop.next.prepared == nil && !e.queue.stopping && e.queue.journalSize >= e.prefillAfter() {
		e.prepareJournal(e.syncLoop.journalSeq + 1)
	}
}

// noteSuccessorReady latches that the full-size successor of a current file that is not full
// size is ready (sync loop only, queue.mu held). It is called once per round, before needsDrain, so
// that needsDrain and rotateDue see the same answer: the preparer finishing between the two
// would otherwise rotate with commits in flight, which rotation never does (pipelinesync.go).
func (e *Engine) noteSuccessorReady() {
	if e.syncLoop.next.successorReady || e.syncLoop.journal == nil || e.syncLoop.journalFull {
		return
	}
	p := e.syncLoop.next.prepared
	e.syncLoop.next.successorReady = p != nil && p.seq == e.syncLoop.journalSeq+1 && p.ready() && p.err == nil && p.full
}

// rotateDue reports whether the pending batch closes its journal file: the file is full, the
// engine stops, the current file is not full size and its full-size successor is ready, or an
// import asked for it (rotateThrough; only a file that is open) (sync loop only, queue.mu held).
func (e *Engine) rotateDue() bool {
	open := e.syncLoop.journal != nil && e.queue.pending.seq == e.syncLoop.journalSeq
	return e.queue.journalSize >= e.opts.JournalFileBytes || e.queue.stopping ||
		(e.syncLoop.next.successorReady && open) || (open && e.queue.pending.seq <= e.queue.rotateThrough)
}

// takePreparedJournal returns the prepared file for journal seq if it can be used now, waiting
// for its preparation to finish; nil means make the file inline (sync loop only).
func (e *Engine) takePreparedJournal(seq uint64) vfs.File {
	p := e.syncLoop.next.prepared
	if p == nil {
		return nil
	}
	e.syncLoop.next.prepared = nil
	p.hurryUp()
	<-p.done
	if p.err != nil {
		e.log.Warn("preparing the next journal file failed; making it inline", "seq", p.seq, "err", p.err)
		return nil
	}
	if p.seq == seq && (e.opts.Sync == SyncInterval || !e.syncLoop.prevUnclean) {
		return p.f
	}
	// Not usable: the inline path recreates file seq (with the flag it needs); a prepared file
	// of another sequence number holds no record and is removed.
	_ = p.f.Close()
	if p.seq != seq {
		_ = e.fs.Remove(e.journalPath(p.seq))
	}
	return nil
}

// discardPreparedJournal waits for a preparation in flight and removes its file: it holds no
// record (sync loop only, when stopping).
func (e *Engine) discardPreparedJournal() {
	if p := e.syncLoop.next.prepared; p != nil {
		e.syncLoop.next.prepared = nil
		p.hurryUp()
		<-p.done
		if p.err == nil {
			// It holds no record: keep it as a free file (its size, maybe filled, is reused).
			_ = p.f.Close()
			e.retireJournal(p.seq)
		}
	}
	e.syncLoop.next.preparers.Wait()
}

// journalHasRecords reports whether journal file seq holds at least one valid record (recovery).
// A file without one was made ahead of use and never written, or never got a durable header. A
// file whose header is invalid but whose first record is valid for seq holds records (its header
// is corrupt, which replay reports) and is never taken for an unwritten one.
func (e *Engine) journalHasRecords(seq uint64) bool {
	f, err := e.fs.OpenFile(e.journalPath(seq), vfs.ReadOnly)
	if err != nil {
		return false
	}
	defer f.Close()
	hdr := make([]byte, headerSize+recHeaderSize)
	if n, _ := f.ReadAt(hdr, 0); n < len(hdr) {
		return false
	}
	var seeds [][]byte
	switch hseq, _, seed, err := parseJournalHeader(hdr); {
	case err == nil && hseq == seq:
		seeds = [][]byte{seed}
	case err == nil:
		return false // a recycled file whose new header never became durable
	default:
		seeds = [][]byte{journalSeed(seq), nil} // see recordsFollowHeader
	}
	bodyLen := int64(binary.LittleEndian.Uint32(hdr[headerSize:]))
	size, err := f.Size()
	if err != nil || bodyLen > maxRecordBody || bodyLen > size-int64(len(hdr)) {
		return false
	}
	rec := make([]byte, recHeaderSize+int(bodyLen))
	if n, _ := f.ReadAt(rec, headerSize); n < len(rec) {
		return false
	}
	for _, seed := range seeds {
		if _, _, err := decodeJournalRecord(rec, seed); err == nil {
			return true
		}
	}
	return false
}
