package storage

import (
	"context"
	"fmt"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// LedgerBytes reports about how many bytes a ledger holds without opening it (opening starts a new
// segment): an open ledger's entry bytes, else the size of its segment files on disk (records
// included). A ledger that does not exist holds 0 bytes.
func (e *Engine) LedgerBytes(ctx context.Context, name string) (int64, error) {
	if err := checkLedgerName(name); err != nil {
		return 0, err
	}
	e.table.mu.Lock()
	l, open := e.table.ledgers[name]
	e.table.mu.Unlock()
	if open {
		select {
		case <-l.ready:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if l.loadErr == nil {
			return l.Bytes(), nil
		}
	}
	des, err := e.fs.ReadDir(e.ledgerDir(name))
	if vfs.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("storage: size of ledger %q: %w", name, err)
	}
	var n int64
	for _, de := range des {
		if _, ok := parseHexName(de.Name, ".seg"); ok {
			n += de.Size
		}
	}
	return n, nil
}
