package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Roll seals the current ledger id and starts a new one.
func (l *Ledger) Roll(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	id, err := l.e.newLedgerID()
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	l.e.enqueue(nil, func(b *batch) item {
		if l.flags.Load()&flagQueueClosed != 0 {
			return item{kind: kFail, err: ErrClosed, done: func(_ mtypes.Position, err error) { ch <- err }}
		}
		if id > l.queue.curID {
			l.switchSegmentLocked(b, id)
		}
		return item{kind: kBarrier, done: func(_ mtypes.Position, err error) { ch <- err }}
	})
	select {
	case err = <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	return l.Trim(ctx)
}

// SetRetention sets how long and how much data that no cursor needs is kept: -1 infinite, 0 none
// (Pulsar's semantics). A consumed segment is removed once it is older than maxAge or the ledger
// is larger than maxBytes.
func (l *Ledger) SetRetention(maxAge time.Duration, maxBytes int64) {
	l.mu.Lock()
	l.maxAge, l.maxBytes = maxAge, maxBytes
	l.mu.Unlock()
}

// Trim removes whole sealed segments that every durable cursor has consumed and that retention
// allows to remove. It also runs periodically.
func (l *Ledger) Trim(ctx context.Context) error {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	cursors := make([]*Cursor, 0, len(l.cursors))
	for _, c := range l.cursors {
		if c.durable {
			cursors = append(cursors, c)
		}
	}
	l.mu.RUnlock()
	slowest := mtypes.Latest
	for _, c := range cursors {
		if md := c.trimPosition(); md.Compare(slowest) < 0 {
			slowest = md
		}
	}
	nowMs := time.Now().UnixMilli()
	var victims []int64
	l.mu.RLock()
	total := l.bytes
	infinite := l.maxAge < 0 && l.maxBytes < 0
	for i, s := range l.segs {
		if infinite || i == len(l.segs)-1 || !s.sealed || s.entries == 0 {
			break
		}
		if (mtypes.Position{LedgerID: s.id, EntryID: s.entries - 1}).Compare(slowest) > 0 {
			break
		}
		expired := l.maxAge >= 0 && (l.maxAge == 0 || nowMs-s.maxTime > l.maxAge.Milliseconds())
		overSize := l.maxBytes >= 0 && total > l.maxBytes
		if !expired && !overSize {
			break
		}
		victims = append(victims, s.id)
		total -= s.bytes
	}
	l.mu.RUnlock()
	if len(victims) == 0 {
		return nil
	}
	ch := make(chan error, len(victims))
	for _, id := range victims {
		l.e.enqueue(l, func(b *batch) item {
			var start int
			b.buf, start = beginJournalRecord(b.buf, jTrim, l.slot)
			b.buf = binary.LittleEndian.AppendUint64(b.buf, uint64(id))
			finishJournalRecord(b.buf, start)
			return item{kind: kTrim, ledgerID: id, done: func(_ mtypes.Position, err error) { ch <- err }}
		})
	}
	var errs []error
	for range victims {
		select {
		case err := <-ch:
			if err != nil {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

func (l *Ledger) applyTrim(id int64) {
	e := l.e
	l.mu.Lock()
	seg := l.segByIDLocked(id)
	if seg == nil || l.closed {
		l.mu.Unlock()
		return
	}
	l.removeSegLocked(seg)
	l.entries -= seg.entries
	l.bytes -= seg.bytes
	first := l.firstPositionLocked()
	cursors := make([]*Cursor, 0, len(l.cursors))
	for _, c := range l.cursors {
		cursors = append(cursors, c)
	}
	l.mu.Unlock()
	e.cache.dropLedger(id, seg.entries)
	for _, p := range []string{segPath(l.dirPath(), id), idxPath(l.dirPath(), id)} {
		e.files.forget(p)
		if err := e.moveToTrash(p); err != nil {
			e.log.Warn("cannot remove trimmed segment file", "path", p, "err", err)
		}
	}
	e.m.trimmedSegments.Add(1)
	e.log.Debug("trimmed", "ledger", l.name, "segment", id)
	// Non-durable cursors may lag behind the trimmed data: move them to the first stored entry.
	for _, c := range cursors {
		c.skipTrimmed(first)
	}
}

func (l *Ledger) applyDelete() error {
	e := l.e
	e.queue.mu.Lock()
	l.flags.Or(flagQueueClosed) // later appends fail without a journal record
	e.queue.mu.Unlock()
	l.mu.Lock()
	l.closed = true
	if l.err == nil {
		l.err = ErrClosed
		l.flags.Or(flagErrSet)
	}
	segs := l.segs
	l.mu.Unlock()
	e.forget(l)
	for _, s := range segs {
		e.cache.dropLedger(s.id, s.entries)
	}
	e.files.forgetPrefix(l.dirPath())
	// A .replaced- directory a replace left beside the ledger's (its removal failed) goes first,
	// made durable by the same checkpoint before the delete's record is retired: Open would take
	// it, without the ledger's directory, for a replace interrupted before its commit and rename it
	// back, and the deleted ledger would return with its replaced entries
	// (TestDeleteAfterReplaceRemovesTheLeftoverReplacedDir). Moved first, it is gone in every state
	// a crash can leave in which the ledger's directory is.
	if err := e.moveToTrash(e.replacedPath(l.dirPath())); err != nil {
		return fmt.Errorf("storage: delete ledger %q: %w", l.name, err)
	}
	if err := e.moveToTrash(l.dirPath()); err != nil {
		return fmt.Errorf("storage: delete ledger %q: %w", l.name, err)
	}
	e.legacyDirs.forget(l.name)
	return nil
}
