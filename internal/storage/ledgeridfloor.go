package storage

// EnsureLedgerIDsFrom makes every ledger id this engine hands out from now on at least floor (with
// Options.LedgerIDBlock, from a block drawn at or above it), recorded in the state file before it
// returns. A cluster broker calls it before it opens a ledger of a bundle taken over from a dead
// broker: the new segments then sort after every segment the dead broker wrote, which merge in
// when it returns (docs/cluster.md, "When a broker dies"). It costs nothing when the ids are
// already there.
func (e *Engine) EnsureLedgerIDsFrom(floor int64) error {
	if floor <= 0 {
		return nil
	}
	return e.raiseLedgerIDs(floor - 1)
}
