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
//   - at most one periodic fsync of the current journal file is in flight (syncsInFlight);
//   - a rotated journal file is handed to the syncer to be fsynced and closed ("close sync");
//     those queue behind each other in order, so an explicit fsync of a later file never
//     precedes one of an earlier file;
//   - a journal file opened while a close sync of its predecessor is in flight carries
//     journalFlagPrevUnclean, so recovery accepts a torn tail of the predecessor after a crash
//     (acknowledged appends may be lost in this mode; a torn journal tail must not stop Open);
//   - a failed background fsync fences every ledger whose unsynced appends it covered, plus every
//     ledger with unsynced appends since, and abandons that journal file (abandonJournal),
//     exactly as an inline fsync failure does.

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
	defer close(e.syncerDone)
	for req := range e.syncReq {
		start := time.Now()
		err := vfs.DataSync(req.f)
		d := time.Since(start)
		if req.close {
			_ = req.f.Close()
		}
		e.qmu.Lock()
		e.syncDone = append(e.syncDone, syncResult{syncRequest: req, err: err, d: d})
		e.qcond.Broadcast()
		e.qmu.Unlock()
	}
}

// startBackgroundSync hands the current journal file to the background syncer; with close, the
// syncer also closes it and the next batch opens a new file (sync loop only).
func (e *Engine) startBackgroundSync(close bool) {
	if e.journal == nil {
		return
	}
	req := syncRequest{f: e.journal, seq: e.journalSeq, close: close, ledgers: e.unsynced}
	e.unsynced = nil
	e.syncsInFlight++
	if close {
		e.closeSyncsInFlight++
		e.journal = nil
	}
	e.lastSync = time.Now()
	e.syncReq <- req // capacity 4: blocks only when four rotations wait for a stalled disk
}

// finishBackgroundSyncs records finished background fsyncs; a failure fences the ledgers whose
// acknowledged appends may be lost and abandons the file (sync loop only).
func (e *Engine) finishBackgroundSyncs(done []syncResult) {
	for _, r := range done {
		e.syncsInFlight--
		if r.close {
			e.closeSyncsInFlight--
		}
		e.recordSync(r.d)
		if r.err == nil {
			continue
		}
		e.m.fsyncErrors.Add(1)
		if e.unsynced == nil {
			e.unsynced = map[*Ledger]struct{}{}
		}
		for l := range r.ledgers {
			e.unsynced[l] = struct{}{}
		}
		e.abandonJournal(r.seq, fmt.Errorf("storage: journal fsync: %w", r.err))
	}
}

// stopBackgroundSyncer waits for the fsyncs in flight, records them and stops the syncer
// (sync loop only, when stopping).
func (e *Engine) stopBackgroundSyncer() {
	if e.syncReq == nil {
		return
	}
	for e.syncsInFlight > 0 {
		e.qmu.Lock()
		for len(e.syncDone) == 0 {
			e.qcond.Wait()
		}
		done := e.syncDone
		e.syncDone = nil
		e.qmu.Unlock()
		e.finishBackgroundSyncs(done)
	}
	close(e.syncReq)
	<-e.syncerDone
	e.syncReq = nil
}
