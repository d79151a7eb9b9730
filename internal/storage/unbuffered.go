package storage

import (
	"errors"
	"fmt"
	"io"
	"unsafe"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Segment writes that bypass the page cache.
//
// Why: through the page cache, every segment write needs page-cache pages, and on a virtual
// machine whose free memory goes back to the host a new page costs several times what reused
// memory does (docs/storage.md, "Page cache"): in a publish profile with every segment write
// through the page cache, the segment write, its paced writeback and the cache drops are ~29% of
// the broker's CPU, the copy into new pages alone a third of that. The segment data is read back
// rarely (the entry cache serves tailing readers) and is made durable by the checkpoint's fsync
// anyway. So when one segment's share of a batch is at least Options.BypassCacheBytes, the
// applier writes it with O_DIRECT (vfs.OpenDirect): the device reads it from the arena, and no
// page is allocated, dirtied, written back or dropped.
//
// O_DIRECT writes whole aligned blocks (vfs.DirectAlign, 4 KiB) from an aligned buffer. The
// segment format is unchanged; the write covers [blockOff, blockOff+len(block)):
//   - blockOff is the write's file offset rounded down to a block. The bytes of the file between
//     blockOff and the write's offset (the partial last block: earlier records, or the segment
//     header) are written again, with the same contents: the applier keeps a copy of them from
//     its previous such write (segment.tail), or reads them through the buffered handle. A torn
//     rewrite therefore leaves those bytes as they were.
//   - After the records, the block is padded with zeros. The file's size becomes that of the
//     whole block; the ledger's size (segment.size) stays the end of the last record, and the
//     next write starts there, overwriting the zeros.
//
// The padding never reaches a reader (reads stop at the last confirmed entry). A sealed segment is
// truncated to its records when sealed (so its index's file size matches); a current segment keeps
// its padding until the next write, a seal, or the next open, where loading and recovery take a
// run of zeros shorter than a block that ends the file on a block boundary for padding and cut
// it quietly (isBlockPadding) instead of counting a torn tail.
//
// Durability is unchanged: the segment is made durable by the checkpoint's fsync (the device has
// a volatile write cache), and until then the journal holds the entries. Mixing with buffered
// writes of the same file (small writes, the sync loop's direct writes, recovery) is correct: the
// kernel writes back and invalidates cached pages of a range before an O_DIRECT write of it.
// If the file system cannot do direct I/O (vfs.ErrDirectUnsupported), the engine falls back to
// the page cache for good and says so once in the log.

// bypassCache reports whether a segment write of size bytes goes around the page cache.
func (e *Engine) bypassCache(size int) bool {
	return e.opts.BypassCacheBytes > 0 && !e.bypassOff.Load() && size >= e.opts.BypassCacheBytes
}

// writeBlocks writes w.block at w.blockOff with O_DIRECT (applier only); where the file system
// cannot, it writes w.buf through the page cache.
func (e *Engine) writeBlocks(cf *cachedFile, w *segWrite) error {
	end := w.off + int64(len(w.buf))
	fallback, err := e.writeAround(cf, w.seg, w.block, w.blockOff, w.off, end)
	if fallback {
		_, err = cf.f.WriteAt(w.buf, w.off)
	}
	return err
}

// writeAround writes block, the file's bytes from blockOff on, with O_DIRECT: block holds
// records from off to end and zeros after them; the bytes before off are filled in here, from
// the segment's tail or read through the buffered handle. fallback: the file system cannot bypass
// the page cache (from now on no write tries), nothing was written, and the caller writes the
// records through it. The applier and the sync loop's direct writes (directwrite.go) call it,
// never for one segment at once: their writes of a segment are ordered by the hand-over of
// batches and the wait before a ledger enters direct mode, and so are seg.tail and seg.padded.
func (e *Engine) writeAround(cf *cachedFile, seg *segment, block []byte, blockOff, off, end int64) (fallback bool, err error) {
	pre := int(off - blockOff)
	if pre > 0 {
		if seg.tail != nil && seg.tailOff == blockOff && len(seg.tail) == pre {
			copy(block[:pre], seg.tail)
		} else if n, err := cf.f.ReadAt(block[:pre], blockOff); n < pre {
			return false, fmt.Errorf("storage: read the start of block %d of %s: %w", blockOff, cf.path, err)
		}
	}
	if cf.df == nil {
		df, err := vfs.OpenDirect(e.fs, cf.path)
		if errors.Is(err, vfs.ErrDirectUnsupported) {
			if e.bypassOff.CompareAndSwap(false, true) {
				e.log.Info("storage: the file system cannot bypass the page cache; segment writes use it", "err", err)
			}
			seg.tail = nil
			return true, nil
		}
		if err != nil {
			return false, err
		}
		cf.df = df
	}
	if _, err := cf.df.WriteAt(block, blockOff); err != nil {
		seg.tail = nil
		return false, err
	}
	tailOff := vfs.AlignDown(end)
	seg.tail = append(seg.tail[:0], block[tailOff-blockOff:end-blockOff]...)
	seg.tailOff = tailOff
	seg.padded = end != blockOff+int64(len(block))
	// Nothing of it is in the page cache: the paced writeback starts counting after it.
	seg.wbOff = max(seg.wbOff, end)
	return false, nil
}

// directBlock lays records recs out in whole aligned blocks for a write around the page cache
// that starts pre bytes into its first block: in a buffer of its own when the entry cache keeps
// slices of it (shared), else in b's direct buffer (directwrite.go, appendDirectRecs). The bytes
// before pre are left for writeAround, those after the records are zero.
func directBlock(b *batch, recs [][]byte, pre int, shared bool) []byte {
	size := 0
	for _, r := range recs {
		size += len(r)
	}
	n := vfs.AlignUp(pre + size)
	var block []byte
	if shared {
		block = vfs.AlignedBuffer(n)
	} else {
		start := vfs.AlignUp(len(b.dbuf))
		if cap(b.dbuf) < start+n || !blockAligned(b.dbuf) {
			// The groups already in the old buffer keep it.
			b.dbuf, start = vfs.AlignedBuffer(max(n, 2*cap(b.dbuf)))[:0], 0
		}
		b.dbuf = b.dbuf[:start+n]
		block = b.dbuf[start : start+n : start+n]
	}
	at := pre
	for _, r := range recs {
		at += copy(block[at:], r)
	}
	clear(block[at:])
	return block
}

// readAt reads size bytes of cf's file at off into *buf (readSegment), allocating *buf unless it
// already has that size and was read through the page cache. A read of at least
// BypassCacheBytes goes around the page cache (O_DIRECT): *buf is then a slice of an aligned
// buffer of its own that covers the whole blocks around it, so that the device writes the data
// where the entries will point, and no page-cache page is allocated and copied from. The same
// ReaderAt contract: fewer than size bytes come with an error (io.EOF at the end of the file).
//
// Why: a catch-up reads what the broker wrote minutes ago and no longer caches; through the page
// cache, the copy out of pages the device has just filled is 11% of the unbatched catch-up's CPU.
// The entry cache still serves tailing readers; a second reader of the same backlog reads the
// device again (the page cache would not have kept it long either: segment pages are dropped once
// written back, docs/storage.md "Page cache").
func (e *Engine) readAt(cf *cachedFile, buf *[]byte, size int, off int64) (int, error) {
	if e.bypassCache(size) {
		if df, err := cf.directReader(e.fs); err == nil {
			blockOff := vfs.AlignDown(off)
			pre := int(off - blockOff)
			ab := vfs.AlignedBuffer(pre + size)
			m, err := df.ReadAt(ab, blockOff)
			*buf = ab[pre : pre+size : pre+size]
			if n := m - pre; n >= size {
				return size, nil
			} else if err == nil {
				err = io.EOF
			}
			return max(m-pre, 0), err
		} else if errors.Is(err, vfs.ErrDirectUnsupported) {
			if e.bypassOff.CompareAndSwap(false, true) {
				e.log.Info("storage: the file system cannot bypass the page cache; segment reads and writes use it", "err", err)
			}
		}
		// Any other failure to open it: this read goes through the page cache.
	}
	if len(*buf) != size {
		*buf = make([]byte, size)
	}
	return cf.f.ReadAt(*buf, off)
}

// unpad cuts a sealed segment's file back to its records (the zeros after a block written by
// writeBlocks) and forgets its tail (applier only).
func (l *Ledger) unpad(seg *segment) {
	seg.tail = nil
	if !seg.padded {
		return
	}
	e := l.e
	p := segPath(l.dirPath(), seg.id)
	cf, err := e.files.acquire(p, false)
	if err == nil {
		err = cf.f.Truncate(seg.size)
		e.files.release(cf)
	}
	if err != nil {
		// The padding stays; the next open cuts it (isBlockPadding). The index is not written:
		// its file size would not match.
		e.log.Warn("storage: cannot cut the padding of a sealed segment", "ledger", l.name, "segment", seg.id, "err", err)
		return
	}
	seg.padded = false
	e.applier.dirtyFiles[p] = struct{}{}
}

// isBlockPadding reports whether the file's bytes from off to size are the zeros that end a block
// written by writeBlocks: fewer than a block, all zero, up to a block boundary that ends the file.
func isBlockPadding(f vfs.File, off, size int64) bool {
	return off < size && size%vfs.DirectAlign == 0 && size-off < vfs.DirectAlign && tailIsZero(f, off, size)
}

// blockAligned reports whether b's backing array starts on a DirectAlign boundary.
func blockAligned(b []byte) bool {
	return cap(b) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%vfs.DirectAlign == 0
}
