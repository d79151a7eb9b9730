package storage

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Ledger directories and their NAME files.
//
// A ledger whose escaped name is longer than 200 bytes lives in a directory named after a hash of
// its name (dirName), with the full name in a NAME file. Builds before the SHA-256 names used
// crc32c and crc32 (legacyDirName); such directories stay where they are and are found by name:
// at Open the engine lists them with the name their NAME file holds (checked against the
// directory's hash), and a ledger of that name keeps using its directory until it is deleted. A
// name whose legacy directory would collide with another ledger's gets a directory of its own.
//
// Loading a hashed directory checks that its NAME file names the ledger being loaded; one naming
// another ledger stops the load (ErrCorrupt naming the directory). A NAME file whose content is a
// proper prefix of the name (empty included: its write was not durable at a crash) is written
// again, but only in a SHA-256 directory: nobody can compute a second name for one, while a
// second name for a legacy directory can be made to extend the first.

// legacyDirSet maps the base name of each legacy hashed directory to its ledger's name. Replaced
// whole (copy on delete); read without a lock by every path lookup.
type legacyDirSet struct {
	m atomic.Pointer[map[string]string]
}

func (s *legacyDirSet) lookup(name string) (string, bool) {
	m := s.m.Load()
	if m == nil || len(*m) == 0 {
		return "", false
	}
	base := legacyDirName(name)
	if n, ok := (*m)[base]; ok && n == name {
		return base, true
	}
	return "", false
}

// forget drops the legacy directory of name (its ledger was deleted: a new one gets a SHA-256
// directory).
func (s *legacyDirSet) forget(name string) {
	if _, hashed := dirName(name); !hashed {
		return
	}
	for {
		old := s.m.Load()
		if old == nil || len(*old) == 0 {
			return
		}
		base := legacyDirName(name)
		if (*old)[base] != name {
			return
		}
		m := make(map[string]string, len(*old))
		for k, v := range *old {
			if k != base {
				m[k] = v
			}
		}
		if s.m.CompareAndSwap(old, &m) {
			return
		}
	}
}

// ledgerDir is the directory of the ledger called name.
func (e *Engine) ledgerDir(name string) string {
	d, hashed := dirName(name)
	if hashed {
		if base, ok := e.legacyDirs.lookup(name); ok {
			d = base
		}
	}
	return e.ledgersDir + "/" + d
}

// isLegacyHashedDir reports whether base has the form of a legacy hashed directory name.
func isLegacyHashedDir(base string) bool {
	if len(base) < 18 || base[0] != '~' || base[17] != '-' {
		return false
	}
	for _, c := range base[1:17] {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// findLegacyDirs lists the legacy hashed directories under ledgers/ whose NAME file holds the
// name they were made for (recovery, before the journal replay).
func (e *Engine) findLegacyDirs() error {
	des, err := e.fs.ReadDir(e.ledgersDir)
	if err != nil {
		if vfs.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("storage: list ledgers: %w", err)
	}
	m := map[string]string{}
	for _, de := range des {
		if !de.IsDir || !isLegacyHashedDir(de.Name) {
			continue
		}
		n, err := e.readNameFile(e.ledgersDir + "/" + de.Name)
		if err != nil || legacyDirName(n) != de.Name {
			e.log.Warn("legacy ledger directory whose NAME file does not name it; left alone", "dir", de.Name, "err", err)
			continue
		}
		m[de.Name] = n
	}
	e.legacyDirs.m.Store(&m)
	return nil
}

// checkNameFile checks that the hashed directory dir (existing) belongs to ledger name: its NAME
// file holds name. A torn NAME file of a SHA-256 directory is written again (durably).
func (e *Engine) checkNameFile(name, dir string) error {
	base := dir[strings.LastIndexByte(dir, '/')+1:]
	if d, hashed := dirName(name); !hashed || (base != d && base != legacyDirName(name)) {
		return nil
	}
	got, err := e.readNameFile(dir)
	if err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("storage: ledger %q: read %s/NAME: %w", name, dir, err)
	}
	switch {
	case err == nil && got == name:
		return nil
	case strings.HasPrefix(name, strings.TrimRight(got, "\x00")) && !isLegacyHashedDir(base):
		e.log.Warn("ledger NAME file torn (not durable at a crash); written again", "ledger", name, "dir", dir, "had", len(got))
		return e.writeNameFile(name, dir)
	}
	return fmt.Errorf("%w: ledger %q: directory %s belongs to another ledger (its NAME file holds %d bytes that are not this name)", ErrCorrupt, name, dir, len(got))
}

// checkName checks the NAME file of the ledger's directory, if it has one (load).
func (l *Ledger) checkName() error {
	if !l.dirMade {
		return nil
	}
	return l.e.checkNameFile(l.name, l.dirPath())
}

// writeNameFile writes dir/NAME durably.
func (e *Engine) writeNameFile(name, dir string) error {
	if err := writeFileDurably(e.fs, dir+"/NAME", []byte(name)); err != nil {
		return fmt.Errorf("storage: write %s/NAME: %w", dir, err)
	}
	return nil
}
