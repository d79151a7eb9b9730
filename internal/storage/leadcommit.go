package storage

// A group commit on the appender's goroutine (a lead).
//
// Under a light load each group commit is one appender's batch: a connection reads a batch of
// SENDs, appends them and waits for its socket again. Handing the batch to the sync loop wakes a
// second goroutine, and the Go runtime wakes a parked thread to run it (Cond.Signal finds an idle
// P), once per group commit; on a virtual machine that costs more CPU than the batch's own work
// (docs/performance.md, "What is left above the floor"). So an appender that waits for its socket
// next may open a lead and append inside it (Ledger.AppendAsyncIn): those appends leave the sync
// loop asleep, and when the lead ends, its goroutine runs the group commit itself if the sync loop
// is idle and the commit is the plain light case, or wakes the sync loop, as the first append
// would have.
//
// Only the holder's own entry appends are left to the lead: any other item (another goroutine's
// append, a cursor, a seal, a failure) wakes the sync loop, and gives the wake-up the lead owes if
// the pending batch holds lead appends. So a wake-up is never lost as long as the holder itself
// waits for nothing between its first lead append and Lead.End: a storage call of its own that
// waits (a synchronous append, a durable cursor) enqueues an item that is not a lead append and
// so wakes the sync loop first. One lead is open at a time.
//
// The plain case (leadMayCommitLocked): SyncAlways, a light load (commitLight), nothing in flight
// or with the applier, only entry appends pending and fewer bytes than a direct write, the
// journal file open and not rotating. While the lead commits, the sync loop runs no round;
// appends from other goroutines wait for the next group commit, as they wait behind the sync
// loop's own inline fsync, and the lead wakes the sync loop for them when it is done.

// leadState is the lead's part of the append queue (guarded by queue.mu).
type leadState struct {
	open bool // a lead is open
	owed bool // the pending batch holds lead appends and the sync loop was not woken for them
	// committing: the lead runs a group commit in the sync loop's stead.
	committing bool
	// syncLoopIdle: the sync loop waits for work (its first wait of a round, spare batch taken).
	syncLoopIdle bool
}

// Lead is an open lead, held by the goroutine that opened it (Engine.LeadCommitBegin).
type Lead struct{ e *Engine }

// LeadCommitBegin opens a lead for the calling goroutine, or returns nil if one is open (or the
// engine does not fsync every group commit, or stops). The caller appends with
// Ledger.AppendAsyncIn, waits for nothing outside storage until it calls End, and calls End.
func (e *Engine) LeadCommitBegin() *Lead {
	e.queue.mu.Lock()
	defer e.queue.mu.Unlock()
	if e.queue.lead.open || e.queue.stopping || e.opts.Sync != SyncAlways {
		return nil
	}
	e.queue.lead.open = true
	return &Lead{e: e}
}

// End closes the lead. If its appends still wait for a group commit, it runs the commit on the
// calling goroutine when the sync loop is idle and the commit is the plain case; otherwise it
// wakes the sync loop. The callbacks of every item of a batch it commits (other goroutines'
// appends included) may run here, so the caller must hold no lock they take.
//
// arrived (nil: never) reports, after a commit run here, whether the holder's next appends came
// while it ran (a connection: its socket holds unread bytes). They would have overlapped the
// fsync had the sync loop run it, which is what makes the load not light (commitLight): the next
// group commits go to the sync loop, pipelined, until its pipeline runs empty with nothing pending.
// Without it a single busy appender would commit one group at a time, each waiting for the
// previous fsync, where the sync loop overlaps them.
func (ld *Lead) End(arrived func() bool) {
	e := ld.e
	e.queue.mu.Lock()
	e.queue.lead.open = false
	if !e.queue.lead.owed {
		e.queue.mu.Unlock()
		return
	}
	e.queue.lead.owed = false
	if !e.leadMayCommitLocked() {
		e.queue.cond.Signal()
		e.queue.mu.Unlock()
		return
	}
	e.queue.lead.committing = true
	b := e.cutPendingLocked()
	e.queue.mu.Unlock()
	e.m.leadCommits.Add(1)

	e.commit(b)
	overlapped := arrived != nil && arrived()

	e.queue.mu.Lock()
	if overlapped {
		e.syncLoop.light = false // still the lead's to write: committing is set
	}
	e.queue.lead.committing = false
	if len(e.queue.freeBatches) > 0 {
		e.queue.spare = e.takeFreeBatch() // else the sync loop takes one at the top of its round
	}
	// Whatever came meanwhile (other appends, reports, Close) is the sync loop's again; an idle
	// sync loop with nothing to do is left asleep (waking it costs what the lead saves).
	if !e.queue.lead.syncLoopIdle || !e.syncLoopWaitsLocked() {
		e.queue.cond.Broadcast()
	}
	e.queue.mu.Unlock()
}

// leadMayCommitLocked reports whether the lead may run the pending group commit itself (queue.mu
// held): the sync loop waits with nothing else to do, and the batch is the plain case.
func (e *Engine) leadMayCommitLocked() bool {
	q := &e.queue
	if !q.lead.syncLoopIdle || q.lead.committing || q.stopping || q.spare == nil || len(q.pending.items) == 0 ||
		q.pending.moved || q.applying || len(q.commitDone) > 0 || len(q.syncDone) > 0 ||
		(e.opts.DirectWriteBytes > 0 && len(q.pending.buf) >= e.opts.DirectWriteBytes) {
		return false
	}
	for i := range q.pending.items {
		if q.pending.items[i].kind != kEntry {
			return false // a seal, a cursor, a create: the sync loop's, with the applier's goroutine
		}
	}
	// The sync loop waits with queue.mu released after its last round: its state is stable.
	s := &e.syncLoop
	if !s.light || len(s.pipeline.inflight) > 0 || len(s.unsynced) > 0 || s.direct.want || len(s.pendingVoids) > 0 ||
		q.appliedJobs != s.handedJobs || s.journal == nil || s.journalSeq != q.pending.seq {
		return false
	}
	e.noteSuccessorReady()
	return !e.rotateDue()
}

// LeadCommitBegin opens a lead on the ledger's engine (Engine.LeadCommitBegin).
func (l *Ledger) LeadCommitBegin() *Lead { return l.e.LeadCommitBegin() }
