package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// The next journal file is made ahead of rotation, off the sync loop.
//
// Making a journal file costs two flushes: its header is fsynced and then its directory (a
// recycled file was renamed). Done inline at rotation, every append queued behind the rotation
// waited for them; on the development VM, whose disk stalls for hundreds of milliseconds a few
// times a minute, one such rotation held receipts for 80-189 ms (docs/publish-latency.md). So as
// soon as journal file seq is opened, a preparer goroutine makes file seq+1 (header written and
// fsynced, directory fsynced) and the rotation adopts it.
//
// A prepared file holds a header and no record until it is adopted. Recovery therefore ignores
// journal files at the end of the sequence that hold no valid record (recover.go): the file
// before them is the last one, whose torn tail was never acknowledged. Header flags: in
// SyncInterval mode a prepared file always carries journalFlagPrevUnclean (its predecessor's
// final fsync may still run when it is adopted, and a torn tail is acceptable in that mode); in
// SyncAlways mode it carries none and is adopted only when its predecessor was not abandoned
// (otherwise the file is made inline, as before, with the flag).

// preparedJournal is a journal file made ahead of use by a preparer goroutine.
type preparedJournal struct {
	seq  uint64
	f    vfs.File
	err  error
	done chan struct{} // closed when f and err are set
}

// makeJournalFile creates journal file seq with its header, durable with its directory entry.
func (e *Engine) makeJournalFile(seq uint64, flags uint32) (vfs.File, error) {
	f, err := e.createJournalFile(seq)
	if err != nil {
		return nil, fmt.Errorf("storage: create journal: %w", err)
	}
	hdr := appendHeaderFlags(nil, magicJournal, seq, flags)
	if _, err := f.WriteAt(hdr, 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("storage: write journal header: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("storage: sync journal: %w", err)
	}
	if err := e.fs.SyncDir(e.journalDir); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("storage: sync journal dir: %w", err)
	}
	return f, nil
}

// prepareJournal starts making journal file seq in the background (sync loop only).
func (e *Engine) prepareJournal(seq uint64) {
	if e.nextJournal != nil {
		return
	}
	var flags uint32
	if e.opts.Sync == SyncInterval {
		flags = journalFlagPrevUnclean
	}
	p := &preparedJournal{seq: seq, done: make(chan struct{})}
	e.nextJournal = p
	e.preparers.Add(1)
	go func() {
		defer e.preparers.Done()
		defer close(p.done)
		p.f, p.err = e.makeJournalFile(seq, flags)
	}()
}

// takePreparedJournal returns the prepared file for journal seq if it can be used now, waiting
// for its preparation to finish; nil means make the file inline (sync loop only).
func (e *Engine) takePreparedJournal(seq uint64) vfs.File {
	p := e.nextJournal
	if p == nil {
		return nil
	}
	e.nextJournal = nil
	<-p.done
	if p.err != nil {
		e.log.Warn("preparing the next journal file failed; making it inline", "seq", p.seq, "err", p.err)
		return nil
	}
	if p.seq == seq && (e.opts.Sync == SyncInterval || !e.prevUnclean) {
		return p.f
	}
	// Not usable: the inline path recreates file seq (with the flag it needs); a prepared file
	// of another sequence number holds no record and is removed.
	_ = p.f.Close()
	if p.seq != seq {
		_ = e.fs.Remove(e.journalPath(p.seq))
	}
	return nil
}

// discardPreparedJournal waits for a preparation in flight and removes its file: it holds no
// record (sync loop only, when stopping).
func (e *Engine) discardPreparedJournal() {
	if p := e.nextJournal; p != nil {
		e.nextJournal = nil
		<-p.done
		if p.err == nil {
			_ = p.f.Close()
			_ = e.fs.Remove(e.journalPath(p.seq))
		}
	}
	e.preparers.Wait()
}

// journalHasRecords reports whether journal file seq holds at least one valid record (recovery).
// A file without one was made ahead of use and never written, or never got a durable header. A
// file whose header is invalid but whose first record is valid for seq holds records (its header
// is corrupt, which replay reports) and is never taken for an unwritten one.
func (e *Engine) journalHasRecords(seq uint64) bool {
	f, err := e.fs.OpenFile(e.journalPath(seq), vfs.ReadOnly)
	if err != nil {
		return false
	}
	defer f.Close()
	hdr := make([]byte, headerSize+recHeaderSize)
	if n, _ := f.ReadAt(hdr, 0); n < len(hdr) {
		return false
	}
	var seeds [][]byte
	switch hseq, _, seed, err := parseJournalHeader(hdr); {
	case err == nil && hseq == seq:
		seeds = [][]byte{seed}
	case err == nil:
		return false // a recycled file whose new header never became durable
	default:
		seeds = [][]byte{journalSeed(seq), nil} // see recordsFollowHeader
	}
	bodyLen := int64(binary.LittleEndian.Uint32(hdr[headerSize:]))
	size, err := f.Size()
	if err != nil || bodyLen > maxRecordBody || bodyLen > size-int64(len(hdr)) {
		return false
	}
	rec := make([]byte, recHeaderSize+int(bodyLen))
	if n, _ := f.ReadAt(rec, headerSize); n < len(rec) {
		return false
	}
	for _, seed := range seeds {
		if _, _, err := decodeJournalRecord(rec, seed); err == nil {
			return true
		}
	}
	return false
}
