package storage

import (
	"context"
	"errors"
	"time"
)

// backgroundState connects the background goroutine to Close.
type backgroundState struct {
	stop chan struct{} // closed by Close
	done chan struct{} // closed by the goroutine when it returns
}

// runBackground flushes the open ledgers' cursors every CursorFlushInterval (and lets idle batches
// give back their buffers), and trims them every TrimInterval; Close stops it.
func (e *Engine) runBackground() {
	defer close(e.background.done)
	flush := time.NewTicker(e.opts.CursorFlushInterval)
	defer flush.Stop()
	trim := time.NewTicker(e.opts.TrimInterval)
	defer trim.Stop()
	for {
		select {
		case <-e.background.stop:
			return
		case <-flush.C:
			for _, l := range e.openLedgers() {
				l.flushCursors(nil, nil)
			}
			e.releaseIdleBatches(time.Now())
		case <-trim.C:
			for _, l := range e.openLedgers() {
				if err := l.Trim(context.Background()); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFenced) {
					e.log.Warn("periodic trim failed", "ledger", l.name, "err", err)
				}
			}
		}
	}
}
