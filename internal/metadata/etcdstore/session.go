package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-mq/meridian/internal/metadata"
)

// session is an etcd lease kept alive in the background.
type session struct {
	s      *Store
	lease  clientv3.LeaseID
	cancel context.CancelFunc // stops the keepalive
	done   chan struct{}      // closed by the keepalive goroutine when it ends

	mu    sync.Mutex
	ended bool // Close called or the keepalive ended
}

// NewSession implements metadata.Store: it grants a lease of ttl (rounded up to whole seconds, at
// least 1; etcd may raise it to its minimum TTL) and keeps it alive until Close. If keepalives fail
// for longer than the TTL, the lease expires, etcd deletes the ephemeral keys and Done closes.
func (s *Store) NewSession(ctx context.Context, ttl time.Duration) (metadata.Session, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("new session: ttl %v must be positive", ttl)
	}
	if s.isClosed() {
		return nil, errClosed()
	}
	secs := int64(math.Ceil(ttl.Seconds()))
	octx, cancel := s.opCtx(ctx)
	grant, err := s.client.Grant(octx, secs)
	cancel()
	if err != nil {
		return nil, s.wrap("grant lease for", "session", err)
	}
	kctx, kcancel := context.WithCancel(context.Background())
	ch, err := s.client.KeepAlive(kctx, grant.ID)
	if err != nil {
		kcancel()
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = s.client.Revoke(rctx, grant.ID)
		rcancel()
		return nil, s.wrap("keep alive lease for", "session", err)
	}
	ss := &session{s: s, lease: grant.ID, cancel: kcancel, done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		kcancel()
		return nil, errClosed()
	}
	s.sessions[ss] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go ss.keepAlive(ch, time.Duration(grant.TTL)*time.Second)
	return ss, nil
}

// keepAlive drains keepalive responses; the channel closes when the lease expired (or was revoked)
// or the session was closed. When no response comes for most of the lease's TTL (localLeaseEnd), it
// ends the session itself, before etcd expires the lease: a broker holding something by the lease
// (bundle ownership) stops acting on it before another may take it over.
func (ss *session) keepAlive(ch <-chan *clientv3.LeaseKeepAliveResponse, ttl time.Duration) {
	defer ss.s.wg.Done()
	deadline := time.NewTimer(localLeaseEnd(ttl))
	defer deadline.Stop()
	for open := true; open; {
		select {
		case resp, ok := <-ch:
			if !ok {
				open = false
				break
			}
			deadline.Reset(localLeaseEnd(time.Duration(resp.TTL) * time.Second))
		case <-deadline.C:
			ss.s.log.Warn("no keep-alive answer for most of the lease's TTL; the session ends here before etcd expires it",
				"lease", fmt.Sprintf("%x", int64(ss.lease)), "ttl", ttl)
			ss.cancel() // the keepalive stops and ch closes
			for range ch {
			}
			open = false
		}
	}
	ss.mu.Lock()
	expired := !ss.ended
	ss.ended = true
	ss.mu.Unlock()
	if expired {
		ss.s.log.Warn("metadata session expired", "lease", fmt.Sprintf("%x", int64(ss.lease)))
	}
	ss.s.mu.Lock()
	delete(ss.s.sessions, ss)
	ss.s.mu.Unlock()
	close(ss.done)
}

// LeaseID returns the etcd lease behind the session (tests revoke it to simulate expiry).
func (ss *session) LeaseID() clientv3.LeaseID { return ss.lease }

func (ss *session) PutEphemeral(ctx context.Context, key string, value []byte) (metadata.KV, error) {
	ss.mu.Lock()
	ended := ss.ended
	ss.mu.Unlock()
	if ended {
		if ss.s.isClosed() {
			return metadata.KV{}, errClosed()
		}
		return metadata.KV{}, fmt.Errorf("put ephemeral %q: %w", key, metadata.ErrSessionExpired)
	}
	kv, err := ss.s.put(ctx, key, value, metadata.AnyVersion, ss.lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		ss.cancel() // the keepalive ends and Done closes
		return metadata.KV{}, fmt.Errorf("put ephemeral %q: %w", key, errors.Join(metadata.ErrSessionExpired, err))
	}
	return kv, err
}

func (ss *session) Done() <-chan struct{} { return ss.done }

func (ss *session) Close(ctx context.Context) error { return ss.end(ctx, true) }

// end stops the keepalive and revokes the lease, which deletes the session's keys at once.
func (ss *session) end(ctx context.Context, revoke bool) error {
	ss.mu.Lock()
	already := ss.ended
	ss.ended = true
	ss.mu.Unlock()
	if already {
		return nil
	}
	var err error
	if revoke {
		rctx, cancel := ss.s.opCtx(ctx)
		_, err = ss.s.client.Revoke(rctx, ss.lease)
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			err = nil // already expired: the keys are gone
		}
	}
	ss.cancel()
	select {
	case <-ss.done:
	case <-ctx.Done():
	}
	if err != nil {
		return fmt.Errorf("closing metadata session: revoking lease %x (it expires by itself after its TTL): %w", int64(ss.lease), ss.s.wrap("revoke", "session", err))
	}
	return nil
}

// localLeaseEnd is how long after a keep-alive answer granting ttl the session counts as ended on
// this side: four fifths of ttl. etcd counts the lease from a renewal no later than the answer, so
// the session ends here a fifth of the TTL (less the answer's delay) before etcd expires it.
func localLeaseEnd(ttl time.Duration) time.Duration { return ttl - ttl/5 }
