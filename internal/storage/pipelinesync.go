package storage

import (
	"fmt"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Overlapping group commits (SyncAlways).
//
// A group commit is one journal write and one fdatasync. Run one after the other, an append that
// arrives while an fsync is in flight waits for that fsync, then for its own: a closed-loop
// client with a bounded window (pulsar-perf keeps 1,000 messages in flight) then sees about two
// fsyncs per round trip, and its rate is its window divided by that. So the sync loop does not
// wait for the fsync of a batch before it writes the next one: it hands the fsync to a commit
// syncer and goes on, with at most SyncPipelineDepth fsyncs in flight. The disk gets the next
// batch's data while it flushes the previous one, and an append waits for about one fsync.
//
// Why this keeps the guarantee "acknowledged only after durable":
//   - batches are written to the journal file in order, each after the previous one's write;
//   - a batch is handed to the applier (which acknowledges it) only after its own fsync returned
//     without error, and strictly in order, after every earlier batch was handed on;
//   - an fdatasync makes durable every byte written to the file before it was called, so the
//     later fsync of two in flight never reports success for bytes the earlier one did not cover
//     and that were written after it (and the order of acknowledgements does not depend on which
//     fsync returns first).
//
// Failure: if any fsync in flight fails, the sync loop waits for all of them and fails every
// batch in flight on that file, in order, even those whose own fsync returned success. The
// journal file is abandoned exactly as after an inline failure (abandonJournal, void records).
//
// Each fsync in flight runs on a descriptor of its own. Linux reports a writeback error once per
// open file description: with one descriptor shared, the later fsync of two in flight could take
// the error of the earlier batch's pages and the earlier one return success, and that batch would
// be acknowledged (if its success reached the sync loop first) although its data was lost. So
// when a journal file is opened, before anything is written to it, the sync loop opens it once
// more per pipeline slot (openCommitDescriptors), and every fsync in flight uses a slot no other
// fsync in flight uses. Each of those descriptors reports every writeback error of the file since
// it was opened: a success means no write to the file failed, whichever fsync saw an error first.
// (An error any of them reports abandons the file, so none is ever used after reporting one.) The
// direct writes' segment fdatasyncs do the same with a descriptor opened per write (directwrite.go).
//
// Anything that changes the journal file (rotation, opening a new file after an abandoned one,
// void records, a batch moved to a new file) is done only with nothing in flight: the sync loop
// drains first and then commits that batch inline as before.

// commitPipeline is the sync loop's part for the commit syncers: batches written whose fsync is
// in flight, oldest first, and the commit syncers that run those fsyncs.
type commitPipeline struct {
	inflight []*commitInFlight
	fds      []vfs.File // descriptors of the current journal file for the fsyncs in flight
	req      chan *commitInFlight
	syncers  sync.WaitGroup
}

// commitInFlight is a batch written to the journal whose fsync runs on a commit syncer.
type commitInFlight struct {
	b   *batch
	f   vfs.File // a descriptor of the journal file of its own (pipeline.fds), not closed while the fsync is in flight
	seq uint64
	// Set by the commit syncer before it reports the commit (under queue.mu).
	err error
	d   time.Duration
	// Set by the sync loop when it receives the report.
	finished bool
}

// commitSyncer runs fsyncs of written batches for the sync loop (SyncAlways, depth > 1).
func (e *Engine) commitSyncer() {
	defer e.syncLoop.pipeline.syncers.Done()
	for c := range e.syncLoop.pipeline.req {
		start := time.Now()
		c.err = syncCommit(c.f, c.b)
		c.d = time.Since(start)
		e.queue.mu.Lock()
		e.queue.commitDone = append(e.queue.commitDone, c)
		e.queue.cond.Broadcast()
		e.queue.mu.Unlock()
	}
}

// pipelined reports whether batch b can be committed with its fsync in flight (sync loop only).
// Batches that touch the journal file's life cycle are committed inline, with nothing in flight.
func (e *Engine) pipelined(b *batch) bool {
	return e.syncLoop.pipeline.req != nil && !b.rotate && !b.moved && len(e.syncLoop.pendingVoids) == 0 &&
		e.syncLoop.journal != nil && e.syncLoop.journalSeq == b.seq && len(b.buf) > 0 && e.freeCommitDescriptor() != nil
}

// commitLight reports whether batch b, which could be pipelined, is committed inline instead
// because the load is light (sync loop only).
//
// Pipelining pays when appends arrive while an fsync is in flight. When none do (a few thousand
// group commits a second, each well apart), the hand-offs to a commit syncer and back cost more
// CPU than the overlap saves: each wakes a parked thread. So with nothing in flight and the last
// inline fsync not joined by any append, the sync loop runs the fsync itself, and then applies the
// batch itself too (applyOnSyncLoop). As soon as an append arrives during an inline fsync, the
// following group commits are pipelined again until the pipeline runs empty with nothing pending
// (finishCommits). An append that arrives during an inline fsync waits for the rest of it, at most
// one fsync, once per change of load.
func (e *Engine) commitLight(b *batch) bool {
	return e.syncLoop.light && !e.opts.AlwaysPipeline && len(e.syncLoop.pipeline.inflight) == 0 && len(b.direct) == 0
}

// openCommitDescriptors opens journal file seq once per pipeline slot for the fsyncs in flight
// (sync loop only; right after the file is opened, before anything is written to it). If that
// fails, the file's batches are committed inline.
func (e *Engine) openCommitDescriptors(seq uint64) {
	if e.syncLoop.pipeline.req == nil {
		return
	}
	for range e.opts.SyncPipelineDepth {
		f, err := e.fs.OpenFile(e.journalPath(seq), vfs.ReadOnly)
		if err != nil {
			e.log.Warn("cannot open the journal file for pipelined fsyncs; its group commits run one at a time", "seq", seq, "err", err)
			e.closeCommitDescriptors()
			return
		}
		e.syncLoop.pipeline.fds = append(e.syncLoop.pipeline.fds, f)
	}
}

// journalDescriptors is how many descriptors the journal holds open: the file in use, and one per
// pipeline slot when fsyncs are pipelined (for the metrics).
func (e *Engine) journalDescriptors() int {
	if e.opts.Sync == SyncAlways && e.opts.SyncPipelineDepth > 1 {
		return 1 + e.opts.SyncPipelineDepth
	}
	return 1
}

// closeCommitDescriptors closes the descriptors of openCommitDescriptors (sync loop only, with
// nothing in flight).
func (e *Engine) closeCommitDescriptors() {
	for i, f := range e.syncLoop.pipeline.fds {
		_ = f.Close()
		e.syncLoop.pipeline.fds[i] = nil
	}
	e.syncLoop.pipeline.fds = e.syncLoop.pipeline.fds[:0]
}

// freeCommitDescriptor returns a descriptor of the current journal file no fsync in flight uses,
// or nil (sync loop only; the loop keeps fewer than SyncPipelineDepth in flight when it commits).
func (e *Engine) freeCommitDescriptor() vfs.File {
	for _, f := range e.syncLoop.pipeline.fds {
		used := false
		for _, c := range e.syncLoop.pipeline.inflight {
			if c.f == f {
				used = true
				break
			}
		}
		if !used {
			return f
		}
	}
	return nil
}

// needsDrain reports whether the pending batch, once cut, would be committed inline while
// fsyncs are in flight; the sync loop then drains them first (sync loop only, queue.mu held).
func (e *Engine) needsDrain() bool {
	if len(e.syncLoop.pipeline.inflight) == 0 {
		return false
	}
	p := e.queue.pending
	return e.rotateDue() || p.moved || len(e.syncLoop.pendingVoids) > 0 ||
		e.syncLoop.journal == nil || e.syncLoop.journalSeq != p.seq || len(p.buf) == 0
}

// commitAsync writes batch b to the journal and hands its fsync to a commit syncer
// (sync loop only; e.pipelined(b) holds).
func (e *Engine) commitAsync(b *batch) {
	jb := journalBuf(b)
	sealJournalRecords(jb, journalSeed(e.syncLoop.journalSeq))
	if err := e.writeJournal(jb); err != nil {
		// Batches in flight were written before this one; their own fsyncs decide them.
		e.drainCommits()
		e.undoDirect(b)
		err = fmt.Errorf("storage: journal write: %w", err)
		e.abandonJournal(b.seq, err)
		e.voidBatch(b)
		e.toApplier(applyJob{b: b, err: err})
		return
	}
	e.syncLoop.journalOff += int64(len(jb))
	e.m.bytesWritten.Add(int64(len(jb)))
	c := &commitInFlight{b: b, f: e.freeCommitDescriptor(), seq: b.seq}
	e.syncLoop.pipeline.inflight = append(e.syncLoop.pipeline.inflight, c)
	e.syncLoop.pipeline.req <- c // capacity SyncPipelineDepth: never blocks, at most that many are in flight
}

// takeCommitReportsLocked marks the commits the commit syncers reported as finished (sync loop
// only, queue.mu held).
func (e *Engine) takeCommitReportsLocked() {
	for _, c := range e.queue.commitDone {
		c.finished = true
	}
	e.queue.commitDone = e.queue.commitDone[:0]
}

// finishCommits hands the finished head of the in-flight list to the applier, in order; if any
// fsync in flight failed it waits for all of them and fails them all (sync loop only).
func (e *Engine) finishCommits() {
	e.queue.mu.Lock()
	e.takeCommitReportsLocked()
	failed := false
	for _, c := range e.syncLoop.pipeline.inflight {
		if c.finished && c.err != nil {
			failed = true
		}
	}
	if failed {
		for !e.allCommitsFinishedLocked() {
			e.queue.cond.Wait()
			e.takeCommitReportsLocked()
		}
	}
	e.queue.mu.Unlock()

	var failErr error
	n := 0
	for _, c := range e.syncLoop.pipeline.inflight {
		if !c.finished {
			break
		}
		n++
		e.recordSync(c.d)
		if c.err != nil && failErr == nil {
			e.m.fsyncErrors.Add(1)
			failErr = fmt.Errorf("storage: journal fsync: %w", c.err)
		}
		if failed {
			continue
		}
		e.releaseDirect(c.b)
		e.io.noteJournalOK()
		e.toApplier(applyJob{b: c.b, seq: c.b.seq})
	}
	if failed {
		// Every batch in flight is on the same journal file (a new file is opened only with
		// nothing in flight) and none was handed on: fail them all, in order.
		failedBatches := make([]*batch, len(e.syncLoop.pipeline.inflight))
		for i, c := range e.syncLoop.pipeline.inflight {
			failedBatches[i] = c.b
		}
		e.undoDirect(failedBatches...)
		e.abandonJournal(e.syncLoop.pipeline.inflight[0].seq, failErr)
		for _, c := range e.syncLoop.pipeline.inflight {
			e.voidBatch(c.b)
			e.toApplier(applyJob{b: c.b, err: failErr})
		}
		n = len(e.syncLoop.pipeline.inflight)
	}
	for i := range n {
		e.syncLoop.pipeline.inflight[i] = nil
	}
	e.syncLoop.pipeline.inflight = e.syncLoop.pipeline.inflight[:copy(e.syncLoop.pipeline.inflight, e.syncLoop.pipeline.inflight[n:])]
	if len(e.syncLoop.pipeline.inflight) == 0 {
		e.noteLoad() // with nothing pending either, nothing overlaps: commit inline
	}
}

// noteLoad sets the load light when nothing is pending (sync loop only, with nothing in flight;
// see commitLight).
func (e *Engine) noteLoad() {
	e.queue.mu.Lock()
	e.syncLoop.light = len(e.queue.pending.items) == 0
	e.queue.mu.Unlock()
}

func (e *Engine) allCommitsFinishedLocked() bool {
	for _, c := range e.syncLoop.pipeline.inflight {
		if !c.finished {
			return false
		}
	}
	return true
}

// drainCommits waits for every fsync in flight and hands their batches on (sync loop only).
// finishCommits always hands on the finished head of the list, so while anything is in flight
// the head waits for a report.
func (e *Engine) drainCommits() {
	for len(e.syncLoop.pipeline.inflight) > 0 {
		e.queue.mu.Lock()
		for len(e.queue.commitDone) == 0 {
			e.queue.cond.Wait()
		}
		e.queue.mu.Unlock()
		e.finishCommits()
	}
}

// stopCommitSyncers stops the commit syncers once nothing is in flight (sync loop only).
func (e *Engine) stopCommitSyncers() {
	if e.syncLoop.pipeline.req == nil {
		return
	}
	e.drainCommits()
	close(e.syncLoop.pipeline.req)
	e.syncLoop.pipeline.syncers.Wait()
	e.syncLoop.pipeline.req = nil
}
