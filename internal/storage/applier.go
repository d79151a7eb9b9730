package storage

import "github.com/meridian-mq/meridian/internal/mtypes"

// applyJob is one batch (or a bare journal rotation) handed from the sync loop to the applier.
type applyJob struct {
	b      *batch
	err    error
	rotate bool // after this, journal file seq is closed: hand its files to the checkpointer
	seq    uint64
}

// applierState belongs to the applier (or to the sync loop while it applies a batch itself,
// with the applier idle: applyOnSyncLoop): the files its writes dirtied since it last handed them to
// the checkpointer, its segment write buffer, its failed writes and its names in the trash.
type applierState struct {
	jobs chan applyJob // sync loop -> applier; closed by the sync loop when it stops
	done chan struct{} // closed when the applier has finished the last job

	dirtyFiles  map[string]struct{} // files written since the last rotation, for the checkpoint's fsync
	dirtyDirs   map[string]struct{} // directories changed since the last rotation, likewise
	arena       []byte              // segment write buffer, reused by every batch (layoutEntries)
	unconfirmed []*segWrite         // writes with entries that failed at apply (unconfirmed.go)
	trashSeq    uint64              // names in the trash (janitor.go)
}

// runApplier applies durable batches (segment writes, visibility, callbacks) while the sync loop
// already writes and fsyncs the next one: a group commit round costs max(fsync, apply), not
// their sum. Batches are applied strictly in order, so callbacks stay in append order. Under a
// light load the sync loop applies a batch itself instead (applyOnSyncLoop).
func (e *Engine) runApplier() {
	defer close(e.applier.done)
	for job := range e.applier.jobs {
		e.runApplyJob(job)
	}
}

// runApplyJob applies one job and gives its batch back to the sync loop (the applier, or the sync
// loop while the applier is idle: applyOnSyncLoop).
func (e *Engine) runApplyJob(job applyJob) {
	if job.b != nil {
		e.queue.mu.Lock()
		e.queue.applying = true
		e.queue.mu.Unlock()
		if job.err != nil {
			e.failBatch(job.b, job.err)
		} else {
			e.apply(job.b)
		}
	}
	if job.rotate {
		e.handOffCheckpoint(job.seq)
	}
	if job.b != nil {
		for i := range job.b.items {
			job.b.items[i] = item{}
		}
		clear(job.b.direct)
		job.b.direct = job.b.direct[:0]
	}
	e.queue.mu.Lock()
	e.queue.applying = false
	e.queue.appliedJobs++
	if job.b != nil {
		e.queue.demand.note(job.b)
		job.b.buf = job.b.buf[:0]
		job.b.items = job.b.items[:0]
		e.queue.demand.trim(job.b)
		e.queue.freeBatches = append(e.queue.freeBatches, job.b)
	}
	// cond's only waiter is the sync loop, and in its idle wait it waits for nothing the applier
	// reports; waking it there would cost a lead (leadcommit.go) what the lead saves.
	if !e.queue.lead.syncLoopIdle {
		e.queue.cond.Broadcast()
	}
	e.queue.mu.Unlock()
}

// applyOnSyncLoop reports whether the sync loop should apply job itself instead of handing it to
// the applier (sync loop only, the job already counted in handedJobs).
//
// Why: under a light load (a few thousand group commits a second, each of a few entries) the
// cost of a group commit is not its I/O but the goroutine hand-offs around it. Every hand-off to
// a parked goroutine wakes a parked thread (and the runtime wakes a second one to look for work),
// several microseconds of kernel time each (docs/performance.md, "What is left above the
// floor"). The applier exists to overlap the apply of one batch with the write and fsync of the
// next; with no next batch waiting and no fsync in flight there is nothing to overlap, so the
// sync loop applies the batch itself and saves two hand-offs (to the applier and back), whatever
// the sync mode and however the batch was committed. Applying in order still
// holds: the applier has finished every earlier job, and the sync loop hands it nothing while it
// applies. Jobs that end a journal file or run repairs always go to the applier.
func (e *Engine) applyOnSyncLoop(job applyJob) bool {
	if job.b == nil || job.rotate || job.err != nil || len(e.syncLoop.pipeline.inflight) > 0 {
		return false
	}
	for i := range job.b.items {
		if job.b.items[i].kind == kRepair {
			return false
		}
	}
	e.queue.mu.Lock()
	defer e.queue.mu.Unlock()
	return e.queue.appliedJobs+1 == e.syncLoop.handedJobs && len(e.queue.pending.items) == 0 && !e.queue.stopping
}

// apply writes a durable batch's effects to the ledgers' files and memory, then completes it.
//
// Entries are acknowledged before their segment write: they are durable in the journal, and the
// write (page cache, or the device with direct I/O) would otherwise sit between the fsync and
// every receipt. Readers do not see the gap: the entry cache holds every applied entry, and a
// reader that must read the file waits for the write (segment.written, Ledger.waitWritten). The
// write still comes before anything else of the batch is applied (a seal, a trim, a cursor
// record, a barrier) and before the applier takes the next job, so the checkpoint, which follows
// a rotation job, finds every segment written. A failed segment write after the acknowledgement
// fences the ledger and stops all checkpoints (writeSegments): the journal keeps the entries until
// a restart replays them.
func (e *Engine) apply(b *batch) {
	e.layoutEntries(b)
	var slab []byte
	for i := range b.items {
		it := &b.items[i]
		l := it.l
		if it.kind != kEntry && it.kind != kFail && len(b.writes) > 0 {
			e.writeSegments(b)
		}
		switch it.kind {
		case kFail:
			it.done(mtypes.Position{}, it.err)
		case kBarrier:
			if it.done != nil {
				it.done(mtypes.Position{}, nil)
			}
		case kEntry:
			p, err := l.applyEntry(it, b.cacheArena, &slab)
			if err == nil && e.opts.Sync == SyncInterval {
				e.m.unsyncedAcks.Add(1)
			}
			e.m.entriesWritten.Add(1)
			it.done(p, err)
		case kCursor, kDelCursor:
			err := l.applyCursorRecord(b.buf[it.off : it.off+it.n])
			if it.cursor != nil {
				if err != nil {
					it.cursor.flushFailed()
				} else {
					it.cursor.flushed(it.version)
				}
			}
			e.m.cursorFlushes.Add(1)
			if it.done != nil {
				it.done(mtypes.Position{}, err)
			}
		case kTrim:
			l.applyTrim(it.ledgerID)
			if it.done != nil {
				it.done(mtypes.Position{}, nil)
			}
		case kSeal:
			l.applySeal(it.ledgerID)
			if it.done != nil {
				it.done(mtypes.Position{}, nil)
			}
		case kCreate:
			var err error
			if !l.dirMade {
				if err = e.ensureLedgerDir(l.name, l.dirPath()); err == nil {
					l.dirMade = true
				}
			}
			if it.done != nil {
				it.done(mtypes.Position{}, err)
			}
		case kDelLedger:
			err := l.applyDelete()
			e.noteLedgerDeleted(l.name, b.seq) // an import of that name waits for its checkpoint
			if it.done != nil {
				it.done(mtypes.Position{}, err)
			}
		case kRepair:
			e.runRepairs()
			it.done(mtypes.Position{}, nil)
		}
	}
	if len(b.writes) > 0 {
		e.writeSegments(b)
	}
	e.cutUnconfirmedWrites()
}
