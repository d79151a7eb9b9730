// Package catalog is Meridian's typed, cached and watched view of the configuration store: clusters,
// tenants, namespaces with their policies, partitioned-topic metadata and topic-level policies.
//
// A Catalog lists everything under "/admin/" once, then follows the store's watch from that revision,
// so its cache sees every change in order without gaps (metadata.Store's List+Watch contract) and
// readers never touch the store. Writes go to the store with compare-and-swap (read, modify, put with
// the read version, retry on conflict), so concurrent admins on several clusters sharing one etcd
// never lose an update; a write returns only after the cache has caught up with it, so an admin call
// that succeeded is visible to the next read on the same catalog (read-your-writes).
//
// Consumers (the broker, replication) Subscribe to change events; they arrive in store order within
// milliseconds of the change (the store's watch, not polling). A subscriber that falls far behind gets
// one EventResync instead of an unbounded queue and re-reads what it needs.
//
// # Key layout (values are JSON with Pulsar's field names, see package adminapi)
//
//	/admin/clusters/<cluster>                                    adminapi.ClusterData
//	/admin/policies/<tenant>                                     adminapi.TenantInfo
//	/admin/policies/<tenant>/<namespace>                         adminapi.Policies
//	/admin/partitioned-topics/<tenant>/<ns>/<domain>/<local>     adminapi.PartitionedTopicMetadata
//	/admin/topic-policies/<tenant>/<ns>/<domain>/<local>         adminapi.TopicPolicies
//	/admin/configuration                                         {"name": "value"} broker dynamic configuration
//
// <local> is the topic's local name, path-escaped (url.PathEscape). The layout mirrors Pulsar's
// ZooKeeper layout (/admin/clusters, /admin/policies, /admin/partitioned-topics).
package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/naming"
)

// EventKind says what changed.
type EventKind int

const (
	// EventCluster: a cluster was created, updated or deleted. Name is the cluster.
	EventCluster EventKind = iota + 1
	// EventTenant: Name is the tenant.
	EventTenant
	// EventNamespace: a namespace or its policies changed. Name is "tenant/ns".
	EventNamespace
	// EventPartitionedTopic: partitioned-topic metadata changed. Name is the full topic name.
	EventPartitionedTopic
	// EventTopicPolicies: topic-level policies changed. Name is the full (base) topic name.
	EventTopicPolicies
	// EventDynamicConfig: the brokers' dynamic configuration changed.
	EventDynamicConfig
	// EventResync: the subscriber missed events (it fell behind, or the store's watch had to restart
	// from a fresh listing). Re-read everything of interest.
	EventResync
)

func (k EventKind) String() string {
	switch k {
	case EventCluster:
		return "cluster"
	case EventTenant:
		return "tenant"
	case EventNamespace:
		return "namespace"
	case EventPartitionedTopic:
		return "partitioned-topic"
	case EventTopicPolicies:
		return "topic-policies"
	case EventDynamicConfig:
		return "dynamic-config"
	case EventResync:
		return "resync"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one change, delivered after the catalog's cache reflects it.
type Event struct {
	Kind     EventKind
	Name     string
	Deleted  bool
	Revision int64
}

type entry[T any] struct {
	val    T
	modRev int64
	ptr    *T // the same value, for shared read-only access (set for namespaces)
}

// maxSubscriberQueue bounds a subscriber's undelivered events before they collapse into one
// EventResync. A variable so that tests can lower it.
var maxSubscriberQueue = 10000

// writeRetries bounds compare-and-swap retries of one write; between retries the writer sleeps a
// random, growing delay (at most 50 ms) so that many concurrent writers spread out.
const writeRetries = 40

// catchUpTimeout bounds how long a write waits for the watch to show it in the cache.
const catchUpTimeout = 10 * time.Second

// Catalog is the cached view. Safe for concurrent use. Create with New, stop with Close.
type Catalog struct {
	store metadata.Store
	log   *slog.Logger

	mu            sync.RWMutex
	changed       *sync.Cond // broadcast whenever rev advances or the catalog stops
	rev           int64
	clusters      map[string]entry[adminapi.ClusterData]
	tenants       map[string]entry[adminapi.TenantInfo]
	namespaces    map[string]entry[adminapi.Policies] // "tenant/ns"
	partitioned   map[string]entry[adminapi.PartitionedTopicMetadata]
	topicPolicies map[string]entry[adminapi.TopicPolicies]
	dynamic       entry[map[string]string]
	subs          map[*subscriber]struct{}
	watchErr      error
	stopped       bool

	cancel context.CancelFunc
	done   chan struct{}
}

// New loads the catalog from store and starts following its changes. The caller keeps ownership of
// store (Close does not close it). logger may be nil.
func New(ctx context.Context, store metadata.Store, logger *slog.Logger) (*Catalog, error) {
	if logger == nil {
		logger = slog.Default()
	}
	c := &Catalog{store: store, log: logger.With("component", "catalog"), subs: map[*subscriber]struct{}{}}
	c.changed = sync.NewCond(&c.mu)
	rev, err := c.reload(ctx)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	ch, err := store.Watch(wctx, prefixRoot, rev)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("catalog: watching %s: %w", prefixRoot, err)
	}
	c.cancel = cancel
	c.done = make(chan struct{})
	go c.follow(wctx, ch)
	return c, nil
}

// Close stops following the store and ends every subscription. Safe to call more than once.
func (c *Catalog) Close() error {
	c.cancel()
	<-c.done
	return nil
}

// reload replaces the cache with a fresh listing and returns its revision.
func (c *Catalog) reload(ctx context.Context) (int64, error) {
	kvs, rev, err := c.store.List(ctx, prefixRoot)
	if err != nil {
		return 0, fmt.Errorf("catalog: listing %s: %w", prefixRoot, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clusters = map[string]entry[adminapi.ClusterData]{}
	c.tenants = map[string]entry[adminapi.TenantInfo]{}
	c.namespaces = map[string]entry[adminapi.Policies]{}
	c.partitioned = map[string]entry[adminapi.PartitionedTopicMetadata]{}
	c.topicPolicies = map[string]entry[adminapi.TopicPolicies]{}
	c.dynamic = entry[map[string]string]{}
	for _, kv := range kvs {
		c.applyLocked(metadata.Event{Type: metadata.EventPut, KV: kv, Revision: kv.ModRevision})
	}
	if rev > c.rev {
		c.rev = rev
	}
	c.changed.Broadcast()
	return rev, nil
}

// follow applies watch events until ctx ends. On a compaction gap it re-lists and tells subscribers
// to resync; on a broken watch it retries with backoff and keeps serving the last known state.
func (c *Catalog) follow(ctx context.Context, ch <-chan metadata.Event) {
	defer close(c.done)
	defer func() {
		c.mu.Lock()
		c.stopped = true
		for s := range c.subs {
			s.close()
		}
		c.subs = map[*subscriber]struct{}{}
		c.changed.Broadcast()
		c.mu.Unlock()
	}()
	backoff := 100 * time.Millisecond
	for {
		for ev := range ch {
			if ev.Err != nil {
				c.log.Warn("configuration store watch ended; re-listing", "err", ev.Err)
				c.setWatchErr(ev.Err)
				break
			}
			backoff = 100 * time.Millisecond
			c.mu.Lock()
			out, ok := c.applyLocked(ev)
			if ev.Revision > c.rev {
				c.rev = ev.Revision
			}
			if ok {
				c.publishLocked(out)
			}
			c.changed.Broadcast()
			c.mu.Unlock()
		}
		if ctx.Err() != nil {
			return
		}
		// The watch ended (compaction or a closed store). Re-list and watch again.
		for {
			rev, err := c.reload(ctx)
			if err == nil {
				var werr error
				ch, werr = c.store.Watch(ctx, prefixRoot, rev)
				if werr == nil {
					c.setWatchErr(nil)
					c.mu.Lock()
					c.publishLocked(Event{Kind: EventResync, Revision: rev})
					c.mu.Unlock()
					break
				}
				err = werr
			}
			if errors.Is(err, metadata.ErrClosed) || ctx.Err() != nil {
				c.setWatchErr(err)
				if ctx.Err() == nil {
					c.log.Error("configuration store closed; catalog stops following it", "err", err)
				}
				return
			}
			c.setWatchErr(err)
			c.log.Warn("configuration store unavailable; retrying", "err", err, "backoff", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

func (c *Catalog) setWatchErr(err error) {
	c.mu.Lock()
	c.watchErr = err
	c.mu.Unlock()
}

// Health returns nil while the catalog follows the store, or why it does not.
func (c *Catalog) Health() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.stopped {
		return fmt.Errorf("catalog stopped: %w", metadata.ErrClosed)
	}
	if c.watchErr != nil {
		return fmt.Errorf("catalog not following the configuration store: %w", c.watchErr)
	}
	return nil
}

// CheckStore asks the configuration store itself whether it is reachable (etcd resumes watches
// silently during an outage, so Health alone does not notice one). It is cheap: a linearizable read
// on etcd, a read transaction on the local store.
func (c *Catalog) CheckStore(ctx context.Context) error {
	if err := c.Health(); err != nil {
		return err
	}
	if err := c.store.Health(ctx); err != nil {
		return fmt.Errorf("configuration store: %w", err)
	}
	return nil
}

// Revision is the store revision the cache reflects.
func (c *Catalog) Revision() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// applyLocked updates the cache with one store event and returns the event to publish.
func (c *Catalog) applyLocked(ev metadata.Event) (Event, bool) {
	kind, name := parseKey(ev.KV.Key)
	del := ev.Type == metadata.EventDelete
	rev := ev.Revision
	bad := func(err error) (Event, bool) {
		// A value we cannot read is logged and ignored (left as it was), never a crash; it came from
		// another writer or a newer version of Meridian.
		c.log.Error("ignoring unreadable configuration value", "key", ev.KV.Key, "err", err)
		return Event{}, false
	}
	switch kind {
	case keyCluster:
		if del {
			delete(c.clusters, name)
		} else {
			var v adminapi.ClusterData
			if err := json.Unmarshal(ev.KV.Value, &v); err != nil {
				return bad(err)
			}
			c.clusters[name] = entry[adminapi.ClusterData]{val: v, modRev: rev}
		}
		return Event{Kind: EventCluster, Name: name, Deleted: del, Revision: rev}, true
	case keyTenant:
		if del {
			delete(c.tenants, name)
		} else {
			var v adminapi.TenantInfo
			if err := json.Unmarshal(ev.KV.Value, &v); err != nil {
				return bad(err)
			}
			c.tenants[name] = entry[adminapi.TenantInfo]{val: v, modRev: rev}
		}
		return Event{Kind: EventTenant, Name: name, Deleted: del, Revision: rev}, true
	case keyNamespace:
		if del {
			delete(c.namespaces, name)
		} else {
			v := adminapi.NewPolicies()
			if err := json.Unmarshal(ev.KV.Value, &v); err != nil {
				return bad(err)
			}
			v.Normalize()
			c.namespaces[name] = entry[adminapi.Policies]{val: v, modRev: rev, ptr: &v}
		}
		return Event{Kind: EventNamespace, Name: name, Deleted: del, Revision: rev}, true
	case keyPartitioned:
		if del {
			delete(c.partitioned, name)
		} else {
			var v adminapi.PartitionedTopicMetadata
			if err := json.Unmarshal(ev.KV.Value, &v); err != nil {
				return bad(err)
			}
			c.partitioned[name] = entry[adminapi.PartitionedTopicMetadata]{val: v, modRev: rev}
		}
		return Event{Kind: EventPartitionedTopic, Name: name, Deleted: del, Revision: rev}, true
	case keyDynamic:
		if del {
			c.dynamic = entry[map[string]string]{}
		} else {
			var v map[string]string
			if err := json.Unmarshal(ev.KV.Value, &v); err != nil {
				return bad(err)
			}
			c.dynamic = entry[map[string]string]{val: v, modRev: rev}
		}
		return Event{Kind: EventDynamicConfig, Deleted: del, Revision: rev}, true
	case keyTopicPolicies:
		if del {
			delete(c.topicPolicies, name)
		} else {
			var v adminapi.TopicPolicies
			if err := json.Unmarshal(ev.KV.Value, &v); err != nil {
				return bad(err)
			}
			c.topicPolicies[name] = entry[adminapi.TopicPolicies]{val: v, modRev: rev}
		}
		return Event{Kind: EventTopicPolicies, Name: name, Deleted: del, Revision: rev}, true
	}
	return Event{}, false
}

// ---- subscriptions ----

type subscriber struct {
	mu      sync.Mutex
	queue   []Event
	wake    chan struct{}
	out     chan Event
	stop    chan struct{}
	stopped bool
}

func (s *subscriber) push(ev Event) {
	s.mu.Lock()
	if len(s.queue) >= maxSubscriberQueue {
		s.queue = append(s.queue[:0], Event{Kind: EventResync, Revision: ev.Revision})
	} else {
		s.queue = append(s.queue, ev)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.stopped = true
		close(s.stop)
	}
}

func (s *subscriber) run() {
	defer close(s.out)
	for {
		s.mu.Lock()
		q := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, ev := range q {
			select {
			case s.out <- ev:
			case <-s.stop:
				return
			}
		}
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
	}
}

// Subscribe returns a channel of change events (in store order) and a function that ends the
// subscription and closes the channel. The channel also closes when the catalog is closed. Events
// are queued per subscriber, so a slow reader does not hold up others; past maxSubscriberQueue
// undelivered events the queue collapses into one EventResync.
func (c *Catalog) Subscribe() (<-chan Event, func()) {
	s := &subscriber{wake: make(chan struct{}, 1), out: make(chan Event), stop: make(chan struct{})}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		ch := make(chan Event)
		close(ch)
		return ch, func() {}
	}
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	go s.run()
	var once sync.Once
	return s.out, func() {
		once.Do(func() {
			c.mu.Lock()
			delete(c.subs, s)
			c.mu.Unlock()
			s.close()
			for range s.out { // drain so run exits
			}
		})
	}
}

func (c *Catalog) publishLocked(ev Event) {
	for s := range c.subs {
		s.push(ev)
	}
}

// waitFor blocks until cond (checked under the read lock) holds, the catalog stops, or the timeout.
func (c *Catalog) waitFor(ctx context.Context, cond func() bool) error {
	deadline := time.Now().Add(catchUpTimeout)
	timer := time.AfterFunc(catchUpTimeout, func() {
		c.mu.Lock()
		c.changed.Broadcast()
		c.mu.Unlock()
	})
	defer timer.Stop()
	stopCtx := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.changed.Broadcast()
		c.mu.Unlock()
	})
	defer stopCtx()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !cond() {
		if c.stopped {
			return fmt.Errorf("catalog: %w", metadata.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("catalog: the change was written but the watch has not shown it after %s: %w", catchUpTimeout, metadata.ErrUnavailable)
		}
		c.changed.Wait()
	}
	return nil
}

func (c *Catalog) waitRevision(ctx context.Context, rev int64) error {
	return c.waitFor(ctx, func() bool { return c.rev >= rev })
}

// ---- generic read-modify-write ----

// errSkipWrite from a mutate function ends the update without writing (the value is already right).
var errSkipWrite = errors.New("skip write")

// update runs a compare-and-swap loop on key: it reads the current value (into a fresh T, or
// exists=false), calls mutate, and writes the result with the version it read. mutate returns
// (remove=true) to delete the key instead, or errSkipWrite to write nothing. It returns after the
// cache reflects the write (or, for errSkipWrite, the value read).
func update[T any](ctx context.Context, c *Catalog, key string, fresh func() T, mutate func(v *T, exists bool) (remove bool, err error)) error {
	for attempt := 0; attempt < writeRetries; attempt++ {
		if attempt > 0 {
			if err := sleepJitter(ctx, attempt); err != nil {
				return err
			}
		}
		v := fresh()
		exists := true
		var version, modRev int64
		kv, err := c.store.Get(ctx, key)
		switch {
		case errors.Is(err, metadata.ErrNotFound):
			exists = false
		case err != nil:
			return fmt.Errorf("catalog: reading %s: %w", key, err)
		default:
			if err := json.Unmarshal(kv.Value, &v); err != nil {
				return fmt.Errorf("catalog: %s holds unreadable JSON: %w", key, err)
			}
			version, modRev = kv.Version, kv.ModRevision
		}
		remove, err := mutate(&v, exists)
		if errors.Is(err, errSkipWrite) {
			// Nothing to write, but the caller may go on to read the cache: it shows at least
			// what was just read.
			if exists {
				return c.waitRevision(ctx, modRev)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if remove {
			if !exists {
				return nil
			}
			err := c.store.Delete(ctx, key, version)
			if errors.Is(err, metadata.ErrBadVersion) || errors.Is(err, metadata.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("catalog: deleting %s: %w", key, err)
			}
			kind, name := parseKey(key)
			return c.waitFor(ctx, func() bool { return !c.hasAtRevLocked(kind, name, modRev) })
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("catalog: encoding %s: %w", key, err)
		}
		put, err := c.store.Put(ctx, key, b, version)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue
		}
		if err != nil {
			return fmt.Errorf("catalog: writing %s: %w", key, err)
		}
		return c.waitRevision(ctx, put.ModRevision)
	}
	return refuse(ErrConflict, "Concurrent modification")
}

func sleepJitter(ctx context.Context, attempt int) error {
	maxDelay := min(time.Duration(1<<min(attempt, 6))*time.Millisecond, 50*time.Millisecond)
	t := time.NewTimer(time.Duration(rand.Int64N(int64(maxDelay)) + 1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// hasAtRevLocked reports whether the cache still holds name at exactly modRev (i.e. a delete of that
// version has not been seen yet).
func (c *Catalog) hasAtRevLocked(kind keyKind, name string, modRev int64) bool {
	switch kind {
	case keyCluster:
		e, ok := c.clusters[name]
		return ok && e.modRev == modRev
	case keyTenant:
		e, ok := c.tenants[name]
		return ok && e.modRev == modRev
	case keyNamespace:
		e, ok := c.namespaces[name]
		return ok && e.modRev == modRev
	case keyPartitioned:
		e, ok := c.partitioned[name]
		return ok && e.modRev == modRev
	case keyTopicPolicies:
		e, ok := c.topicPolicies[name]
		return ok && e.modRev == modRev
	case keyDynamic:
		return c.dynamic.modRev == modRev
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// parseNamespace validates "tenant/ns" with Pulsar's refusal text.
func parseNamespace(ns string) (naming.NamespaceName, error) {
	n, err := naming.ParseNamespace(ns)
	if err != nil {
		return naming.NamespaceName{}, refuse(ErrPrecondition, "Namespace name is not valid: %v", err)
	}
	return n, nil
}

func parseTopic(topic string) (naming.TopicName, error) {
	t, err := naming.ParseTopic(topic)
	if err != nil {
		return naming.TopicName{}, refuse(ErrPrecondition, "Topic name is not valid: %v", err)
	}
	return t, nil
}
