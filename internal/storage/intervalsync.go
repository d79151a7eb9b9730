package storage

import (
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// In SyncInterval mode appends are acknowledged once written, and the journal is fsynced every
// SyncInterval. That fsync runs in its own goroutine (the background syncer), not in the sync
// loop: on a disk whose fsync stalls for hundreds of milliseconds, an inline fsync would hold up
// every group commit queued behind it, and with them the receipts that this mode promises without
// waiting for the disk.
//
// Rules (all state below is owned by the sync loop):
//   - at most one periodic fsync of the current journal file is in flight (interval.inFlight);
//   - a rotated journal file is handed to the syncer to be fsynced and closed ("close sync");
//     those queue behind each other in order, so an explicit fsync of a later file never
//     precedes one of an earlier file;
//   - a journal file opened while a close sync of its predecessor is in flight carries
//     journalFlagPrevUnclean, so recovery accepts a torn tail of the predecessor after a crash
//     (acknowledged appends may be lost in this mode; a torn journal tail must not stop Open);
//   - a failed background fsync fences every ledger whose unsynced appends it covered, plus every
//     ledger with unsynced appends since, and abandons that journal file (abandonJournal),
//     exactly as an inline fsync failure does.

// intervalSyncs is the sync loop's part for the background syncer.
type intervalSyncs struct {
	// inFlight: fsyncs handed to the background syncer and not yet reported back; closesInFlight:
	// how many of them also close a rotated journal file.
	inFlight, closesInFlight int
	req                      chan syncRequest // sync loop -> background syncer
	done                     chan struct{}    // closed when the background syncer returns
}

// syncRequest asks the background syncer to fsync one journal file.
type syncRequest struct {
	f       vfs.File
	seq     uint64
	close   bool                 // close f after the fsync: it was rotated
	ledgers map[*Ledger]struct{} // ledgers with acknowledged appends the fsync makes durable
}

// syncResult is a finished background fsync.
type syncResult struct {
	syncRequest
	err error
	d   time.Duration
}

// backgroundSyncer runs the fsyncs the sync loop hands it, in order (SyncInterval only).
func (e *Engine) backgroundSyncer() {
	defer close(e.syncLoop.interval.done)
	for req := range e.syncLoop.interval.req {
		start := time.Now()
		err := vfs.DataSync(req.f)
		d := time.Since(start)
		if req.close {
			_ = req.f.Close()
		}
		e.queue.mu.Lock()
		e.queue.syncDone = append(e.queue.syncDone, syncResult{syncRequest: req, err: err, d: d})
		e.queue.cond.Broadcast()
		e.queue.mu.Unlock()
	}
}

// startBackgroundSync hands the current journal file to the background syncer; with close, the
// syncer also closes it and the next batch opens a new file (sync loop only).
func (e *Engine) startBackgroundSync(close bool) {
	if e.syncLoop.journal == nil {
		return
	}
	req := syncRequest{f: e.syncLoop.journal, seq: e.syncLoop.journalSeq, close: close, ledgers: e.syncLoop.unsynced}
	e.syncLoop.unsynced = nil
	e.syncLoop.interval.inFlight++
	if close {
		e.syncLoop.interval.closesInFlight++
		e.syncLoop.journal = nil
	}
	e.syncLoop.lastSync = time.Now()
	e.syncLoop.interval.req <- req // capacity 4: blocks only when four rotations wait for a stalled disk
}

// finishBackgroundSyncs records finished background fsyncs; a failure fences the ledgers whose
// acknowledged appends may be lost and abandons the file (sync loop only).
func (e *Engine) finishBackgroundSyncs(done []syncResult) {
	for _, r := range done {
		e.syncLoop.interval.inFlight--
		if r.close {
			e.syncLoop.interval.closesInFlight--
		}
		e.recordSync(r.d)
		if r.err == nil {
			continue
		}
		e.m.fsyncErrors.Add(1)
		if e.syncLoop.unsynced == nil {
			e.syncLoop.unsynced = map[*Ledger]struct{}{}
		}
		for l := range r.ledgers {
			e.syncLoop.unsynced[l] = struct{}{}
		}
		e.abandonJournal(r.seq, fmt.Errorf("storage: journal fsync: %w", r.err))
	}
}

// stopBackgroundSyncer waits for the fsyncs in flight, records them and stops the syncer
// (sync loop only, when stopping).
func (e *Engine) stopBackgroundSyncer() {
	if e.syncLoop.interval.req == nil {
		return
	}
	for e.syncLoop.interval.inFlight > 0 {
		e.queue.mu.Lock()
		for len(e.queue.syncDone) == 0 {
			e.queue.cond.Wait()
		}
		done := e.queue.syncDone
		e.queue.syncDone = nil
		e.queue.mu.Unlock()
		e.finishBackgroundSyncs(done)
	}
	close(e.syncLoop.interval.req)
	<-e.syncLoop.interval.done
	e.syncLoop.interval.req = nil
}
