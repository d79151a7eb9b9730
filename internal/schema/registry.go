package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/naming"
)

// StrategySource returns the compatibility strategy that applies to a topic (namespace policy
// schema_compatibility_strategy, topic policy, ...); StrategyUndefined means DefaultStrategy.
type StrategySource func(ctx context.Context, topic naming.TopicName) Strategy

// Options configure a Registry.
type Options struct {
	// Strategy gives a topic's compatibility strategy; nil means DefaultStrategy everywhere.
	Strategy StrategySource
	// Now is the clock (unix ms); nil means time.Now.
	Now func() int64
}

// Registry stores schema histories in a metadata store. It is safe for concurrent use; writes to
// one topic's history are serialised in process and protected by create-only puts across
// processes.
type Registry struct {
	store    metadata.Store
	strategy StrategySource
	now      func() int64

	mu    sync.Mutex
	locks map[string]*topicLock
}

type topicLock struct {
	mu   sync.Mutex
	refs int
}

// New returns a registry on store.
func New(store metadata.Store, opts Options) *Registry {
	r := &Registry{store: store, strategy: opts.Strategy, now: opts.Now, locks: map[string]*topicLock{}}
	if r.now == nil {
		r.now = func() int64 { return time.Now().UnixMilli() }
	}
	return r
}

// rootPrefix is where schema histories live in the store.
const rootPrefix = "/schemas/"

// formatVersion is the on-store record version.
const formatVersion = 1

// ID is a topic's schema id: tenant/namespace/base local name (partitions and domains share it).
func ID(topic naming.TopicName) string {
	b := topic.Base()
	return b.Tenant + "/" + b.Namespace + "/" + b.Local
}

func historyPrefix(topic naming.TopicName) string { return rootPrefix + ID(topic) + "/" }

func versionKey(topic naming.TopicName, v int64) string {
	return fmt.Sprintf("%s%020d", historyPrefix(topic), v)
}

type record struct {
	V       int               `json:"v"`
	Type    int32             `json:"type"`
	Name    string            `json:"name,omitempty"`
	Data    []byte            `json:"data,omitempty"`
	Props   map[string]string `json:"props,omitempty"`
	TS      int64             `json:"ts"`
	Deleted bool              `json:"deleted,omitempty"`
}

// lock serialises writers of one history in this process.
func (r *Registry) lock(id string) func() {
	r.mu.Lock()
	l := r.locks[id]
	if l == nil {
		l = &topicLock{}
		r.locks[id] = l
	}
	l.refs++
	r.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(r.locks, id)
		}
		r.mu.Unlock()
	}
}

// History returns every stored version of the topic's schema, tombstones included, oldest first.
func (r *Registry) History(ctx context.Context, topic naming.TopicName) ([]Version, error) {
	prefix := historyPrefix(topic)
	kvs, _, err := r.store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("schema: list %s: %w", ID(topic), err)
	}
	out := make([]Version, 0, len(kvs))
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.Key, prefix)
		if strings.Contains(rest, "/") {
			continue // a longer topic name sharing the prefix cannot happen ("/" ends it), but be safe
		}
		v, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			continue
		}
		var rec record
		if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.V != formatVersion {
			return nil, fmt.Errorf("schema: %s version %d: unreadable record (format %d): %v", ID(topic), v, rec.V, err)
		}
		out = append(out, Version{
			Info:      Info{Name: rec.Name, Type: Type(rec.Type), Data: rec.Data, Properties: rec.Props},
			Version:   v,
			Timestamp: rec.TS,
			Deleted:   rec.Deleted,
		})
	}
	slices.SortFunc(out, func(a, b Version) int { return int(a.Version - b.Version) })
	return out, nil
}

// live returns the versions after the last tombstone, and the next version number.
func live(history []Version) ([]Version, int64) {
	next := int64(0)
	if n := len(history); n > 0 {
		next = history[n-1].Version + 1
	}
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Deleted {
			return history[i+1:], next
		}
	}
	return history, next
}

// Live returns the versions that count (after the last tombstone), oldest first.
func (r *Registry) Live(ctx context.Context, topic naming.TopicName) ([]Version, error) {
	h, err := r.History(ctx, topic)
	if err != nil {
		return nil, err
	}
	l, _ := live(h)
	return l, nil
}

// Latest returns the topic's current schema, or ErrNotFound when it has none.
func (r *Registry) Latest(ctx context.Context, topic naming.TopicName) (Version, error) {
	l, err := r.Live(ctx, topic)
	if err != nil {
		return Version{}, err
	}
	if len(l) == 0 {
		return Version{}, fmt.Errorf("%w: topic %s has no schema", ErrNotFound, ID(topic))
	}
	return l[len(l)-1], nil
}

// Get returns one version (tombstones too: Deleted is set), or ErrNotFound.
func (r *Registry) Get(ctx context.Context, topic naming.TopicName, version int64) (Version, error) {
	kv, err := r.store.Get(ctx, versionKey(topic, version))
	if errors.Is(err, metadata.ErrNotFound) {
		return Version{}, fmt.Errorf("%w: topic %s has no schema version %d", ErrNotFound, ID(topic), version)
	}
	if err != nil {
		return Version{}, fmt.Errorf("schema: get %s version %d: %w", ID(topic), version, err)
	}
	var rec record
	if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.V != formatVersion {
		return Version{}, fmt.Errorf("schema: %s version %d: unreadable record: %v", ID(topic), version, err)
	}
	return Version{
		Info:    Info{Name: rec.Name, Type: Type(rec.Type), Data: rec.Data, Properties: rec.Props},
		Version: version, Timestamp: rec.TS, Deleted: rec.Deleted,
	}, nil
}

// GetLive returns a version of the live lineage: ErrNotFound for a version that does not exist,
// is a tombstone, or was written before the last delete (GET_SCHEMA: a deleted schema is gone for
// the messages written with it too, as on Pulsar).
func (r *Registry) GetLive(ctx context.Context, topic naming.TopicName, version int64) (Version, error) {
	l, err := r.Live(ctx, topic)
	if err != nil {
		return Version{}, err
	}
	for _, v := range l {
		if v.Version == version {
			return v, nil
		}
	}
	return Version{}, fmt.Errorf("%w: topic %s has no live schema version %d", ErrNotFound, ID(topic), version)
}

// StrategyFor is the compatibility strategy that applies to topic.
func (r *Registry) StrategyFor(ctx context.Context, topic naming.TopicName) Strategy {
	if r.strategy == nil {
		return DefaultStrategy
	}
	return r.strategy(ctx, topic).Resolve(DefaultStrategy)
}

// Find returns the version of a live schema identical to info, or ErrNotFound.
func (r *Registry) Find(ctx context.Context, topic naming.TopicName, info Info) (int64, error) {
	l, err := r.Live(ctx, topic)
	if err != nil {
		return 0, err
	}
	if v, ok := find(l, info); ok {
		return v, nil
	}
	return 0, fmt.Errorf("%w: no such schema on topic %s", ErrNotFound, ID(topic))
}

func find(l []Version, info Info) (int64, bool) {
	for i := len(l) - 1; i >= 0; i-- {
		if Same(l[i].Info, info) {
			return l[i].Version, true
		}
	}
	return 0, false
}

// Check tests whether info could be registered on topic (an identical live schema is always
// fine) and returns the strategy it was checked under.
func (r *Registry) Check(ctx context.Context, topic naming.TopicName, info Info) (Strategy, error) {
	s := r.StrategyFor(ctx, topic)
	l, err := r.Live(ctx, topic)
	if err != nil {
		return s, err
	}
	if _, ok := find(l, info); ok {
		return s, nil
	}
	if err := Validate(info); err != nil {
		return s, err
	}
	return s, Compatible(s, l, info)
}

// Put registers info on topic: the version of an identical live schema, or a new version if info
// is compatible with the live ones under the topic's strategy (ErrIncompatible otherwise).
func (r *Registry) Put(ctx context.Context, topic naming.TopicName, info Info) (int64, error) {
	if err := Validate(info); err != nil {
		return 0, err
	}
	unlock := r.lock(ID(topic))
	defer unlock()
	s := r.StrategyFor(ctx, topic)
	for attempt := 0; ; attempt++ {
		h, err := r.History(ctx, topic)
		if err != nil {
			return 0, err
		}
		l, next := live(h)
		if v, ok := find(l, info); ok {
			return v, nil
		}
		if err := Compatible(s, l, info); err != nil {
			return 0, err
		}
		err = r.write(ctx, topic, next, record{V: formatVersion, Type: int32(info.Type), Name: info.Name,
			Data: info.Data, Props: info.Properties, TS: r.now()})
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, metadata.ErrBadVersion) || attempt >= 10 {
			return 0, err
		}
		// Another broker wrote this version first: read again and decide again.
	}
}

func (r *Registry) write(ctx context.Context, topic naming.TopicName, v int64, rec record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("schema: encode %s version %d: %w", ID(topic), v, err)
	}
	if _, err := r.store.Put(ctx, versionKey(topic, v), data, 0); err != nil {
		return fmt.Errorf("schema: store %s version %d: %w", ID(topic), v, err)
	}
	return nil
}

// Delete deletes the topic's schema. Without force it writes a tombstone version (returned); with
// force it removes the whole history (returning the last version it had). ErrNotFound when there
// is nothing to delete.
func (r *Registry) Delete(ctx context.Context, topic naming.TopicName, force bool) (int64, error) {
	unlock := r.lock(ID(topic))
	defer unlock()
	h, err := r.History(ctx, topic)
	if err != nil {
		return 0, err
	}
	l, next := live(h)
	if force {
		if len(h) == 0 {
			return 0, fmt.Errorf("%w: topic %s has no schema", ErrNotFound, ID(topic))
		}
		for _, v := range h {
			if err := r.store.Delete(ctx, versionKey(topic, v.Version), metadata.AnyVersion); err != nil && !errors.Is(err, metadata.ErrNotFound) {
				return 0, fmt.Errorf("schema: delete %s version %d: %w", ID(topic), v.Version, err)
			}
		}
		return h[len(h)-1].Version, nil
	}
	if len(l) == 0 {
		return 0, fmt.Errorf("%w: topic %s has no schema", ErrNotFound, ID(topic))
	}
	if err := r.write(ctx, topic, next, record{V: formatVersion, TS: r.now(), Deleted: true}); err != nil {
		return 0, err
	}
	return next, nil
}

// ForProducer applies a producer's declared schema (PRODUCER.schema): none → no version; else the
// version of the schema, registering it when autoUpdate allows (namespace policy
// is_allow_auto_update_schema, true by default); without autoUpdate the schema must already exist.
//
// A declared BYTES (NONE) schema is registered like any other on a topic without a schema (or with
// a BYTES one), as Pulsar does, so its messages carry a version that GET_SCHEMA resolves; on a topic
// with a typed schema it is accepted without a version, like a producer that declares nothing.
func (r *Registry) ForProducer(ctx context.Context, topic naming.TopicName, info *Info, autoUpdate bool) ([]byte, error) {
	if info == nil {
		return nil, nil
	}
	if info.Type == TypeNone {
		l, err := r.Live(ctx, topic)
		if err != nil {
			return nil, err
		}
		if len(l) > 0 && l[len(l)-1].Type != TypeNone {
			return nil, nil
		}
	}
	if !autoUpdate {
		v, err := r.Find(ctx, topic, *info)
		if err != nil {
			return nil, fmt.Errorf("%w: schema not found and schema auto updating is disabled", ErrIncompatible)
		}
		return VersionBytes(v), nil
	}
	v, err := r.Put(ctx, topic, *info)
	if err != nil {
		return nil, err
	}
	return VersionBytes(v), nil
}

// ForConsumer applies a consumer's declared schema (SUBSCRIBE.schema): a topic with a schema must
// be compatible with it; a topic without one gets it registered when the topic is idle (no
// producers, no stored data), as Pulsar does, and otherwise accepts the consumer as is.
func (r *Registry) ForConsumer(ctx context.Context, topic naming.TopicName, info *Info, idle bool) error {
	if info.IsNone() {
		return nil
	}
	l, err := r.Live(ctx, topic)
	if err != nil {
		return err
	}
	if len(l) == 0 {
		if !idle {
			return nil
		}
		_, err := r.Put(ctx, topic, *info)
		return err
	}
	if _, ok := find(l, *info); ok {
		return nil
	}
	return Compatible(r.StrategyFor(ctx, topic), l, *info)
}
