package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/cluster"
	"github.com/meridian-mq/meridian/internal/naming"
)

// When bundles move (docs/cluster.md, "Moving a bundle"): an admin unload, the load shedder, and a
// broker that stops. The move itself is handover.go.

// UnloadBundle implements admin.Ownership: the bundle's unload, asked of its owner.
func (a adminMember) UnloadBundle(ctx context.Context, ns naming.NamespaceName, bundle, destination string) error {
	return a.m.node.unloadBundle(ctx, ns, bundle, destination)
}

func (n *Node) unloadBundle(ctx context.Context, ns naming.NamespaceName, bundle, destination string) error {
	m := n.components.member
	r, err := cluster.ParseRange(bundle)
	if err != nil {
		return fmt.Errorf("%w: %v", admin.ErrInvalidArgument, err)
	}
	b := cluster.Bundle{Namespace: ns.String(), Range: r}
	var target cluster.BrokerInfo
	found := false
	if destination != "" {
		for _, br := range m.coord.Brokers() {
			if br.ID == destination || hostOf(br.WebURL) == destination || hostOf(br.WebURLTLS) == destination {
				target, found = br, true
			}
		}
		if !found {
			return fmt.Errorf("%w: destinationBroker %q is not a live broker of this cluster", admin.ErrInvalidArgument, destination)
		}
	} else {
		target, found = m.coord.HandOverTarget(b)
	}
	if found && target.ID == m.coord.Self().ID {
		found = false
	}
	if !found {
		// No other broker: the unload closes the bundle's topics here (clients reconnect).
		return n.closeBundleTopics(ctx, b, broker.Reassigned{})
	}
	// The move does not end with the request: a client that stops waiting does not abort it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unloadMoveTimeout)
	defer cancel()
	if err := n.handOver(ctx, b, target); err != nil {
		if errors.Is(err, cluster.ErrNotOwner) {
			return fmt.Errorf("%w: %v", admin.ErrNotReady, err)
		}
		return err
	}
	return nil
}

// unloadMoveTimeout bounds a move an unload asks for.
const unloadMoveTimeout = 10 * time.Minute

func hostOf(u string) string {
	_, host, _ := strings.Cut(u, "://")
	return strings.TrimSuffix(host, "/")
}

// inBundle reports whether topic t belongs to bundle b.
func (m *clusterMember) inBundle(b cluster.Bundle, t naming.TopicName) bool {
	return t.NamespaceName().String() == b.Namespace && m.coord.BundleOf(b.Namespace, t.String()) == b
}

// bundleTopics lists the persistent topics of bundle b this broker stores or has loaded.
func (n *Node) bundleTopics(ctx context.Context, b cluster.Bundle) ([]naming.TopicName, error) {
	ns, err := naming.ParseNamespace(b.Namespace)
	if err != nil {
		return nil, err
	}
	all, err := n.components.broker.ListTopics(ctx, ns)
	if err != nil {
		return nil, err
	}
	var out []naming.TopicName
	for _, t := range all {
		if n.components.member.inBundle(b, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// closeBundleTopics unloads the bundle's loaded topics (persistent or not); their clients reconnect
// to the broker to names, or look the topics up again when it is empty.
func (n *Node) closeBundleTopics(ctx context.Context, b cluster.Bundle, to broker.Reassigned) error {
	c := &n.components
	for _, t := range c.broker.LoadedTopics() {
		if name := t.Name(); c.member.inBundle(b, name) {
			if err := c.broker.UnloadTopicTo(ctx, name, to); err != nil {
				return fmt.Errorf("close %s: %w", name, err)
			}
		}
	}
	return nil
}

// shedLoad runs the load shedder until ctx ends: every interval, while this broker serves at least
// two bundles more than the least-loaded live broker, it hands one bundle over to that broker
// (cluster.Shed).
func (n *Node) shedLoad(ctx context.Context, interval time.Duration) {
	m := n.components.member
	t := time.NewTicker(interval)
	defer t.Stop()
	failed := map[cluster.Bundle]time.Time{} // bundles whose move failed, left alone for a while
	movable := func(b cluster.Bundle) bool {
		if at, ok := failed[b]; ok && time.Since(at) < shedRetryAfter(interval) {
			return false
		}
		return n.sheddable(b)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil {
			mv, ok := m.coord.PlanShed(movable)
			if !ok {
				break
			}
			m.log.Info("load shedding: moving a bundle", "bundle", mv.Bundle.String(), "to", mv.To.ID)
			if err := n.handOver(ctx, mv.Bundle, mv.To); err != nil {
				// Every attempt disconnects the bundle's clients: a move that fails is not tried again
				// for a while.
				failed[mv.Bundle] = time.Now()
				m.log.Warn("load shedding: the move failed; the bundle is left alone for a while", "bundle", mv.Bundle.String(),
					"retryAfter", shedRetryAfter(interval), "err", err)
				break
			}
			delete(failed, mv.Bundle)
		}
	}
}

// shedRetryAfter is how long the shedder leaves a bundle whose move failed.
func shedRetryAfter(interval time.Duration) time.Duration { return 10 * interval }

// maxShedBytes bounds the retained data of a bundle the load shedder moves: a move keeps the
// bundle unavailable while its data is copied (about 3 s for 1 GiB between two brokers of one
// machine), which the shedder does not impose on its own; an unload moves any bundle.
const maxShedBytes = 1 << 30

// sheddable reports whether the load shedder may move b: its topics here hold at most maxShedBytes.
func (n *Node) sheddable(b cluster.Bundle) bool {
	c := &n.components
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := n.bundleTopics(ctx, b)
	if err != nil {
		return false
	}
	var bytes int64
	for _, t := range topics {
		n, err := c.engine.LedgerBytes(ctx, t.StorageName())
		if err != nil {
			return false
		}
		bytes += n
	}
	return bytes <= maxShedBytes
}

// handOverAll hands every bundle this broker serves to the other live brokers before it stops,
// within ctx. It first marks itself draining: from then on it refuses moves to it, and no bundle is
// assigned, shed or handed to it (another broker stopping at the same time hands its bundles
// elsewhere). It then moves bundles until it serves none, also those of a move to it that was
// already under way and completes meanwhile. A bundle whose move fails is tried again (its target
// may have begun to stop) up to handOverAttempts times; what it could not move stays its own and
// waits for it to come back.
func (n *Node) handOverAll(ctx context.Context) {
	m := n.components.member
	if err := m.coord.Drain(ctx); err != nil {
		m.log.Warn("stopping: could not mark this broker draining; moving its bundles anyway", "err", err)
	}
	moved, attempts := 0, map[cluster.Bundle]int{}
	for ctx.Err() == nil {
		changed := m.coord.Changed()
		var todo []cluster.Bundle
		for _, b := range m.coord.ServedBundles() {
			if attempts[b] < handOverAttempts {
				todo = append(todo, b)
			}
		}
		if len(todo) == 0 {
			if len(m.coord.IncomingBundles()) == 0 {
				break
			}
			// A move to this broker began before it was draining: wait for it to end either way.
			select {
			case <-changed:
			case <-ctx.Done():
			}
			continue
		}
		progress := false
		for _, b := range todo {
			target, ok := m.coord.HandOverTarget(b)
			if !ok {
				m.log.Info("stopping: no other broker takes bundles; the rest wait for this broker", "bundles", len(todo))
				return
			}
			if ctx.Err() != nil {
				break
			}
			attempts[b]++
			if err := n.handOver(ctx, b, target); err != nil {
				m.log.Warn("stopping: a bundle could not be handed over", "bundle", b.String(), "to", target.ID,
					"attempt", attempts[b], "err", err)
				continue
			}
			moved++
			progress = true
		}
		if !progress {
			// Every move failed: a target may be stopping too, which this broker's view shows soon.
			select {
			case <-changed:
			case <-time.After(handOverRetryDelay):
			case <-ctx.Done():
			}
		}
	}
	m.log.Info("stopping: bundles handed over", "moved", moved, "kept", len(m.coord.ServedBundles()))
}

// handOverAttempts bounds the moves a stopping broker tries per bundle; handOverRetryDelay is the
// longest it waits before trying again after a round in which every move failed.
const (
	handOverAttempts   = 3
	handOverRetryDelay = 500 * time.Millisecond
)

// dropStaleCopies deletes, at start, the local ledgers of topics whose bundle another broker owns:
// copies left by a hand-over that ended (the record names the target) before this broker deleted
// its copy. Only the owner named by the record ever serves a bundle, so these are never read. A
// bundle taken over from this broker while it was down (the record names it stranded) keeps its
// ledgers: they hold messages the owner lacks, and merge in when the bundle comes back here.
func (n *Node) dropStaleCopies(ctx context.Context) error {
	c := &n.components
	self := c.member.coord.Self().ID
	for _, ns := range c.catalog.AllNamespaces() {
		name, err := naming.ParseNamespace(ns)
		if err != nil {
			continue
		}
		topics, err := c.broker.ListTopics(ctx, name)
		if err != nil {
			return err
		}
		for _, t := range topics {
			own, ok := c.member.coord.Record(ns, t.String())
			if !ok || own.Broker == "" || own.Broker == self || own.MovingTo == self || own.HoldsStranded(self) {
				continue // ours, nobody's, on its way here, or holding messages the owner lacks
			}
			owner := own.Broker
			c.member.log.Info("deleting the copy of a topic another broker owns (left by a hand-over)", "topic", t.String(), "owner", owner)
			if err := c.engine.DeleteLedger(ctx, t.StorageName()); err != nil {
				return fmt.Errorf("delete stale copy of %s: %w", t, err)
			}
		}
	}
	return nil
}
