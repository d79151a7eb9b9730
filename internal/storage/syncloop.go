package storage

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"time"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// syncLoopState belongs to the sync loop: the journal file it writes, what it has written and not
// yet fsynced, its direct writes, and the goroutines it starts and stops (the background syncer,
// the commit syncers, the journal file preparers), each with its own part.
type syncLoopState struct {
	journal     vfs.File             // the journal file written to (nil: none open)
	journalOff  int64                // where the next group commit goes in it
	journalSeq  uint64               // its sequence number
	journalFull bool                 // it is full size: appends overwrite allocated blocks (nextjournal.go)
	unsynced    map[*Ledger]struct{} // SyncInterval: ledgers with written, unsynced appends
	lastSync    time.Time            // when the last fsync of the journal started
	prevUnclean bool                 // the next journal file follows an abandoned one
	// pendingVoids: void records to write first in the next group commit.
	pendingVoids []byte
	handedJobs   uint64 // jobs handed to the applier (the count it finished is queue.appliedJobs)
	// light: the load is light enough that group commits do not overlap; the next one with
	// nothing in flight runs its fsync on the sync loop (see commitLight).
	light bool

	interval intervalSyncs    // SyncInterval: the background syncer (intervalsync.go)
	pipeline commitPipeline   // SyncAlways, SyncPipelineDepth > 1: the commit syncers (pipelinesync.go)
	direct   directWrites     // direct writes to segment files (directwrite.go)
	next     nextJournalState // the next journal file, made ahead of rotation (nextjournal.go)
}

// runSyncLoop is the sync loop: it cuts the pending batch, writes it to the journal, fsyncs it
// (or hands the fsync on) and hands it to the applier, until Close stops the queue.
func (e *Engine) runSyncLoop() {
	defer close(e.applier.jobs)
	e.syncLoop.lastSync = time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		e.queue.mu.Lock()
		if e.queue.spare == nil {
			e.queue.spare = e.takeFreeBatch() // back-pressure: the applier is at most two batches behind
		}
		for e.syncLoopWaitsLocked() {
			e.queue.lead.syncLoopIdle = !e.queue.lead.committing
			e.queue.cond.Wait()
		}
		e.queue.lead.syncLoopIdle = false
		if e.queue.spare == nil { // a lead's commit took it (leadcommit.go)
			e.queue.mu.Unlock()
			continue
		}
		if len(e.queue.commitDone) > 0 {
			e.queue.mu.Unlock()
			e.finishCommits()
			continue
		}
		if len(e.queue.syncDone) > 0 {
			done := e.queue.syncDone
			e.queue.syncDone = nil
			e.queue.mu.Unlock()
			e.finishBackgroundSyncs(done)
			continue
		}
		if len(e.queue.pending.items) == 0 && e.queue.stopping {
			e.queue.mu.Unlock()
			e.stopCommitSyncers()
			e.stopBackgroundSyncer()
			if len(e.syncLoop.unsynced) > 0 {
				if err := e.syncJournal(); err != nil {
					e.abandonJournal(e.syncLoop.journalSeq, err)
				}
			}
			e.discardPreparedJournal()
			return
		}
		if len(e.queue.pending.items) == 0 {
			// SyncInterval with unsynced data: wait for the interval or new work (or, with an
			// fsync already running, for its result).
			if e.syncLoop.interval.inFlight > 0 {
				e.queue.cond.Wait()
				e.queue.mu.Unlock()
				continue
			}
			wait := e.opts.SyncInterval - time.Since(e.syncLoop.lastSync)
			if wait > 0 {
				if timer == nil {
					timer = time.AfterFunc(wait, func() { e.queue.mu.Lock(); e.queue.cond.Broadcast(); e.queue.mu.Unlock() })
				} else {
					timer.Reset(wait)
				}
				e.queue.cond.Wait()
				e.queue.mu.Unlock()
				continue
			}
			e.queue.mu.Unlock()
			e.startBackgroundSync(false)
			continue
		}
		// Let the batch the applier is finishing rejoin: its appenders' next appends would
		// otherwise always miss this group commit and the two halves of a closed-loop load
		// alternate with half-size fsyncs. The wait is bounded by the apply of one batch plus a
		// few scheduler yields; with an open-loop load the applier is idle and nothing waits.
		// With an fsync in flight the pending batch is cut at once instead (pipelinesync.go):
		// its fsync then overlaps the one in flight, which is the point of pipelining.
		// Under a light load (commitLight) the yields are skipped: each wakes a parked thread, and
		// group commits are too far apart for another append to be on its way.
		waited := false
		for e.queue.applying && !e.queue.stopping && len(e.syncLoop.pipeline.inflight) == 0 {
			e.queue.cond.Wait()
			waited = true
		}
		for i := 0; i < 4 && !e.queue.stopping && (waited || !e.syncLoop.light || len(e.syncLoop.pipeline.inflight) > 0); i++ {
			n := len(e.queue.pending.items)
			e.queue.mu.Unlock()
			runtime.Gosched()
			e.queue.mu.Lock()
			if len(e.queue.pending.items) == n {
				break
			}
		}
		e.noteSuccessorReady()
		if e.needsDrain() || (e.syncLoop.direct.want && (len(e.syncLoop.pipeline.inflight) > 0 || e.queue.appliedJobs != e.syncLoop.handedJobs)) {
			// The pending batch is committed inline (it rotates or opens the journal file, or
			// has no journal bytes to order it): the batches in flight go first. Or a ledger
			// was armed for direct writes: its next entries may go straight to its segment once
			// everything before is durable and written there (directwrite.go).
			e.queue.mu.Unlock()
			e.drainCommits()
			if e.syncLoop.direct.want {
				e.waitApplied()
				e.syncLoop.direct.want = false
			}
			continue
		}
		b := e.cutPendingLocked()
		e.queue.mu.Unlock()

		e.commit(b)
	}
}

// syncLoopWaitsLocked reports whether the sync loop has nothing to do: no pending batch it may
// cut, no report to take in, not stopping; or a lead commits in its stead (queue.mu held).
func (e *Engine) syncLoopWaitsLocked() bool {
	return e.queue.lead.committing || (!e.queue.stopping && len(e.syncLoop.unsynced) == 0 && len(e.queue.syncDone) == 0 &&
		len(e.queue.commitDone) == 0 && (len(e.queue.pending.items) == 0 || len(e.syncLoop.pipeline.inflight) >= e.opts.SyncPipelineDepth))
}

// cutPendingLocked takes the pending batch for a group commit and puts the spare batch in its
// place (sync loop only, or the lead committing in its stead; queue.mu held, spare taken).
func (e *Engine) cutPendingLocked() *batch {
	b := e.queue.pending
	e.queue.pending, e.queue.spare = e.queue.spare, nil // emptied by the applier when it freed it
	e.queue.pending.seq = b.seq
	e.queue.pending.moved = false
	e.prepareFullSuccessor()
	b.rotate = e.rotateDue()
	if b.rotate {
		e.queue.pending.seq = b.seq + 1
		e.queue.journalSize = headerSize
	}
	e.queue.pendingSeq = e.queue.pending.seq
	return b
}

// commit writes one batch to the journal and makes it durable (SyncAlways), then hands it to
// the applier.
func (e *Engine) commit(b *batch) {
	e.planDirect(b, e.opts.Sync == SyncAlways && !b.moved && len(e.syncLoop.pendingVoids) == 0 &&
		e.syncLoop.journal != nil && e.syncLoop.journalSeq == b.seq)
	if e.pipelined(b) && !e.commitLight(b) {
		e.commitAsync(b)
		return
	}
	var err error
	closing := b.rotate && e.syncLoop.journal != nil && e.syncLoop.journalSeq == b.seq
	if len(b.buf) > 0 || len(e.syncLoop.pendingVoids) > 0 || closing {
		if e.syncLoop.journal == nil || e.syncLoop.journalSeq != b.seq {
			err = e.openJournal(b.seq)
		}
		if err == nil {
			buf := journalBuf(b)
			if b.moved || len(e.syncLoop.pendingVoids) > 0 {
				// Void records of a failed batch go first, so they are durable no later than
				// any later record of those ledgers; a batch encoded for an abandoned journal
				// file announces its ledgers again.
				buf = append(append([]byte(nil), e.syncLoop.pendingVoids...), e.announcements(b)...)
			}
			if b.rotate {
				// A rotated file ends with an end record: what follows in a recycled file is stale.
				buf = appendEndRecord(buf)
			}
			sealJournalRecords(buf, journalSeed(e.syncLoop.journalSeq))
			err = e.writeJournal(buf)
			if err != nil {
				err = fmt.Errorf("storage: journal write: %w", err)
			} else {
				e.syncLoop.journalOff += int64(len(buf))
				e.m.bytesWritten.Add(int64(len(buf)))
			}
		}
		if err == nil && e.opts.Sync == SyncAlways {
			err = e.syncJournal()
		}
		if err == nil {
			err = syncDirect(b)
		}
	}
	if err != nil {
		e.undoDirect(b)
		e.abandonJournal(b.seq, err)
		e.voidBatch(b)
		e.toApplier(applyJob{b: b, err: err})
		return
	}
	e.releaseDirect(b)
	if len(b.buf) > 0 || len(e.syncLoop.pendingVoids) > 0 {
		e.io.noteJournalOK()
	}
	e.syncLoop.pendingVoids = e.syncLoop.pendingVoids[:0]
	if e.opts.Sync == SyncInterval {
		for _, it := range b.items {
			if it.kind == kEntry {
				if e.syncLoop.unsynced == nil {
					e.syncLoop.unsynced = map[*Ledger]struct{}{}
				}
				e.syncLoop.unsynced[it.l] = struct{}{}
			}
		}
	}
	if e.opts.Sync == SyncAlways && e.syncLoop.light {
		e.noteLoad() // appends that arrived during the inline fsync make the next ones overlap
	}
	e.toApplier(applyJob{b: b, rotate: b.rotate && e.syncLoop.journal != nil, seq: b.seq})
	switch {
	case b.rotate && e.syncLoop.journal != nil && e.opts.Sync == SyncInterval:
		// The background syncer fsyncs and closes the file; the next batches go to a new
		// one meanwhile (whose header says this one may end torn until that fsync is done).
		e.startBackgroundSync(true)
	case b.rotate && e.syncLoop.journal != nil:
		e.closeJournal()
		e.carryDirect(b.seq)
	case e.opts.Sync == SyncInterval && len(e.syncLoop.unsynced) > 0 && e.syncLoop.interval.inFlight == 0 &&
		time.Since(e.syncLoop.lastSync) >= e.opts.SyncInterval:
		e.startBackgroundSync(false)
	}
}

// voidBatch prepares void records for the entries of a batch that failed: all its ledgers are
// fenced by the applier, and none of these entries (nor any later one of those ledgers that is
// already queued) was acknowledged. They are written at the start of the next group commit.
func (e *Engine) voidBatch(b *batch) {
	type key struct {
		l  *Ledger
		id int64
	}
	first := map[key]int64{}
	var order []key
	for _, it := range b.items {
		if it.kind != kEntry || it.l == nil {
			continue
		}
		k := key{it.l, it.ledgerID}
		if v, ok := first[k]; !ok || it.entryID < v {
			if !ok {
				order = append(order, k)
			}
			first[k] = it.entryID
		}
	}
	for _, k := range order {
		e.syncLoop.pendingVoids = appendAnnounce(e.syncLoop.pendingVoids, k.l.slot, k.l.name)
		var start int
		e.syncLoop.pendingVoids, start = beginJournalRecord(e.syncLoop.pendingVoids, jVoid, k.l.slot)
		e.syncLoop.pendingVoids = binary.LittleEndian.AppendUint64(e.syncLoop.pendingVoids, uint64(k.id))
		e.syncLoop.pendingVoids = binary.LittleEndian.AppendUint64(e.syncLoop.pendingVoids, uint64(first[k]))
		finishJournalRecord(e.syncLoop.pendingVoids, start)
	}
}

func (e *Engine) announcements(b *batch) []byte {
	if !b.moved {
		return b.buf
	}
	var out []byte
	seen := map[*Ledger]bool{}
	for _, it := range b.items {
		if it.l != nil && !seen[it.l] {
			seen[it.l] = true
			out = appendAnnounce(out, it.l.slot, it.l.name)
		}
	}
	return append(out, b.buf...)
}

// writeJournal writes buf to the journal file at the current offset (sync loop only; the caller
// advances the offset).
//
// In a file made full size ahead of time (journalFull) the write is padded with zeros to the end
// of its last block. Why: that file was zero-filled around the page cache (nextjournal.go), so a
// write that ends inside a block whose page is not cached makes the kernel read the block from
// the device before it can copy the write in: every group commit waited for a device read, a
// sleep and a wake-up, before its own write. With the block written whole, the next group commit
// finds its first block in the page cache. The padding is zeros where zeros (or a recycled file's
// stale bytes, which recovery tells apart) already are, in a block the fsync writes anyway.
func (e *Engine) writeJournal(buf []byte) error {
	w := buf
	if e.syncLoop.journalFull {
		end := e.syncLoop.journalOff + int64(len(buf))
		if pad := (vfs.DirectAlign - end%vfs.DirectAlign) % vfs.DirectAlign; pad > 0 && end+pad <= e.opts.JournalFileBytes {
			w = append(buf, zeroBlock[:pad]...)
		}
	}
	_, err := e.syncLoop.journal.WriteAt(w, e.syncLoop.journalOff)
	return err
}

// zeroBlock is the padding writeJournal appends.
var zeroBlock [vfs.DirectAlign]byte

// syncJournal fsyncs the journal (sync loop only).
func (e *Engine) syncJournal() error {
	if e.syncLoop.journal == nil {
		return nil
	}
	start := time.Now()
	err := vfs.DataSync(e.syncLoop.journal)
	d := time.Since(start)
	e.syncLoop.lastSync = time.Now()
	e.recordSync(d)
	if err != nil {
		e.m.fsyncErrors.Add(1)
		return fmt.Errorf("storage: journal fsync: %w", err)
	}
	clear(e.syncLoop.unsynced)
	return nil
}

// abandonJournal gives up journal file seq after a failed write or fsync: nothing written since
// its last good fsync may be on disk, so it is never written again. Ledgers with acknowledged
// unsynced appends (SyncInterval) are fenced; later batches go to a new file whose header says
// that this one may end torn (sync loop only).
func (e *Engine) abandonJournal(seq uint64, err error) {
	if e.io.journalFailing() {
		e.log.Debug("journal write or fsync failed again; continuing in a new journal file", "seq", seq, "err", err)
	} else {
		e.log.Error("journal write or fsync failed; continuing in a new journal file", "seq", seq, "err", err)
	}
	e.io.noteJournalFailed(err)
	e.queue.mu.Lock()
	if e.queue.pending.seq <= seq {
		e.queue.pending.seq = seq + 1
		e.queue.pending.moved = len(e.queue.pending.items) > 0
		e.queue.journalSize = headerSize + int64(len(e.queue.pending.buf))
	}
	e.queue.pendingSeq = e.queue.pending.seq
	e.queue.mu.Unlock()
	e.syncLoop.prevUnclean = true
	for l := range e.syncLoop.unsynced {
		l.fence(err)
	}
	clear(e.syncLoop.unsynced)
	if e.syncLoop.journal != nil && e.syncLoop.journalSeq == seq {
		e.closeJournal()
		e.toApplier(applyJob{rotate: true, seq: seq})
	}
}

func (e *Engine) closeJournal() {
	if e.syncLoop.journal != nil {
		e.closeCommitDescriptors()
		_ = e.syncLoop.journal.Close()
		e.syncLoop.journal = nil
	}
}

func (e *Engine) openJournal(seq uint64) error {
	e.waitForCheckpoint()
	e.closeJournal()
	f := e.takePreparedJournal(seq) // made ahead of time (nextjournal.go)
	if f == nil {
		var flags uint32
		if e.syncLoop.prevUnclean || e.syncLoop.interval.closesInFlight > 0 {
			// The previous file was abandoned, or its final fsync (SyncInterval) has not
			// finished: its tail may be torn although it is not the last file.
			flags = journalFlagPrevUnclean
		}
		var err error
		if f, _, err = e.makeJournalFile(seq, flags, false, nil); err != nil {
			return err
		}
	}
	e.syncLoop.journal, e.syncLoop.journalSeq, e.syncLoop.journalOff = f, seq, headerSize
	e.openCommitDescriptors(seq) // before the first write to the file (pipelinesync.go)
	e.io.noteJournalOpened(seq)
	e.syncLoop.prevUnclean = false
	e.syncLoop.journalFull = e.fullSize(f)
	e.syncLoop.next.successorReady = false
	if e.syncLoop.journalFull {
		e.prepareJournal(seq + 1)
	} // else once it holds prefillAfter bytes (prepareFullSuccessor)
	return nil
}

// toApplier hands a job to the applier, counting it (sync loop only).
func (e *Engine) toApplier(job applyJob) {
	if job.b != nil && job.err == nil && len(job.b.items) > 0 {
		e.m.commitLatency.Observe(time.Since(job.b.opened))
	}
	e.syncLoop.handedJobs++
	if e.applyOnSyncLoop(job) {
		e.runApplyJob(job)
		return
	}
	e.applier.jobs <- job
}

// waitApplied waits until the applier has finished every job handed to it (sync loop only).
func (e *Engine) waitApplied() {
	e.queue.mu.Lock()
	for e.queue.appliedJobs != e.syncLoop.handedJobs {
		e.queue.cond.Wait()
	}
	e.queue.mu.Unlock()
}
