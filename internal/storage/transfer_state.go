package storage

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// The engine's side of ledger imports (transfer_import.go): what Commit needs from the rest of
// the engine, and the incarnations of imported segments of loaded ledgers.
//
// Why Commit may wait for a checkpoint. Journal replay applies every record of a ledger to the
// directory its name maps to. An earlier ledger of the imported name, deleted before the import,
// may still have records in the journal files not yet retired by a checkpoint: its entries,
// cursor states, its delete record. Replayed after a crash, they would land in the imported
// directory (and the delete record would remove it). So when the name's last delete record is in
// a journal file a checkpoint has not retired, Commit rotates the journal and waits until the
// checkpoint retires every file up to the one current when it started; only then does it rename
// the staged directory into place. Nothing of that name is journaled meanwhile: the name is
// reserved for the import (OpenLedger fails with ErrImporting).

// importState is the engine's part of imports; mu guards it. Lock order: after stateMu and
// table.mu, never while holding queue.mu.
type importState struct {
	mu sync.Mutex
	// deleted: ledger name -> the journal file holding its last delete record, until a checkpoint
	// retires that file.
	deleted map[string]uint64
	// notice is closed (and replaced) by every checkpoint, successful or not.
	notice chan struct{}
	// incarnations: the imported segments' incarnations of loaded ledgers, by ledger name, under
	// incMu; withIncarnations is its size, so that reads of engines without imported segments
	// (every read asks Ledger.IncarnationOf) take no lock.
	incMu            sync.RWMutex
	incarnations     map[string]importedIncarnations
	withIncarnations atomic.Int64
	// staged numbers the staging directories of this open.
	staged atomic.Uint64
}

// noteLedgerDeleted records that the delete record of ledger name is in journal file seq
// (applier).
func (e *Engine) noteLedgerDeleted(name string, seq uint64) {
	e.imports.mu.Lock()
	defer e.imports.mu.Unlock()
	if e.imports.deleted == nil {
		e.imports.deleted = map[string]uint64{}
	}
	e.imports.deleted[name] = seq
}

// noteCheckpointed forgets the delete records in journal files before first (retired) and wakes
// imports waiting for a checkpoint (checkpointer).
func (e *Engine) noteCheckpointed(first uint64) {
	e.imports.mu.Lock()
	defer e.imports.mu.Unlock()
	for n, seq := range e.imports.deleted {
		if seq < first {
			delete(e.imports.deleted, n)
		}
	}
	e.wakeCheckpointWaitersLocked()
}

// noteCheckpointFailedForImports wakes imports waiting for a checkpoint: they fail rather than
// wait while checkpoints fail (checkpointer).
func (e *Engine) noteCheckpointFailedForImports() {
	e.imports.mu.Lock()
	defer e.imports.mu.Unlock()
	e.wakeCheckpointWaitersLocked()
}

func (e *Engine) wakeCheckpointWaitersLocked() {
	if e.imports.notice != nil {
		close(e.imports.notice)
		e.imports.notice = nil
	}
}

// checkpointNotice returns a channel closed by the next checkpoint, successful or not.
func (e *Engine) checkpointNotice() <-chan struct{} {
	e.imports.mu.Lock()
	defer e.imports.mu.Unlock()
	if e.imports.notice == nil {
		e.imports.notice = make(chan struct{})
	}
	return e.imports.notice
}

// deleteMayBeReplayed reports whether a delete record of a ledger called name may be in a journal
// file not retired yet (conservative: noteCheckpointed forgets it only after the checkpoint wrote
// the state file). It takes imports.mu only, never stateMu, which is held across ledger id
// allocations and state file fsyncs: the sync loop calls it (directwrite.go, activate).
func (e *Engine) deleteMayBeReplayed(name string) bool {
	e.imports.mu.Lock()
	defer e.imports.mu.Unlock()
	_, ok := e.imports.deleted[name]
	return ok
}

// journalMayHoldRecordsOf reports whether journal files a checkpoint has not retired may hold
// records of an earlier ledger called name: its delete record is in one.
func (e *Engine) journalMayHoldRecordsOf(name string) bool {
	e.imports.mu.Lock()
	seq, ok := e.imports.deleted[name]
	e.imports.mu.Unlock()
	if !ok {
		return false
	}
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	return seq >= e.firstJournal
}

// reforceCheckpointAfter: while an import waits for a checkpoint that does not come (the
// checkpointer folds a rotation into the next one when it is behind), it rotates the journal
// again after this long, unless the engine is degraded (checkpoints fail and are retried anyway).
const reforceCheckpointAfter = 2 * time.Second

// retireJournalForImport rotates the journal file pending now and waits until a checkpoint has
// retired it and every file before it: afterwards no journal record enqueued before the call is
// replayed after a crash. It fails while checkpoints fail (an I/O error; Engine.Health): the
// import is then tried again later.
func (e *Engine) retireJournalForImport(ctx context.Context, name string) error {
	e.queue.mu.Lock()
	target := e.queue.pending.seq
	e.queue.mu.Unlock()
	if err := e.rotateJournalThrough(ctx, name, target); err != nil {
		return err
	}
	retry := time.NewTimer(reforceCheckpointAfter)
	defer retry.Stop()
	for {
		notice := e.checkpointNotice()
		e.stateMu.Lock()
		done := e.firstJournal > target
		e.stateMu.Unlock()
		if done {
			return nil
		}
		if p := e.io.ckptErr.Load(); p != nil {
			return fmt.Errorf("storage: the checkpoint an import waits for fails: %w", *p)
		}
		select {
		case <-notice:
		case <-ctx.Done():
			return ctx.Err()
		case <-e.checkpointer.done:
			return ErrClosed
		case <-retry.C:
			if !e.io.degraded() {
				e.queue.mu.Lock()
				now := e.queue.pending.seq
				e.queue.mu.Unlock()
				if err := e.rotateJournalThrough(ctx, name, now); err != nil {
					return err
				}
			}
			retry.Reset(reforceCheckpointAfter)
		}
	}
}

// rotateJournalThrough makes the sync loop close every journal file up to target: the pending
// batch rotates while its file is target or before. A group commit rotates only a file it has
// open, so a batch is enqueued that opens it (an announce record: replay takes note of the slot's
// name and nothing else), and again until the file is closed.
func (e *Engine) rotateJournalThrough(ctx context.Context, name string, target uint64) error {
	e.table.mu.Lock()
	e.table.slot++
	slot := e.table.slot
	e.table.mu.Unlock()
	for range 4 {
		e.queue.mu.Lock()
		if e.queue.pending.seq > target {
			e.queue.mu.Unlock()
			return nil
		}
		e.queue.rotateThrough = max(e.queue.rotateThrough, target)
		e.queue.mu.Unlock()
		ch := make(chan error, 1)
		e.enqueue(nil, func(b *batch) item {
			b.buf = appendAnnounce(b.buf, slot, name)
			return item{kind: kBarrier, done: func(_ mtypes.Position, err error) { ch <- err }}
		})
		select {
		case err := <-ch:
			if err != nil {
				return fmt.Errorf("storage: rotate the journal for an import: %w", err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.queue.mu.Lock()
	defer e.queue.mu.Unlock()
	if e.queue.pending.seq > target {
		return nil
	}
	return fmt.Errorf("storage: rotate the journal for an import: journal file %d still open", target)
}

// raiseLedgerIDs makes every ledger id this engine hands out from now on greater than maxID, and
// records the new limit in the state file before it returns. With Options.LedgerIDBlock it draws
// a new block whose first id is at least maxID+1.
func (e *Engine) raiseLedgerIDs(maxID int64) error {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	if maxID < e.nextLedgerID {
		return nil
	}
	floor := maxID + 1
	next := floor
	if e.opts.LedgerIDBlock != nil {
		first, err := e.opts.LedgerIDBlock(floor, ledgerIDBlock)
		if err != nil {
			return fmt.Errorf("storage: reserve ledger ids above imported ones: %w", err)
		}
		if first < floor {
			return fmt.Errorf("storage: reserved ledger ids start at %d, not above the imported id %d", first, maxID)
		}
		next = first
	}
	oldNext, oldLimit := e.nextLedgerID, e.ledgerIDLimit
	e.nextLedgerID, e.ledgerIDLimit = next, next+ledgerIDBlock
	if err := e.writeState(); err != nil {
		e.nextLedgerID, e.ledgerIDLimit = oldNext, oldLimit
		return err
	}
	return nil
}

// stagingPrefix starts the names of import staging directories under ledgers/. A ledger
// directory never starts with '.' (dirName escapes a leading '.'), so no ledger has such a name.
const stagingPrefix = ".import-"

// removeImportStaging removes what imports interrupted by a crash left in ledgers/, and
// finishes or undoes interrupted replaces (recovery).
func (e *Engine) removeImportStaging() error {
	des, err := e.fs.ReadDir(e.ledgersDir)
	if err != nil {
		return fmt.Errorf("storage: list %s: %w", e.ledgersDir, err)
	}
	if err := e.resolveReplacedLedgers(des); err != nil {
		return err
	}
	for _, de := range des {
		if !strings.HasPrefix(de.Name, stagingPrefix) {
			continue
		}
		e.log.Warn("removing an unfinished ledger import", "dir", de.Name)
		if err := e.fs.RemoveAll(e.ledgersDir + "/" + de.Name); err != nil {
			return fmt.Errorf("storage: remove unfinished import %s: %w", de.Name, err)
		}
	}
	// Always, not only after a removal: an import whose commit was interrupted between its rename
	// and this fsync left a ledger directory that only the page cache may hold. This engine
	// serves that ledger, and its checkpoints fsync only the ledger's own directory
	// (TestImportKilledBeforeItsDirectoryFsyncThenAppended).
	if err := e.fs.SyncDir(e.ledgersDir); err != nil {
		return fmt.Errorf("storage: sync %s: %w", e.ledgersDir, err)
	}
	return nil
}

// setImportedIncarnations records (or, with none, forgets) the imported segments' incarnations of
// ledger name (its load).
func (e *Engine) setImportedIncarnations(name string, t importedIncarnations) {
	e.imports.incMu.Lock()
	defer e.imports.incMu.Unlock()
	if len(t) == 0 {
		delete(e.imports.incarnations, name)
	} else {
		if e.imports.incarnations == nil {
			e.imports.incarnations = map[string]importedIncarnations{}
		}
		e.imports.incarnations[name] = t
	}
	e.imports.withIncarnations.Store(int64(len(e.imports.incarnations)))
}

func (e *Engine) importedIncarnations(name string) importedIncarnations {
	if e.imports.withIncarnations.Load() == 0 {
		return nil
	}
	e.imports.incMu.RLock()
	defer e.imports.incMu.RUnlock()
	return e.imports.incarnations[name]
}
