package storage

import (
	"fmt"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

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
// anyway. A segment's header is written in the same apply as its first entry, so a journal that
// holds entry 0 of a segment holds everything written to it since its creation: the header is
// written again with that entry (its writeback failed with the entries', and after a power loss
// the segment would start with zeros). Entries written straight to a segment (directwrite.go) are
// not in the journal; their own fdatasync made them durable before they were acknowledged. The same holds for the directories:
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
	if err := rs.writeHeaderWithFirst(cf.f, eid, off); err != nil {
		return err
	}
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

// writeHeaderWithFirst writes the segment's header again when the replay writes its first entry
// (eid at off): the journal holding entry 0 means the header was written since the last
// checkpoint too, and its writeback may have failed with the entry's. The bytes are the same as
// the valid header scanSegment found (or wrote).
func (rs *replaySeg) writeHeaderWithFirst(f vfs.File, eid, off int64) error {
	if eid != 0 || off != headerSize {
		return nil
	}
	if _, err := f.WriteAt(appendHeader(nil, magicSegment, uint64(rs.id)), 0); err != nil {
		return fmt.Errorf("storage: replay rewrite segment header: %w", err)
	}
	return nil
}
