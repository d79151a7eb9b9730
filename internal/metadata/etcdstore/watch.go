package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-mq/meridian/internal/metadata"
)

const (
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// Watch implements metadata.Store.
func (s *Store) Watch(ctx context.Context, prefix string, afterRevision int64) (<-chan metadata.Event, error) {
	if afterRevision < 0 {
		return nil, fmt.Errorf("watch %q: revision %d is invalid", prefix, afterRevision)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, errClosed()
	}
	if afterRevision == 0 {
		rev, err := s.currentRevision(ctx)
		if err != nil {
			return nil, s.wrap("watch", prefix, err)
		}
		afterRevision = rev
	}
	out := make(chan metadata.Event, 64)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed()
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go s.runWatch(ctx, prefix, afterRevision, out)
	return out, nil
}

// runWatch owns one metadata watch: it (re)opens etcd watches from the revision after the last
// delivered event until ctx ends, the store closes, or the start revision is compacted.
func (s *Store) runWatch(ctx context.Context, prefix string, after int64, out chan<- metadata.Event) {
	defer s.wg.Done()
	defer close(out)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // ends with wctx (cancelled on return)
		select {
		case <-s.closing:
			cancel()
		case <-wctx.Done():
		}
	}()

	backoff := watchRetryMin
	failing := false // this watch is counted in the store's failing watches (Health)
	defer func() {
		if failing {
			s.watchRecovered()
		}
	}()
	for {
		if wctx.Err() != nil {
			return
		}
		wch := s.client.Watch(clientv3.WithRequireLeader(wctx), s.rangePrefix(prefix),
			clientv3.WithPrefix(), clientv3.WithRev(after+1), clientv3.WithCreatedNotify())
		var failure error
		for resp := range wch {
			if resp.CompactRevision != 0 {
				err := fmt.Errorf("watch %q from revision %d: etcd compacted up to revision %d: %w", prefix, after+1, resp.CompactRevision, metadata.ErrCompacted)
				s.log.Warn("metadata watch ended", "prefix", prefix, "err", err)
				select {
				case out <- metadata.Event{Err: err, Revision: resp.CompactRevision}:
				case <-wctx.Done():
				}
				return
			}
			if err := resp.Err(); err != nil {
				failure = err
				break
			}
			for _, ev := range resp.Events {
				rev := ev.Kv.ModRevision
				if rev <= after {
					continue // already delivered before a reconnect (defensive; etcd resumes exactly)
				}
				me := metadata.Event{Revision: rev, KV: s.toKV(ev.Kv)}
				if ev.Type == mvccpb.DELETE {
					me.Type = metadata.EventDelete
					me.KV = metadata.KV{Key: me.KV.Key, ModRevision: rev}
				} else {
					me.Type = metadata.EventPut
				}
				select {
				case out <- me:
				case <-wctx.Done():
					return
				}
			}
			if n := len(resp.Events); n > 0 {
				after = resp.Events[n-1].Kv.ModRevision
			}
			if resp.Created && failing {
				// Established again after a failure.
				failing = false
				s.watchRecovered()
				backoff = watchRetryMin
			}
		}
		if wctx.Err() != nil {
			return
		}
		if failure == nil {
			failure = errors.New("watch stream closed")
		}
		if !failing {
			failing = true
			s.watchFailing(failure)
		}
		s.log.Warn("metadata watch interrupted; resuming", "prefix", prefix, "from_revision", after+1, "retry_in", backoff, "err", failure)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-wctx.Done():
			t.Stop()
			return
		}
		backoff = min(backoff*2, watchRetryMax)
	}
}
