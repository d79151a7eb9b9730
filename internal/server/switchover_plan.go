package server

import (
	"slices"
	"time"
)

// The decisions of a planned switchover (docs/replication-design.md, "Planned switchover"): when
// a migrating topic's producers and each of its subscriptions' consumers may be told to go to the
// target cluster. switchoverPlan is pure: the sweeper (switchover.go) feeds it what it observed and
// carries out what it answers.

// TopicProgress is what decides how far a migrating topic's switchover may go. internal/node
// fills it from the topic's stats.
type TopicProgress struct {
	// ReplicatesToTarget: the topic has a replicator to the target cluster; its backlog must drain
	// before producers move, so that every message acknowledged here is on the target before the
	// same producer's next message is.
	ReplicatesToTarget bool
	// ReplicationBacklog: entries the target has not acknowledged yet.
	ReplicationBacklog int64
	// Subscriptions by name.
	Subscriptions map[string]SubscriptionProgress
}

// SubscriptionProgress is one subscription of a migrating topic.
type SubscriptionProgress struct {
	// Replicated: a replicated subscription, whose state the sync carries to the target.
	Replicated bool
	// SyncedToTarget: the target has acknowledged every state of the subscription written so far
	// (at least one).
	SyncedToTarget bool
	// HasState: at least one state of the subscription was written for the target.
	HasState bool
	// Backlog: messages not acknowledged yet.
	Backlog int64
	// Unacked: messages delivered to consumers and not acknowledged yet.
	Unacked int64
}

// switchoverInput is one observation of a migrating topic.
type switchoverInput struct {
	// ProducersQuiet: every producer of the topic on this broker is fenced (its new SENDs are
	// dropped, to be resent on the target) and has no publish in flight.
	ProducersQuiet bool
	Progress       TopicProgress
}

// switchoverActions is what to do now.
type switchoverActions struct {
	// RedirectProducers: tell every fenced producer of the topic to go to the target.
	RedirectProducers bool
	// RedirectSubscriptions: tell every consumer of these subscriptions to go (sorted).
	RedirectSubscriptions []string
	// SyncSubscriptions: replicated subscriptions with no state written for the target yet; ask
	// the sync to write one (sorted).
	SyncSubscriptions []string
}

// switchoverPlan is one migrating topic's switchover. The zero value starts it.
type switchoverPlan struct {
	// drained: producers were redirected once: everything they had acknowledged here is on the
	// target (or the topic does not replicate to it). Consumers move only after this.
	drained bool
	// readySince: when each subscription first met its condition while its consumers still had
	// unacknowledged messages.
	readySince map[string]time.Time
}

// unackedGrace bounds how long a ready subscription waits for its consumers to acknowledge what
// they were delivered before they are moved anyway. Moving them with nothing unacknowledged keeps
// the client from acknowledging, on the target, message ids that name this cluster's entries;
// after it, those messages are delivered again there (never lost).
const unackedGrace = 2 * time.Second

// step decides what the observation in allows at now.
func (p *switchoverPlan) step(now time.Time, in switchoverInput) switchoverActions {
	var out switchoverActions
	pr := in.Progress
	if in.ProducersQuiet && (!pr.ReplicatesToTarget || pr.ReplicationBacklog == 0) {
		out.RedirectProducers = true
		p.drained = true
	}
	if !p.drained {
		return out
	}
	for name, s := range pr.Subscriptions {
		ready := false
		if s.Replicated && pr.ReplicatesToTarget {
			// The state travels: the local backlog need not drain.
			ready = s.SyncedToTarget
			if !s.HasState {
				out.SyncSubscriptions = append(out.SyncSubscriptions, name)
			}
		} else {
			// Nothing carries the position: the consumers stay until they have read everything.
			ready = s.Backlog == 0
		}
		if !ready {
			delete(p.readySince, name)
			continue
		}
		if s.Unacked > 0 {
			if p.readySince == nil {
				p.readySince = map[string]time.Time{}
			}
			since, seen := p.readySince[name]
			if !seen {
				p.readySince[name] = now
				continue
			}
			if now.Sub(since) < unackedGrace {
				continue
			}
		}
		delete(p.readySince, name)
		out.RedirectSubscriptions = append(out.RedirectSubscriptions, name)
	}
	slices.Sort(out.RedirectSubscriptions)
	slices.Sort(out.SyncSubscriptions)
	return out
}
