// Package admin serves Meridian's admin REST API: Pulsar's `/admin/v2` (clusters, tenants, namespaces
// and their policies, topics, subscriptions, topic-level policies, schemas, brokers and their dynamic
// configuration), `/lookup/v2/topic/...` and `/metrics`, as one http.Handler built on net/http's
// ServeMux patterns. docs/admin.md lists every endpoint.
//
// Answers follow Pulsar's conventions so that pulsaradmin, pulsar-admin and dashboards work unchanged:
// JSON with Pulsar's field names (package adminapi), 204 for successful writes, errors as
// {"reason": "..."} with Pulsar's statuses (404 missing, 409 duplicate or not empty, 412 invalid value
// or reference, 403 replication to a cluster not registered or not allowed, 400 malformed JSON, 413 body
// over Config.MaxBodyBytes); field names a body's type does not define are ignored, as Pulsar does. An
// unset policy reads as an empty 204 answer.
//
// Clusters, tenants, namespaces and all policies live in the configuration store through
// internal/catalog; topic and subscription operations go to a TopicService that internal/node adapts
// from the broker (this package never imports the broker). Partitioned topics are handled here: the
// metadata is in the catalog and every per-topic operation fans out to the partitions.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/schema"
)

// DefaultMaxBodyBytes bounds request bodies (a policy document is a few KiB; the store's values are
// at most metadata.MaxValueSize).
const DefaultMaxBodyBytes = 1 << 20

// Config configures a Handler.
type Config struct {
	// Cluster is the name of the cluster this broker belongs to (required). New namespaces without a
	// replication list replicate to it only; per-cluster rate maps are read and written under it.
	Cluster string
	// Catalog is the configuration store view (required).
	Catalog *catalog.Catalog
	// Topics serves topic and subscription operations. If nil they answer 503.
	Topics TopicService
	// Schemas is the schema registry behind /admin/v2/schemas (the one the binary protocol uses). If
	// nil those endpoints answer 503.
	Schemas *schema.Registry
	// Ready reports whether the broker is ready (storage recovered, bootstrap done, listeners up);
	// /admin/v2/brokers/ready and /health answer 503 with its error. nil means always ready.
	Ready func(ctx context.Context) error
	// Registry is served on /metrics, followed by the topic families the handler reads from topic
	// stats at scrape time (metricsexpo.go). nil: the topic families only.
	Registry *prometheus.Registry
	// HideTopicLevelMetrics turns Pulsar's exposeTopicLevelMetricsInPrometheus off: /metrics then
	// has namespace aggregates instead of per-topic series (for brokers with many topics).
	HideTopicLevelMetrics bool
	// Logger; nil uses slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds request bodies (default DefaultMaxBodyBytes); larger bodies get 413.
	MaxBodyBytes int64
	// AutoTopicCreation is the broker default (--auto-topic-creation). The broker-wide default
	// creates non-partitioned topics, so today only a namespace's autoTopicCreation override (type
	// partitioned) makes `GET .../partitions?checkAllowAutoCreation=true` create partitioned metadata,
	// whatever this value; it is kept for a broker-wide partitioned default.
	AutoTopicCreation bool
	// ReplicationApplied, if set, is called after a write that changes the replication clusters of
	// namespace ns (or of a topic in it) and before the answer, so the replicators and their cursors
	// exist when the caller publishes next. Its error is logged, not returned: the policy is stored and
	// the replication manager retries in the background.
	ReplicationApplied func(ctx context.Context, ns string) error
	// Authorizer, if set, checks every route against routePermissions (authz.go) with the role of
	// the request's identity (auth.IdentityFrom). nil: every request is served (authorization off).
	Authorizer *auth.Authorizer
	// Ownership, if set, makes this broker one of several serving its cluster: topic routes are
	// served by the topic's owner, others answer 307 to it (ownership.go).
	Ownership Ownership
}

// Handler is the admin API. Create with NewHandler.
type Handler struct {
	cfg Config
	cat *catalog.Catalog
	log *slog.Logger
	mux *http.ServeMux
	// patterns are the registered route patterns, unlisted those without a permission entry.
	patterns, unlisted []string
	gatherer           prometheus.Gatherer // the registry behind /metrics (broker-stats/metrics)
}

// NewHandler builds the API.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Cluster == "" {
		return nil, errors.New("admin: Config.Cluster is required")
	}
	if cfg.Catalog == nil {
		return nil, errors.New("admin: Config.Catalog is required")
	}
	if _, err := permissionTable(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	h := &Handler{cfg: cfg, cat: cfg.Catalog, log: cfg.Logger.With("component", "admin"), mux: http.NewServeMux()}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	// The topic families are written after the registry's (metricsexpo.go); registering their
	// names keeps the registry from taking another collector's family of the same name, which
	// would make the page unparseable.
	if err := reg.Register(familyNames{topicLevel: !cfg.HideTopicLevelMetrics}); err != nil {
		return nil, fmt.Errorf("admin: registering metrics: %w", err)
	}
	h.gatherer = reg
	h.routes()
	h.profilingRoutes()
	h.handOverRoutes()
	return h, nil
}

// Close releases the handler's resources (none held today; kept for the node's lifecycle).
func (h *Handler) Close() error { return nil }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// apiFunc is an endpoint: it writes a success answer itself or returns an error that wrap turns into
// Pulsar's error answer.
type apiFunc func(w http.ResponseWriter, r *http.Request) error

// handle registers an endpoint. Its permission comes from the permission table (routes_authz.go);
// a pattern without an entry is served to superusers only and listed by UnlistedRoutes, which a
// test requires to be empty.
func (h *Handler) handle(pattern string, fn apiFunc) {
	h.patterns = append(h.patterns, pattern)
	h.mux.Handle(pattern, h.guard(pattern, h.ownerOnly(pattern, h.wrap(fn))))
}

func (h *Handler) wrap(fn apiFunc) http.Handler { return h.wrapBounded(fn, h.cfg.MaxBodyBytes) }

// wrapBounded is wrap with its own bound of the request body (<0: none, for a streamed body the
// endpoint reads piece by piece).
func (h *Handler) wrapBounded(fn apiFunc, maxBody int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if maxBody >= 0 {
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				h.log.Error("admin handler panic", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				writeError(w, http.StatusInternalServerError, "internal error")
			}
		}()
		start := time.Now()
		if err := fn(w, r); err != nil {
			status, reason := h.classify(err)
			if status >= 500 && status != http.StatusServiceUnavailable {
				h.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
			} else if status >= 500 {
				h.log.Warn("admin request refused", "method", r.Method, "path", r.URL.Path, "status", status, "reason", reason)
			} else {
				h.log.Debug("admin request refused", "method", r.Method, "path", r.URL.Path, "status", status, "reason", reason)
			}
			writeError(w, status, reason)
			return
		}
		h.log.Debug("admin request", "method", r.Method, "path", r.URL.Path, "took", time.Since(start))
	})
}

// apiError is an answer decided by the handler itself.
type apiError struct {
	status int
	reason string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.reason) }

func fail(status int, format string, args ...any) error {
	return &apiError{status: status, reason: fmt.Sprintf(format, args...)}
}

// classify maps an error to Pulsar's status and reason.
func (h *Handler) classify(err error) (int, string) {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status, ae.reason
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body larger than %d bytes", mbe.Limit)
	}
	var ce *catalog.Error
	if errors.As(err, &ce) {
		switch ce.Kind {
		case catalog.ErrNotFound:
			return http.StatusNotFound, ce.Msg
		case catalog.ErrAlreadyExists, catalog.ErrConflict:
			return http.StatusConflict, ce.Msg
		case catalog.ErrPrecondition:
			return http.StatusPreconditionFailed, ce.Msg
		case catalog.ErrForbidden:
			return http.StatusForbidden, ce.Msg
		case catalog.ErrInvalid:
			return http.StatusBadRequest, ce.Msg
		}
	}
	for _, m := range []struct {
		sentinel error
		status   int
	}{
		{ErrTopicNotFound, http.StatusNotFound},
		{ErrSubscriptionNotFound, http.StatusNotFound},
		{ErrMessageNotFound, http.StatusNotFound},
		{ErrTopicExists, http.StatusConflict},
		{ErrSubscriptionExists, http.StatusConflict},
		{ErrTopicBusy, http.StatusPreconditionFailed},
		{ErrSubscriptionBusy, http.StatusPreconditionFailed},
		{ErrInvalidArgument, http.StatusPreconditionFailed},
		{ErrNotSupported, http.StatusNotImplemented},
		{ErrNotReady, http.StatusServiceUnavailable},
	} {
		if errors.Is(err, m.sentinel) {
			// The sentinel's text is Pulsar's reason; the wrapped detail follows it when useful.
			return m.status, reasonOf(err, m.sentinel)
		}
	}
	if errors.Is(err, metadata.ErrUnavailable) || errors.Is(err, metadata.ErrClosed) {
		return http.StatusServiceUnavailable, "Configuration store unavailable: " + err.Error()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable, "Request timed out or was cancelled: " + err.Error()
	}
	return http.StatusInternalServerError, err.Error()
}

// reasonOf returns the sentinel's text, which is what Pulsar's clients match on, unless the wrapping
// added nothing but context prefixes; the full chain is logged separately.
func reasonOf(err, sentinel error) string {
	s := err.Error()
	if strings.HasSuffix(s, sentinel.Error()) {
		return sentinel.Error()
	}
	return s
}

func writeError(w http.ResponseWriter, status int, reason string) {
	writeJSON(w, status, map[string]string{"reason": reason})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"reason":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// ok answers 200 with a JSON value.
func ok(w http.ResponseWriter, v any) error {
	writeJSON(w, http.StatusOK, v)
	return nil
}

// noContent answers 204 (Pulsar's answer to writes, and to reads of unset values).
func noContent(w http.ResponseWriter) error {
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// readBody reads the whole (size-limited) request body.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, fail(http.StatusBadRequest, "Reading the request body failed: %v", err)
	}
	return b, nil
}

// decodeBody strictly decodes the body into v; an empty body is refused.
func decodeBody(r *http.Request, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeBytes(b, v)
}

func decodeBytes(b []byte, v any) error {
	if err := adminapi.DecodeBody(b, v); err != nil {
		if errors.Is(err, adminapi.ErrEmptyBody) {
			return fail(http.StatusBadRequest, "Request body is empty; a JSON value is required")
		}
		return fail(http.StatusBadRequest, "%v", err)
	}
	return nil
}

// replicationApplied runs Config.ReplicationApplied for namespace ns, logging its failure.
func (h *Handler) replicationApplied(r *http.Request, ns string) {
	if h.cfg.ReplicationApplied == nil {
		return
	}
	if err := h.cfg.ReplicationApplied(r.Context(), ns); err != nil {
		h.log.Warn("replicators not yet in step with the new replication clusters; retrying in the background", "namespace", ns, "err", err)
	}
}
