package cluster

import (
	"hash/crc32"
	"slices"
)

// BrokerInfo is what a broker registers about itself (registry.go) and what lookups answer with.
type BrokerInfo struct {
	ID            string `json:"id"`
	ServiceURL    string `json:"brokerServiceUrl,omitempty"`
	ServiceURLTLS string `json:"brokerServiceUrlTls,omitempty"`
	WebURL        string `json:"webServiceUrl,omitempty"`
	WebURLTLS     string `json:"webServiceUrlTls,omitempty"`
	// OwnedBundles is the broker's load as assignment sees it: the bundles it owns when it last
	// reported.
	OwnedBundles int `json:"ownedBundles"`
	// Draining: the broker is stopping and handing its bundles over; nothing is assigned or moved
	// to it.
	Draining bool `json:"draining,omitempty"`
}

// Ownership is a bundle's ownership record: the broker that serves it and an epoch that grows with
// every assignment, so a stale owner's release or write can be told apart from the current one's.
//
// MovingTo, when set, names the broker the owner is handing the bundle over to (handover.go): the
// owner no longer serves the bundle, lookups hold, and the record ends either owned by MovingTo
// (the copy is complete) or by the owner again (the hand-over failed).
//
// Stranded and IDFloor come from a takeover (takeover.go): a live broker took the bundle over from
// an owner that died holding it. Stranded names the brokers whose disks hold data of the bundle that
// its owner does not have; each merges its data back in when it returns. IDFloor is at least every
// ledger id any broker had been given before the takeover: the bundle's new ledgers get ids at or
// above it, so a stranded broker's segments sort before everything written since.
type Ownership struct {
	Broker   string   `json:"broker"`
	Epoch    int64    `json:"epoch"`
	MovingTo string   `json:"movingTo,omitempty"`
	Stranded []string `json:"stranded,omitempty"`
	IDFloor  int64    `json:"idFloor,omitempty"`
}

// HoldsStranded reports whether broker's disk holds data of the bundle that its owner lacks.
func (o Ownership) HoldsStranded(broker string) bool { return slices.Contains(o.Stranded, broker) }

// Serving reports whether the record names broker as the bundle's serving owner: owned and not
// being handed over.
func (o Ownership) Serving(broker string) bool { return o.Broker == broker && o.MovingTo == "" }

// Action is what a lookup decision asks the caller to do.
type Action int

const (
	// Connect: this broker owns the bundle; the client connects here.
	Connect Action = iota + 1
	// Redirect: another live broker owns it; the client asks that broker, authoritatively.
	Redirect
	// Assign: nobody owns it, or its owner is not live; the caller records Candidate as owner
	// (compare-and-swap; a takeover when there was an owner) and decides again.
	Assign
	// Wait: the bundle is being handed over, or no broker is live; the caller waits for a change (a
	// broker registering, the record changing) up to its hold deadline, then answers
	// ServiceNotReady.
	Wait
)

func (a Action) String() string {
	switch a {
	case Connect:
		return "Connect"
	case Redirect:
		return "Redirect"
	case Assign:
		return "Assign"
	case Wait:
		return "Wait"
	}
	return "Action(?)"
}

// View is what one lookup decision sees: this broker, the bundle's ownership record (nil when the
// bundle is unassigned) and the live brokers.
type View struct {
	Self   string
	Bundle string // the bundle's name, which spreads ties between equally loaded brokers
	Record *Ownership
	Live   map[string]BrokerInfo
}

// Decision is a lookup decision: the action and the broker it names (the owner for Connect and
// Redirect, the candidate for Assign).
type Decision struct {
	Action Action
	Broker BrokerInfo
}

// Decide is the lookup rule (docs/cluster.md, "Lookup"):
//
//   - the owner is this broker and this broker is live: Connect;
//   - the owner is another live broker: Redirect to it (authoritative, so it never redirects again);
//   - the owner is not live (its registration expired, also in the middle of a hand-over): Assign
//     the least-loaded live broker, a takeover. The messages on the dead owner's disk are not
//     served until it comes back and merges them in (takeover.go);
//   - the bundle is being handed over (MovingTo set) by a live owner: Wait, also on the owner,
//     which no longer serves it; the hand-over ends by naming the new owner (or the old one again)
//     within seconds;
//   - no owner: Assign the least-loaded live broker, or Wait when no broker is live. Ties go to
//     the broker that ranks highest for this bundle (rendezvous hashing of bundle and broker id):
//     deciders that agree on the loads agree on the broker, and bundles assigned at the same
//     moment, each seeing the same loads, still spread over the brokers.
func Decide(v View) Decision {
	if v.Record != nil {
		owner, live := v.Live[v.Record.Broker]
		switch {
		case !live:
			if cand, ok := LeastLoaded(v.Live, v.Bundle); ok {
				return Decision{Action: Assign, Broker: cand}
			}
			return Decision{Action: Wait}
		case v.Record.MovingTo != "":
			return Decision{Action: Wait}
		case owner.ID == v.Self:
			return Decision{Action: Connect, Broker: owner}
		default:
			return Decision{Action: Redirect, Broker: owner}
		}
	}
	cand, ok := LeastLoaded(v.Live, v.Bundle)
	if !ok {
		return Decision{Action: Wait}
	}
	return Decision{Action: Assign, Broker: cand}
}

// LeastLoaded picks the live broker with the fewest owned bundles; ties go to the broker with the
// highest rendezvous hash for bundle. A draining broker is never picked.
func LeastLoaded(live map[string]BrokerInfo, bundle string) (BrokerInfo, bool) {
	var best BrokerInfo
	var bestRank uint32
	found := false
	for id, b := range live {
		if b.Draining {
			continue
		}
		rank := crc32.ChecksumIEEE([]byte(bundle + "\x00" + id))
		switch {
		case !found, b.OwnedBundles < best.OwnedBundles,
			b.OwnedBundles == best.OwnedBundles && (rank > bestRank || rank == bestRank && id < best.ID):
			best, bestRank, found = b, rank, true
		}
	}
	return best, found
}
