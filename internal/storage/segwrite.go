package storage

import (
	"fmt"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// segWrite collects one segment's records of a batch, written with one WriteAt.
type segWrite struct {
	l    *Ledger
	seg  *segment
	off  int64 // file offset of buf[0]
	size int
	buf  []byte
	err  error
	// direct: written by the sync loop before the journal (directwrite.go); cf is held until its
	// fsync finished, and shareable says the entry cache may keep slices of buf.
	direct    bool
	shareable bool
	cf        *cachedFile
	sf        vfs.File // direct: the descriptor its fdatasync runs on (opened before the write)
	// end: the entry id after the last one in buf.
	end int64
	// block: set when the write bypasses the page cache (unbuffered.go): buf's records within
	// whole 4 KiB blocks, from file offset blockOff = off rounded down; the bytes before buf are
	// the file's bytes there, filled in by writeSegments, the bytes after it zeros.
	block    []byte
	blockOff int64
}

// layoutEntries places the entry records of a durable batch in their segment files: each item's
// file offset, and one contiguous buffer per segment (b.writes) that writeSegments writes once
// the entries are acknowledged (phase one of applying a batch). Its only I/O creates a new
// segment's file, so that a failure there still fails the entries instead of acknowledging them.
func (e *Engine) layoutEntries(b *batch) {
	writes := b.writes[:0]
	var last *segWrite
	for i := range b.items {
		it := &b.items[i]
		if it.kind != kEntry || it.w != nil {
			continue // it.w set: written directly by the sync loop (directwrite.go)
		}
		l := it.l
		if last == nil || last.l != l || last.seg.id != it.ledgerID {
			last = nil
			for _, w := range writes {
				if w.l == l && w.seg.id == it.ledgerID {
					last = w
					break
				}
			}
		}
		if last == nil {
			l.mu.RLock()
			err := l.err
			if err == nil && l.closed {
				err = ErrClosed
			}
			seg := l.segByIDLocked(it.ledgerID)
			l.mu.RUnlock()
			if err == nil && seg == nil {
				err = fmt.Errorf("storage: internal error: no segment %d for entry %d", it.ledgerID, it.entryID)
			}
			if err != nil {
				it.err = err
				continue
			}
			last = &segWrite{l: l, seg: seg, off: seg.size, blockOff: -1}
			if !seg.created {
				last.off = headerSize
			}
			if seg.entries != it.entryID {
				last.err = fmt.Errorf("storage: internal error: entry %d:%d out of sequence (have %d)", it.ledgerID, it.entryID, seg.entries)
			}
			writes = append(writes, last)
		}
		it.fileOff = last.off + int64(last.size)
		it.w = last
		last.size += it.n
		last.end = it.entryID + 1
	}
	// Lay the records of each segment out contiguously in one arena. When every entry of the
	// batch fits the entry cache, the arena is new and the cache keeps slices of it (no second
	// copy per entry; it is freed once the cache has evicted all of them); otherwise one arena is
	// reused and the cache gets copies.
	total := 0
	for _, w := range writes {
		total += w.size
	}
	var arena []byte
	if b.cacheArena = e.cache.limit > 0 && total > 0; b.cacheArena {
		for i := range b.items {
			if it := &b.items[i]; it.kind == kEntry && int64(it.n-segRecordOverhead)+cacheEntryOverhead > e.cache.limit/4 {
				b.cacheArena = false
				break
			}
		}
	}
	// Writes that bypass the page cache get whole aligned blocks of the arena (unbuffered.go).
	bypass := false
	for _, w := range writes {
		if w.err == nil && e.bypassCache(w.size) {
			w.blockOff = vfs.AlignDown(w.off)
			total += vfs.AlignUp(int(w.off-w.blockOff)+w.size) - w.size
			bypass = true
		}
	}
	if b.cacheArena {
		if bypass {
			arena = vfs.AlignedBuffer(total)[:total]
		} else {
			arena = make([]byte, total)
		}
	} else {
		if cap(e.applier.arena) < total || (bypass && !blockAligned(e.applier.arena)) {
			e.applier.arena = vfs.AlignedBuffer(total)
		}
		arena = e.applier.arena[:total]
	}
	if bypass {
		// Blocks first, from the aligned start of the arena, so each one is aligned.
		for _, w := range writes {
			if w.blockOff < 0 {
				continue
			}
			pre := int(w.off - w.blockOff)
			n := vfs.AlignUp(pre + w.size)
			w.block, arena = arena[:n:n], arena[n:]
			clear(w.block[pre+w.size:]) // zeros after the records (a reused arena is not)
			w.buf = w.block[pre : pre : pre+w.size]
		}
	}
	for _, w := range writes {
		if w.blockOff < 0 {
			w.buf, arena = arena[:0:w.size], arena[w.size:]
		}
	}
	for i := range b.items {
		if it := &b.items[i]; it.kind == kEntry && it.w != nil && !it.w.direct {
			it.w.buf = append(it.w.buf, b.buf[it.off:it.off+it.n]...)
		}
	}
	for _, w := range writes {
		if w.err == nil && !w.seg.created {
			w.err = w.l.createSegmentFile(w.seg.id)
		}
	}
	b.writes = writes
}

// writeSegments writes the segment buffers layoutEntries laid out for b, one write per segment,
// and lets readers waiting for those entries' bytes go on (applier only; the entries are
// acknowledged already). A write that fails cannot fail its entries any more: they are durable in
// the journal. The file becomes a repair target (repair.go): the ledger is fenced, no checkpoint
// retires the journal, and the file is rewritten from the journal.
func (e *Engine) writeSegments(b *batch) {
	for _, w := range b.writes {
		if w.err != nil {
			continue // its entries failed before the acknowledgement (applyEntry)
		}
		p := segPath(w.l.dirPath(), w.seg.id)
		cf, err := e.files.acquire(p, false)
		if err == nil {
			if w.block != nil {
				err = e.writeBlocks(cf, w)
			} else {
				_, err = cf.f.WriteAt(w.buf, w.off)
				if err == nil {
					e.paceWriteback(cf.f, w.seg, w.off+int64(len(w.buf)))
				}
			}
			e.files.release(cf)
		}
		if err != nil {
			e.needRepair(p, w.l, fmt.Errorf("storage: segment write after acknowledgement: %w", err))
			continue
		}
		e.applier.dirtyFiles[p] = struct{}{}
		w.l.segmentWritten(w.seg, w.end)
	}
	clear(b.writes)
	b.writes = b.writes[:0]
}

// writebackChunk is how much a segment file is written through the page cache before the applier
// starts its writeback.
//
// Why: segment data written by the applier (the double write) is fsynced only at the checkpoint,
// when its journal file fills (64 MiB). Left to the kernel, none of it reaches the device before
// then (writeback starts after 30 s or gigabytes of dirty pages), so the checkpoint would send the
// whole 64 MiB at once and the journal's fdatasyncs would queue behind it. Started every 1 MiB, the
// writes reach the device in steps a few milliseconds long, and the checkpoint's fsync finds little
// left to write: at 5,000 msg/s x 1 KiB the pacing lowers the replication latency p99 from about
// 38 ms to 11 ms (median of six alternating pairs; docs/storage.md, "Paced writeback").
const writebackChunk = 1 << 20

// paceWriteback starts writeback of segment seg's file up to end once writebackChunk bytes have
// been written past the last start (applier only). Advisory: an error (or a file system without
// it) only loses the pacing; the checkpoint's fsync still makes the data durable and reports
// failures.
func (e *Engine) paceWriteback(f vfs.File, seg *segment, end int64) {
	if end-seg.wbOff < writebackChunk {
		return
	}
	if err := vfs.StartWriteback(f, seg.wbOff, end-seg.wbOff); err != nil {
		e.log.Debug("storage: segment writeback", "err", err)
	}
	// The chunks handed to the device before this one are written back by now (most of them):
	// drop their clean pages so that the next chunk's page cache reuses memory used moments ago.
	if seg.wbOff > seg.dropOff {
		if err := vfs.DropCache(f, seg.dropOff, seg.wbOff-seg.dropOff); err != nil {
			e.log.Debug("storage: segment drop cache", "err", err)
		}
		seg.dropOff = max(seg.dropOff, seg.wbOff-2*writebackChunk)
	}
	seg.wbOff = end
}

// applyEntry makes a written entry visible and returns its position (phase two). With shared, the
// entry cache keeps a slice of the batch's arena; else it copies into slab.
func (l *Ledger) applyEntry(it *item, shared bool, slab *[]byte) (mtypes.Position, error) {
	e := l.e
	if it.err != nil {
		return mtypes.Position{}, it.err
	}
	if it.w.err != nil {
		l.fence(it.w.err)
		return mtypes.Position{}, it.w.err
	}
	if it.w.direct {
		shared = it.w.shareable
	}
	seg := it.w.seg
	rec := it.w.buf[it.fileOff-it.w.off:][:it.n]
	data := rec[segRecordOverhead:]
	pos := mtypes.Position{LedgerID: seg.id, EntryID: it.entryID}
	l.mu.Lock()
	if l.closed || l.err != nil {
		err := l.err
		if err == nil {
			err = ErrClosed
		}
		l.mu.Unlock()
		e.noteUnconfirmed(it.w) // its bytes may be in the file already (unconfirmed.go)
		return mtypes.Position{}, err
	}
	seg.created = true
	seg.addEntry(it.fileOff, int64(len(rec)), it.publishTime, int64(len(data)))
	if it.w.direct && seg.written == it.entryID {
		seg.written++ // the sync loop wrote it before the journal (directwrite.go)
	}
	l.entries++
	l.bytes += int64(len(data))
	l.mu.Unlock()
	if e.cache.limit > 0 && shared {
		e.cache.put(pos, it.publishTime, data[:len(data):len(data)])
	} else if e.cache.limit > 0 {
		// One allocation per batch holds the cached copies of all its entries.
		if len(*slab) < len(data) {
			*slab = make([]byte, max(len(data), 256<<10))
		}
		c := (*slab)[:len(data):len(data)]
		*slab = (*slab)[len(data):]
		copy(c, data)
		e.cache.put(pos, it.publishTime, c)
	}
	return pos, nil
}

func (l *Ledger) createSegmentFile(id int64) error {
	e := l.e
	if !l.dirMade {
		if err := e.ensureLedgerDir(l.name, l.dirPath()); err != nil {
			return err
		}
		l.dirMade = true
	}
	if err := e.files.create(segPath(l.dirPath(), id), appendHeader(nil, magicSegment, uint64(id))); err != nil {
		return fmt.Errorf("storage: create segment: %w", err)
	}
	e.applier.dirtyDirs[l.dirPath()] = struct{}{}
	return nil
}

func (l *Ledger) applySeal(id int64) {
	l.mu.Lock()
	seg := l.segByIDLocked(id)
	if seg == nil || seg.sealed {
		l.mu.Unlock()
		return
	}
	seg.sealed = true
	cur := len(l.segs) > 0 && l.segs[len(l.segs)-1] == seg
	if seg.entries == 0 && !cur {
		l.removeSegLocked(seg)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.unpad(seg)
	if seg.padded {
		return // no index: its file size would not match (unpad logged why)
	}
	l.saveIndex(seg)
	if seg.idxSaved {
		l.e.applier.dirtyFiles[idxPath(l.dirPath(), seg.id)] = struct{}{}
	}
}
