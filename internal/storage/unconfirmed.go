package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Entries that never became confirmed.
//
// An entry is confirmed when the applier applies it; its acknowledgement says so. Entries are not
// confirmed when their batch failed (journal or direct-write fsync: failBatch) or when their
// ledger was fenced before the applier reached them. The fence can come from another goroutine
// at any time (the checkpointer making one of the ledger's files a repair target: repair.go),
// also in the middle of a batch: the entries of one ledger in that batch before the fence are
// confirmed and acknowledged, those after it fail. Bytes of failed entries can already be in the
// segment file: the sync loop writes a direct group before the journal (directwrite.go), and the
// applier writes a batch's records of a segment in one write. Left there, the ledger reopened
// without a restart (its owner reopens a fenced ledger) loads them from the file and serves
// entries whose appends were reported failed. So the applier cuts the file back to its confirmed
// end (cutUnconfirmed). After a crash the void records do the same (recover.go).
//
// The cut, and the sync loop's truncation of a failed batch's direct data (undoDirect), are made
// durable by the checkpoint that retires the journal file with the void records: the applier
// marks the segment file for it. Until then the void records make recovery cut it again. Without
// that, data of a later batch that did reach the disk (pipelined, its own fsync reported the
// first one's error) could stay behind a hole after a crash, which loading takes for corruption.
// The checkpoint's fsync of the file also reports a writeback error that the direct write's
// descriptor reported first (it may have cost the file acknowledged entries written through the
// page cache before the ledger went direct): the file then becomes a repair target.

// failBatch fences the ledgers of a batch whose journal write or fsync failed and fails its items.
func (e *Engine) failBatch(b *batch, err error) {
	for _, w := range b.direct {
		// undoDirect truncated it: the next checkpoint makes that durable.
		e.applier.dirtyFiles[segPath(w.l.dirPath(), w.seg.id)] = struct{}{}
	}
	for _, it := range b.items {
		if it.kind == kFail {
			it.done(mtypes.Position{}, it.err)
			continue
		}
		if it.l != nil && it.kind != kBarrier {
			it.l.fence(err)
		}
		if it.kind == kDelLedger {
			// Failed, yet its record may be durable (a batch whose journal fsync succeeded fails
			// for a direct write's fsync): replay may still delete the directory.
			e.noteLedgerDeleted(it.l.name, b.seq)
		}
		if it.cursor != nil {
			it.cursor.flushFailed()
		}
		if it.done != nil {
			it.done(mtypes.Position{}, err)
		}
	}
}

// noteUnconfirmed remembers that an entry of w failed when the applier applied it (applier only).
func (e *Engine) noteUnconfirmed(w *segWrite) {
	if n := len(e.applier.unconfirmed); n == 0 || e.applier.unconfirmed[n-1] != w {
		e.applier.unconfirmed = append(e.applier.unconfirmed, w)
	}
}

// cutUnconfirmedWrites cuts the segment files of the writes noted by noteUnconfirmed (applier
// only, once the batch is applied and its segment writes are done).
func (e *Engine) cutUnconfirmedWrites() {
	for i, w := range e.applier.unconfirmed {
		e.cutUnconfirmed(w)
		e.applier.unconfirmed[i] = nil
	}
	e.applier.unconfirmed = e.applier.unconfirmed[:0]
}

// cutUnconfirmed truncates the segment file w wrote (or the sync loop wrote directly) back to
// the segment's confirmed end (applier only). Entries of the segment after w's can only have
// failed too: the ledger is fenced or closed for good.
func (e *Engine) cutUnconfirmed(w *segWrite) {
	l := w.l
	l.mu.RLock()
	confirmed := max(w.seg.size, headerSize)
	l.mu.RUnlock()
	if confirmed >= w.off+int64(w.size) {
		return
	}
	p := segPath(l.dirPath(), w.seg.id)
	cf, err := e.files.acquire(p, false)
	if vfs.IsNotExist(err) {
		return // deleted since (in the trash)
	}
	if err == nil {
		var size int64
		if size, err = cf.f.Size(); err == nil && size > confirmed {
			err = cf.f.Truncate(confirmed)
		}
		e.files.release(cf)
	}
	if err != nil {
		e.log.Error("cutting entries that were not confirmed from a segment failed; the ledger may show them until a restart",
			"ledger", l.name, "file", p, "offset", confirmed, "err", err)
		return
	}
	e.applier.dirtyFiles[p] = struct{}{}
}

// fence stops the ledger: appends and cursor updates fail from now on; reads keep working.
// A void record tells recovery that this ledger's later entries in the journal were never
// acknowledged (so the gap they leave is expected, not corruption).
func (l *Ledger) fence(err error) {
	e := l.e
	// Under the queue lock, so that no entry is queued after the void positions are taken.
	e.queue.mu.Lock()
	l.mu.Lock()
	first := l.err == nil
	var voids []byte
	if first {
		l.err = fmt.Errorf("%w: %w", ErrFenced, err)
		l.flags.Or(flagErrSet)
		l.flags.Or(flagQueueFenced)
		e.log.Error("ledger fenced", "ledger", l.name, "err", err)
		for _, s := range l.segs {
			voids = binary.LittleEndian.AppendUint64(voids, uint64(s.id))
			voids = binary.LittleEndian.AppendUint64(voids, uint64(s.entries))
		}
	}
	l.mu.Unlock()
	e.queue.mu.Unlock()
	if first {
		e.enqueue(l, func(b *batch) item {
			var start int
			b.buf, start = beginJournalRecord(b.buf, jVoid, l.slot)
			b.buf = append(b.buf, voids...)
			finishJournalRecord(b.buf, start)
			return item{kind: kBarrier}
		})
	}
}
