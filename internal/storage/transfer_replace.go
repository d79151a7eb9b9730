package storage

import (
	"context"
	"fmt"
	"strings"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Replacing imports: a ledger imported over an existing ledger of the same name, atomically.
//
// When a broker returns, a topic it served before comes back to it with segments another broker
// wrote meanwhile; its own ledger of that name still holds its older segments. The node merges
// both into one import (the old ledger's entries read while it is open, MergeCursorRecords for
// the cursors) and commits it in place of the old ledger. Commit, with the staging directory
// written and fsynced and the ledger id counter raised as for every import:
//
//  1. fails with ErrLedgerExists if the ledger is still open (the caller closes it first);
//  2. waits for a checkpoint to retire every journal file written so far (retireJournalForImport):
//     records of the old ledger (opening it journals a new segment; closing it, its cursors) are
//     never replayed into the new directory;
//  3. renames the ledger's directory to ledgers/.replaced-<directory name> and fsyncs ledgers/;
//  4. renames the staging directory to the ledger's directory and fsyncs ledgers/: the commit;
//  5. removes the .replaced- directory.
//
// No ledger directory starts with '.', so neither name is a ledger's. Open, before anything
// else (resolveReplacedLedgers): a .replaced- directory whose ledger directory exists is removed
// (step 4 was durable: the new ledger is whole); one whose ledger directory is missing is renamed
// back (the crash came between steps 3 and 4: the old ledger is whole), and the staging
// directory is removed as for every import. So a crash at any step leaves the old ledger or the
// new one, each whole. The new ledger takes the old one's directory name (for a name kept in a
// legacy hashed directory, that directory: legacydirs.go).
//
// If a step fails, Commit puts the old directory back and fsyncs ledgers/ before the name is free
// again (putBack); if even that fails, the name stays reserved (OpenLedger fails with
// ErrImporting) until the engine is opened again, which finishes or undoes the replace as after a
// crash.
//
// If step 5 fails (Commit has succeeded), the .replaced- directory stays beside the new ledger's
// until Open removes it, or until the ledger is deleted: DeleteLedger moves it into the trash
// before the ledger's directory (applyDelete), made durable by the checkpoint that retires the
// delete's journal record, as the directory's move is. Otherwise Open would find it without its
// ledger directory, take it for a replace interrupted before step 4 and rename it back: the
// deleted ledger would return with its replaced entries. Nothing else removes a ledger's
// directory, so a .replaced- directory without its ledger directory is always an interrupted
// replace.

// replacedPrefix starts the name of a replaced ledger's directory while the replace commits.
const replacedPrefix = ".replaced-"

// ImportLedgerReplacing starts an import, like ImportLedger, whose Commit replaces the ledger of
// that name if one exists (see the comment above for the steps and their crash safety); without
// one it is ImportLedger. The ledger may be open while the import is written (its entries are
// read into it), but must be closed when Commit is called, which otherwise fails with
// ErrLedgerExists; what is appended to it after its Export is not in the import and goes with
// the replaced ledger. Meanwhile OpenLedger of that name fails with ErrImporting, as does a second
// import of it. The new ledger holds only what the import holds: the caller copies in the old
// ledger's segments it keeps (StartSegment with Ledger.IncarnationOf of each, so that the new
// INCARNATIONS file describes them too) and the cursor states (MergeCursorRecords).
func (e *Engine) ImportLedgerReplacing(ctx context.Context, name string) (*LedgerImport, error) {
	return e.beginImport(ctx, name, true)
}

// checkNotOpen fails with ErrLedgerExists if ledger name is open (or closing).
func (e *Engine) checkNotOpen(name string) error {
	e.table.mu.Lock()
	defer e.table.mu.Unlock()
	if e.table.ledgers[name] != nil {
		return fmt.Errorf("%w: %q is open (close it before Commit replaces it)", ErrLedgerExists, name)
	}
	return nil
}

// replacedPath is where dir (a ledger directory under ledgers/) waits while a replace commits.
func (e *Engine) replacedPath(dir string) string {
	return e.ledgersDir + "/" + replacedPrefix + dir[strings.LastIndexByte(dir, '/')+1:]
}

// swapIn replaces the ledger directory dir with the staging directory (steps 3 to 5; mu held,
// the journal retired).
func (im *LedgerImport) swapIn(dir string) error {
	e := im.e
	aside := e.replacedPath(dir)
	if _, err := e.fs.Stat(aside); err == nil {
		// Left by a replace whose removal of it failed: dir exists, so it is the replaced one's
		// (Open would remove it too).
		if err := e.fs.RemoveAll(aside); err != nil {
			return fmt.Errorf("remove %s: %w", aside, err)
		}
	}
	// Cached descriptors are the old files': the new ones have the same paths.
	e.files.forgetPrefix(dir)
	if err := e.fs.Rename(dir, aside); err != nil {
		return fmt.Errorf("rename %s to %s: %w", dir, aside, err)
	}
	if err := e.fs.SyncDir(e.ledgersDir); err != nil {
		return im.putBack(dir, aside, false, fmt.Errorf("sync %s: %w", e.ledgersDir, err))
	}
	if err := e.fs.Rename(im.staging, dir); err != nil {
		return im.putBack(dir, aside, false, fmt.Errorf("rename %s to %s: %w", im.staging, dir, err))
	}
	if err := e.fs.SyncDir(e.ledgersDir); err != nil {
		// Whether the rename is durable is unknown: take it back (a crash before that is durable
		// finds the new ledger whole, as if Commit had returned).
		return im.putBack(dir, aside, true, fmt.Errorf("sync %s: %w", e.ledgersDir, err))
	}
	e.files.forgetPrefix(dir)
	for i, r := range im.incs {
		e.cache.dropLedger(r.id, im.entries[i]) // entries the old ledger had cached
	}
	if err := e.fs.RemoveAll(aside); err != nil {
		e.log.Warn("cannot remove a replaced ledger's directory; it is removed at the next start", "dir", aside, "err", err)
	}
	return nil
}

// putBack undoes a swap that failed: the staging directory back out of dir (staged), the old
// directory back in, and ledgers/ fsynced before the name is free again. When the commit's own
// fsync failed, its rename may be durable: until the put back is too, a crash finds the new ledger
// in place and the old one aside, and Open finishes the replace, so appends the old ledger
// acknowledged meanwhile would go with its directory (TestPutBackAfterFailedReplaceCommitIsDurable).
// If any of that fails, the name stays reserved (OpenLedger fails with ErrImporting) and nothing
// serves the ledger until the next Open resolves the directories (resolveReplacedLedgers): the old
// ledger or the new one, whichever the disk has, each whole.
func (im *LedgerImport) putBack(dir, aside string, staged bool, cause error) error {
	e := im.e
	var err error
	if staged {
		err = e.fs.Rename(dir, im.staging)
	}
	if err == nil {
		err = e.fs.Rename(aside, dir)
	}
	if err == nil {
		if err = e.fs.SyncDir(e.ledgersDir); err != nil {
			err = fmt.Errorf("sync %s: %w", e.ledgersDir, err)
		}
	}
	if err != nil {
		im.keepReserved = true
		e.log.Error("cannot put back a replaced ledger after its replace failed; the ledger stays unavailable until the engine is opened again", "ledger", im.name, "dir", dir, "err", err, "cause", cause)
		return fmt.Errorf("%w; putting %s back failed too (%w): the ledger stays unavailable until the engine is opened again", cause, dir, err)
	}
	return cause
}

// resolveReplacedLedgers finishes or undoes the replaces a crash interrupted (recovery, before
// anything reads ledgers/): a .replaced- directory is removed if its ledger directory exists,
// renamed back otherwise.
func (e *Engine) resolveReplacedLedgers(des []vfs.FileInfo) error {
	changed := false
	for _, de := range des {
		if !strings.HasPrefix(de.Name, replacedPrefix) {
			continue
		}
		aside := e.ledgersDir + "/" + de.Name
		base := strings.TrimPrefix(de.Name, replacedPrefix)
		if base == "" || strings.HasPrefix(base, ".") {
			return fmt.Errorf("%w: %s: not the name of a replaced ledger's directory; remove it or move it away", ErrCorrupt, aside)
		}
		dir := e.ledgersDir + "/" + base
		switch _, err := e.fs.Stat(dir); {
		case err == nil:
			e.log.Info("finishing an interrupted ledger replace: removing the replaced ledger", "dir", aside)
			if err := e.fs.RemoveAll(aside); err != nil {
				return fmt.Errorf("storage: remove replaced ledger %s: %w", aside, err)
			}
		case vfs.IsNotExist(err):
			e.log.Warn("undoing an interrupted ledger replace: the replaced ledger is put back", "dir", dir)
			if err := e.fs.Rename(aside, dir); err != nil {
				return fmt.Errorf("storage: put back replaced ledger %s: %w", aside, err)
			}
		default:
			return fmt.Errorf("storage: stat %s: %w", dir, err)
		}
		changed = true
	}
	if changed {
		if err := e.fs.SyncDir(e.ledgersDir); err != nil {
			return fmt.Errorf("storage: sync %s: %w", e.ledgersDir, err)
		}
	}
	return nil
}

// isTransferDir reports whether base, a name under ledgers/, is an import's staging directory or
// a replaced ledger's: no ledger's directory.
func isTransferDir(base string) bool {
	return strings.HasPrefix(base, stagingPrefix) || strings.HasPrefix(base, replacedPrefix)
}
