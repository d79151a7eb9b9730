// Package engine is the in-process metadata store shared by memstore and localstore: an in-memory
// index of every key, CAS checks, revisions, a bounded change history that watches read from, and
// sessions that own ephemeral keys. Durability is delegated to a Persister (none for memstore, bbolt
// for localstore) that records each change before it becomes visible.
package engine

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/metadata"
)

// Change is one committed mutation, handed to the Persister in revision order.
type Change struct {
	Type metadata.EventType
	// KV is the new state for puts; for deletes only Key and ModRevision are set.
	KV metadata.KV
	// Ephemeral is true when the put belongs to a session (the key must not survive a restart).
	Ephemeral bool
	// CompactRev: history at or below this revision may be forgotten by the persister.
	CompactRev int64
}

// Persister makes changes durable. Commit is called with the engine's write lock held, once per
// change, in revision order; if it fails the change is not applied.
type Persister interface {
	Commit(c Change) error
}

// Entry is one key of the initial state.
type Entry struct {
	KV        metadata.KV
	Ephemeral bool // left over from a previous run: deleted when the engine starts
}

// State is what a store starts from.
type State struct {
	Entries    []Entry
	Revision   int64            // current store revision, >= 1
	History    []metadata.Event // recent changes, ascending, all <= Revision
	CompactRev int64            // revisions <= CompactRev are not in History
}

// Options bound the change history.
type Options struct {
	MaxHistoryEvents int // default 10000
	MaxHistoryBytes  int // default 64 MiB
	Name             string
}

type entry struct {
	kv    metadata.KV
	owner *session // nil for persistent keys
}

// Engine implements metadata.Store in process.
type Engine struct {
	persist Persister
	name    string

	mu       sync.RWMutex
	keys     []string // sorted
	data     map[string]*entry
	rev      int64
	hist     *history
	sessions map[*session]struct{}
	closed   bool

	closing  chan struct{} // closed by Close: watchers stop
	watchers sync.WaitGroup
}

// New builds an engine from st. Ephemeral entries left over from a previous run are deleted (each
// deletion a new revision, persisted and visible to watches from older revisions).
func New(st State, p Persister, opt Options) (*Engine, error) {
	if opt.MaxHistoryEvents <= 0 {
		opt.MaxHistoryEvents = 10000
	}
	if opt.MaxHistoryBytes <= 0 {
		opt.MaxHistoryBytes = 64 << 20
	}
	if st.Revision < 1 {
		st.Revision = 1
	}
	// The history must be contiguous up to the current revision; whatever precedes it is compacted.
	if len(st.History) == 0 {
		st.CompactRev = st.Revision
	} else {
		st.CompactRev = st.History[0].Revision - 1
		for i, ev := range st.History {
			if ev.Revision != st.CompactRev+int64(i)+1 {
				return nil, fmt.Errorf("history is not contiguous at revision %d", ev.Revision)
			}
		}
		if last := st.History[len(st.History)-1].Revision; last != st.Revision {
			return nil, fmt.Errorf("history ends at revision %d, store is at %d", last, st.Revision)
		}
	}
	e := &Engine{
		persist:  p,
		name:     opt.Name,
		data:     make(map[string]*entry, len(st.Entries)),
		rev:      st.Revision,
		hist:     newHistory(st.CompactRev, opt.MaxHistoryEvents, opt.MaxHistoryBytes),
		sessions: make(map[*session]struct{}),
		closing:  make(chan struct{}),
	}
	for _, ev := range st.History {
		e.hist.append(ev)
	}
	var leftovers []string
	for _, en := range st.Entries {
		e.data[en.KV.Key] = &entry{kv: en.KV}
		e.keys = append(e.keys, en.KV.Key)
		if en.Ephemeral {
			leftovers = append(leftovers, en.KV.Key)
		}
	}
	sort.Strings(e.keys)
	for _, k := range leftovers {
		if err := e.deleteLocked(k); err != nil {
			return nil, fmt.Errorf("removing ephemeral key %q left from the previous run: %w", k, err)
		}
	}
	return e, nil
}

func (e *Engine) errClosed() error { return fmt.Errorf("%s: %w", e.name, metadata.ErrClosed) }

func cloneKV(kv metadata.KV) metadata.KV {
	if kv.Value != nil {
		kv.Value = bytes.Clone(kv.Value)
	}
	return kv
}

// Get implements metadata.Store.
func (e *Engine) Get(ctx context.Context, key string) (metadata.KV, error) {
	if err := ctx.Err(); err != nil {
		return metadata.KV{}, err
	}
	if err := metadata.ValidateKey(key); err != nil {
		return metadata.KV{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return metadata.KV{}, e.errClosed()
	}
	en, ok := e.data[key]
	if !ok {
		return metadata.KV{}, fmt.Errorf("get %q: %w", key, metadata.ErrNotFound)
	}
	return cloneKV(en.kv), nil
}

// Put implements metadata.Store.
func (e *Engine) Put(ctx context.Context, key string, value []byte, expectedVersion int64) (metadata.KV, error) {
	if err := ctx.Err(); err != nil {
		return metadata.KV{}, err
	}
	if err := metadata.ValidatePut(key, value, expectedVersion); err != nil {
		return metadata.KV{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return metadata.KV{}, e.errClosed()
	}
	return e.putLocked(key, value, expectedVersion, nil)
}

func (e *Engine) putLocked(key string, value []byte, expectedVersion int64, owner *session) (metadata.KV, error) {
	old, exists := e.data[key]
	if expectedVersion != metadata.AnyVersion {
		var cur int64
		if exists {
			cur = old.kv.Version
		}
		if cur != expectedVersion {
			return metadata.KV{}, fmt.Errorf("put %q: expected version %d, found %d: %w", key, expectedVersion, cur, metadata.ErrBadVersion)
		}
	}
	kv := metadata.KV{Key: key, Value: bytes.Clone(value), Version: 1, ModRevision: e.rev + 1}
	if kv.Value == nil {
		kv.Value = []byte{}
	}
	if exists {
		kv.Version = old.kv.Version + 1
	}
	if err := e.commit(Change{Type: metadata.EventPut, KV: kv, Ephemeral: owner != nil}); err != nil {
		return metadata.KV{}, fmt.Errorf("put %q: %w", key, err)
	}
	if exists {
		if old.owner != nil && old.owner != owner {
			delete(old.owner.keys, key)
		}
		old.kv = kv
		old.owner = owner
	} else {
		e.data[key] = &entry{kv: kv, owner: owner}
		i := sort.SearchStrings(e.keys, key)
		e.keys = append(e.keys, "")
		copy(e.keys[i+1:], e.keys[i:])
		e.keys[i] = key
	}
	if owner != nil {
		owner.keys[key] = struct{}{}
	}
	e.hist.append(metadata.Event{Type: metadata.EventPut, KV: kv, Revision: kv.ModRevision})
	return cloneKV(kv), nil
}

// commit persists a change at revision e.rev+1 and advances the revision.
func (e *Engine) commit(c Change) error {
	c.CompactRev = e.hist.compactRev
	if e.persist != nil {
		if err := e.persist.Commit(c); err != nil {
			return err
		}
	}
	e.rev++
	return nil
}

// Delete implements metadata.Store.
func (e *Engine) Delete(ctx context.Context, key string, expectedVersion int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := metadata.ValidateKey(key); err != nil {
		return err
	}
	if expectedVersion < metadata.AnyVersion {
		return fmt.Errorf("delete %q: expected version %d is invalid", key, expectedVersion)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return e.errClosed()
	}
	en, ok := e.data[key]
	if !ok {
		return fmt.Errorf("delete %q: %w", key, metadata.ErrNotFound)
	}
	if expectedVersion != metadata.AnyVersion && en.kv.Version != expectedVersion {
		return fmt.Errorf("delete %q: expected version %d, found %d: %w", key, expectedVersion, en.kv.Version, metadata.ErrBadVersion)
	}
	return e.deleteLocked(key)
}

func (e *Engine) deleteLocked(key string) error {
	en := e.data[key]
	kv := metadata.KV{Key: key, ModRevision: e.rev + 1}
	if err := e.commit(Change{Type: metadata.EventDelete, KV: kv}); err != nil {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	if en.owner != nil {
		delete(en.owner.keys, key)
	}
	delete(e.data, key)
	i := sort.SearchStrings(e.keys, key)
	e.keys = append(e.keys[:i], e.keys[i+1:]...)
	e.hist.append(metadata.Event{Type: metadata.EventDelete, KV: kv, Revision: kv.ModRevision})
	return nil
}

// List implements metadata.Store.
func (e *Engine) List(ctx context.Context, prefix string) ([]metadata.KV, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, 0, e.errClosed()
	}
	var out []metadata.KV
	for i := sort.SearchStrings(e.keys, prefix); i < len(e.keys) && strings.HasPrefix(e.keys[i], prefix); i++ {
		out = append(out, cloneKV(e.data[e.keys[i]].kv))
	}
	return out, e.rev, nil
}

// Revision returns the current store revision.
func (e *Engine) Revision() int64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.rev
}

// watchBatch bounds how many events a watcher copies out per lock acquisition.
const watchBatch = 256

// Watch implements metadata.Store.
func (e *Engine) Watch(ctx context.Context, prefix string, afterRevision int64) (<-chan metadata.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if afterRevision < 0 {
		return nil, fmt.Errorf("watch %q: revision %d is invalid", prefix, afterRevision)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, e.errClosed()
	}
	if afterRevision == 0 {
		afterRevision = e.rev
	}
	out := make(chan metadata.Event, 64)
	e.watchers.Add(1)
	go e.runWatch(ctx, prefix, afterRevision, out)
	return out, nil
}

func (e *Engine) runWatch(ctx context.Context, prefix string, after int64, out chan<- metadata.Event) {
	defer e.watchers.Done()
	defer close(out)
	for {
		e.mu.RLock()
		evs, scanned, compacted, wait := e.hist.since(after, prefix, watchBatch, e.rev)
		compactRev := e.hist.compactRev
		e.mu.RUnlock()
		if compacted {
			err := fmt.Errorf("watch %q from revision %d: history starts after revision %d: %w", prefix, after+1, compactRev, metadata.ErrCompacted)
			select {
			case out <- metadata.Event{Err: err, Revision: compactRev}:
			case <-ctx.Done():
			case <-e.closing:
			}
			return
		}
		for _, ev := range evs {
			ev.KV = cloneKV(ev.KV)
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			case <-e.closing:
				return
			}
		}
		after = scanned
		if wait != nil && len(evs) < watchBatch {
			select {
			case <-wait:
			case <-ctx.Done():
				return
			case <-e.closing:
				return
			}
		}
	}
}

// Health implements metadata.Store.
func (e *Engine) Health(ctx context.Context) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return e.errClosed()
	}
	return ctx.Err()
}

// Close ends every session (removing its keys), stops watches and marks the engine closed. It does
// not close the persister.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	var firstErr error
	for s := range e.sessions {
		if err := e.endSessionLocked(s); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	e.closed = true
	close(e.closing)
	e.mu.Unlock()
	e.watchers.Wait()
	return firstErr
}

// NewSession implements metadata.Store. In process, a session ends only when it or the store is
// closed; ttl is checked for symmetry with etcd but otherwise unused.
func (e *Engine) NewSession(ctx context.Context, ttl time.Duration) (metadata.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("new session: ttl %v must be positive", ttl)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, e.errClosed()
	}
	s := &session{e: e, keys: make(map[string]struct{}), done: make(chan struct{})}
	e.sessions[s] = struct{}{}
	return s, nil
}

func (e *Engine) endSessionLocked(s *session) error {
	if s.ended {
		return nil
	}
	keys := make([]string, 0, len(s.keys))
	for k := range s.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var firstErr error
	for _, k := range keys {
		if err := e.deleteLocked(k); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	s.ended = true
	delete(e.sessions, s)
	close(s.done)
	return firstErr
}

type session struct {
	e     *Engine
	keys  map[string]struct{} // guarded by e.mu
	done  chan struct{}
	ended bool // guarded by e.mu
}

func (s *session) PutEphemeral(ctx context.Context, key string, value []byte) (metadata.KV, error) {
	if err := ctx.Err(); err != nil {
		return metadata.KV{}, err
	}
	if err := metadata.ValidatePut(key, value, metadata.AnyVersion); err != nil {
		return metadata.KV{}, err
	}
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if s.e.closed {
		return metadata.KV{}, s.e.errClosed()
	}
	if s.ended {
		return metadata.KV{}, fmt.Errorf("put ephemeral %q: %w", key, metadata.ErrSessionExpired)
	}
	return s.e.putLocked(key, value, metadata.AnyVersion, s)
}

func (s *session) Done() <-chan struct{} { return s.done }

func (s *session) Close(ctx context.Context) error {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.e.endSessionLocked(s)
}
