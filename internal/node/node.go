// Package node is Meridian's composition root: it builds one broker — storage engine, metadata
// stores, catalog, broker core, binary-protocol server and admin HTTP listener — from an Options
// struct, runs the first-start/every-start bootstrap, reports readiness and shuts everything down in
// order. cmd/meridian, brokertest and tests use it; nothing else constructs these pieces.
//
// Start order: bind the configured listeners, plaintext and TLS (tls.go; so a port in use fails
// before the data dir is touched), read the authentication keys (authn.go), lock and bind the data
// dir, serve the web listeners (they answer /admin/v2/brokers/ready with 503 from the first
// moment), recover storage, open the metadata stores, bootstrap the catalog (own cluster entry,
// tenant public, namespace public/default if absent), build the broker, start serving the binary
// protocol, then mark the node ready.
//
// Close order is the reverse: not ready, stop accepting, tell clients (CLOSE_PRODUCER /
// CLOSE_CONSUMER, then close connections), close the broker (cursors flushed), storage, metadata
// stores, the web listener, and release the data dir lock. Close is bounded by
// Options.ShutdownTimeout (5 s by default).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/auth"
)

// Node is one running broker.
type Node struct {
	opts Options
	log  *slog.Logger

	lock     *dataDirLock
	brokerLn net.Listener
	webLn    net.Listener
	web      *http.Server
	mux      *http.ServeMux

	serviceURL string // pulsar://advertised:port, or empty without a plaintext binary listener
	webURL     string // http://advertised:port, or empty without a plaintext web listener
	tls        tlsListeners
	authn      *auth.Authenticator // nil without authentication (authn.go)
	authz      *auth.Authorizer    // nil without authorization (authn.go)

	// notReady is nil when the node is ready, else the reason it is not.
	notReady atomic.Pointer[error]

	healthMu  sync.Mutex // guards the cached metadata store check
	healthAt  time.Time
	healthErr error

	components components // the pieces built in Start, closed in Close (compose.go)

	done      chan error // receives at most one fatal error, then is closed by Close
	fatalOnce sync.Once
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup

	// fresh is what this start created in the data dir; a start that fails removes it again, so a
	// failed first start leaves no LOCK and no cluster.json binding the dir to its cluster.
	fresh       freshPaths
	startFailed bool
}

// Start builds and starts a node. It returns once the node is ready (or failed); ctx bounds the
// startup only. On failure everything already started is stopped again.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	n := &Node{opts: opts, log: opts.Logger, done: make(chan error, 1)}
	if n.log == nil {
		n.log = slog.Default()
	}
	n.log = n.log.With("component", "node")
	n.setNotReady(errors.New("starting"))
	if err := n.start(ctx); err != nil {
		n.startFailed = true
		began := time.Now()
		if serr := n.shutdown(); serr != nil {
			n.log.Error("stopping after a failed start", "err", serr)
		}
		n.log.Error("start failed", "cluster", opts.Cluster, "dataDir", opts.DataDir, "err", err,
			"stoppedIn", time.Since(began).Round(time.Millisecond))
		return nil, err
	}
	n.setNotReady(nil)
	n.log.Info("broker ready", "cluster", opts.Cluster, "serviceUrl", n.serviceURL, "webServiceUrl", n.webURL,
		"serviceUrlTls", n.tls.serviceURL, "webServiceUrlTls", n.tls.webURL,
		"fsync", string(opts.Fsync), "maxMessageSize", opts.MaxMessageSize, "dedup", opts.Dedup,
		"autoTopicCreation", opts.AutoTopicCreation)
	if opts.Fsync == FsyncInterval {
		n.log.Warn("--fsync=interval: messages are acknowledged before fsync; a machine crash can lose acknowledged messages")
	}
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	var err error
	if n.opts.BrokerAddr != "" {
		if n.brokerLn, err = net.Listen("tcp", n.opts.BrokerAddr); err != nil {
			return fmt.Errorf("listen on --broker-addr %s: %w", n.opts.BrokerAddr, err)
		}
		n.serviceURL = hostPortURL("pulsar", advertisedHost(n.opts.AdvertisedAddress, n.brokerLn.Addr()), n.brokerLn.Addr())
	}
	if n.opts.WebAddr != "" {
		if n.webLn, err = net.Listen("tcp", n.opts.WebAddr); err != nil {
			return fmt.Errorf("listen on --web-addr %s: %w", n.opts.WebAddr, err)
		}
		n.webURL = hostPortURL("http", advertisedHost(n.opts.AdvertisedAddress, n.webLn.Addr()), n.webLn.Addr())
	}
	if err := n.listenTLS(); err != nil {
		return err
	}
	if err := n.buildAuthenticator(); err != nil {
		return err
	}
	n.fresh = missingDataDirPaths(n.opts.DataDir)
	if n.lock, err = lockDataDir(n.opts.DataDir); err != nil {
		n.fresh = freshPaths{} // not ours: another process may hold it
		return err
	}
	if err := bindDataDir(n.opts.DataDir, n.opts.Cluster); err != nil {
		return err
	}

	// The web listener serves from the first moment so that probes get a 503 with the reason while
	// storage recovers, instead of a refused connection.
	n.mux = http.NewServeMux()
	n.mux.HandleFunc("GET /admin/v2/brokers/ready", n.serveReady)
	// Request bodies are bounded by the admin API (admin.Config.MaxBodyBytes, 413 beyond); the
	// timeouts bound how long a slow client may hold a connection while sending its request, and
	// how long an idle keep-alive connection stays open.
	n.web = &http.Server{Handler: n.webHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: webReadTimeout, IdleTimeout: webIdleTimeout,
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)}
	for name, ln := range map[string]net.Listener{"web listener": n.webLn, "web TLS listener": n.tlsWebListener()} {
		if ln == nil {
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.web.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.fatal(fmt.Errorf("%s: %w", name, err))
			}
		}()
	}

	return n.compose(ctx)
}

// Cluster is this node's cluster name.
func (n *Node) Cluster() string { return n.opts.Cluster }

// ServiceURL is the advertised binary-protocol URL, pulsar://host:port, or empty without a
// plaintext binary listener.
func (n *Node) ServiceURL() string { return n.serviceURL }

// WebURL is the advertised admin URL, http://host:port, or empty without a plaintext web
// listener.
func (n *Node) WebURL() string { return n.webURL }

// BrokerAddr is the address the plaintext binary-protocol listener is bound to; nil without one.
func (n *Node) BrokerAddr() net.Addr {
	if n.brokerLn == nil {
		return nil
	}
	return n.brokerLn.Addr()
}

// WebAddr is the address the plaintext web listener is bound to; nil without one.
func (n *Node) WebAddr() net.Addr {
	if n.webLn == nil {
		return nil
	}
	return n.webLn.Addr()
}

// Options returns the validated options the node runs with.
func (n *Node) Options() Options { return n.opts }

// Ready returns nil when the node serves, or why it does not.
func (n *Node) Ready() error {
	if p := n.notReady.Load(); p != nil {
		return *p
	}
	return nil
}

func (n *Node) setNotReady(reason error) {
	if reason == nil {
		n.notReady.Store(nil)
		return
	}
	n.notReady.Store(&reason)
}

// Done delivers a fatal error (a listener died) at most once; it is closed by Close.
func (n *Node) Done() <-chan error { return n.done }

func (n *Node) fatal(err error) {
	n.fatalOnce.Do(func() {
		n.log.Error("fatal error", "err", err)
		n.done <- err
	})
}

// webShutdownGrace is how long shutdown waits for admin requests in flight.
const webShutdownGrace = time.Second

// storeHealthTimeout bounds the configuration store check of a readiness probe.
const storeHealthTimeout = time.Second

// Healthy is Ready plus the storage engine's health (Engine.Health: a full disk or I/O errors it
// is recovering from) and a live check of the metadata stores: an unreachable etcd makes the node
// unready (new topics, policy changes and lookups of new namespaces would fail), even though the
// catalog keeps serving its cache.
func (n *Node) Healthy(ctx context.Context) error {
	if err := n.Ready(); err != nil {
		return err
	}
	// Storage failing closed (disk full, I/O errors) makes the node unready until it has recovered
	// by itself: publishes fail meanwhile.
	if e := n.components.engine; e != nil {
		if err := e.Health(); err != nil {
			return err
		}
	}
	// Probes and dashboards may ask often; the store check is a round trip to etcd.
	n.healthMu.Lock()
	defer n.healthMu.Unlock()
	if time.Since(n.healthAt) < healthCacheFor {
		return n.healthErr
	}
	n.healthErr = n.checkStores(ctx)
	n.healthAt = time.Now()
	return n.healthErr
}

// healthCacheFor is how long a metadata store check is reused.
const healthCacheFor = time.Second

func (n *Node) checkStores(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, storeHealthTimeout)
	defer cancel()
	c := &n.components
	if c.configStore != nil {
		if err := c.configStore.Health(ctx); err != nil {
			return fmt.Errorf("configuration store: %w", err)
		}
	}
	if c.localStore != nil && c.localStore != c.configStore {
		if err := c.localStore.Health(ctx); err != nil {
			return fmt.Errorf("local metadata store: %w", err)
		}
	}
	if c.catalog != nil {
		if err := c.catalog.Health(); err != nil {
			return fmt.Errorf("catalog: %w", err)
		}
	}
	return nil
}

func (n *Node) serveReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := n.Healthy(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Close shuts the node down gracefully within Options.ShutdownTimeout. Safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		began := time.Now()
		n.closeErr = n.shutdown()
		n.log.Info("stopped", "took", time.Since(began).Round(time.Millisecond), "err", n.closeErr)
		n.fatalOnce.Do(func() {}) // no fatal error is reported after Close
		close(n.done)
	})
	return n.closeErr
}

// shutdown stops whatever start got to, in reverse order. After a failed start it also removes what
// that start created in the data dir: the files while the lock is still held, the dir after.
func (n *Node) shutdown() error {
	n.setNotReady(errors.New("shutting down"))
	if c := &n.components; c.member != nil && c.replication != nil && c.server != nil && n.opts.HandOverTimeout > 0 {
		// Before anything stops: the bundles move to the other brokers, so their clients go on.
		// It has its own bound; the shutdown's starts after it.
		if c.shedStop != nil {
			c.shedStop()
		}
		hoCtx, cancel := context.WithTimeout(context.Background(), n.opts.HandOverTimeout)
		n.handOverAll(hoCtx)
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ShutdownTimeout)
	defer cancel()
	var errs []error
	if n.brokerLn != nil && n.components.server == nil {
		_ = n.brokerLn.Close() // never served; the server closes it otherwise
	}
	n.closeUnservedTLS()
	errs = append(errs, n.components.close(ctx, n.log))
	if n.web != nil {
		// A short grace for requests in flight; then close what is left. http.Server.Shutdown counts
		// accepted connections that never sent a request (a client transport's speculative dial) as
		// active, so waiting for all of them could use up the whole shutdown budget for nothing.
		graceCtx, cancel := context.WithTimeout(ctx, webShutdownGrace)
		if err := n.web.Shutdown(graceCtx); err != nil {
			_ = n.web.Close()
		}
		cancel()
	} else {
		for _, ln := range []net.Listener{n.webLn, n.tls.web} {
			if ln != nil {
				_ = ln.Close()
			}
		}
	}
	n.wg.Wait()
	if n.startFailed {
		errs = append(errs, n.fresh.removeFiles())
	}
	errs = append(errs, n.lock.release())
	if n.startFailed {
		n.fresh.removeDir()
	}
	return errors.Join(errs...)
}
