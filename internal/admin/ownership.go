package admin

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/naming"
)

// Ownership places topics on the brokers of a cluster of several (docs/cluster.md); internal/node
// adapts the cluster coordinator to it. Without it (nil) this broker serves every topic.
type Ownership interface {
	// TopicOwner says who serves topic, assigning its bundle first when nobody owns it; it may
	// hold while the bundle has no live owner, then fails with an error wrapping ErrNotReady
	// (503, as Pulsar answers for a bundle in transition).
	TopicOwner(ctx context.Context, topic naming.TopicName) (TopicOwner, error)
	// BundleRange is the name of the topic's bundle range ("0x00000000_0x40000000").
	BundleRange(topic naming.TopicName) string
	// BundleOwner says who serves a namespace bundle ("0x00000000_0x40000000"), like TopicOwner.
	BundleOwner(ctx context.Context, ns naming.NamespaceName, bundle string) (TopicOwner, error)
	// Brokers lists the cluster's live brokers by web host:port, sorted.
	Brokers() []string
	// Topics lists the persistent topics of a namespace on every broker of the cluster.
	Topics(ctx context.Context, ns naming.NamespaceName) ([]string, error)
	// UnloadBundle is a bundle's unload on its owner: it hands the bundle over to destination (a
	// broker id or web host:port; empty: the least-loaded other live broker) or, with no other
	// broker live, closes its topics.
	UnloadBundle(ctx context.Context, ns naming.NamespaceName, bundle, destination string) error
	// AcceptHandOver stores one topic's ledger streamed by a bundle's owner handing the bundle over
	// to this broker, and returns the entries stored. Errors wrap ErrHandOverRefused or
	// ErrHandOverMalformed when they are the sender's.
	AcceptHandOver(ctx context.Context, body io.Reader) (int64, error)
}

// TopicOwner is a topic's broker: this one (Self) or another, with its advertised URLs.
type TopicOwner struct {
	Self bool
	// URLs are the owner's advertised URLs (this broker's own when Self).
	URLs adminapi.LookupData
}

// clusterWideRoutes are topic-named routes any broker answers itself: they read or write the
// shared catalog (a partitioned topic's metadata), not one topic's data.
var clusterWideRoutes = []string{"/partitions", "/partitioned-stats", "/partitioned-internalStats"}

// ownerOnly wraps a topic route of a cluster of several brokers: a broker that does not own the
// topic answers 307 to the same path on the owner, as Pulsar does; the owner serves it.
func (h *Handler) ownerOnly(pattern string, next http.Handler) http.Handler {
	if h.cfg.Ownership == nil {
		return next
	}
	// Whichever broker serves a route may ask other brokers on the caller's behalf (a partitioned
	// topic's partitions, a namespace's topics), with the caller's credentials.
	next = carryCredentials(next)
	if strings.Contains(pattern, "{bundle}") {
		return h.bundleOwnerOnly(next)
	}
	if !strings.Contains(pattern, "{topic}") {
		return next
	}
	for _, suffix := range clusterWideRoutes {
		if strings.HasSuffix(pattern, suffix) {
			return next
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		topic, err := h.topicFromPath(r)
		if err != nil {
			next.ServeHTTP(w, r) // the route answers the bad name itself
			return
		}
		owner, err := h.cfg.Ownership.TopicOwner(r.Context(), topic)
		if err != nil {
			status, reason := h.classify(err)
			writeError(w, status, reason)
			return
		}
		h.serveOrRedirect(w, r, owner, next)
	})
}

// bundleOwnerOnly is ownerOnly for a bundle route (.../{bundle}/unload): the bundle's owner serves it.
func (h *Handler) bundleOwnerOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, err := h.namespaceFromPath(r)
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		owner, err := h.cfg.Ownership.BundleOwner(r.Context(), ns, r.PathValue("bundle"))
		if err != nil {
			status, reason := h.classify(err)
			writeError(w, status, reason)
			return
		}
		h.serveOrRedirect(w, r, owner, next)
	})
}

// serveOrRedirect serves the request when this broker is the owner, else answers 307 to the same
// path and query on the owner (its https:// URL for a request that came over TLS).
func (h *Handler) serveOrRedirect(w http.ResponseWriter, r *http.Request, owner TopicOwner, next http.Handler) {
	if owner.Self {
		next.ServeHTTP(w, r)
		return
	}
	base := owner.URLs.HTTPURL
	if r.TLS != nil && owner.URLs.HTTPURLTLS != "" {
		base = owner.URLs.HTTPURLTLS
	}
	if base == "" {
		base = owner.URLs.HTTPURLTLS
	}
	if base == "" {
		writeError(w, http.StatusServiceUnavailable, "the topic's owner has no web listener")
		return
	}
	w.Header().Set("Location", strings.TrimSuffix(base, "/")+r.URL.RequestURI())
	w.WriteHeader(http.StatusTemporaryRedirect)
}

// credentialsKey carries a request's Authorization header in its context.
type credentialsKey struct{}

// carryCredentials puts the request's Authorization header into its context: a broker serving a
// call that spans topics (a partitioned topic's, a namespace's) asks each topic's owner with the
// caller's own credentials, so the owner authorizes the same role (ForwardedCredentials).
func carryCredentials(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Authorization"); a != "" {
			r = r.WithContext(context.WithValue(r.Context(), credentialsKey{}, a))
		}
		next.ServeHTTP(w, r)
	})
}

// ForwardedCredentials is the Authorization header of the admin request ctx belongs to, for a call
// to another broker of the cluster on the caller's behalf ("" when there is none).
func ForwardedCredentials(ctx context.Context) string {
	a, _ := ctx.Value(credentialsKey{}).(string)
	return a
}
