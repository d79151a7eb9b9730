package storage

import (
	"fmt"
	"path"
	"sync"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// The janitor: slow file work off the applier.
//
// The applier is one goroutine for all ledgers, and it delivers every ledger's receipts, so
// whatever it waits for, every publish of the broker waits for. Three kinds of file work are slow
// on a real disk: removing a deleted ledger's directory (unlinking every segment, up to 128 MiB
// each), unlinking trimmed segments, and compacting a cursor log (a new file written and
// fsynced, renamed, the directory fsynced). They run on the janitor, one goroutine per
// engine, in order, stopped by Close (pending work is dropped: what it removes is in the trash,
// emptied at the next Open; a compaction not done is just not done).
//
// Crash safety, deletes and trims. The journal record comes first, as before: until a
// checkpoint retires its journal file, the replay removes the directory or segment again. What
// the applier still does is a rename, one metadata operation: the ledger's directory, or the
// trimmed segment and its index, move into <dir>/trash under a name unique to this open
// (incarnation and a counter), and the directories involved are marked for the next checkpoint's
// fsync, as the removal was. The checkpoint that retires the journal record therefore makes the
// rename durable first, so a deleted ledger or trimmed segment never comes back; the janitor
// unlinks the trash later, and whatever a crash leaves in the trash is removed at the next Open.
// A recreated ledger of the same name gets a new directory at once: the old one is already gone
// from ledgers/.
//
// Crash safety, compactions. The janitor writes the live states into cursors.log.compact and fsyncs
// it, holding the checkpoint lock (checkpointer.mu) from before it takes the snapshot until the new log's
// directory is fsynced: no journal file is retired meanwhile, so every record the applier
// appends to the old log during the compaction stays covered by the journal. The snapshot is
// taken, and the swap done, under cursorLogs.mu, which the applier takes for each cursor-log
// append: the records appended between the two (all newer than the snapshot) are copied behind
// the snapshot and fsynced before the rename; a failure there aborts the swap. The checkpoint that
// retires their journal file fsyncs the new file again (the applier marked the log's path dirty
// when it appended them), but through a descriptor opened after the copy's was closed, which a
// writeback failure of the copy would not reach (fdretire.go). A ledger closed or deleted
// meanwhile is not swapped (checked under cursorLogs.mu; a ledger loading the same name reads its
// cursor log under cursorLogs.mu too), and neither is one whose log was rewritten wholesale
// meanwhile (rewriteCursorLog, by a repair after a failed fsync: repair.go), which holds
// cursorLogs.mu and uses its own tmp file.

// cursorLogLock serialises the engine's cursor-log file work: the applier takes mu for each
// cursor-log append, the janitor to snapshot and swap a compacted log, a ledger load to read its
// log. It also guards each Ledger's cursorLog sizes.
type cursorLogLock struct {
	mu sync.Mutex
	// rewrites counts rewriteCursorLog calls, of any ledger: a compaction gives up when one
	// happened since its snapshot.
	rewrites uint64
}

// janitor runs slow file work in order on one goroutine.
type janitor struct {
	mu   sync.Mutex
	cond *sync.Cond
	jobs []func()
	stop bool
	done chan struct{}
}

func (e *Engine) startJanitor() {
	j := &janitor{done: make(chan struct{})}
	j.cond = sync.NewCond(&j.mu)
	e.janitor = j
	go j.run()
	e.janitor.add(e.emptyTrash)
}

func (j *janitor) run() {
	defer close(j.done)
	for {
		j.mu.Lock()
		for len(j.jobs) == 0 && !j.stop {
			j.cond.Wait()
		}
		if j.stop {
			j.mu.Unlock()
			return
		}
		job := j.jobs[0]
		j.jobs[0] = nil
		j.jobs = j.jobs[1:]
		j.mu.Unlock()
		job()
	}
}

func (j *janitor) add(job func()) {
	j.mu.Lock()
	if !j.stop {
		j.jobs = append(j.jobs, job)
		j.cond.Signal()
	}
	j.mu.Unlock()
}

// close stops the janitor after the job it is running; pending jobs are dropped.
func (j *janitor) close() {
	j.mu.Lock()
	j.stop = true
	j.jobs = nil
	j.cond.Signal()
	j.mu.Unlock()
	<-j.done
}

// trashDir holds what was deleted or trimmed until the janitor unlinks it.
func (e *Engine) trashDir() string { return e.dir + "/trash" }

// moveToTrash renames p into the trash (applier only) and has the janitor remove it. A missing p
// is not an error. The rename becomes durable with the next checkpoint's directory fsyncs.
func (e *Engine) moveToTrash(p string) error {
	e.applier.trashSeq++
	dst := fmt.Sprintf("%s/%016x-%d", e.trashDir(), e.inc.current, e.applier.trashSeq)
	if err := e.fs.Rename(p, dst); err != nil {
		if vfs.IsNotExist(err) {
			return nil
		}
		return err
	}
	e.applier.dirtyDirs[path.Dir(p)] = struct{}{}
	e.applier.dirtyDirs[e.trashDir()] = struct{}{}
	e.janitor.add(func() {
		if err := e.fs.RemoveAll(dst); err != nil {
			e.log.Warn("cannot remove deleted files; they are removed at the next start", "path", dst, "err", err)
		}
	})
	return nil
}

// emptyTrash removes what an earlier run left in the trash (janitor).
func (e *Engine) emptyTrash() {
	des, err := e.fs.ReadDir(e.trashDir())
	if err != nil {
		return
	}
	for _, de := range des {
		if err := e.fs.RemoveAll(e.trashDir() + "/" + de.Name); err != nil {
			e.log.Warn("cannot empty the trash", "path", de.Name, "err", err)
		}
	}
}

// Cursor-log compaction thresholds: a log is compacted when it exceeds minCompactBytes and four
// times the live states plus minCompactBytes.
const minCompactBytes = 1 << 20

// noteCursorLogGrowth decides, after an append (applier, cursorLogs.mu held), whether the janitor
// should look at compacting l's log; l.cursorLog.compactAt keeps it from asking again before the log grows
// past the next threshold.
func (l *Ledger) noteCursorLogGrowth() bool {
	if l.cursorLog.size <= max(l.cursorLog.compactAt, minCompactBytes) {
		return false
	}
	l.cursorLog.compactAt = 1<<63 - 1 // until the janitor has looked
	return true
}

// compactCursorLog rewrites l's cursor log with the live states if it is mostly superseded
// (janitor; see the comment at the top for why it is safe).
func (e *Engine) compactCursorLog(l *Ledger) {
	e.checkpointer.mu.Lock()
	defer e.checkpointer.mu.Unlock()
	p := cursorLogPath(l.dirPath())
	e.cursorLogs.mu.Lock()
	if l.isClosed() {
		e.cursorLogs.mu.Unlock()
		return
	}
	live := l.liveCursorRecords()
	var n int64
	for _, r := range live {
		n += int64(recHeaderSize + len(r))
	}
	oldSize, gen := l.cursorLog.size, e.cursorLogs.rewrites
	if oldSize <= 4*n+minCompactBytes {
		l.cursorLog.compactAt = 4*n + minCompactBytes
		e.cursorLogs.mu.Unlock()
		return
	}
	e.cursorLogs.mu.Unlock()

	// Not rewriteCursorLog's tmp name: a repair may rewrite the log while this one is written.
	tmp := p + ".compact"
	b := appendHeader(nil, magicCursors, 0)
	for _, body := range live {
		b = appendPlainRecord(b, body)
	}
	err := writeFileSynced(e.fs, tmp, b)
	swapped := false
	if err == nil {
		swapped, err = e.swapCursorLog(l, p, tmp, oldSize, gen, int64(len(b)))
	}
	if err == nil && swapped {
		err = e.fs.SyncDir(path.Dir(p))
	}
	if err == nil && !swapped {
		_ = e.fs.Remove(tmp) // the ledger was closed or deleted, or its log rewritten, meanwhile
	}
	if err != nil {
		_ = e.fs.Remove(tmp)
		e.log.Warn("cursor log compaction failed", "ledger", l.name, "err", err)
		e.cursorLogs.mu.Lock()
		l.cursorLog.compactAt = l.cursorLog.size + minCompactBytes // try again after more growth
		e.cursorLogs.mu.Unlock()
	}
}

// swapCursorLog copies the records appended to the log at p since oldSize behind the snapshot in
// tmp (size bytes), fsyncs them, and renames tmp over p under cursorLogs.mu once no record is
// left to copy (the applier appends nothing between that check and the rename). It swaps nothing, and reports false, when the ledger was
// closed or deleted, or a cursor log was rewritten wholesale since the snapshot (a repair or a
// load; gen is the count of those rewrites then): the records after oldSize may then not be the
// ones appended behind the snapshot. Such rewrites are rare, so counting them for all ledgers costs only a retried compaction.
func (e *Engine) swapCursorLog(l *Ledger, p, tmp string, oldSize int64, gen uint64, size int64) (bool, error) {
	// The records appended to the log while the snapshot was written are copied behind it and
	// fdatasynced before the descriptor closes: a writeback failure after that would reach no one
	// (fdretire.go), and the checkpoint's fsync through a new descriptor would succeed and retire
	// the journal that holds them (TestCursorLogCompactionSyncsItsTail). The fdatasync runs
	// outside cursorLogs.mu, which the applier takes for every cursor record of every ledger (a
	// slow one under it stalled every topic's receipts: TestCompactionTailSyncDoesNotStallOtherTopics);
	// what arrives meanwhile is copied in the next round, and the round that finds nothing new
	// swaps. After a few rounds a busy log's last tail is synced under the lock.
	const roundsOutsideTheLock = 3
	for round := 0; ; round++ {
		e.cursorLogs.mu.Lock()
		if l.isClosed() || e.cursorLogs.rewrites != gen {
			e.cursorLogs.mu.Unlock()
			return false, nil
		}
		if l.cursorLog.size > oldSize {
			f, n, err := e.appendCursorLogTail(p, tmp, oldSize, l.cursorLog.size, size)
			if err != nil {
				e.cursorLogs.mu.Unlock()
				return false, err
			}
			oldSize, size = l.cursorLog.size, size+n
			underLock := round >= roundsOutsideTheLock
			if !underLock {
				e.cursorLogs.mu.Unlock()
			}
			err = vfs.DataSync(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				if underLock {
					e.cursorLogs.mu.Unlock()
				}
				return false, err
			}
			if !underLock {
				continue
			}
		}
		e.files.forget(p)
		err := e.fs.Rename(tmp, p)
		if err == nil {
			l.cursorLog.size = size
			l.cursorLog.compactAt = 0
		}
		e.cursorLogs.mu.Unlock()
		return err == nil, err
	}
}

// appendCursorLogTail copies the bytes [from, to) of the cursor log p to the compacted file tmp at
// offset at (cursorLogs.mu held) and returns tmp's descriptor, open for the caller to sync and
// close, and the bytes copied.
func (e *Engine) appendCursorLogTail(p, tmp string, from, to, at int64) (vfs.File, int64, error) {
	tail := make([]byte, to-from)
	cf, err := e.files.acquire(p, false)
	if err != nil {
		return nil, 0, err
	}
	_, err = cf.f.ReadAt(tail, from)
	e.files.release(cf)
	if err != nil {
		return nil, 0, fmt.Errorf("read the cursor log's tail: %w", err)
	}
	f, err := e.fs.OpenFile(tmp, vfs.ReadWrite)
	if err != nil {
		return nil, 0, err
	}
	if _, err := f.WriteAt(tail, at); err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	return f, int64(len(tail)), nil
}

// isClosed reports whether the ledger was closed or deleted.
func (l *Ledger) isClosed() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.closed
}
