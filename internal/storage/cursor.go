package storage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Cursor is a subscription's (or replicator's) position in a ledger: a mark-delete position
// plus individually acknowledged entries after it, and properties.
//
// Durable cursors are persisted in batches: every CursorFlushInterval (default 1 s) the states
// of the cursors that changed are written as journal records and share the next group commit.
// After a crash a cursor is at most one flush interval (plus one group commit) behind the
// acknowledgements it received: entries are redelivered, never skipped.
type Cursor struct {
	l       *Ledger
	name    string
	durable bool

	// flushMu orders this cursor's journal records as their states were taken (cursorflush.go).
	flushMu  sync.Mutex
	mu       sync.Mutex
	st       cursorState
	version  uint64 // bumped on every change
	queued   uint64 // version last handed to the journal
	flushedV uint64 // version last durable
	deleted  bool
	// persisted: the mark-delete position of the newest durable state (trimposition.go).
	persisted persistedMarks
}

// Name returns the cursor's name.
func (c *Cursor) Name() string { return c.name }

// Durable reports whether the cursor is persisted.
func (c *Cursor) Durable() bool { return c.durable }

// MarkDeletePosition: every entry <= it is acknowledged.
func (c *Cursor) MarkDeletePosition() mtypes.Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.markDelete
}

func (c *Cursor) check() error {
	if c.deleted {
		return fmt.Errorf("%w: cursor %q deleted", ErrClosed, c.name)
	}
	return nil
}

func (c *Cursor) next() nextFunc {
	return func(p mtypes.Position) (mtypes.Position, bool) {
		c.l.mu.RLock()
		defer c.l.mu.RUnlock()
		return c.l.nextStoredLocked(p)
	}
}

// MarkDelete acknowledges every entry <= p (cumulative); a no-op if p is behind. A position
// after the last confirmed entry is clamped to it.
func (c *Cursor) MarkDelete(ctx context.Context, p mtypes.Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(); err != nil {
		return err
	}
	if p.Compare(c.st.markDelete) <= 0 {
		return nil
	}
	if lc := c.l.LastConfirmed(); p.Compare(lc) > 0 {
		p = lc
		if p.Compare(c.st.markDelete) <= 0 {
			return nil
		}
	}
	c.st.setMarkDelete(p)
	c.st.normalize(c.next())
	c.version++
	return nil
}

// Delete acknowledges individual entries; a contiguous prefix moves the mark-delete position.
// Positions that are not stored (trimmed, not yet written) are ignored.
func (c *Cursor) Delete(ctx context.Context, ps ...mtypes.Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(); err != nil {
		return err
	}
	changed := false
	c.l.mu.RLock()
	for _, p := range ps {
		if p.Compare(c.st.markDelete) <= 0 || !c.l.isStoredLocked(p) {
			continue
		}
		c.st.ack(p)
		changed = true
	}
	c.l.mu.RUnlock()
	if changed {
		c.st.normalize(c.next())
		c.version++
	}
	return nil
}

// AckBatchIndexes acknowledges some messages of the batch entry at p; once all batchSize are
// acknowledged it is like Delete(p).
//
// A batchSize over MaxAckBatchSize (or below 0) is refused with ErrCursorStateTooLarge before
// anything is allocated for it.
func (c *Cursor) AckBatchIndexes(ctx context.Context, p mtypes.Position, batchSize int, indexes []int) error {
	if err := checkAckBatchSize(batchSize); err != nil {
		return err
	}
	c.mu.Lock()
	if err := c.check(); err != nil {
		c.mu.Unlock()
		return err
	}
	if c.st.isAcked(p) {
		c.mu.Unlock()
		return nil
	}
	c.l.mu.RLock()
	stored := c.l.isStoredLocked(p)
	c.l.mu.RUnlock()
	if !stored {
		c.mu.Unlock()
		return nil
	}
	all, err := c.st.ackBatch(p, batchSize, indexes)
	if err == nil {
		c.version++
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if all {
		return c.Delete(ctx, p)
	}
	return nil
}

// AckedBatchIndexes returns the bitset of acknowledged indexes (bit i = index i) of a partially
// acknowledged batch, or nil if none of its indexes is individually acknowledged.
func (c *Cursor) AckedBatchIndexes(p mtypes.Position) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.st.batches[p]; b != nil {
		return append([]uint64(nil), b.acked...)
	}
	return nil
}

// IsAcknowledged reports whether the entry at p is acknowledged.
func (c *Cursor) IsAcknowledged(p mtypes.Position) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.isAcked(p)
}

// ResetTo moves the cursor so that the next entry to deliver is p (Earliest and Latest allowed);
// it clears individual acknowledgements.
func (c *Cursor) ResetTo(ctx context.Context, p mtypes.Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(); err != nil {
		return err
	}
	c.st.reset(c.l.initialMarkDelete(p))
	c.version++
	return nil
}

// initialMarkDelete converts "the next entry to deliver is p" into a mark-delete position.
func (l *Ledger) initialMarkDelete(p mtypes.Position) mtypes.Position {
	l.mu.RLock()
	defer l.mu.RUnlock()
	lc := l.lastConfirmedLocked()
	switch {
	case p == mtypes.Earliest:
		p = l.firstPositionLocked()
	case p.Compare(lc) > 0:
		return lc
	}
	if first := l.firstPositionLocked(); p.Compare(first) < 0 {
		p = first
	}
	return mtypes.Position{LedgerID: p.LedgerID, EntryID: p.EntryID - 1}
}

// Backlog is exact: stored entries after the mark-delete position minus individually
// acknowledged ones.
func (c *Cursor) Backlog() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.l.mu.RLock()
	defer c.l.mu.RUnlock()
	return c.l.countLocked(c.st.markDelete, c.l.lastConfirmedLocked()) - c.st.ackedCount
}

// Properties returns a copy of the cursor's properties.
func (c *Cursor) Properties() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.st.props)
}

// SetProperties replaces the cursor's properties. Properties over MaxCursorPropertiesBytes
// (PropertiesSize) are refused with ErrCursorStateTooLarge; the old ones stay.
func (c *Cursor) SetProperties(ctx context.Context, props map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(); err != nil {
		return err
	}
	if err := c.st.setProperties(props); err != nil {
		return fmt.Errorf("cursor %q: %w", c.name, err)
	}
	c.version++
	return nil
}

// Flush persists the cursor's state now and waits until it is durable.
func (c *Cursor) Flush(ctx context.Context) error {
	if !c.durable {
		return nil
	}
	ch := make(chan error, 1)
	c.l.flushCursors([]*Cursor{c}, ch)
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// skipTrimmed moves a cursor whose mark-delete position fell before the first stored entry.
func (c *Cursor) skipTrimmed(first mtypes.Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if md := (mtypes.Position{LedgerID: first.LedgerID, EntryID: first.EntryID - 1}); c.st.markDelete.Compare(md) < 0 {
		c.st.setMarkDelete(md)
		c.version++
	}
}

func (c *Cursor) flushed(v uint64) {
	c.mu.Lock()
	if v > c.flushedV {
		c.flushedV = v
	}
	c.persisted.durable(v)
	c.mu.Unlock()
}

func (c *Cursor) flushFailed() {
	c.mu.Lock()
	c.queued = c.flushedV
	c.persisted.failed()
	c.mu.Unlock()
}

// ---- ledger side: opening, deleting, persisting cursors ----

// OpenCursor opens or creates a cursor. An existing cursor (durable ones survive restarts) keeps
// its state; a new durable cursor is persisted before OpenCursor returns.
func (l *Ledger) OpenCursor(ctx context.Context, name string, opts CursorOptions) (*Cursor, error) {
	if name == "" {
		return nil, errors.New("storage: empty cursor name")
	}
	if err := checkCursorName(name); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if c, ok := l.cursors[name]; ok {
		l.mu.Unlock()
		return c, nil
	}
	if opts.Durable && l.err != nil {
		err := l.err
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	md := l.initialMarkDelete(opts.Initial)
	c := &Cursor{l: l, name: name, durable: opts.Durable, st: cursorState{name: name, markDelete: md},
		persisted: persistedMarks{md: mtypes.Earliest}} // not durable yet: holds back every trim
	l.mu.Lock()
	if prev, ok := l.cursors[name]; ok {
		l.mu.Unlock()
		return prev, nil
	}
	if l.cursors == nil {
		l.cursors = map[string]*Cursor{}
	}
	l.cursors[name] = c
	l.mu.Unlock()
	if opts.Durable {
		c.mu.Lock()
		c.version++
		c.mu.Unlock()
		if err := c.Flush(ctx); err != nil {
			return nil, fmt.Errorf("storage: persist new cursor %q: %w", name, err)
		}
	}
	return c, nil
}

// Cursor returns the open cursor called name, or nil.
func (l *Ledger) Cursor(name string) *Cursor {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.cursors[name]
}

// Cursors lists the ledger's cursors, sorted by name.
func (l *Ledger) Cursors() []*Cursor {
	l.mu.RLock()
	out := make([]*Cursor, 0, len(l.cursors))
	for _, c := range l.cursors {
		out = append(out, c)
	}
	l.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// DeleteCursor removes a cursor and its stored state; deleting an absent cursor is a no-op.
func (l *Ledger) DeleteCursor(ctx context.Context, name string) error {
	l.mu.Lock()
	c, ok := l.cursors[name]
	if ok {
		delete(l.cursors, name)
	}
	l.mu.Unlock()
	if !ok {
		return nil
	}
	// Under flushMu: a state of this cursor taken before it was deleted is queued before the
	// deletion, never after it (cursorflush.go).
	c.lockFlush()
	c.mu.Lock()
	c.deleted = true
	c.mu.Unlock()
	if !c.durable {
		c.flushMu.Unlock()
		return nil
	}
	ch := make(chan error, 1)
	body := append([]byte{cDelete}, name...)
	l.e.enqueue(l, func(b *batch) item {
		var off int
		b.buf, off = appendJournalBody(b.buf, jDelCursor, l.slot, body)
		return item{kind: kDelCursor, off: off, n: len(body), done: func(_ mtypes.Position, err error) { ch <- err }}
	})
	c.flushMu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// applyCursorRecord appends a durable cursor-log record (runs on the sync loop).
func (l *Ledger) applyCursorRecord(body []byte) error {
	e := l.e
	l.mu.RLock()
	closed := l.closed
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	p := cursorLogPath(l.dirPath())
	e.cursorLogs.mu.Lock()
	defer e.cursorLogs.mu.Unlock()
	if l.cursorLog.size == 0 {
		if !l.dirMade {
			if err := e.ensureLedgerDir(l.name, l.dirPath()); err != nil {
				return err
			}
			l.dirMade = true
		}
		// A new cursor log needs no fsync here: the journal holds its records until the next
		// checkpoint syncs the file and its directory.
		if err := l.createCursorLog(); err != nil {
			return err
		}
	}
	cf, err := e.files.acquire(p, false)
	if err != nil {
		return fmt.Errorf("storage: open cursor log: %w", err)
	}
	rec := appendPlainRecord(nil, body)
	_, err = cf.f.WriteAt(rec, l.cursorLog.size)
	e.files.release(cf)
	if err != nil {
		return fmt.Errorf("storage: write cursor log: %w", err)
	}
	l.cursorLog.size += int64(len(rec))
	e.applier.dirtyFiles[p] = struct{}{}
	if l.noteCursorLogGrowth() {
		// Compact when the log is mostly superseded states: off the applier (janitor.go).
		e.janitor.add(func() { e.compactCursorLog(l) })
	}
	return nil
}

// liveCursorRecords encodes the current state of every durable cursor. Writing a state newer
// than the journal's is safe: it only contains acknowledgements that were made.
func (l *Ledger) liveCursorRecords() [][]byte {
	l.mu.RLock()
	cs := make([]*Cursor, 0, len(l.cursors))
	for _, c := range l.cursors {
		if c.durable {
			cs = append(cs, c)
		}
	}
	l.mu.RUnlock()
	out := make([][]byte, 0, len(cs))
	for _, c := range cs {
		c.mu.Lock()
		out = append(out, encodeCursorState([]byte{cState}, &c.st))
		c.mu.Unlock()
	}
	return out
}

func (l *Ledger) createCursorLog() error {
	e := l.e
	p := cursorLogPath(l.dirPath())
	e.files.forget(p)
	f, err := e.fs.OpenFile(p, vfs.ReadWrite|vfs.Create|vfs.Trunc)
	if err != nil {
		return fmt.Errorf("storage: create cursor log: %w", err)
	}
	hdr := appendHeader(nil, magicCursors, 0)
	_, err = f.WriteAt(hdr, 0)
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("storage: create cursor log: %w", err)
	}
	l.cursorLog.size = int64(len(hdr))
	e.applier.dirtyFiles[p] = struct{}{}
	e.applier.dirtyDirs[l.dirPath()] = struct{}{}
	return nil
}

func truncateFile(fsys vfs.FS, p string, size int64) error {
	f, err := fsys.OpenFile(p, vfs.ReadWrite)
	if err != nil {
		return fmt.Errorf("storage: truncate %s: %w", p, err)
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("storage: truncate %s: %w", p, err)
	}
	return nil
}

// rewriteCursorLog atomically replaces the cursor log with the given records (tmp file, fsync,
// rename, directory fsync). It holds cursorLogs.mu throughout, so a compaction on the janitor can
// neither interleave its own swap nor copy this file's records behind its older snapshot
// (cursorLogs.rewrites).
func (l *Ledger) rewriteCursorLog(bodies [][]byte) error {
	e := l.e
	e.cursorLogs.mu.Lock()
	defer e.cursorLogs.mu.Unlock()
	p := cursorLogPath(l.dirPath())
	tmp := p + ".tmp"
	b := appendHeader(nil, magicCursors, 0)
	for _, body := range bodies {
		b = appendPlainRecord(b, body)
	}
	// The cached descriptor is of the file being replaced; cursorLogs.mu keeps the applier from
	// opening it again meanwhile.
	e.files.forget(p)
	if err := replaceFileDurably(e.fs, p, tmp, b); err != nil {
		return fmt.Errorf("storage: write cursor log: %w", err)
	}
	l.cursorLog.size = int64(len(b))
	e.cursorLogs.rewrites++
	return nil
}

// loadCursors reads the cursor log (the last valid state of each cursor wins; a torn tail is
// cut), reconciles each state with the stored entries and compacts the log. A damaged log stops
// the ledger with ErrCorrupt naming it (cursorlogcheck.go).
func (l *Ledger) loadCursors() error {
	e := l.e
	p := cursorLogPath(l.dirPath())
	// Under cursorLogs.mu: a compaction of the log by a closed handle of this ledger is either done or
	// not started (janitor.go).
	e.cursorLogs.mu.Lock()
	data, err := readWholeFile(e.fs, p)
	e.cursorLogs.mu.Unlock()
	if err != nil {
		return fmt.Errorf("storage: read cursor log %s: %w", p, err)
	}
	scan := scanCursorLog(data)
	size := scan.size
	truncateAt := int64(-1)
	switch {
	case scan.tornHeader(data):
		e.log.Warn("cursor log with a torn header (its creation was interrupted); written anew", "ledger", l.name, "size", size)
		truncateAt = 0
	case scan.headerErr != nil || ((len(scan.after) > 0 || scan.incomplete) && e.opts.Sync == SyncAlways):
		return cursorLogDamageError(l.name, p, &scan)
	case scan.bad >= 0:
		e.log.Warn("cursor log has a torn tail; later cursor updates are lost (redelivery)", "ledger", l.name, "offset", scan.bad, "size", size)
		truncateAt = scan.bad
	}
	states := map[string]*cursorState{}
	applyCursorRecords(states, scan.prefix)
	defer func() {
		for n, st := range states {
			e.log.Debug("loaded cursor", "ledger", l.name, "cursor", n, "md", st.markDelete.String())
		}
	}()
	if truncateAt >= 0 {
		// Later appends must not land behind garbage: cut it off (a torn tail was never durable;
		// the journal replay has rewritten whatever it held that was acknowledged).
		size = truncateAt
		if size < headerSize {
			if err := l.rewriteCursorLog(nil); err != nil {
				return err
			}
			size = l.cursorLog.size
		} else if err := truncateFile(e.fs, p, size); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(states))
	for n := range states {
		names = append(names, n)
	}
	sort.Strings(names)
	bodies := make([][]byte, 0, len(names))
	for _, n := range names {
		st := states[n]
		l.reconcile(st)
		// version 1 > flushedV 0: the reconciled state is persisted by the next flush (reconcile
		// may have moved it, and a later Flush must not skip it as unchanged).
		c := &Cursor{l: l, name: n, durable: true, st: *st, version: 1, persisted: persistedMarks{md: st.markDelete}}
		if l.cursors == nil {
			l.cursors = map[string]*Cursor{}
		}
		l.cursors[n] = c
		bodies = append(bodies, encodeCursorState([]byte{cState}, st))
	}
	var live int64
	for _, b := range bodies {
		live += int64(recHeaderSize + len(b))
	}
	// Compact only when mostly superseded states: a rewrite costs two fsyncs.
	if l.err == nil && size > 64<<10 && size > 2*live+headerSize {
		if err := l.rewriteCursorLog(bodies); err != nil {
			return err
		}
	} else {
		l.cursorLog.size = size
	}
	return nil
}

// reconcile makes a stored cursor state consistent with the stored entries: a mark-delete
// position after the last entry (possible after losing unsynced data in SyncInterval mode) is
// clamped to it; one before the first stored entry moves up to it; acknowledgements of entries
// that are not stored are dropped.
func (l *Ledger) reconcile(st *cursorState) {
	lc := l.lastConfirmedLocked()
	if st.markDelete.Compare(lc) > 0 {
		e := l.e
		e.log.Warn("cursor was ahead of the stored data; clamped", "ledger", l.name, "cursor", st.name, "markDelete", st.markDelete.String(), "lastConfirmed", lc.String())
		st.markDelete = lc
	}
	first := l.firstPositionLocked()
	if md := (mtypes.Position{LedgerID: first.LedgerID, EntryID: first.EntryID - 1}); st.markDelete.Compare(md) < 0 {
		st.markDelete = md
	}
	kept := st.acked[:0]
	st.ackedCount = 0
	for _, r := range st.acked {
		s := l.segByIDLocked(r.ledger)
		if s == nil || (mtypes.Position{LedgerID: r.ledger, EntryID: r.to}).Compare(st.markDelete) <= 0 {
			continue
		}
		if r.from <= st.markDelete.EntryID && r.ledger == st.markDelete.LedgerID {
			r.from = st.markDelete.EntryID + 1
		}
		r.to = min(r.to, s.entries-1)
		if r.to < r.from {
			continue
		}
		kept = append(kept, r)
		st.ackedCount += r.to - r.from + 1
	}
	st.acked = kept
	for p := range st.batches {
		if p.Compare(st.markDelete) <= 0 || !l.isStoredLocked(p) {
			delete(st.batches, p)
		}
	}
	st.normalize(l.nextStoredLocked)
}
