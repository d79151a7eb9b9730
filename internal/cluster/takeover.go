package cluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
)

// Takeover of a dead broker's bundles (docs/cluster.md, "When a broker dies").
//
// In this release a bundle's messages are on its owner's disk. When the owner's registration
// expires, the next lookup of one of its bundles assigns the bundle to the least-loaded live broker
// (Decide), which serves it at once with the data it has of it, usually none: the bundle stays
// writable, and what the dead broker holds comes back when it does. The takeover's record says so:
//
//   - Stranded gains the dead owner: its disk holds data of the bundle that the new owner does not.
//     When it is live again, the owner hands the bundle over to it (StrandedReturns), and accepting a
//     bundle merges the incoming data with what the target's disk holds (the node's hand-over);
//     completing that hand-over removes it from Stranded. A stranded broker whose disk holds nothing
//     of the bundle removes itself (Unstrand).
//   - IDFloor is a ledger id at least every id any broker of the cluster had been given: the new
//     owner opens the bundle's ledgers only with ids at or above it. Positions order by ledger id,
//     so the dead owner's segments merge in before everything written after the takeover, and a
//     producer's messages keep their order across the takeover.
//
// A broker that loses its registration (etcd unreachable past the session TTL) stops serving
// every bundle at once (Owns is false until it registers again, and OnLost closes their topics):
// from then on another broker may take them over. What it acknowledged until then is on its disk,
// and it is stranded data like any dead owner's.

// takeoverRecord is the record of bundle prev after newOwner takes it over from prev's owner, which
// is not live; floor is a fresh ledger id (AllocateLedgerIDs) above every id given out so far.
func takeoverRecord(prev Ownership, newOwner string, floor int64) Ownership {
	stranded := slices.Clone(prev.Stranded)
	if prev.Broker != "" && !slices.Contains(stranded, prev.Broker) {
		stranded = append(stranded, prev.Broker)
	}
	sort.Strings(stranded)
	return Ownership{Broker: newOwner, Epoch: prev.Epoch + 1, Stranded: without(stranded, newOwner),
		IDFloor: max(prev.IDFloor, floor)}
}

// without is ids without id (nil when nothing is left).
func without(ids []string, id string) []string {
	var out []string
	for _, s := range ids {
		if s != id {
			out = append(out, s)
		}
	}
	return out
}

// StrandedReturns lists the bundles this broker serves whose record names a stranded broker that is
// live and not draining, each with that broker: the owner hands each bundle over to it so that it
// merges its data in.
func (c *Coordinator) StrandedReturns() []Move {
	self := c.opts.Self.ID
	var out []Move
	for _, b := range c.view.ownedBy(self) {
		rec, ok := c.view.record(b)
		if !ok || !rec.own.Serving(self) || !c.registered.Load() {
			continue
		}
		for _, id := range rec.own.Stranded {
			if br, live := c.view.broker(id); live && !br.Draining && id != self {
				out = append(out, Move{Bundle: b, To: br})
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bundle.String() < out[j].Bundle.String() })
	return out
}

// StrandedHere lists the bundles whose record names this broker as stranded: its disk holds data
// of them that their owner lacks, which must be kept until it is merged in.
func (c *Coordinator) StrandedHere() []Bundle {
	self := c.opts.Self.ID
	c.view.mu.Lock()
	defer c.view.mu.Unlock()
	var out []Bundle
	for b, r := range c.view.records {
		if r.own.HoldsStranded(self) {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Unstrand removes this broker from b's stranded brokers: its disk holds nothing of b (checked by
// the caller, under the lock that serialises moves into this broker). The compare-and-swap fails if
// the record changed since the view saw it.
func (c *Coordinator) Unstrand(ctx context.Context, b Bundle) error {
	self := c.opts.Self.ID
	rec, ok := c.view.record(b)
	if !ok || !rec.own.HoldsStranded(self) || rec.own.MovingTo != "" {
		return fmt.Errorf("bundle %s: %w: this broker is not stranded on it, or it is moving", b, ErrHandOverRefused)
	}
	// The epoch stays: nothing about who serves the bundle changes.
	own := rec.own
	own.Stranded = without(own.Stranded, self)
	return c.writeRecord(ctx, b, rec, own, "stranded broker holds nothing of the bundle")
}
