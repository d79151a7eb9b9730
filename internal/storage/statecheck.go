package storage

import (
	"fmt"
)

// refuseMissingState fails recovery when the state file is missing but the data directory holds
// data (ledger directories, or a journal file with records). The state file holds the ledger id
// limit: starting over at 1 would hand out ids below those in use, so new entries would sort
// before entries that cursors have acknowledged, and be skipped. The file is never removed by the
// engine (it is replaced atomically), so its absence is damage or an operator's mistake: restore
// it, or rebuild it with Repair (`meridian repair --accept-loss`), which derives the limit from
// the ids found on disk.
func (e *Engine) refuseMissingState() error {
	p := e.dir + "/" + stateFile
	des, err := e.fs.ReadDir(e.ledgersDir)
	if err != nil {
		return fmt.Errorf("storage: %s is missing and %s cannot be listed: %w", p, e.ledgersDir, err)
	}
	if len(des) > 0 {
		return fmt.Errorf("%w: %s is missing but %s holds %d ledger directories (the ledger id counter would start over and new positions would sort before acknowledged ones); restore the file, or rebuild it with `meridian repair --accept-loss`",
			ErrCorrupt, p, e.ledgersDir, len(des))
	}
	des, err = e.fs.ReadDir(e.journalDir)
	if err != nil {
		return fmt.Errorf("storage: %s is missing and %s cannot be listed: %w", p, e.journalDir, err)
	}
	for _, de := range des {
		if seq, ok := parseHexName(de.Name, ".jnl"); ok && e.journalHasRecords(uint64(seq)) {
			return fmt.Errorf("%w: %s is missing but journal file %s holds records; restore the file, or rebuild it with `meridian repair --accept-loss`",
				ErrCorrupt, p, e.journalPath(uint64(seq)))
		}
	}
	return nil
}
