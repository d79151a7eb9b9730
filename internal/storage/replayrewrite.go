package storage

import "fmt"

// Replay rewrites what the segment already holds.
//
// Recovery used to skip a journal entry its segment already held. After a failed fsync that is
// not safe: a segment file whose writeback failed still shows the data through the page cache as
// long as the machine runs, so a broker restarted after such a failure (and before the repair that
// would have rewritten it: repair.go) found every entry "already there", fsynced nothing new
// (the error had been reported already) and retired the journal: the only durable copy. So replay
// writes every journal entry again, in place where the segment holds it (the bytes are the same;
// writing them makes their pages dirty, so the fsync before the journal is retired does write
// them). The cost is writing each replayed entry once, which replay after a power failure pays
// anyway. Entries written straight to a segment (directwrite.go) are not in the journal; their own
// fdatasync made them durable before they were acknowledged. The same holds for the directories:
// every ledger directory the replay touches is fsynced before the journal is retired.

// touchDir makes the directory entries of a ledger the replay touches durable with the files: the
// directory (and its NAME file) can exist only in the page cache too, when the process restarted
// before the checkpoint that would have fsynced them.
func (r *replayer) touchDir(name, dir string) {
	r.dirs[dir] = struct{}{}
	r.dirs[r.e.ledgersDir] = struct{}{}
	if _, hashed := dirName(name); hashed {
		r.files[dir+"/NAME"] = struct{}{}
	}
}

// rewriteEntry writes rec, entry eid of segment rs that the segment already holds, again at its
// offset (replay).
func (r *replayer) rewriteEntry(rs *replaySeg, eid int64, rec []byte) error {
	if eid < 0 || eid >= int64(len(rs.offs)) {
		r.skipped++
		return nil
	}
	off := rs.offs[eid]
	end := rs.end
	if eid+1 < int64(len(rs.offs)) {
		end = rs.offs[eid+1]
	}
	if end-off != int64(len(rec)) {
		// The segment holds another record under this id: never overwrite it with one of a
		// different length (the records after it would be cut). Loading the segment reports it.
		r.e.log.Warn("replay: a segment record differs in length from its journal record; left as it is",
			"segment", rs.path, "entry", eid, "segmentBytes", end-off, "journalBytes", len(rec))
		r.skipped++
		return nil
	}
	cf, err := r.e.files.acquire(rs.path, false)
	if err != nil {
		return fmt.Errorf("storage: replay open segment: %w", err)
	}
	defer r.e.files.release(cf)
	if _, err := cf.f.WriteAt(rec, off); err != nil {
		return fmt.Errorf("storage: replay rewrite: %w", err)
	}
	r.rewritten++
	r.files[rs.path] = struct{}{}
	return nil
}

// recoveryWritebackErr waits for the writeback of the descriptors the file cache closed during
// replay (fdretire.go) and returns an error if one failed: the journal must not be retired then,
// and Open fails (a retry rewrites everything again).
func (e *Engine) recoveryWritebackErr() error {
	e.files.waitRetired()
	if e.repairsPending() > 0 {
		return fmt.Errorf("storage: recovery: %w", e.firstRepairCause())
	}
	return nil
}
