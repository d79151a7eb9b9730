package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/metadata"
)

// ErrNotReady: the bundle has no live owner within the hold deadline (the owner is down, or no
// broker is registered). The server answers ServiceNotReady, which clients retry.
var ErrNotReady = errors.New("bundle has no live owner")

// ErrNotOwner: an operation that only the serving owner may do (a hand-over) was asked of another
// broker, or of the owner while the bundle is already moving.
var ErrNotOwner = errors.New("this broker does not own the bundle")

// Defaults for Options.
const (
	DefaultSessionTTL  = 5 * time.Second
	DefaultHoldTimeout = 10 * time.Second
)

// Options configure a Coordinator.
type Options struct {
	// Store is the cluster-local metadata store every broker of the cluster shares (etcd).
	Store metadata.Store
	// Self is this broker's registration; Self.ID is stable across restarts (it names the data dir's
	// bundles).
	Self BrokerInfo
	// SessionTTL is how long the registration outlives this broker's last keep-alive.
	SessionTTL time.Duration
	// HoldTimeout bounds how long a lookup of a bundle without a live owner waits before
	// ErrNotReady. It stays well below the clients' operation timeout (30 s in the Go client).
	HoldTimeout time.Duration
	// BundleRanges returns a namespace's bundle ranges (from its policy); nil or empty means
	// EvenRanges(DefaultBundleCount).
	BundleRanges func(namespace string) []Range
	// OnServe, when set, is called (on the goroutine that saw the change; it must not block) when
	// this broker starts serving a bundle it did not serve: assigned to it, handed over to it, or
	// back to it after an aborted hand-over.
	OnServe func(Bundle)
	// OnMoveAbandoned, when set, is called (likewise, without blocking) when a hand-over of a
	// bundle to this broker ends without making it the owner: what it received is not the
	// bundle's data.
	OnMoveAbandoned func(Bundle)
	// OnLost, when set, is called (likewise, without blocking) when this broker stops serving a
	// bundle other than by handing it over: another broker took it over, or this broker's
	// registration expired (then for every bundle it served). Its topics must close: their clients
	// find the bundle's owner again through lookup.
	OnLost func(Bundle)
	Logger *slog.Logger
}

// Coordinator is one broker's membership in its cluster: it registers the broker, follows the
// other brokers and the bundle records, answers lookups and records assignments. It owns two
// goroutines (the watch and the session keeper), stopped by Close.
type Coordinator struct {
	opts Options
	log  *slog.Logger
	view *view

	stop context.CancelFunc
	wg   sync.WaitGroup

	sessMu sync.Mutex
	sess   metadata.Session // the session that holds our registration; replaced when it expires

	draining   atomic.Bool // Drain was called: the registration says so
	registered atomic.Bool // the session holding our registration is live: only then does this broker serve
}

// Start registers this broker and starts following the cluster. It fails when another live
// broker is registered under the same id with different addresses.
func Start(ctx context.Context, opts Options) (*Coordinator, error) {
	if opts.Store == nil || opts.Self.ID == "" {
		return nil, errors.New("cluster: a store and a broker id are required")
	}
	if err := metadata.ValidateKey(brokerKey(opts.Self.ID)); err != nil {
		return nil, fmt.Errorf("cluster: broker id %q: %w", opts.Self.ID, err)
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.HoldTimeout <= 0 {
		opts.HoldTimeout = DefaultHoldTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Coordinator{opts: opts, log: opts.Logger.With("component", "cluster", "broker", opts.Self.ID), view: newView()}
	if err := c.waitForStaleRegistration(ctx); err != nil {
		return nil, err
	}
	if err := c.register(ctx); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stop = stop
	brokersRev, err := c.load(ctx, brokersPrefix)
	if err == nil {
		var bundlesRev int64
		bundlesRev, err = c.load(ctx, bundlesPrefix)
		if err == nil {
			err = c.abortUnfinishedHandOvers(ctx)
		}
		if err == nil {
			err = c.follow(runCtx, brokersPrefix, brokersRev)
		}
		if err == nil {
			err = c.follow(runCtx, bundlesPrefix, bundlesRev)
		}
	}
	if err != nil {
		c.Close(ctx)
		return nil, err
	}
	c.registered.Store(true)
	c.wg.Add(1)
	go c.keepRegistered(runCtx)
	return c, nil
}

// waitForStaleRegistration waits (up to two session TTLs) for a registration under our id that
// carries other addresses to expire: a restarted broker on new ports finds its previous
// registration until the old lease ends. Two live brokers with one id are refused.
func (c *Coordinator) waitForStaleRegistration(ctx context.Context) error {
	deadline := time.Now().Add(2*c.opts.SessionTTL + time.Second)
	for {
		kv, err := c.opts.Store.Get(ctx, brokerKey(c.opts.Self.ID))
		if errors.Is(err, metadata.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cluster: read registration %s: %w", c.opts.Self.ID, err)
		}
		var other BrokerInfo
		if json.Unmarshal(kv.Value, &other) == nil && sameAddresses(other, c.opts.Self) {
			return nil // our own previous run: the new registration replaces it
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: broker id %s is registered by a live broker at %s (each broker needs its own --broker-id)", c.opts.Self.ID, other.ServiceURL)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func sameAddresses(a, b BrokerInfo) bool {
	return a.ServiceURL == b.ServiceURL && a.ServiceURLTLS == b.ServiceURLTLS && a.WebURL == b.WebURL && a.WebURLTLS == b.WebURLTLS
}

// register opens a session and writes our registration on it.
func (c *Coordinator) register(ctx context.Context) error {
	sess, err := c.opts.Store.NewSession(ctx, c.opts.SessionTTL)
	if err != nil {
		return fmt.Errorf("cluster: open session: %w", err)
	}
	self := c.opts.Self
	self.OwnedBundles = 0
	self.Draining = c.draining.Load()
	val, _ := json.Marshal(self)
	if _, err := sess.PutEphemeral(ctx, brokerKey(self.ID), val); err != nil {
		_ = sess.Close(ctx)
		return fmt.Errorf("cluster: register broker %s: %w", self.ID, err)
	}
	c.sessMu.Lock()
	c.sess = sess
	c.sessMu.Unlock()
	return nil
}

// keepRegistered registers again whenever the session ends (etcd unreachable past the TTL). While
// unregistered this broker serves nothing, and other brokers take its bundles over (takeover.go).
func (c *Coordinator) keepRegistered(ctx context.Context) {
	defer c.wg.Done()
	for {
		c.sessMu.Lock()
		done := c.sess.Done()
		c.sessMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-done:
		}
		// Other brokers may take our bundles over from now on: stop serving them.
		c.registered.Store(false)
		lost := c.ServedBundles()
		c.log.Warn("cluster registration expired; this broker serves no bundle until it registers again", "bundles", len(lost))
		if c.opts.OnLost != nil {
			for _, b := range lost {
				c.opts.OnLost(b)
			}
		}
		for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
			if err := c.reregister(ctx); err == nil {
				c.log.Info("cluster registration restored")
				break
			} else if ctx.Err() != nil {
				return
			} else {
				c.log.Warn("cluster registration failed; retrying", "err", err, "in", backoff)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
	}
}

// reregister registers again after the session expired, and serves again only once the view
// holds the store's bundle records as of after the registration: while this broker was
// unregistered another may have taken its bundles over, and a view that has not seen that yet
// must not make it serve them beside the new owner.
func (c *Coordinator) reregister(ctx context.Context) error {
	if err := c.register(ctx); err != nil {
		return err
	}
	if _, err := c.resync(ctx, brokersPrefix); err != nil {
		return err
	}
	if _, err := c.resync(ctx, bundlesPrefix); err != nil {
		return err
	}
	c.registered.Store(true)
	if c.opts.OnServe != nil {
		for _, b := range c.ServedBundles() {
			c.opts.OnServe(b)
		}
	}
	return nil
}

// load lists a prefix into the view and returns the revision to follow from.
func (c *Coordinator) load(ctx context.Context, prefix string) (int64, error) {
	kvs, rev, err := c.opts.Store.List(ctx, prefix)
	if err != nil {
		return 0, fmt.Errorf("cluster: list %s: %w", prefix, err)
	}
	for _, kv := range kvs {
		c.apply(metadata.Event{Type: metadata.EventPut, KV: kv, Revision: kv.ModRevision})
	}
	return rev, nil
}

// follow starts a goroutine that applies the store's changes under prefix to the view, listing
// again when the watch fails (compaction or a lost connection).
func (c *Coordinator) follow(ctx context.Context, prefix string, rev int64) error {
	ch, err := c.opts.Store.Watch(ctx, prefix, rev)
	if err != nil {
		return fmt.Errorf("cluster: watch %s: %w", prefix, err)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			for ev := range ch {
				if ev.Err != nil {
					c.log.Warn("cluster watch ended; listing again", "prefix", prefix, "err", ev.Err)
					break
				}
				c.apply(ev)
			}
			if ctx.Err() != nil {
				return
			}
			for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
				rev, err := c.resync(ctx, prefix)
				if err == nil {
					if ch, err = c.opts.Store.Watch(ctx, prefix, rev); err == nil {
						break
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
			}
		}
	}()
	return nil
}

// resync replaces the view's entries under prefix with a fresh listing.
func (c *Coordinator) resync(ctx context.Context, prefix string) (int64, error) {
	kvs, rev, err := c.opts.Store.List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	present := map[string]bool{}
	for _, kv := range kvs {
		present[kv.Key] = true
		c.apply(metadata.Event{Type: metadata.EventPut, KV: kv, Revision: kv.ModRevision})
	}
	switch prefix {
	case brokersPrefix:
		for _, b := range c.view.liveBrokers() {
			if !present[brokerKey(b.ID)] {
				c.view.deleteBroker(b.ID)
			}
		}
	case bundlesPrefix:
		c.view.mu.Lock()
		var gone []Bundle
		for b := range c.view.records {
			if !present[bundleKey(b)] {
				gone = append(gone, b)
			}
		}
		c.view.mu.Unlock()
		for _, b := range gone {
			c.view.deleteRecord(b, rev)
		}
	}
	return rev, nil
}

// apply folds one store event into the view. Values that do not parse are logged and skipped: a
// hostile or corrupt record never becomes an owner.
func (c *Coordinator) apply(ev metadata.Event) {
	key := ev.KV.Key
	switch {
	case len(key) > len(brokersPrefix) && key[:len(brokersPrefix)] == brokersPrefix:
		id := brokerIDOfKey(key)
		if ev.Type == metadata.EventDelete {
			c.view.deleteBroker(id)
			return
		}
		var info BrokerInfo
		if err := json.Unmarshal(ev.KV.Value, &info); err != nil || info.ID != id {
			c.log.Warn("ignoring a malformed broker registration", "key", key, "err", err)
			return
		}
		c.view.putBroker(info)
	default:
		b, ok := bundleOfKey(key)
		if !ok {
			return
		}
		if ev.Type == metadata.EventDelete {
			c.view.deleteRecord(b, ev.Revision)
			return
		}
		var own Ownership
		if err := json.Unmarshal(ev.KV.Value, &own); err != nil {
			c.log.Warn("ignoring a malformed bundle record", "key", key, "err", err)
			return
		}
		c.putRecord(b, recordAt{own: own, version: ev.KV.Version, modRevision: ev.KV.ModRevision})
	}
}

// putRecord applies a record to the view and calls OnServe when this broker starts serving b.
func (c *Coordinator) putRecord(b Bundle, r recordAt) {
	before, applied := c.view.putRecord(b, r)
	self := c.opts.Self.ID
	if applied && c.opts.OnServe != nil && r.own.Serving(self) && !before.own.Serving(self) {
		c.opts.OnServe(b)
	}
	if applied && c.opts.OnMoveAbandoned != nil && before.own.MovingTo == self && r.own.MovingTo != self && !r.own.Serving(self) {
		c.opts.OnMoveAbandoned(b)
	}
	if applied && c.opts.OnLost != nil && before.own.Serving(self) && r.own.Broker != self {
		c.opts.OnLost(b)
	}
}

// Close deregisters the broker (its bundles stay recorded as its own) and stops the goroutines.
func (c *Coordinator) Close(ctx context.Context) {
	if c.stop != nil {
		c.stop()
	}
	c.wg.Wait()
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	if c.sess != nil {
		_ = c.sess.Close(ctx)
	}
}

// Self is this broker's registration.
func (c *Coordinator) Self() BrokerInfo { return c.opts.Self }

// Ranges are a namespace's bundle ranges.
func (c *Coordinator) Ranges(namespace string) []Range {
	var ranges []Range
	if c.opts.BundleRanges != nil {
		ranges = c.opts.BundleRanges(namespace)
	}
	if len(ranges) == 0 {
		ranges = EvenRanges(DefaultBundleCount)
	}
	return ranges
}

// BundleOf is the bundle that holds a topic (full name) of a namespace ("tenant/ns").
func (c *Coordinator) BundleOf(namespace, topic string) Bundle {
	return Bundle{Namespace: namespace, Range: Find(c.Ranges(namespace), topic)}
}

// Lookup decides who serves a topic: Connect (this broker) or Redirect (another live broker). An
// unassigned bundle is assigned to the least-loaded live broker first; a bundle without a live
// owner is held until one appears or the hold deadline passes (ErrNotReady).
func (c *Coordinator) Lookup(ctx context.Context, namespace, topic string) (Decision, error) {
	return c.LookupBundle(ctx, c.BundleOf(namespace, topic))
}

// LookupBundle is Lookup of a bundle named directly (an admin call on a bundle).
func (c *Coordinator) LookupBundle(ctx context.Context, b Bundle) (Decision, error) {
	hold := time.NewTimer(c.opts.HoldTimeout)
	defer hold.Stop()
	for {
		v, rec, exists, changed := c.view.snapshot(c.opts.Self.ID, b)
		var retry <-chan time.Time
		d := Decide(v)
		switch d.Action {
		case Connect, Redirect:
			return d, nil
		case Assign:
			err := c.assign(ctx, b, d.Broker.ID, rec, exists)
			if err == nil {
				continue // decide again on what the store now says
			}
			if !errors.Is(err, metadata.ErrBadVersion) {
				return Decision{}, err
			}
			// A concurrent winner (now in the view), or a record the view refuses to hold (a
			// malformed value, logged): decide again shortly, within the hold deadline.
			retry = time.After(10 * time.Millisecond)
		}
		select {
		case <-changed:
		case <-retry:
		case <-hold.C:
			return Decision{}, fmt.Errorf("bundle %s: %w", b, ErrNotReady)
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		}
	}
}

// assign records broker as b's owner with the next epoch, if the record is still what the
// decision saw (compare-and-swap on its version).
func (c *Coordinator) assign(ctx context.Context, b Bundle, broker string, prev recordAt, exists bool) error {
	own := Ownership{Broker: broker, Epoch: prev.own.Epoch + 1}
	takeover := exists && prev.own.Broker != ""
	if takeover {
		// The view may lag the store: take over only from a broker whose registration is gone
		// there too (else the view catches up and the lookup decides again).
		if _, err := c.opts.Store.Get(ctx, brokerKey(prev.own.Broker)); err == nil {
			return fmt.Errorf("cluster: take bundle %s over: broker %s is registered: %w", b, prev.own.Broker, metadata.ErrBadVersion)
		} else if !errors.Is(err, metadata.ErrNotFound) {
			return fmt.Errorf("cluster: take bundle %s over: %w", b, err)
		}
		floor, err := AllocateLedgerIDs(ctx, c.opts.Store, 0, 1)
		if err != nil {
			return fmt.Errorf("cluster: take bundle %s over: %w", b, err)
		}
		own = takeoverRecord(prev.own, broker, floor)
	}
	val, _ := json.Marshal(own)
	expect := int64(0)
	if exists {
		expect = prev.version
	}
	kv, err := c.opts.Store.Put(ctx, bundleKey(b), val, expect)
	if errors.Is(err, metadata.ErrBadVersion) {
		// Another broker assigned it first: read the winner now rather than wait for the watch.
		if cur, gerr := c.opts.Store.Get(ctx, bundleKey(b)); gerr == nil {
			c.apply(metadata.Event{Type: metadata.EventPut, KV: cur, Revision: cur.ModRevision})
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: assign bundle %s: %w", b, err)
	}
	if takeover {
		c.log.Warn("bundle taken over from a broker that is not live; its data there comes back when it does",
			"bundle", b.String(), "owner", broker, "from", prev.own.Broker, "epoch", own.Epoch, "stranded", own.Stranded)
	} else {
		c.log.Info("bundle assigned", "bundle", b.String(), "owner", broker, "epoch", own.Epoch)
	}
	c.putRecord(b, recordAt{own: own, version: kv.Version, modRevision: kv.ModRevision})
	return nil
}

// Owns reports whether this broker serves the topic's bundle: it owns it and is not handing it over.
func (c *Coordinator) Owns(namespace, topic string) bool {
	r, _ := c.view.record(c.BundleOf(namespace, topic))
	return r.own.Serving(c.opts.Self.ID) && c.registered.Load()
}

// Owner is the registration of the broker that owns the topic's bundle, when it is live.
func (c *Coordinator) Owner(namespace, topic string) (BrokerInfo, bool) {
	id := c.view.owner(c.BundleOf(namespace, topic))
	if id == "" {
		return BrokerInfo{}, false
	}
	return c.view.broker(id)
}

// Record is the ownership record of the topic's bundle, when there is one.
func (c *Coordinator) Record(namespace, topic string) (Ownership, bool) {
	r, ok := c.view.record(c.BundleOf(namespace, topic))
	return r.own, ok
}

// Assigned reports whether the topic's bundle has an owner (live or not).
func (c *Coordinator) Assigned(namespace, topic string) bool {
	return c.view.owner(c.BundleOf(namespace, topic)) != ""
}

// OwnedBundles lists this broker's bundles, sorted by name.
func (c *Coordinator) OwnedBundles() []Bundle {
	out := c.view.ownedBy(c.opts.Self.ID)
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Brokers lists the live brokers, sorted by id, each with the bundles it owns counted.
func (c *Coordinator) Brokers() []BrokerInfo {
	v, _, _, _ := c.view.snapshot(c.opts.Self.ID, Bundle{})
	out := make([]BrokerInfo, 0, len(v.Live))
	for _, b := range v.Live {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
