// Package metadata defines Meridian's metadata store: a small, versioned key-value store with
// compare-and-swap writes, prefix listing, ordered prefix watches and sessions that own ephemeral keys.
//
// Three implementations share one contract (checked by the conformance suite in
// internal/metadata/storetest):
//
//   - internal/metadata/memstore: in memory, for tests;
//   - internal/metadata/localstore: a bbolt file in the data dir, the default;
//   - internal/metadata/etcdstore: etcd v3 (3.4 or newer), for a configuration store shared by clusters.
//
// Use internal/metadata/stores.Open to open one from a URL ("etcd://h1:2379,h2:2379/prefix" or the
// local default).
//
// # Keys
//
// Keys are '/'-separated paths that start with '/', such as "/admin/clusters/east". List and Watch take
// a plain byte prefix: "/admin/clusters/" matches the children (and deeper descendants) of
// "/admin/clusters"; "/admin/clusters" would also match "/admin/clustersX". The empty prefix matches
// every key. See docs/metadata.md for the layout conventions.
//
// # Versions and revisions
//
// Every store keeps a store-wide revision that increases by one (or more) with every change; a fresh
// store is at revision 1 or higher, never 0. Each key has a Version: 1 when it is created, +1 for
// every later put; deleting the key and creating it again starts at 1 again. ModRevision is the store
// revision at which the key last changed.
//
// Put and Delete take an expectedVersion: AnyVersion writes unconditionally, 0 means "the key must not
// exist" (create), and n > 0 means "the key's current version must be n". A failed condition returns
// ErrBadVersion (also for Put with n > 0 on a missing key). Delete of a missing key returns ErrNotFound.
//
// # Watches
//
// Watch delivers every change under a prefix with Revision > afterRevision, in revision order, without
// gaps. afterRevision 0 means "from the current revision on" (only future changes). The usual pattern is
// List, then Watch from the revision List returned: together they see every state without a gap.
// Several events may share one revision when one atomic change touched several keys (for example an
// etcd lease expiring); revisions never go backwards. A watch that cannot continue without a gap (its
// start revision was compacted away) ends with one event whose Err wraps ErrCompacted; the caller then
// re-lists.
package metadata

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Errors returned by every Store implementation. Implementations wrap them with context; test with
// errors.Is.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("metadata: key not found")
	// ErrBadVersion: a compare-and-swap condition failed (the key's version differs from the expected
	// one, or the key exists when creating).
	ErrBadVersion = errors.New("metadata: version conflict")
	// ErrClosed: the store (or session) has been closed.
	ErrClosed = errors.New("metadata: store closed")
	// ErrSessionExpired: the session has expired or was closed; its ephemeral keys are gone.
	ErrSessionExpired = errors.New("metadata: session expired")
	// ErrCompacted: a watch asked for revisions the store no longer keeps.
	ErrCompacted = errors.New("metadata: revision compacted")
	// ErrInvalidKey: the key is not a valid path.
	ErrInvalidKey = errors.New("metadata: invalid key")
	// ErrUnavailable: the store cannot be reached (etcd down or unreachable); reported by Health and
	// by operations that time out for that reason.
	ErrUnavailable = errors.New("metadata: store unavailable")
)

// AnyVersion as expectedVersion makes Put and Delete unconditional. expectedVersion 0 means "must not
// exist" (create); n > 0 means "current version must be n".
const AnyVersion int64 = -1

// MaxValueSize is the largest value every implementation accepts (etcd's default request limit is
// 1.5 MiB, and the key and framing must fit too).
const MaxValueSize = 1 << 20

// KV is one key with its value and versions.
type KV struct {
	Key         string
	Value       []byte
	Version     int64 // per key: 1 on create, +1 per put
	ModRevision int64 // store-wide revision of the last change
}

// EventType says what happened to a key.
type EventType int

const (
	// EventPut: the key was created or updated; Event.KV holds the new value.
	EventPut EventType = iota + 1
	// EventDelete: the key was deleted (explicitly or because its session ended); Event.KV holds only
	// Key and ModRevision.
	EventDelete
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "PUT"
	case EventDelete:
		return "DELETE"
	default:
		return fmt.Sprintf("EventType(%d)", int(t))
	}
}

// Event is one change delivered by Watch.
type Event struct {
	Type     EventType
	KV       KV    // for deletes: Key and ModRevision
	Revision int64 // store revision of the change (== KV.ModRevision)
	// Err is set on the last event when the watch fails unrecoverably (for example ErrCompacted); the
	// channel then closes. Type and KV are zero in that event.
	Err error
}

// Store is a versioned key-value store with watches and sessions. All methods are safe for concurrent
// use. After Close every method returns an error wrapping ErrClosed and open watch channels close.
type Store interface {
	// Get returns the key, or ErrNotFound.
	Get(ctx context.Context, key string) (KV, error)
	// Put writes value under key if expectedVersion matches (see AnyVersion) and returns the new KV.
	// A plain Put on an ephemeral key makes it persistent again (it no longer belongs to a session).
	Put(ctx context.Context, key string, value []byte, expectedVersion int64) (KV, error)
	// Delete removes the key if expectedVersion matches; ErrNotFound if it does not exist.
	Delete(ctx context.Context, key string, expectedVersion int64) error
	// List returns the keys starting with prefix, sorted by key, plus the store revision it reflects.
	List(ctx context.Context, prefix string) ([]KV, int64, error)
	// Watch delivers, in order and without gaps, every change under prefix with Revision > afterRevision.
	// The channel closes when ctx ends or after an Err event. Transient connection loss is retried inside.
	Watch(ctx context.Context, prefix string, afterRevision int64) (<-chan Event, error)
	// NewSession starts a session whose ephemeral keys are removed when it ends. ttl bounds how long
	// the session survives after its owner stops refreshing it (etcd lease TTL, whole seconds, at least
	// one second); in-process stores end sessions only on Close (of the session or of the store).
	NewSession(ctx context.Context, ttl time.Duration) (Session, error)
	// Health returns nil when the store is usable, or an error (wrapping ErrUnavailable or ErrClosed)
	// saying why not. It is cheap enough for a readiness probe.
	Health(ctx context.Context) error
	// Close releases the store: sessions end, watches close. It is safe to call more than once.
	Close() error
}

// Session owns ephemeral keys.
type Session interface {
	// PutEphemeral writes key unconditionally and attaches it to the session: it is removed when the
	// session ends. Returns ErrSessionExpired once the session has ended.
	PutEphemeral(ctx context.Context, key string, value []byte) (KV, error)
	// Done is closed when the session expires or is closed. A store whose sessions are leases on a
	// server (etcd) also closes it when it has had no keep-alive answer for most of the TTL, before
	// the server expires the lease: whoever acts on the session stops before others may take over.
	Done() <-chan struct{}
	// Close ends the session and removes its ephemeral keys. Safe to call more than once.
	Close(ctx context.Context) error
}

// ValidateKey reports whether key is a usable key: it starts with '/', is longer than "/", does not end
// with '/', has no empty segments ("//"), is valid UTF-8 and contains no NUL or control characters.
func ValidateKey(key string) error {
	if len(key) < 2 || key[0] != '/' {
		return fmt.Errorf("%w: %q must start with '/' and name something", ErrInvalidKey, key)
	}
	if strings.HasSuffix(key, "/") {
		return fmt.Errorf("%w: %q ends with '/'", ErrInvalidKey, key)
	}
	if strings.Contains(key, "//") {
		return fmt.Errorf("%w: %q has an empty segment", ErrInvalidKey, key)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidKey, key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %q contains a control character", ErrInvalidKey, key)
		}
	}
	return nil
}

// ValidatePut checks the arguments of a Put: a valid key, a value within MaxValueSize and an
// expectedVersion that is AnyVersion or >= 0.
func ValidatePut(key string, value []byte, expectedVersion int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if len(value) > MaxValueSize {
		return fmt.Errorf("metadata: value for %q is %d bytes, over the %d byte limit", key, len(value), MaxValueSize)
	}
	if expectedVersion < AnyVersion {
		return fmt.Errorf("metadata: expected version %d for %q is invalid", expectedVersion, key)
	}
	return nil
}
