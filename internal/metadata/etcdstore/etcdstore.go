// Package etcdstore is a metadata.Store on etcd v3 (servers 3.4 and newer; the client is
// go.etcd.io/etcd/client/v3). Keys live under a prefix (default "/meridian"), so several deployments
// can share one etcd.
//
// Mapping onto etcd:
//   - revisions are etcd's store-wide revisions (shared by every prefix in the cluster); Version is
//     etcd's per-key version, which also restarts at 1 after a delete;
//   - CAS is a single Txn comparing the key's version (0 for "must not exist"), with a keys-only read of
//     the key in the same Txn to return the new Version and ModRevision;
//   - Watch is an etcd watch from afterRevision+1 with the leader required. If the stream ends for any
//     reason other than the caller's context or the store closing (connection lost, leader lost, server
//     restarted) it is opened again from the revision after the last delivered event, with backoff, so
//     nothing is skipped or repeated. A compacted start revision ends the watch with ErrCompacted;
//   - sessions are leases with a keepalive; ephemeral keys are put with the lease. When keepalives fail
//     for longer than the TTL the lease expires on the server, etcd deletes the keys (one revision for
//     all of them) and Done closes;
//   - Health is a linearizable read with a short deadline; watch retries are also reported there.
//
// Nothing here crashes on a broken connection: operations return errors wrapping
// metadata.ErrUnavailable when etcd cannot be reached in time, and watches keep retrying.
package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-mq/meridian/internal/metadata"
)

// Config says how to reach etcd.
type Config struct {
	Endpoints []string
	// Prefix is prepended to every key (default metadata.DefaultEtcdPrefix). "/" stores keys as they are.
	Prefix string
	// DialTimeout bounds connecting (default 5s).
	DialTimeout time.Duration
	// RequestTimeout bounds each operation whose context has no deadline (default 10s).
	RequestTimeout time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Store is a metadata.Store on etcd.
type Store struct {
	client  *clientv3.Client
	prefix  string // "" or "/meridian"; keys are prefix+key
	reqTO   time.Duration
	log     *slog.Logger
	closing chan struct{}
	wg      sync.WaitGroup // watches and session keepalives

	mu       sync.Mutex
	closed   bool
	sessions map[*session]struct{}
	// Watches retrying after a failure, for Health: how many, the latest error, since when.
	failingWatches int
	watchErr       error
	watchErrT      time.Time
}

var _ metadata.Store = (*Store)(nil)

// Open connects to etcd and checks that it answers within ctx (or DialTimeout when ctx has no
// deadline). The returned store retries lost connections by itself.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd metadata store: no endpoints")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = metadata.DefaultEtcdPrefix
	}
	prefix := strings.TrimSuffix(cfg.Prefix, "/")
	if prefix != "" {
		if err := metadata.ValidateKey(prefix); err != nil {
			return nil, fmt.Errorf("etcd metadata store: prefix: %w", err)
		}
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		// Detect dead connections (a peer that vanished without closing) within seconds.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		PermitWithoutStream:  true,
		Logger:               zapToSlog(cfg.Logger.With("component", "etcd-client", "endpoints", strings.Join(cfg.Endpoints, ",")).Handler()),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd metadata store %v: %w", cfg.Endpoints, err)
	}
	s := &Store{
		client:   client,
		prefix:   prefix,
		reqTO:    cfg.RequestTimeout,
		log:      cfg.Logger.With("component", "metadata", "store", "etcd", "endpoints", strings.Join(cfg.Endpoints, ",")),
		closing:  make(chan struct{}),
		sessions: map[*session]struct{}{},
	}
	pctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		pctx, cancel = context.WithTimeout(ctx, cfg.DialTimeout)
	}
	defer cancel()
	if _, err := client.Get(pctx, s.prefix+"/", clientv3.WithCountOnly()); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("etcd metadata store %v does not answer: %w", cfg.Endpoints, errors.Join(metadata.ErrUnavailable, err))
	}
	return s, nil
}

// Client returns the underlying etcd client (for tests and diagnostics).
func (s *Store) Client() *clientv3.Client { return s.client }

// Prefix returns the key prefix inside etcd.
func (s *Store) Prefix() string { return s.prefix }

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func errClosed() error { return fmt.Errorf("etcd metadata store: %w", metadata.ErrClosed) }

// opCtx applies the request timeout when ctx has no deadline, and cancels when the store closes.
func (s *Store) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); !ok {
		return context.WithTimeout(ctx, s.reqTO)
	}
	return context.WithCancel(ctx)
}

// wrap translates etcd and gRPC errors into metadata errors, keeping the original.
func (s *Store) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if s.isClosed() {
		return fmt.Errorf("%s %q: %w", op, key, metadata.ErrClosed)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrTimeout) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) {
		return fmt.Errorf("etcd %s %q: %w", op, key, errors.Join(metadata.ErrUnavailable, err))
	}
	if st, ok := status.FromError(err); ok && (st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded) {
		return fmt.Errorf("etcd %s %q: %w", op, key, errors.Join(metadata.ErrUnavailable, err))
	}
	return fmt.Errorf("etcd %s %q: %w", op, key, err)
}

func (s *Store) full(key string) string { return s.prefix + key }

// rangePrefix is the etcd prefix to range or watch for a metadata prefix. Every key starts with '/',
// so the empty prefix means prefix+"/" (never the sibling "/meridianX").
func (s *Store) rangePrefix(prefix string) string {
	if prefix == "" {
		return s.prefix + "/"
	}
	return s.prefix + prefix
}

func (s *Store) toKV(kv *mvccpb.KeyValue) metadata.KV {
	v := kv.Value
	if v == nil {
		v = []byte{}
	}
	return metadata.KV{Key: strings.TrimPrefix(string(kv.Key), s.prefix), Value: v, Version: kv.Version, ModRevision: kv.ModRevision}
}

// Get implements metadata.Store.
func (s *Store) Get(ctx context.Context, key string) (metadata.KV, error) {
	if err := metadata.ValidateKey(key); err != nil {
		return metadata.KV{}, err
	}
	if s.isClosed() {
		return metadata.KV{}, errClosed()
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.client.Get(ctx, s.full(key))
	if err != nil {
		return metadata.KV{}, s.wrap("get", key, err)
	}
	if len(resp.Kvs) == 0 {
		return metadata.KV{}, fmt.Errorf("get %q: %w", key, metadata.ErrNotFound)
	}
	return s.toKV(resp.Kvs[0]), nil
}

// Put implements metadata.Store.
func (s *Store) Put(ctx context.Context, key string, value []byte, expectedVersion int64) (metadata.KV, error) {
	return s.put(ctx, key, value, expectedVersion, clientv3.NoLease)
}

func (s *Store) put(ctx context.Context, key string, value []byte, expectedVersion int64, lease clientv3.LeaseID) (metadata.KV, error) {
	if err := metadata.ValidatePut(key, value, expectedVersion); err != nil {
		return metadata.KV{}, err
	}
	if s.isClosed() {
		return metadata.KV{}, errClosed()
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	full := s.full(key)
	var conds []clientv3.Cmp
	if expectedVersion != metadata.AnyVersion {
		conds = append(conds, clientv3.Compare(clientv3.Version(full), "=", expectedVersion))
	}
	var putOpts []clientv3.OpOption
	if lease != clientv3.NoLease {
		putOpts = append(putOpts, clientv3.WithLease(lease))
	}
	resp, err := s.client.Txn(ctx).If(conds...).
		Then(clientv3.OpPut(full, string(value), putOpts...), clientv3.OpGet(full, clientv3.WithKeysOnly())).
		Else(clientv3.OpGet(full, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return metadata.KV{}, s.wrap("put", key, err)
	}
	if !resp.Succeeded {
		var cur int64
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			cur = kvs[0].Version
		}
		return metadata.KV{}, fmt.Errorf("put %q: expected version %d, found %d: %w", key, expectedVersion, cur, metadata.ErrBadVersion)
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	if len(kvs) != 1 {
		return metadata.KV{}, fmt.Errorf("etcd put %q: the read inside the transaction returned %d keys", key, len(kvs))
	}
	out := s.toKV(kvs[0])
	out.Value = append([]byte{}, value...)
	return out, nil
}

// Delete implements metadata.Store.
func (s *Store) Delete(ctx context.Context, key string, expectedVersion int64) error {
	if err := metadata.ValidateKey(key); err != nil {
		return err
	}
	if expectedVersion < metadata.AnyVersion {
		return fmt.Errorf("delete %q: expected version %d is invalid", key, expectedVersion)
	}
	if s.isClosed() {
		return errClosed()
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	full := s.full(key)
	cond := clientv3.Compare(clientv3.Version(full), ">", 0)
	if expectedVersion != metadata.AnyVersion {
		cond = clientv3.Compare(clientv3.Version(full), "=", expectedVersion)
	}
	resp, err := s.client.Txn(ctx).If(cond).
		Then(clientv3.OpDelete(full)).
		Else(clientv3.OpGet(full, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return s.wrap("delete", key, err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return fmt.Errorf("delete %q: %w", key, metadata.ErrNotFound)
	}
	return fmt.Errorf("delete %q: expected version %d, found %d: %w", key, expectedVersion, kvs[0].Version, metadata.ErrBadVersion)
}

// List implements metadata.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]metadata.KV, int64, error) {
	if s.isClosed() {
		return nil, 0, errClosed()
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.client.Get(ctx, s.rangePrefix(prefix), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, 0, s.wrap("list", prefix, err)
	}
	var out []metadata.KV
	for _, kv := range resp.Kvs {
		out = append(out, s.toKV(kv))
	}
	return out, resp.Header.Revision, nil
}

// currentRevision reads the store revision with a linearizable request.
func (s *Store) currentRevision(ctx context.Context) (int64, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.client.Get(ctx, s.prefix+"/", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// Health implements metadata.Store: a linearizable read within 2 s, and no watch stuck retrying.
func (s *Store) Health(ctx context.Context) error {
	if s.isClosed() {
		return errClosed()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
	}
	if _, err := s.client.Get(ctx, s.prefix+"/", clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd health: %w", errors.Join(metadata.ErrUnavailable, err))
	}
	s.mu.Lock()
	werr, since := s.watchErr, s.watchErrT
	s.mu.Unlock()
	if werr != nil && time.Since(since) > 5*time.Second {
		return fmt.Errorf("etcd health: a watch has been failing for %v: %w", time.Since(since).Round(time.Second), errors.Join(metadata.ErrUnavailable, werr))
	}
	return nil
}

func (s *Store) watchFailing(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failingWatches == 0 {
		s.watchErrT = time.Now()
	}
	s.failingWatches++
	s.watchErr = err
}

func (s *Store) watchRecovered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failingWatches--
	if s.failingWatches == 0 {
		s.watchErr = nil
	}
}

// Close implements metadata.Store: sessions are revoked (their keys deleted), watches stop, the
// client disconnects.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sessions := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	var errs []error
	for _, ss := range sessions {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := ss.end(ctx, true); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	close(s.closing)
	s.wg.Wait()
	if err := s.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// Revoking may fail when etcd is unreachable; the leases then expire on their own.
		s.log.Warn("closing etcd metadata store", "err", errors.Join(errs...))
	}
	return nil
}
