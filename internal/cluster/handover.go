package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"time"

	"github.com/meridian-mq/meridian/internal/metadata"
)

// Hand-over of a bundle from its owner to another live broker (docs/cluster.md, "Moving a bundle").
//
// In this release a bundle's messages are on its owner's disk, so a bundle moves with its data. The
// owner drives it, through three writes of the bundle's record, each a compare-and-swap:
//
//  1. BeginHandOver: {owner, epoch+1, movingTo: target}. From here the owner no longer serves the
//     bundle (Owns is false, its broker refuses to load the topics) and every lookup holds.
//  2. The owner closes the bundle's topics and copies their ledgers to the target, which accepts a
//     copy only while the record says it is the bundle's target (IncomingHandOver).
//  3. CompleteHandOver: {target, epoch+1}: lookups now redirect to the target. Or, when the copy
//     failed, AbortHandOver: {owner, epoch+1}, and the owner serves the bundle again.
//
// An owner that dies between 1 and 3 finds its own unfinished hand-overs when it starts again and
// aborts them (Start), so a bundle is never left moving by a live owner. Once its registration
// expires, a lookup takes the bundle over like any bundle of a dead owner (takeover.go).
//
// Every step keeps the record's Stranded and IDFloor; completing removes the target from Stranded,
// because accepting a bundle merges what the target's disk held of it.

// ErrHandOverRefused: the bundle's record does not allow this step of a hand-over (another broker
// owns it, it already moves, or it moves elsewhere).
var ErrHandOverRefused = errors.New("bundle hand-over refused")

// BeginHandOver records that this broker hands bundle b over to target, a live broker, and returns
// the move's epoch, which the streams to the target carry. From then on this broker does not serve
// b. It returns ErrNotOwner unless this broker serves b.
func (c *Coordinator) BeginHandOver(ctx context.Context, b Bundle, target string) (int64, error) {
	if target == c.opts.Self.ID {
		return 0, fmt.Errorf("bundle %s: %w: the target is this broker", b, ErrHandOverRefused)
	}
	if t, live := c.view.broker(target); !live || t.Draining {
		return 0, fmt.Errorf("bundle %s: %w: broker %q is not live or is stopping", b, ErrHandOverRefused, target)
	}
	rec, ok := c.view.record(b)
	if !ok || !rec.own.Serving(c.opts.Self.ID) {
		return 0, fmt.Errorf("bundle %s: %w", b, ErrNotOwner)
	}
	own := rec.own
	own.Epoch++
	own.MovingTo = target
	return own.Epoch, c.writeRecord(ctx, b, rec, own, "bundle hand-over begins")
}

// CompleteHandOver makes the hand-over's target the owner of b: the copy is complete.
func (c *Coordinator) CompleteHandOver(ctx context.Context, b Bundle) error {
	rec, ok := c.view.record(b)
	if !ok || rec.own.Broker != c.opts.Self.ID || rec.own.MovingTo == "" {
		return fmt.Errorf("bundle %s: %w: not moving from this broker", b, ErrHandOverRefused)
	}
	// The target merged whatever data of the bundle its disk held (takeover.go): it is no longer
	// stranded.
	own := rec.own
	own.Broker, own.MovingTo, own.Epoch = rec.own.MovingTo, "", rec.own.Epoch+1
	own.Stranded = without(rec.own.Stranded, own.Broker)
	return c.writeRecord(ctx, b, rec, own, "bundle handed over")
}

// AbortHandOver ends this broker's hand-over of b with b still its own (the copy failed).
func (c *Coordinator) AbortHandOver(ctx context.Context, b Bundle) error {
	rec, ok := c.view.record(b)
	if !ok || rec.own.Broker != c.opts.Self.ID || rec.own.MovingTo == "" {
		return fmt.Errorf("bundle %s: %w: not moving from this broker", b, ErrHandOverRefused)
	}
	own := rec.own
	own.MovingTo, own.Epoch = "", rec.own.Epoch+1
	return c.writeRecord(ctx, b, rec, own, "bundle hand-over aborted")
}

// IncomingHandOver checks, against the store itself (not the view, which may lag), that broker
// from is handing bundle b over to this broker in the move of epoch: only then may this broker
// accept b's data, and it checks again before it makes a topic's copy its own (a stream of an
// aborted or earlier move must not replace what a later one brought).
func (c *Coordinator) IncomingHandOver(ctx context.Context, b Bundle, from string, epoch int64) error {
	own, ok, err := c.StoredRecord(ctx, b)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("bundle %s: %w: it has no owner", b, ErrHandOverRefused)
	}
	if own.Broker != from || own.MovingTo != c.opts.Self.ID || own.Epoch != epoch {
		return fmt.Errorf("bundle %s: %w: the record says owner %q moving to %q at epoch %d, not %q at %d",
			b, ErrHandOverRefused, own.Broker, own.MovingTo, own.Epoch, from, epoch)
	}
	return nil
}

// StoredRecord reads b's record from the store itself (the view may lag); ok is false when b has
// none.
func (c *Coordinator) StoredRecord(ctx context.Context, b Bundle) (Ownership, bool, error) {
	kv, err := c.opts.Store.Get(ctx, bundleKey(b))
	if errors.Is(err, metadata.ErrNotFound) {
		return Ownership{}, false, nil
	}
	if err != nil {
		return Ownership{}, false, fmt.Errorf("cluster: read bundle %s: %w", b, err)
	}
	var own Ownership
	if err := json.Unmarshal(kv.Value, &own); err != nil {
		return Ownership{}, false, fmt.Errorf("cluster: bundle record %s: %w", b, err)
	}
	return own, true, nil
}

// writeRecord replaces b's record (compare-and-swap on the version the caller read) and applies
// the write to the view at once.
func (c *Coordinator) writeRecord(ctx context.Context, b Bundle, prev recordAt, own Ownership, what string) error {
	val, _ := json.Marshal(own)
	kv, err := c.opts.Store.Put(ctx, bundleKey(b), val, prev.version)
	if err != nil {
		return fmt.Errorf("cluster: %s %s: %w", what, b, err)
	}
	c.log.Info(what, "bundle", b.String(), "owner", own.Broker, "movingTo", own.MovingTo, "epoch", own.Epoch)
	c.putRecord(b, recordAt{own: own, version: kv.Version, modRevision: kv.ModRevision})
	return nil
}

// abortUnfinishedHandOvers ends the hand-overs a previous run of this broker left open (it died
// while copying): the bundles are this broker's again.
func (c *Coordinator) abortUnfinishedHandOvers(ctx context.Context) error {
	for _, b := range c.view.ownedBy(c.opts.Self.ID) {
		if rec, ok := c.view.record(b); ok && rec.own.MovingTo != "" {
			if err := c.AbortHandOver(ctx, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// Drain marks this broker's registration as draining: it is stopping, and no bundle is assigned,
// shed or handed over to it any more (LeastLoaded skips it).
func (c *Coordinator) Drain(ctx context.Context) error {
	c.draining.Store(true)
	self := c.opts.Self
	self.Draining = true
	val, _ := json.Marshal(self)
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	if _, err := c.sess.PutEphemeral(ctx, brokerKey(self.ID), val); err != nil {
		return fmt.Errorf("cluster: mark broker %s draining: %w", self.ID, err)
	}
	return nil
}

// Draining reports whether Drain was called: this broker is stopping and takes no bundle.
func (c *Coordinator) Draining() bool { return c.draining.Load() }

// IncomingBundles lists the bundles whose record says they are being handed over to this broker.
func (c *Coordinator) IncomingBundles() []Bundle {
	c.view.mu.Lock()
	defer c.view.mu.Unlock()
	var out []Bundle
	for b, r := range c.view.records {
		if r.own.MovingTo == c.opts.Self.ID {
			out = append(out, b)
		}
	}
	return out
}

// Changed is closed at the next change of the cluster's view (a record or a registration).
func (c *Coordinator) Changed() <-chan struct{} {
	c.view.mu.Lock()
	defer c.view.mu.Unlock()
	return c.view.changed
}

// HandOverTarget picks the broker a bundle of this broker goes to when it is unloaded or this broker
// stops: the least-loaded other live broker (ties by rendezvous rank, as assignment). ok is false
// when no other broker is live.
func (c *Coordinator) HandOverTarget(b Bundle) (BrokerInfo, bool) {
	v, _, _, _ := c.view.snapshot(c.opts.Self.ID, b)
	delete(v.Live, c.opts.Self.ID)
	return LeastLoaded(v.Live, b.String())
}

// MovingBundles lists the bundles this broker owns whose record says they are being handed over.
func (c *Coordinator) MovingBundles() []Bundle {
	var out []Bundle
	for _, b := range c.OwnedBundles() {
		if rec, ok := c.view.record(b); ok && rec.own.MovingTo != "" {
			out = append(out, b)
		}
	}
	return out
}

// ServedBundles lists the bundles this broker serves (owns and is not handing over), sorted.
func (c *Coordinator) ServedBundles() []Bundle {
	var out []Bundle
	for _, b := range c.OwnedBundles() {
		if rec, ok := c.view.record(b); ok && rec.own.Serving(c.opts.Self.ID) {
			out = append(out, b)
		}
	}
	return out
}

// Move is one bundle the load shedder hands over.
type Move struct {
	Bundle Bundle
	To     BrokerInfo
}

// Shed is the load shedder's rule (docs/cluster.md, "Moving a bundle"): when this broker serves at
// least two bundles more than the least-loaded live broker, move one bundle to that broker. The
// bundle is the one that ranks highest for the target (rendezvous hashing) among those movable says
// may move (nil: all), so brokers that shed at once pick different bundles and a bundle does not
// bounce. Load is the count of owned bundles; one move per call keeps each step small, and the
// caller calls again after it.
func Shed(self string, live map[string]BrokerInfo, served []Bundle, movable func(Bundle) bool) (Move, bool) {
	me, ok := live[self]
	if !ok || len(served) == 0 {
		return Move{}, false
	}
	others := make(map[string]BrokerInfo, len(live))
	for id, b := range live {
		if id != self {
			others[id] = b
		}
	}
	if len(others) == 0 {
		return Move{}, false
	}
	sorted := append([]Bundle(nil), served...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].String() < sorted[j].String() })
	to, _ := LeastLoaded(others, sorted[0].String())
	if me.OwnedBundles-to.OwnedBundles < 2 {
		return Move{}, false
	}
	var best Bundle
	var bestRank uint32
	found := false
	for _, b := range sorted {
		if movable != nil && !movable(b) {
			continue
		}
		if r := crc32.ChecksumIEEE([]byte(b.String() + "\x00" + to.ID)); !found || r > bestRank {
			best, bestRank, found = b, r, true
		}
	}
	return Move{Bundle: best, To: to}, found
}

// PlanShed applies Shed to the current view.
func (c *Coordinator) PlanShed(movable func(Bundle) bool) (Move, bool) {
	v, _, _, _ := c.view.snapshot(c.opts.Self.ID, Bundle{})
	return Shed(c.opts.Self.ID, v.Live, c.ServedBundles(), movable)
}

// Incoming reports whether the topic's bundle is being handed over to this broker.
func (c *Coordinator) Incoming(namespace, topic string) bool {
	r, _ := c.view.record(c.BundleOf(namespace, topic))
	return r.own.MovingTo == c.opts.Self.ID && c.registered.Load()
}

// AwaitServing waits, up to the lookup hold, while the topic's bundle is being handed over to this
// broker, and reports whether this broker serves it then: the old owner sends the bundle's clients
// here when the move begins (assignedBrokerServiceUrl), and they wait here rather than look the
// topic up again.
func (c *Coordinator) AwaitServing(ctx context.Context, namespace, topic string) bool {
	hold := time.NewTimer(c.opts.HoldTimeout)
	defer hold.Stop()
	b := c.BundleOf(namespace, topic)
	self := c.opts.Self.ID
	for {
		changed := c.Changed()
		// One read of the record: the move may complete between two reads, which would show it
		// neither moving here nor served here.
		r, _ := c.view.record(b)
		switch {
		case !c.registered.Load():
			return false
		case r.own.Serving(self):
			return true
		case r.own.MovingTo != self:
			return false
		}
		select {
		case <-changed:
		case <-hold.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
