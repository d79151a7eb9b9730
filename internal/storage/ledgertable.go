package storage

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// ledgerTable is the engine's open ledgers, guarded by mu.
type ledgerTable struct {
	mu      sync.Mutex
	ledgers map[string]*Ledger // by name: open, loading, or closing
	closed  bool               // Close has begun: nothing opens any more
	slot    uint32             // the last slot handed out (a ledger's number in journal records)
	// importing: names reserved by a ledger import until it commits or aborts (transfer_import.go).
	importing map[string]struct{}
}

// OpenLedger opens the ledger called name, creating it if absent. While it is open, every call
// returns the same *Ledger. name is opaque and may contain '/'. Opening starts a new ledger id.
func (e *Engine) OpenLedger(ctx context.Context, name string) (*Ledger, error) {
	if err := checkLedgerName(name); err != nil {
		return nil, err
	}
	if err := e.repairPendingFor(name); err != nil {
		return nil, err
	}
	e.table.mu.Lock()
	for {
		if e.table.closed {
			e.table.mu.Unlock()
			return nil, ErrClosed
		}
		if _, busy := e.table.importing[name]; busy {
			e.table.mu.Unlock()
			return nil, fmt.Errorf("%w: %q", ErrImporting, name)
		}
		l, ok := e.table.ledgers[name]
		if !ok {
			break
		}
		if l.flags.Load()&flagClosing != 0 {
			// Being closed: wait until its pending work is done, then load it afresh.
			e.table.mu.Unlock()
			select {
			case <-l.closedCh:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			e.table.mu.Lock()
			if e.table.ledgers[name] == l {
				delete(e.table.ledgers, name)
			}
			continue
		}
		e.table.mu.Unlock()
		<-l.ready
		if l.loadErr != nil {
			return nil, l.loadErr
		}
		return l, nil
	}
	e.table.slot++
	l := &Ledger{e: e, name: name, slot: e.table.slot, ready: make(chan struct{})}
	e.table.ledgers[name] = l
	e.table.mu.Unlock()

	err := l.load(ctx)
	if err == nil && !l.dirMade {
		// A new ledger: make its existence durable (one shared group commit), so a topic
		// created without data still exists after a restart.
		err = l.persistCreation(ctx)
	}
	if err != nil {
		l.loadErr = err
		e.table.mu.Lock()
		delete(e.table.ledgers, name)
		e.table.mu.Unlock()
	} else {
		l.flags.Or(flagLoaded)
	}
	close(l.ready)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// LedgerExists reports whether a ledger called name exists (open, or with a directory on disk).
func (e *Engine) LedgerExists(ctx context.Context, name string) (bool, error) {
	e.table.mu.Lock()
	_, ok := e.table.ledgers[name]
	closed := e.table.closed
	e.table.mu.Unlock()
	if closed {
		return false, ErrClosed
	}
	if ok {
		return true, nil
	}
	dir := e.ledgerDir(name)
	if _, err := e.fs.Stat(dir); err != nil {
		if vfs.IsNotExist(err) {
			return false, nil
		}
		return false, fmt.Errorf("storage: stat ledger: %w", err)
	}
	return e.checkNameFile(name, dir) == nil, nil
}

func (e *Engine) readNameFile(dir string) (string, error) {
	f, err := e.fs.OpenFile(dir+"/NAME", vfs.ReadOnly)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sz, err := f.Size()
	if err != nil {
		return "", err
	}
	if sz > MaxLedgerNameBytes {
		return "", fmt.Errorf("%w: NAME file too large", ErrCorrupt)
	}
	b := make([]byte, sz)
	if _, err := f.ReadAt(b, 0); err != nil && int64(len(b)) != sz {
		return "", err
	}
	return string(b), nil
}

// ListLedgers lists the names of existing ledgers (open or on disk) starting with prefix, sorted.
func (e *Engine) ListLedgers(ctx context.Context, prefix string) ([]string, error) {
	set := map[string]struct{}{}
	e.table.mu.Lock()
	if e.table.closed {
		e.table.mu.Unlock()
		return nil, ErrClosed
	}
	for n := range e.table.ledgers {
		if strings.HasPrefix(n, prefix) {
			set[n] = struct{}{}
		}
	}
	e.table.mu.Unlock()
	des, err := e.fs.ReadDir(e.ledgersDir)
	if err != nil && !vfs.IsNotExist(err) {
		return nil, fmt.Errorf("storage: list ledgers: %w", err)
	}
	for _, de := range des {
		if !de.IsDir {
			continue
		}
		n, ok := nameFromDir(de.Name)
		if !ok && strings.HasPrefix(de.Name, "~") {
			n, err = e.readNameFile(e.ledgersDir + "/" + de.Name)
			ok = err == nil
		}
		if ok && strings.HasPrefix(n, prefix) {
			set[n] = struct{}{}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// DeleteLedger closes the ledger if open and removes its data and cursors. Deleting a ledger
// that does not exist is not an error.
func (e *Engine) DeleteLedger(ctx context.Context, name string) error {
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	e.enqueue(l, func(b *batch) item {
		var start int
		b.buf, start = beginJournalRecord(b.buf, jDelLedger, l.slot)
		finishJournalRecord(b.buf, start)
		return item{kind: kDelLedger, done: func(_ mtypes.Position, err error) { ch <- err }}
	})
	select {
	case err = <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// openLedgers lists the ledgers that loaded without error.
func (e *Engine) openLedgers() []*Ledger {
	e.table.mu.Lock()
	defer e.table.mu.Unlock()
	out := make([]*Ledger, 0, len(e.table.ledgers))
	for _, l := range e.table.ledgers {
		if l.flags.Load()&flagLoaded != 0 {
			out = append(out, l)
		}
	}
	return out
}

func (e *Engine) forget(l *Ledger) {
	e.table.mu.Lock()
	if e.table.ledgers[l.name] == l {
		delete(e.table.ledgers, l.name)
	}
	e.table.mu.Unlock()
	e.setImportedIncarnations(l.name, nil) // loaded again with the ledger
	e.rememberClosed(l)                    // its files may still wait for a checkpoint (repair.go)
}

// ensureLedgerDir creates a ledger's directory (and its NAME file for hashed names) unless it
// exists. Its durability is left to the next checkpoint: the journal has everything needed to
// rebuild it. The directory and ledgers/ are marked for that checkpoint before anything can fail,
// and also when the directory exists already: a creation that made the directory and then failed
// (its NAME write refused for ENOSPC) leaves it behind, and the retried OpenLedger finds it and
// takes the ledger for an existing one, with no jCreate record and no call here. Only this mark
// makes the checkpoint that retires the ledger's entries fsync its entry in ledgers/
// (TestRetriedCreationOfHashedLedgerSurvivesPowerLoss). Every other directory a load finds was
// made durable at Open (removeImportStaging fsyncs ledgers/) or by the import that renamed it in.
func (e *Engine) ensureLedgerDir(name, dir string) error {
	e.applier.dirtyDirs[dir] = struct{}{}
	e.applier.dirtyDirs[e.ledgersDir] = struct{}{}
	if _, err := e.fs.Stat(dir); err == nil {
		return nil
	}
	if err := e.fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("storage: create ledger dir: %w", err)
	}
	if _, hashed := dirName(name); hashed {
		f, err := e.fs.OpenFile(dir+"/NAME", vfs.ReadWrite|vfs.Create|vfs.Trunc)
		if err != nil {
			return fmt.Errorf("storage: write NAME: %w", err)
		}
		_, err = f.WriteAt([]byte(name), 0)
		e.files.retireFile(dir+"/NAME", f) // written back before it is closed (fdretire.go)
		if err != nil {
			return fmt.Errorf("storage: write NAME: %w", err)
		}
		e.applier.dirtyFiles[dir+"/NAME"] = struct{}{}
	}
	return nil
}
