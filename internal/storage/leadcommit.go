package storage

// A group commit on the appender's goroutine (a lead).
//
// Under a light load each group commit is one appender's batch: a connection reads a batch of
// SENDs, appends them and waits for its socket again. Handing the batch to the sync loop wakes a
// second thread (Cond.Signal finds an idle P and starts a parked M), which the hypervisor makes
// expensive: on the benchmark machine a reader goroutine that hands each fsync'd round to a
// second goroutine spends 30-75 µs more CPU per round than one that does the round itself
// (docs/performance.md, "What is left above the floor"). So an appender that is about to wait
// anyway may open a lead: while it is open, its appends leave the sync loop asleep, and when it
// ends, the appender runs the group commit itself if the sync loop is idle, or wakes it.
//
// The hazard is a wake that is never given: an append made while a lead is open relies on the
// lead's end to wake the sync loop, whoever made it. So the lead's holder must not wait for
// anything between its first append and LeadCommitEnd, except through storage: any item that is
// not an entry append (a cursor, a create, a seal, a failure) wakes the sync loop at once and pays
// what is owed, so a storage call that waits for its own item never waits for the lead. One lead
// is open at a time; an appender that cannot open one appends as usual.
//
// The lead commits only the plain case: SyncAlways, a light load (commitLight), nothing in flight
// or with the applier, the journal file open and not rotating, nothing to drain. Otherwise it
// wakes the sync loop, exactly as the append would have. While it commits, the sync loop does not
// run a round (lead.committing); appends from other goroutines queue for the next group commit,
// as they do behind the sync loop's own inline fsync, and the lead wakes the sync loop for them
// when it is done.

// leadState is the lead's part of the append queue (guarded by queue.mu).
type leadState struct {
	open bool // a lead is open: entry appends do not wake the sync loop
	owed bool // an append found the pending batch empty while the lead was open
	// committing: the lead runs a group commit in the sync loop's stead.
	committing bool
	// syncLoopIdle: the sync loop waits for work with its spare batch taken.
	syncLoopIdle bool
}

// LeadCommitBegin opens a lead for the calling goroutine if none is open and reports whether it
// did. The caller then appends without waiting for anything outside storage, and calls
// LeadCommitEnd.
func (e *Engine) LeadCommitBegin() bool {
	e.queue.mu.Lock()
	defer e.queue.mu.Unlock()
	if e.queue.lead.open || e.queue.stopping || e.opts.Sync != SyncAlways {
		return false
	}
	e.queue.lead.open = true
	return true
}

// LeadCommitEnd closes the lead opened by LeadCommitBegin: the group commit of what was appended
// runs on the calling goroutine when the sync loop is idle, else the sync loop is woken. Callbacks
// of the committed items run on this goroutine too, so the caller must hold no lock they take.
func (e *Engine) LeadCommitEnd() {
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

	e.queue.mu.Lock()
	e.queue.lead.committing = false
	if e.queue.spare == nil && len(e.queue.freeBatches) > 0 {
		e.queue.spare = e.takeFreeBatch()
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
	if !e.queue.lead.syncLoopIdle || e.queue.lead.committing || e.queue.stopping || e.queue.spare == nil ||
		len(e.queue.pending.items) == 0 || e.queue.applying || len(e.queue.commitDone) > 0 || len(e.queue.syncDone) > 0 {
		return false
	}
	// The sync loop is parked with queue.mu released after its last round: its state is stable.
	s := &e.syncLoop
	if !s.light || len(s.pipeline.inflight) > 0 || len(s.unsynced) > 0 || s.direct.want || len(s.pendingVoids) > 0 ||
		e.queue.appliedJobs != s.handedJobs || s.journal == nil || s.journalSeq != e.queue.pending.seq || e.queue.pending.moved {
		return false
	}
	e.noteSuccessorReady()
	return !e.rotateDue()
}

// wakeOwed wakes the sync loop for appends left to a lead (whose end would wake it): for a
// caller that waits for its own append now (Ledger.Append).
func (e *Engine) wakeOwed() {
	e.queue.mu.Lock()
	if e.queue.lead.owed {
		e.queue.lead.owed = false
		e.queue.cond.Signal()
	}
	e.queue.mu.Unlock()
}

// LeadCommitBegin opens a lead on the ledger's engine (Engine.LeadCommitBegin).
func (l *Ledger) LeadCommitBegin() bool { return l.e.LeadCommitBegin() }

// LeadCommitEnd closes a lead opened by LeadCommitBegin (Engine.LeadCommitEnd).
func (l *Ledger) LeadCommitEnd() { l.e.LeadCommitEnd() }
