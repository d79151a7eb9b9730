package storage

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Failing closed on I/O errors, and coming back by itself.
//
// Disk full (ENOSPC) and I/O errors (EIO) on a write or an fsync never produce a receipt for data
// that is not durable: a failed journal write or fsync fails its batch (the appenders get errors)
// and fences its ledgers; a failed segment write or segment fsync makes the file a repair target
// (repair.go), which fences its ledger and holds back every checkpoint until the file is rewritten
// from the journal. While any of that lasts the engine reports itself unhealthy (Health, which the
// node's readiness endpoint answers with), and the checkpointer retries on its own (checkpoint.go,
// maintain): the repairs, the failed checkpoint, and a probe record through a failing journal. So
// when space returns, checkpoints resume, the journal files pile-up is retired, fenced ledgers can
// be opened again (their owners reopen them), and Health is nil again, without a restart.
//
// Meanwhile the journal is not retired, so it grows with every append. It is bounded: once
// Options.MaxJournalBacklog (in journal files) waits for a checkpoint, appends fail
// (ErrUnavailable) instead of filling the disk, until a checkpoint retires them. Cursor updates, trims and deletes still go
// through (they are small, and trims and deletes free space).
//
// The same bound is reached without any failure when checkpoints are merely slower than the
// journal fills (their segment fsyncs write back what the applier wrote through the page cache,
// the journal's own writes are sequential). Then nothing is refused: the sync loop waits for the
// checkpoint before it opens another journal file (Engine.waitForCheckpoint), so appends wait,
// as for a slow disk, and the broker's publish limits hold producers back meanwhile. Refusing
// would hand producers errors for a disk that works.

// ioState is the engine's record of I/O failures and of the journal backlog.
type ioState struct {
	repairs repairTable
	kick    chan struct{} // wakes the checkpointer to run repairs

	journalErr     atomic.Pointer[error] // the last journal write or fsync failed (nil after a success)
	ckptErr        atomic.Pointer[error] // the last checkpoint failed (nil after a success)
	ckptFailures   atomic.Int64
	repaired       atomic.Int64
	repairFailures atomic.Int64

	backlog journalBacklog
}

// repairTable is the files waiting for a repair and the ledgers closed since the last checkpoint
// (repair.go), guarded by mu.
type repairTable struct {
	mu      sync.Mutex
	targets map[string]*fileRepair    // by file path
	closed  map[string][]closedLedger // by ledger directory
}

// journalBacklog is the journal files waiting for a checkpoint, guarded by mu; full is readable
// without it.
type journalBacklog struct {
	mu       sync.Mutex
	opened   []uint64      // journal files opened and not retired yet, ascending
	maxFiles int           // bound on len(opened) (Options.MaxJournalBacklog)
	changed  chan struct{} // closed and replaced when a checkpoint retires files or fails
	full     atomic.Bool
}

// defaultJournalBacklogFiles is the default bound of journal files waiting for a checkpoint
// (normally one or two: the current file and the one being checkpointed).
const defaultJournalBacklogFiles = 8

func (s *ioState) init(o Options) {
	s.repairs.targets = map[string]*fileRepair{}
	s.repairs.closed = map[string][]closedLedger{}
	s.kick = make(chan struct{}, 1)
	s.backlog.maxFiles = defaultJournalBacklogFiles
	s.backlog.changed = make(chan struct{})
	if o.MaxJournalBacklog > 0 {
		s.backlog.maxFiles = max(3, int((o.MaxJournalBacklog+o.JournalFileBytes-1)/o.JournalFileBytes))
	}
}

// initIO prepares the engine's failure and backlog state (Open).
func (e *Engine) initIO() {
	e.io.init(e.opts)
	e.files.retire.onSyncError = func(p string, err error) {
		e.m.fsyncErrors.Add(1)
		e.needRepair(p, nil, err)
	}
}

// kickCheckpointer wakes the checkpointer to retry without waiting for its pause.
func (s *ioState) kickCheckpointer() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// noteJournalFailed records a failed journal write or fsync (sync loop).
func (s *ioState) noteJournalFailed(err error) {
	s.journalErr.Store(&err)
	s.kickCheckpointer()
}

// noteJournalOK records a journal write made durable (sync loop, after each such commit).
func (s *ioState) noteJournalOK() {
	if s.journalErr.Load() != nil {
		s.journalErr.Store(nil)
	}
}

func (s *ioState) journalFailing() bool { return s.journalErr.Load() != nil }

// noteJournalOpened counts journal file seq as waiting for a checkpoint (sync loop).
func (s *ioState) noteJournalOpened(seq uint64) {
	s.backlog.mu.Lock()
	defer s.backlog.mu.Unlock()
	if n := len(s.backlog.opened); n == 0 || s.backlog.opened[n-1] < seq {
		s.backlog.opened = append(s.backlog.opened, seq)
	}
	s.backlog.full.Store(len(s.backlog.opened) >= s.backlog.maxFiles)
}

// checkpointed forgets the journal files before first: a checkpoint retired them.
func (s *ioState) checkpointed(first uint64) {
	s.backlog.mu.Lock()
	defer s.backlog.mu.Unlock()
	i := 0
	for i < len(s.backlog.opened) && s.backlog.opened[i] < first {
		i++
	}
	s.backlog.opened = append(s.backlog.opened[:0], s.backlog.opened[i:]...)
	s.backlog.full.Store(len(s.backlog.opened) >= s.backlog.maxFiles)
	s.backlog.signalLocked()
}

// signalLocked wakes whoever waits for the backlog to change (mu held).
func (b *journalBacklog) signalLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// checkpointFailed wakes whoever waits for a checkpoint: it will not retire files soon.
func (s *ioState) checkpointFailed() {
	s.backlog.mu.Lock()
	s.backlog.signalLocked()
	s.backlog.mu.Unlock()
}

// backlogChanges returns a channel closed at the backlog's next change.
func (s *ioState) backlogChanges() <-chan struct{} {
	s.backlog.mu.Lock()
	defer s.backlog.mu.Unlock()
	return s.backlog.changed
}

// failureRecorded reports whether an I/O error holds back checkpoints or the journal: files
// waiting for a repair, a failed checkpoint, a failing journal.
func (s *ioState) failureRecorded() bool {
	if s.ckptErr.Load() != nil || s.journalErr.Load() != nil {
		return true
	}
	s.repairs.mu.Lock()
	defer s.repairs.mu.Unlock()
	return len(s.repairs.targets) > 0
}

// refusesAppends reports whether appends fail for the backlog: it is at its bound and an I/O
// error holds checkpoints back, so waiting would not end by itself.
func (s *ioState) refusesAppends() bool {
	return s.backlog.full.Load() && s.failureRecorded()
}

// checkpointBehind reports whether the backlog is at its bound with nothing failed: a checkpoint
// is merely behind, and the sync loop waits for it before it opens another journal file.
func (s *ioState) checkpointBehind() bool {
	return s.backlog.full.Load() && !s.failureRecorded()
}

func (s *ioState) backlogFiles() int {
	s.backlog.mu.Lock()
	defer s.backlog.mu.Unlock()
	return len(s.backlog.opened)
}

// degraded reports whether something waits for the checkpointer's retries.
func (s *ioState) degraded() bool {
	s.repairs.mu.Lock()
	n := len(s.repairs.targets)
	s.repairs.mu.Unlock()
	return n > 0 || s.ckptErr.Load() != nil || s.journalErr.Load() != nil || s.backlog.full.Load()
}

// Health returns nil while the engine takes appends and makes them durable normally; otherwise an
// error that says why not: files waiting for a repair after an I/O error, checkpoints failing,
// journal writes failing, or the journal backlog at its bound (appends refused). It clears by
// itself once the cause is gone (the checkpointer retries in the background).
func (e *Engine) Health() error {
	var why []string
	if n := e.repairsPending(); n > 0 {
		why = append(why, fmt.Sprintf("%d file(s) waiting to be rewritten from the journal after an I/O error (%v)", n, e.firstRepairCause()))
	}
	if p := e.io.ckptErr.Load(); p != nil {
		why = append(why, fmt.Sprintf("checkpoints failing (%v)", *p))
	}
	if p := e.io.journalErr.Load(); p != nil {
		why = append(why, fmt.Sprintf("journal writes failing (%v)", *p))
	}
	if e.io.refusesAppends() {
		why = append(why, e.backlogError().Error())
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(why, "; "))
}

// backlogError is the error of an append refused because the journal backlog is at its bound.
func (e *Engine) backlogError() error {
	cause := "no checkpoint yet"
	if p := e.io.ckptErr.Load(); p != nil {
		cause = (*p).Error()
	}
	return fmt.Errorf("%w: %d journal files wait for a checkpoint (bound %d), appends refused until one succeeds: %s",
		ErrUnavailable, e.io.backlogFiles(), e.io.backlog.maxFiles, cause)
}

// appendErr is why an append to l must fail now, or nil.
func (l *Ledger) appendErr() error {
	if err := l.Err(); err != nil {
		return err
	}
	if l.e.io.refusesAppends() {
		return l.e.backlogError()
	}
	return nil
}

// backlogRecheck bounds how long waitForCheckpoint waits without a signal before it looks again
// at what the backlog's signals do not cover: a repair target, Close.
const backlogRecheck = 50 * time.Millisecond

// waitForCheckpoint holds the sync loop before it opens another journal file while the backlog
// is at its bound and a checkpoint is merely behind (see the top of this file). That relies on
// the checkpointer never waiting for the sync loop (probeJournal does not). It stops waiting
// once a checkpoint retires files, once a failure makes appends fail instead, when the engine
// stops, and when no checkpoint is running or coming (the applier hands one off when it applies
// a rotated batch; a job folded into a later hand-off comes only with the next rotation, which
// this wait would hold back): another file is then opened past the bound (sync loop only).
func (e *Engine) waitForCheckpoint() {
	if !e.io.checkpointBehind() {
		return
	}
	start := time.Now()
	waited := false
	for {
		changed := e.io.backlogChanges()
		if !e.io.checkpointBehind() || !e.checkpointComing() || e.stoppingNow() {
			break
		}
		waited = true
		t := time.NewTimer(backlogRecheck)
		select {
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
	if waited {
		e.m.backlogWaits.Add(1)
		e.m.backlogWaitNanos.Add(int64(time.Since(start)))
	}
}

// checkpointComing reports whether a checkpoint runs or is handed off, or may be: the applier has
// jobs of the sync loop's not applied yet (sync loop only).
func (e *Engine) checkpointComing() bool {
	if e.checkpointer.pending.Load() > 0 {
		return true
	}
	e.queue.mu.Lock()
	defer e.queue.mu.Unlock()
	return e.queue.appliedJobs != e.syncLoop.handedJobs
}

// stoppingNow reports whether Close has stopped the engine's queue.
func (e *Engine) stoppingNow() bool {
	e.queue.mu.Lock()
	defer e.queue.mu.Unlock()
	return e.queue.stopping
}

// probeJournal queues one record that means nothing to recovery (the announcement of slot 0,
// which no ledger uses) for the journal: after a journal failure, a commit that succeeds shows
// the journal works again even when nothing else is being appended (checkpointer only). It does
// not wait for the commit, and queues no second probe while one is queued: the checkpointer never
// waits for the sync loop, which may itself be waiting for a checkpoint (waitForCheckpoint).
func (e *Engine) probeJournal() {
	if !e.checkpointer.probeQueued.CompareAndSwap(false, true) {
		return
	}
	e.enqueue(nil, func(b *batch) item {
		b.buf = appendAnnounce(b.buf, 0, "")
		return item{kind: kBarrier, done: func(mtypes.Position, error) { e.checkpointer.probeQueued.Store(false) }}
	})
}

// fillHealthMetrics adds the failure and backlog figures to m.
func (e *Engine) fillHealthMetrics(m *EngineMetrics) {
	m.RepairsPending = e.repairsPending()
	m.Repairs = e.io.repaired.Load()
	m.RepairFailures = e.io.repairFailures.Load()
	m.CheckpointFailures = e.io.ckptFailures.Load()
	m.CheckpointFailing = e.io.ckptErr.Load() != nil
	m.JournalFailing = e.io.journalFailing()
	m.JournalBacklogFiles = e.io.backlogFiles()
	m.JournalBacklogLimit = e.io.backlog.maxFiles
	m.JournalBacklogWaits = e.m.backlogWaits.Load()
	m.JournalBacklogWait = time.Duration(e.m.backlogWaitNanos.Load())
	if err := e.Health(); err != nil {
		m.Unhealthy = strings.TrimPrefix(err.Error(), ErrUnavailable.Error()+": ")
	}
}
