package storage

import (
	"crypto/rand"
	"fmt"
	"math/big"
)

// Where a new data directory's ledger ids start.
//
// A position (ledger id, entry id) names an entry only within one data directory. Positions of
// another one reach a broker anyway: a client moved to another cluster by a switchover still holds
// messages of the first cluster and acknowledges them on the second (docs/geo-replication.md §7.3).
// If both data directories handed out the same ledger ids, such a position could name an existing
// entry of the same topic, and acknowledge a message the consumer never received. So a new data
// directory's first ledger id is drawn at random: a multiple of ledgerIDBlock from
// [firstLedgerIDMin, firstLedgerIDMax). Two data directories that each hand out fewer than U ids
// share one with a probability of at most about 2U/(firstLedgerIDMax-firstLedgerIDMin).
//
// firstLedgerIDMin is above every id a data directory whose counter started at 1 (made before
// ids started at random) can have reached, so new ids never meet those either. Below
// firstLedgerIDMax, ids stay far below 2^53, the largest integers that JSON readers using doubles
// (JavaScript) hold exactly, and the counter keeps nearly all of the int64 range to grow. The
// state file records the counter as before: an existing data directory keeps its own.
const (
	firstLedgerIDMin = 1 << 32
	firstLedgerIDMax = 1 << 47
)

// randomFirstLedgerID draws the first ledger id of a new data directory.
func randomFirstLedgerID() (int64, error) {
	n, err := rand.Int(rand.Reader, big.NewInt((firstLedgerIDMax-firstLedgerIDMin)/ledgerIDBlock))
	if err != nil {
		return 0, fmt.Errorf("storage: draw the first ledger id: %w", err)
	}
	return firstLedgerIDMin + n.Int64()*ledgerIDBlock, nil
}
