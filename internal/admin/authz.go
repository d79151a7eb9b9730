package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/naming"
)

// guard puts the permission check of pattern's routePermissions entry in front of next. A
// pattern without an entry is served to superusers only (and listed by UnlistedRoutes).
func (h *Handler) guard(pattern string, next http.Handler) http.Handler {
	need, domain, ok := RoutePermission(pattern)
	if !ok {
		h.unlisted = append(h.unlisted, pattern)
		need = auth.NeedSuperUser
	}
	if h.cfg.Authorizer == nil {
		return next
	}
	return authorizeRoute(h.cfg.Authorizer, need, domain, next, h.log)
}

// UnlistedRoutes returns the patterns registered without an entry in routePermissions.
func (h *Handler) UnlistedRoutes() []string { return append([]string(nil), h.unlisted...) }

// Patterns returns every registered route pattern.
func (h *Handler) Patterns() []string { return append([]string(nil), h.patterns...) }

// Guard puts the permission check of pattern's routePermissions entry in front of next, for
// routes mounted beside the admin API on the same listener (the console, the readiness probe).
// A pattern without an entry is an error: every route on the web listener has one.
func Guard(a *auth.Authorizer, pattern string, next http.Handler, log *slog.Logger) (http.Handler, error) {
	need, domain, ok := RoutePermission(pattern)
	if !ok {
		return nil, fmt.Errorf("admin: route %q has no entry in the permission table (internal/admin/routes_authz.go)", pattern)
	}
	if a == nil {
		return next, nil
	}
	if log == nil {
		log = slog.Default()
	}
	return authorizeRoute(a, need, domain, next, log.With("component", "admin")), nil
}

// RoutePermission returns what pattern needs, and the topic domain its path names ("persistent"
// when it names none), from the permission table (routePermissions and the policy tables). The two
// topic domains share entries: a pattern's "/persistent/{tenant}" or "/non-persistent/{tenant}" is
// looked up as "/{domain}/{tenant}".
func RoutePermission(pattern string) (need auth.Need, domain string, ok bool) {
	key, domain := RouteKey(pattern)
	table, _ := permissionTable()
	need, ok = table[key]
	return need, domain, ok
}

// RouteKey is pattern's key in the permission table, and the topic domain it names.
func RouteKey(pattern string) (key, domain string) {
	for _, d := range []naming.Domain{naming.NonPersistent, naming.Persistent} {
		seg := "/" + string(d) + "/{tenant}"
		if strings.Contains(pattern, seg) {
			return strings.Replace(pattern, seg, "/{domain}/{tenant}", 1), string(d)
		}
	}
	return pattern, string(naming.Persistent)
}

// PermissionTable returns a copy of the permission table, policy routes included (for
// documentation and tests).
func PermissionTable() map[string]auth.Need {
	table, _ := permissionTable()
	return maps.Clone(table)
}

// authorizeRoute answers 401 to a request without credentials whose role may not do it (the
// anonymous role included: credentials could help), 403 to an authenticated role without the
// permission, and otherwise serves it.
func authorizeRoute(a *auth.Authorizer, need auth.Need, domain string, next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, authenticated := auth.IdentityFrom(r.Context())
		res := resourceOf(r, domain)
		err := a.Authorize(id.Role, need, res)
		if err == nil {
			next.ServeHTTP(w, r)
			return
		}
		if errors.Is(err, auth.ErrTenantNotFound) {
			writeError(w, http.StatusNotFound, err.Error())
			return
		}
		anonymous := !authenticated || id.Method == auth.MethodAnonymous
		log.Info("admin request refused: not authorized", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path,
			"role", id.Role, "needs", need.String(), "anonymous", anonymous)
		status, reason := http.StatusForbidden, "Not authorized: "+err.Error()
		if anonymous {
			status, reason = http.StatusUnauthorized, "Authentication required: "+err.Error()
			w.Header().Set("WWW-Authenticate", `Bearer realm="meridian"`)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"reason": reason})
	})
}

// resourceOf names what the request touches from its path values; a topic is named by its
// partitioned (base) name, as grants are.
func resourceOf(r *http.Request, domain string) auth.Resource {
	tenant, ns, topic := r.PathValue("tenant"), r.PathValue("namespace"), r.PathValue("topic")
	res := auth.Resource{Tenant: tenant, Subscription: r.PathValue("subscription")}
	if tenant != "" && ns != "" {
		res.Namespace = tenant + "/" + ns
	}
	if res.Namespace != "" && topic != "" {
		if t, err := naming.NewTopic(naming.Domain(domain), naming.NamespaceName{Tenant: tenant, Namespace: ns}, topic); err == nil {
			res.Topic = t.Base().String()
		} else {
			res.Topic = domain + "://" + res.Namespace + "/" + topic
		}
	}
	return res
}

// CatalogPolicies is the configuration store as the Authorizer's PolicySource: tenants' admin
// roles and namespaces' grants, read from the catalog's in-memory view.
type CatalogPolicies struct{ Catalog *catalog.Catalog }

// TenantAdminRoles implements auth.PolicySource.
func (c CatalogPolicies) TenantAdminRoles(tenant string) ([]string, bool) {
	t, ok := c.Catalog.Tenant(tenant)
	return t.AdminRoles, ok
}

// NamespacePermissions implements auth.PolicySource. The maps are the catalog's shared,
// read-only view (replaced, never changed, by updates).
func (c CatalogPolicies) NamespacePermissions(ns string) (auth.NamespacePermissions, bool) {
	p, ok := c.Catalog.NamespaceShared(ns)
	if !ok {
		return auth.NamespacePermissions{}, false
	}
	a := p.AuthPolicies
	return auth.NamespacePermissions{Roles: a.NamespaceAuth, Topics: a.DestinationAuth, Subscriptions: a.SubscriptionAuthRoles}, true
}

// ReplicatorRoles implements auth.PolicySource.
func (c CatalogPolicies) ReplicatorRoles(cluster string) []string {
	d, _ := c.Catalog.Cluster(cluster)
	return d.ReplicatorRoles
}

// IsReplicatorRole implements auth.PolicySource.
func (c CatalogPolicies) IsReplicatorRole(role string) bool {
	for _, name := range c.Catalog.Clusters() {
		if d, ok := c.Catalog.Cluster(name); ok && slices.Contains(d.ReplicatorRoles, role) {
			return true
		}
	}
	return false
}
