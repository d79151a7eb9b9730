package storage

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Checkpoints.
//
// When a journal file is closed, the applier hands the files and directories written since the
// last hand-off to the checkpointer, which fsyncs them (16 at a time) and the directories (deepest
// first), records in the state file that recovery starts after that journal file, and retires it.
//
// A failed fsync is never retried. On Linux the pages whose writeback failed are marked clean:
// the page cache still shows the data, the device does not have it, no later fsync writes it, and
// the error is reported once per open file description (so a second fsync usually succeeds). A
// checkpoint that retried the fsync and then retired the journal would have thrown away the only
// durable copy of acknowledged entries. Instead every file whose fsync failed becomes a repair
// target (repair.go): its ledger is fenced, its data since the last checkpoint is written again
// from the journal (or, for a cursor log, from the cursors in memory) and fsynced, and no journal
// file is retired while any repair is pending. The checkpointer retries the repairs and the
// checkpoint by itself (after a kick, then with a growing pause up to maxMaintainPause), so a
// broker recovers without a restart once the disk takes writes again (health.go).
//
// A descriptor the file cache closes is written back first (fdretire.go): Linux may evict the
// inode of a file nobody holds open, and an unreported writeback error with it, so the
// checkpoint's own fsync through a new descriptor would succeed although data was lost. The
// checkpoint waits for those writebacks before it decides.

// checkpointerState belongs to the checkpointer, apart from mu and lastErr.
type checkpointerState struct {
	jobs chan checkpointJob // applier -> checkpointer; closed by Close
	done chan struct{}      // closed when the checkpointer returns
	// pending counts the jobs handed off and not finished yet (the sync loop's waitForCheckpoint
	// reads it).
	pending atomic.Int32
	// probeQueued: a journal probe is queued and not committed yet (probeJournal).
	probeQueued atomic.Bool
	carry       *checkpointJob // a failed checkpoint's files, retried with the next one
	// mu serialises checkpoints (the checkpointer's and Close's final one) with the janitor's
	// cursor-log compactions (janitor.go).
	mu      sync.Mutex
	lastErr atomic.Value // string: the last checkpoint's error, for Metrics
}

// checkpointJob is the applier's hand-off to the checkpointer: what to fsync before journal
// files up to seq are retired.
type checkpointJob struct {
	seq   uint64 // journal files <= seq are covered once the files below are synced
	files map[string]struct{}
	dirs  map[string]struct{}
}

// handOffCheckpoint hands everything written since the last hand-off (journal files <= seq) to
// the checkpointer (applier only).
func (e *Engine) handOffCheckpoint(seq uint64) {
	job := checkpointJob{seq: seq, files: e.applier.dirtyFiles, dirs: e.applier.dirtyDirs}
	e.applier.dirtyFiles = map[string]struct{}{}
	e.applier.dirtyDirs = map[string]struct{}{}
	e.checkpointer.pending.Add(1)
	select {
	case e.checkpointer.jobs <- job:
	default:
		e.checkpointer.pending.Add(-1)
		// The checkpointer is behind: fold this job into the next one.
		for f := range job.files {
			e.applier.dirtyFiles[f] = struct{}{}
		}
		for d := range job.dirs {
			e.applier.dirtyDirs[d] = struct{}{}
		}
	}
}

// Pauses between the checkpointer's attempts to recover from I/O errors by itself (repairs, a
// failed checkpoint, a failing journal): the first after minMaintainPause, doubling up to
// maxMaintainPause.
const (
	minMaintainPause = 100 * time.Millisecond
	maxMaintainPause = 2 * time.Second
)

// runCheckpointer makes the ledgers' files durable for each closed journal file, then records in
// the state file that recovery can start after it and retires it. While something is degraded
// (health.go) it also retries by itself: repairs, the failed checkpoint, a journal probe.
func (e *Engine) runCheckpointer() {
	defer close(e.checkpointer.done)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	pause := time.Duration(0)
	for {
		select {
		case job, ok := <-e.checkpointer.jobs:
			if !ok {
				return
			}
			e.runCheckpoint(&job)
			e.checkpointer.pending.Add(-1)
		case <-e.io.kick:
			e.maintain()
		case <-retry.C:
			e.maintain()
		}
		if e.io.degraded() || e.checkpointer.carry != nil {
			pause = min(max(2*pause, minMaintainPause), maxMaintainPause)
			retry.Reset(pause)
		} else {
			pause = 0
			retry.Stop()
		}
	}
}

// maintain retries what an I/O error left undone: the repairs (on the applier), the checkpoint
// that failed, and a probe of a failing journal (checkpointer only). The repairs are requested
// before the probe is queued: a repair item in a batch of its own reaches the applier without a
// journal write (repairs need not wait for the journal to work again); in the probe's batch, a
// failing journal write would fail it.
func (e *Engine) maintain() {
	if e.repairsPending() > 0 {
		e.requestRepairs()
	}
	if e.io.journalFailing() {
		e.probeJournal()
	}
	if e.checkpointer.carry != nil {
		job := *e.checkpointer.carry
		e.checkpointer.carry = nil
		e.runCheckpoint(&job)
	}
}

// runCheckpoint runs one checkpoint job, merged with a failed one before it; a failure keeps the
// merged job for the next attempt (checkpointer only).
func (e *Engine) runCheckpoint(job *checkpointJob) {
	if c := e.checkpointer.carry; c != nil {
		for f := range c.files {
			job.files[f] = struct{}{}
		}
		for d := range c.dirs {
			job.dirs[d] = struct{}{}
		}
		job.seq = max(job.seq, c.seq)
		e.checkpointer.carry = nil
	}
	if e.repairsPending() > 0 {
		e.requestRepairs()
	}
	if err := e.checkpoint(job.seq, job.files, job.dirs); err != nil {
		e.noteCheckpointFailed(err)
		e.checkpointer.carry = job
	}
}

// noteCheckpointFailed logs and records a failed checkpoint: the first failure of a run of them
// at error level, the others at debug level (the checkpointer retries every few seconds).
func (e *Engine) noteCheckpointFailed(err error) {
	if e.io.ckptErr.Swap(&err) == nil {
		e.log.Error("checkpoint failed; journal kept for recovery, retrying", "err", err)
	} else {
		e.log.Debug("checkpoint failed again", "err", err)
	}
	e.io.ckptFailures.Add(1)
	e.io.checkpointFailed()
	e.checkpointer.lastErr.Store(err.Error())
	e.noteCheckpointFailedForImports()
}

func (e *Engine) checkpoint(seq uint64, files, dirs map[string]struct{}) error {
	e.checkpointer.mu.Lock()
	defer e.checkpointer.mu.Unlock()
	start := time.Now()
	// Descriptors the file cache closed are written back first; a failure there is a repair target.
	e.files.waitRetired()
	if n := e.repairsPending(); n > 0 {
		return fmt.Errorf("storage: %d file(s) await repair after an I/O error: %w", n, e.firstRepairCause())
	}
	failed, err := e.syncFiles(files, dirs)
	for f, ferr := range failed {
		e.needRepair(f, nil, ferr)
	}
	if len(failed) > 0 && e.repairsPending() > 0 {
		// Never retried: the files are rewritten from the journal first (repair.go). A failed
		// file that needs no repair (an index, removed; a file removed since) does not hold the
		// checkpoint back: nothing needs its data, and syncFiles fsynced the directories all the
		// same.
		return fmt.Errorf("storage: checkpoint fsync failed for %d file(s), repairing them: %w", len(failed), errors.Join(mapErrors(failed)...))
	}
	if err != nil {
		return err
	}
	// Opening the files may have made the cache close others written in the same journal files:
	// their fsyncs count too.
	e.files.waitRetired()
	if n := e.repairsPending(); n > 0 {
		return fmt.Errorf("storage: %d file(s) await repair after an I/O error: %w", n, e.firstRepairCause())
	}
	synced := time.Since(start)
	e.stateMu.Lock()
	old := e.firstJournal
	if seq+1 > e.firstJournal {
		e.firstJournal = seq + 1
	}
	err = e.writeState()
	if err != nil {
		e.firstJournal = old
	}
	first := e.firstJournal
	e.stateMu.Unlock()
	if err != nil {
		return err
	}
	for s := old; s <= seq; s++ {
		e.retireJournal(s)
	}
	if old <= seq {
		e.syncRetired()
	}
	e.io.checkpointed(first)
	e.forgetClosedBefore(first)
	e.noteCheckpointed(first)
	e.m.checkpoints.Add(1)
	if e.io.ckptErr.Swap(nil) != nil {
		e.log.Info("checkpoint succeeded again; journal files retired", "journal", seq)
	}
	e.log.Debug("checkpoint", "journal", seq, "files", len(files), "dirs", len(dirs), "fsync", synced, "took", time.Since(start))
	return nil
}

func mapErrors(m map[string]error) []error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]error, 0, len(keys))
	for _, k := range keys {
		out = append(out, m[k])
	}
	return out
}

// checkpointSyncWorkers fsync files in parallel: on ext4 concurrent fsyncs of different files
// share journal commits (100 files: 32 rounds/s one by one, 121 rounds/s with 16 workers).
const checkpointSyncWorkers = 16

// syncFiles fsyncs files (in parallel) and then dirs. It returns the files whose fsync failed (the
// caller must not retry them: see "Checkpoints") and the first other error: a file that could not
// be opened (a missing one is fine: trimmed or deleted since), a directory fsync.
func (e *Engine) syncFiles(files, dirs map[string]struct{}) (failed map[string]error, err error) {
	work := make(chan string)
	var mu sync.Mutex
	failed = map[string]error{}
	var openErr error
	var wg sync.WaitGroup
	for w := 0; w < min(checkpointSyncWorkers, len(files)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				cf, err := e.files.acquire(f, false)
				if err != nil {
					if !vfs.IsNotExist(err) {
						mu.Lock()
						openErr = cmp(openErr, fmt.Errorf("storage: checkpoint open %s: %w", f, err))
						mu.Unlock()
					}
					continue
				}
				err = cf.f.Sync()
				if err == nil && strings.HasSuffix(f, ".seg") {
					// Up to the file's current size: its partial last page stays (the
					// applier's next append would otherwise read it back from the device
					// first), and so do pages appended since the fsync that are still dirty.
					// Cursor logs stay cached: small, and rewritten in place.
					if size, serr := cf.f.Size(); serr == nil {
						_ = vfs.DropCache(cf.f, 0, size)
					}
				}
				e.files.release(cf)
				if err != nil {
					e.m.fsyncErrors.Add(1)
					mu.Lock()
					failed[f] = fmt.Errorf("storage: checkpoint fsync %s: %w", f, err)
					mu.Unlock()
				}
			}
		}()
	}
	for f := range files {
		work <- f
	}
	close(work)
	wg.Wait()
	if openErr != nil {
		return failed, openErr
	}
	// The directories are fsynced even when files failed: a failure that needs no repair does not
	// stop the checkpoint, and the files created in its journal files must not vanish in a crash
	// with their entries (TestCheckpointWithFailedIndexFsyncSyncsDirectories).
	// Deeper directories first, so a new directory's entries are durable before its parent names it.
	ds := make([]string, 0, len(dirs))
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return strings.Count(ds[i], "/") > strings.Count(ds[j], "/") })
	for _, d := range ds {
		if err := e.fs.SyncDir(d); err != nil && !vfs.IsNotExist(err) {
			return failed, fmt.Errorf("storage: checkpoint fsync dir %s: %w", d, err)
		}
	}
	return failed, nil
}

// cmp keeps the first error.
func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// finalCheckpoint runs after the sync loop and the applier stopped: everything is synced and the
// journal emptied, unless a repair or an fsync fails (then the journal stays for recovery).
func (e *Engine) finalCheckpoint() error {
	if e.checkpointer.carry != nil {
		for f := range e.checkpointer.carry.files {
			e.applier.dirtyFiles[f] = struct{}{}
		}
		for d := range e.checkpointer.carry.dirs {
			e.applier.dirtyDirs[d] = struct{}{}
		}
		e.checkpointer.carry = nil
	}
	if e.repairsPending() > 0 {
		e.runRepairs() // nothing else writes any more: run them here
	}
	if e.syncLoop.journal == nil && len(e.applier.dirtyFiles) == 0 && len(e.applier.dirtyDirs) == 0 && e.repairsPending() == 0 {
		return nil
	}
	seq := e.syncLoop.journalSeq
	if e.syncLoop.journal != nil {
		e.closeJournal()
	}
	return e.checkpoint(seq, e.applier.dirtyFiles, e.applier.dirtyDirs)
}
