package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/naming"
)

const nsBase = "/admin/v2/namespaces/{tenant}/{namespace}"

func (h *Handler) namespaceRoutes() {
	h.handle("GET /admin/v2/namespaces/{tenant}", readEndpoint(h.existingTenant, func(r *http.Request, _ adminapi.TenantInfo) ([]string, error) {
		if list := h.cat.Namespaces(r.PathValue("tenant")); list != nil {
			return list, nil
		}
		return []string{}, nil
	}))
	h.handle("GET "+nsBase, readEndpoint(h.policiesOf, func(_ *http.Request, p adminapi.Policies) (adminapi.Policies, error) { return p, nil }))
	h.handle("PUT "+nsBase, writeEndpoint(h.namespaceFromPath, h.namespaceCreate))
	h.handle("DELETE "+nsBase, writeEndpoint(h.existingNamespace, h.namespaceDelete))
	h.handle("GET "+nsBase+"/topics", readEndpoint(h.existingNamespace, h.namespaceTopics))
	h.handle("PUT "+nsBase+"/unload", writeEndpoint(h.existingNamespace, h.namespaceUnload))
	h.handle("PUT "+nsBase+"/{bundle}/unload", writeEndpoint(h.existingNamespace, h.namespaceUnload))
	clearBacklog := writeEndpoint(h.existingNamespace, h.forEachSubscriptionInNamespace(func(ctx context.Context, topic, sub string) error {
		return h.cfg.Topics.ClearBacklog(ctx, topic, sub)
	}))
	h.handle("POST "+nsBase+"/clearBacklog", clearBacklog)
	h.handle("POST "+nsBase+"/clearBacklog/{subscription}", clearBacklog)
	h.handle("POST "+nsBase+"/unsubscribe/{subscription}", writeEndpoint(h.existingNamespace, h.forEachSubscriptionInNamespace(func(ctx context.Context, topic, sub string) error {
		return h.cfg.Topics.DeleteSubscription(ctx, topic, sub, false)
	})))

	// permissions: grants enforced by the Authorizer (authz.go) when authorization is on
	h.handle("GET "+nsBase+"/permissions", readEndpoint(h.policiesOf, func(_ *http.Request, p adminapi.Policies) (map[string][]string, error) {
		return p.AuthPolicies.NamespaceAuth, nil
	}))
	h.handle("POST "+nsBase+"/permissions/{role}", h.namespaceWrite(false, func(in *policyRequest) (func(*adminapi.Policies) error, error) {
		actions, err := decodeChecked(in, decodeValue[[]string], validActions)
		role := in.r.PathValue("role")
		return func(p *adminapi.Policies) error {
			p.AuthPolicies.NamespaceAuth[role] = mergeActions(nil, actions)
			return nil
		}, err
	}))
	h.handle("DELETE "+nsBase+"/permissions/{role}", h.namespaceEdit(func(r *http.Request, p *adminapi.Policies) error {
		delete(p.AuthPolicies.NamespaceAuth, r.PathValue("role"))
		return nil
	}))
	h.handle("GET "+nsBase+"/permissions/subscription", readEndpoint(h.policiesOf, func(_ *http.Request, p adminapi.Policies) (map[string][]string, error) {
		return p.AuthPolicies.SubscriptionAuthRoles, nil
	}))
	h.handle("POST "+nsBase+"/permissions/subscription/{subscription}", h.namespaceWrite(false, func(in *policyRequest) (func(*adminapi.Policies) error, error) {
		roles, err := decodeInput[[]string](in)
		sub := in.r.PathValue("subscription")
		return func(p *adminapi.Policies) error {
			p.AuthPolicies.SubscriptionAuthRoles[sub] = roles
			return nil
		}, err
	}))
	h.handle("DELETE "+nsBase+"/permissions/{subscription}/{role}", h.namespaceEdit(func(r *http.Request, p *adminapi.Policies) error {
		sub, role := r.PathValue("subscription"), r.PathValue("role")
		roles := slices.DeleteFunc(slices.Clone(p.AuthPolicies.SubscriptionAuthRoles[sub]), func(x string) bool { return x == role })
		if len(roles) == 0 {
			delete(p.AuthPolicies.SubscriptionAuthRoles, sub)
		} else {
			p.AuthPolicies.SubscriptionAuthRoles[sub] = roles
		}
		return nil
	}))

	h.handle("GET "+nsBase+"/property/{key}", endpoint(h.policiesOf, func(r *http.Request, p adminapi.Policies) (*string, error) {
		if v, found := p.Properties[r.PathValue("key")]; found {
			return &v, nil
		}
		return nil, nil
	}, okTextOrNoContent))
	h.handle("PUT "+nsBase+"/property/{key}/{value}", h.namespaceEdit(func(r *http.Request, p *adminapi.Policies) error {
		p.Properties[r.PathValue("key")] = r.PathValue("value")
		return nil
	}))
	h.handle("DELETE "+nsBase+"/property/{key}", h.namespaceEdit(func(r *http.Request, p *adminapi.Policies) error {
		delete(p.Properties, r.PathValue("key"))
		return nil
	}))

	for _, pol := range namespacePolicies(h.cfg.Cluster) {
		h.registerNamespacePolicy(pol)
	}
}

// okTextOrNoContent answers a value as text, or 204 without one.
func okTextOrNoContent(w http.ResponseWriter, s *string) error {
	if s == nil {
		return noContent(w)
	}
	return okText(w, *s)
}

func okText(w http.ResponseWriter, s string) error {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write([]byte(s))
	return err
}

// retentionCovers reports whether retention allows at least the backlog quota's size, Pulsar's rule
// when both are set (a quota beyond retention could never be reached). It compares in MB, the quota
// rounded up, so that a retention size whose bytes do not fit an int64 cannot wrap.
func retentionCovers(ret adminapi.RetentionPolicies, q adminapi.BacklogQuota) bool {
	if ret.RetentionSizeInMB < 0 || q.LimitSize <= 0 {
		return true
	}
	limitMB := (q.LimitSize-1)>>20 + 1
	return ret.RetentionSizeInMB >= limitMB
}

// existingNamespace parses the path's namespace and checks that tenant and namespace exist, with
// Pulsar's 404 reasons.
func (h *Handler) existingNamespace(r *http.Request) (naming.NamespaceName, error) {
	ns, err := h.namespaceFromPath(r)
	if err != nil {
		return ns, err
	}
	if _, found := h.cat.Tenant(ns.Tenant); !found {
		return ns, fail(http.StatusNotFound, "Tenant does not exist")
	}
	if _, found := h.cat.Namespace(ns.String()); !found {
		return ns, fail(http.StatusNotFound, "Namespace does not exist")
	}
	return ns, nil
}

func (h *Handler) namespaceFromPath(r *http.Request) (naming.NamespaceName, error) {
	ns := naming.NamespaceName{Tenant: r.PathValue("tenant"), Namespace: r.PathValue("namespace")}
	if err := ns.Validate(); err != nil {
		return ns, fail(http.StatusPreconditionFailed, "Namespace name is not valid: %v", err)
	}
	return ns, nil
}

func (h *Handler) policiesOf(r *http.Request) (adminapi.Policies, error) {
	ns, err := h.existingNamespace(r)
	if err != nil {
		return adminapi.Policies{}, err
	}
	p, _ := h.cat.Namespace(ns.String())
	return p, nil
}

// changeNamespace applies fn to the path's namespace, which must exist, and names it.
func (h *Handler) changeNamespace(r *http.Request, fn func(p *adminapi.Policies) error) (naming.NamespaceName, error) {
	ns, err := h.existingNamespace(r)
	if err != nil {
		return ns, err
	}
	return ns, h.cat.UpdateNamespace(r.Context(), ns.String(), fn)
}

// namespaceEdit is a namespace write that needs no body: edit changes the freshest policies.
func (h *Handler) namespaceEdit(edit func(r *http.Request, p *adminapi.Policies) error) apiFunc {
	return h.namespaceWrite(false, func(in *policyRequest) (func(*adminapi.Policies) error, error) {
		return func(p *adminapi.Policies) error { return edit(in.r, p) }, nil
	})
}

func (h *Handler) namespaceCreate(r *http.Request, ns naming.NamespaceName) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	p := adminapi.NewPolicies()
	if len(strings.TrimSpace(string(b))) > 0 && strings.TrimSpace(string(b)) != "null" {
		if isBareBundlesData(b) {
			// pulsaradmin's CreateNsWithBundlesData sends a bare BundlesData.
			var bd adminapi.BundlesData
			if err := adminapi.DecodeBody(b, &bd); err != nil {
				return fail(http.StatusBadRequest, "%v", err)
			}
			p.Bundles = &bd
		} else if err := adminapi.DecodeBody(b, &p); err != nil {
			return fail(http.StatusBadRequest, "%v", err)
		}
	}
	p.Normalize()
	if len(p.ReplicationClusters) == 0 {
		p.ReplicationClusters = []string{h.cfg.Cluster}
	}
	if _, found := h.cat.Tenant(ns.Tenant); !found {
		return fail(http.StatusNotFound, "Tenant does not exist")
	}
	return h.cat.CreateNamespace(r.Context(), ns.String(), p)
}

func (h *Handler) namespaceDelete(r *http.Request, ns naming.NamespaceName) error {
	force := queryBool(r, "force")
	topics, err := h.topicsOfNamespace(r.Context(), ns.String())
	if err != nil {
		return err
	}
	partitioned := h.cat.PartitionedTopics(ns.String())
	if (len(topics) > 0 || len(partitioned) > 0) && !force {
		return fail(http.StatusConflict, "Cannot delete non empty namespace")
	}
	for _, t := range topics {
		if err := h.cfg.Topics.DeleteTopic(r.Context(), t, true); err != nil && !errors.Is(err, ErrTopicNotFound) {
			return err
		}
	}
	for _, t := range partitioned {
		if err := h.cat.DeletePartitionedTopic(r.Context(), t); err != nil && !catalog.IsKind(err, catalog.ErrNotFound) {
			return err
		}
	}
	return h.cat.DeleteNamespace(r.Context(), ns.String())
}

// topicsOfNamespace lists the topics of ns: the broker's, and in a cluster of several brokers every
// broker's (empty without a TopicService).
func (h *Handler) topicsOfNamespace(ctx context.Context, ns string) ([]string, error) {
	if h.cfg.Topics == nil {
		return nil, nil
	}
	local, err := h.cfg.Topics.ListTopics(ctx, ns)
	if err != nil || h.cfg.Ownership == nil {
		return local, err
	}
	name, err := naming.ParseNamespace(ns)
	if err != nil {
		return local, nil
	}
	others, err := h.cfg.Ownership.Topics(ctx, name)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(local)+len(others))
	out := make([]string, 0, len(local)+len(others))
	for _, t := range append(local, others...) {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out, nil
}

// namespaceTopics lists topics and partitions (?mode=PERSISTENT (default), NON_PERSISTENT or ALL).
func (h *Handler) namespaceTopics(r *http.Request, ns naming.NamespaceName) ([]string, error) {
	var domains []naming.Domain
	switch strings.ToUpper(r.URL.Query().Get("mode")) {
	case "", "PERSISTENT":
		domains = []naming.Domain{naming.Persistent}
	case "NON_PERSISTENT":
		domains = []naming.Domain{naming.NonPersistent}
	case "ALL":
		domains = []naming.Domain{naming.Persistent, naming.NonPersistent}
	default:
		return nil, fail(http.StatusBadRequest, "Invalid mode %q: want PERSISTENT, NON_PERSISTENT or ALL", r.URL.Query().Get("mode"))
	}
	return h.listTopics(r.Context(), ns.String(), domains...)
}

// listTopics returns the non-partitioned topics and the partitions of partitioned topics of a
// namespace in the given domains, sorted, without duplicates.
func (h *Handler) listTopics(ctx context.Context, ns string, domains ...naming.Domain) ([]string, error) {
	topics, err := h.topicsOfNamespace(ctx, ns)
	if err != nil {
		return nil, err
	}
	set := map[string]struct{}{}
	for _, t := range topics {
		set[t] = struct{}{}
	}
	for _, p := range h.cat.PartitionedTopics(ns) {
		meta, _ := h.cat.PartitionedTopic(p)
		base, err := naming.ParseTopic(p)
		if err != nil {
			continue
		}
		for i := 0; i < meta.Partitions; i++ {
			set[base.Partition(i).String()] = struct{}{}
		}
	}
	out := []string{}
	for t := range set {
		tn, err := naming.ParseTopic(t)
		if err != nil || !slices.Contains(domains, tn.Domain) {
			continue
		}
		out = append(out, t)
	}
	sort.Strings(out)
	return out, nil
}

func (h *Handler) namespaceUnload(r *http.Request, ns naming.NamespaceName) error {
	if bundle := r.PathValue("bundle"); bundle != "" && h.cfg.Ownership != nil {
		// In a cluster the bundle moves: to destinationBroker, as Pulsar's unload takes it, or to
		// the least-loaded other broker (docs/cluster.md, "Moving a bundle").
		return h.cfg.Ownership.UnloadBundle(r.Context(), ns, bundle, r.URL.Query().Get("destinationBroker"))
	}
	if h.cfg.Topics == nil {
		return nil
	}
	// In a cluster of several brokers, every broker's topics: each closes on its owner.
	topics, err := h.topicsOfNamespace(r.Context(), ns.String())
	if err != nil {
		return err
	}
	for _, t := range topics {
		if err := h.cfg.Topics.Unload(r.Context(), t); err != nil && !errors.Is(err, ErrTopicNotFound) {
			return err
		}
	}
	return nil
}

// forEachSubscriptionInNamespace runs fn on every subscription of the namespace's topics (only the
// path's {subscription}, if it names one); in a cluster of several brokers, of every broker's
// topics, each on its owner.
func (h *Handler) forEachSubscriptionInNamespace(fn func(ctx context.Context, topic, sub string) error) func(*http.Request, naming.NamespaceName) error {
	return func(r *http.Request, ns naming.NamespaceName) error {
		if h.cfg.Topics == nil {
			return fail(http.StatusServiceUnavailable, "Topic service not available")
		}
		only := r.PathValue("subscription")
		topics, err := h.topicsOfNamespace(r.Context(), ns.String())
		if err != nil {
			return err
		}
		for _, t := range topics {
			subs, err := h.cfg.Topics.Subscriptions(r.Context(), t)
			if err != nil {
				if errors.Is(err, ErrTopicNotFound) {
					continue
				}
				return err
			}
			for _, s := range subs {
				if only != "" && s != only {
					continue
				}
				if err := fn(r.Context(), t, s); err != nil && !errors.Is(err, ErrSubscriptionNotFound) {
					return err
				}
			}
		}
		return nil
	}
}

func queryBool(r *http.Request, name string) bool {
	v, _ := strconv.ParseBool(r.URL.Query().Get(name))
	return v
}

// isBareBundlesData reports whether a namespace-create body is a BundlesData object (top-level
// "boundaries" or "numBundles", which Policies does not have) rather than Policies.
func isBareBundlesData(body []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return false
	}
	_, boundaries := top["boundaries"]
	_, numBundles := top["numBundles"]
	return boundaries || numBundles
}
