package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"

	"github.com/meridian-mq/meridian/internal/metadata"
)

// ledgerIDCounter is the value of ledgerIDsKey: the first ledger id no broker has been given.
type ledgerIDCounter struct {
	Next int64 `json:"next"`
}

// AllocateLedgerIDs reserves n ledger ids no other broker of the cluster gets and returns the
// first; every id it returns is at least floor (the ids this broker's storage already used) and
// above every id returned before, so a topic's ledger ids grow across brokers too. A new counter
// starts at random (randomFirstLedgerID), so two clusters practically never share ledger ids.
func AllocateLedgerIDs(ctx context.Context, store metadata.Store, floor, n int64) (int64, error) {
	if n <= 0 {
		return 0, errors.New("cluster: ledger id block size must be positive")
	}
	for {
		var cur ledgerIDCounter
		expect := int64(0)
		kv, err := store.Get(ctx, ledgerIDsKey)
		switch {
		case errors.Is(err, metadata.ErrNotFound):
			if cur.Next, err = randomFirstLedgerID(); err != nil {
				return 0, err
			}
		case err != nil:
			return 0, fmt.Errorf("cluster: read %s: %w", ledgerIDsKey, err)
		default:
			if err := json.Unmarshal(kv.Value, &cur); err != nil || cur.Next < 1 {
				return 0, fmt.Errorf("cluster: %s holds %q, not a ledger id counter: repair it by hand", ledgerIDsKey, kv.Value)
			}
			expect = kv.Version
		}
		first := max(cur.Next, floor)
		val, _ := json.Marshal(ledgerIDCounter{Next: first + n})
		if _, err := store.Put(ctx, ledgerIDsKey, val, expect); err == nil {
			return first, nil
		} else if !errors.Is(err, metadata.ErrBadVersion) {
			return 0, fmt.Errorf("cluster: reserve ledger ids: %w", err)
		}
	}
}

// A new cluster counter starts at a random multiple of ledgerIDBlock in [firstLedgerIDMin,
// firstLedgerIDMax), as a new storage data directory does (internal/storage, firstledgerid.go):
// a position of another cluster then names no entry here, so a client moved by a switchover
// that acknowledges a message of its old cluster acknowledges nothing of this one. The bounds and
// the block are the storage engine's.
const (
	firstLedgerIDMin = 1 << 32
	firstLedgerIDMax = 1 << 47
	ledgerIDBlock    = 4096
)

// randomFirstLedgerID draws where a new cluster counter starts.
func randomFirstLedgerID() (int64, error) {
	n, err := rand.Int(rand.Reader, big.NewInt((firstLedgerIDMax-firstLedgerIDMin)/ledgerIDBlock))
	if err != nil {
		return 0, fmt.Errorf("cluster: draw the first ledger id: %w", err)
	}
	return firstLedgerIDMin + n.Int64()*ledgerIDBlock, nil
}
