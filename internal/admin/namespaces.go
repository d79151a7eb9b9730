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
	h.handle("GET /admin/v2/namespaces/{tenant}", h.namespacesList)
	h.handle("GET "+nsBase, h.namespaceGet)
	h.handle("PUT "+nsBase, h.namespaceCreate)
	h.handle("DELETE "+nsBase, h.namespaceDelete)
	h.handle("GET "+nsBase+"/topics", h.namespaceTopics)
	h.handle("PUT "+nsBase+"/unload", h.namespaceUnload)
	h.handle("PUT "+nsBase+"/{bundle}/unload", h.namespaceUnload)
	h.handle("POST "+nsBase+"/clearBacklog", h.namespaceClearBacklog)
	h.handle("POST "+nsBase+"/clearBacklog/{subscription}", h.namespaceClearBacklog)
	h.handle("POST "+nsBase+"/unsubscribe/{subscription}", h.namespaceUnsubscribe)

	// permissions: grants enforced by the Authorizer (authz.go) when authorization is on
	h.handle("GET "+nsBase+"/permissions", func(w http.ResponseWriter, r *http.Request) error {
		p, err := h.policiesOf(r)
		if err != nil {
			return err
		}
		return ok(w, p.AuthPolicies.NamespaceAuth)
	})
	h.handle("POST "+nsBase+"/permissions/{role}", func(w http.ResponseWriter, r *http.Request) error {
		var actions []string
		if err := decodeBody(r, &actions); err != nil {
			return err
		}
		if err := validActions(actions); err != nil {
			return err
		}
		role := r.PathValue("role")
		return h.updateNamespace(w, r, func(p *adminapi.Policies) error {
			p.AuthPolicies.NamespaceAuth[role] = mergeActions(nil, actions)
			return nil
		})
	})
	h.handle("DELETE "+nsBase+"/permissions/{role}", func(w http.ResponseWriter, r *http.Request) error {
		role := r.PathValue("role")
		return h.updateNamespace(w, r, func(p *adminapi.Policies) error {
			delete(p.AuthPolicies.NamespaceAuth, role)
			return nil
		})
	})
	h.handle("GET "+nsBase+"/permissions/subscription", func(w http.ResponseWriter, r *http.Request) error {
		p, err := h.policiesOf(r)
		if err != nil {
			return err
		}
		return ok(w, p.AuthPolicies.SubscriptionAuthRoles)
	})
	h.handle("POST "+nsBase+"/permissions/subscription/{subscription}", func(w http.ResponseWriter, r *http.Request) error {
		var roles []string
		if err := decodeBody(r, &roles); err != nil {
			return err
		}
		sub := r.PathValue("subscription")
		return h.updateNamespace(w, r, func(p *adminapi.Policies) error {
			p.AuthPolicies.SubscriptionAuthRoles[sub] = roles
			return nil
		})
	})
	h.handle("DELETE "+nsBase+"/permissions/{subscription}/{role}", func(w http.ResponseWriter, r *http.Request) error {
		sub, role := r.PathValue("subscription"), r.PathValue("role")
		return h.updateNamespace(w, r, func(p *adminapi.Policies) error {
			roles := p.AuthPolicies.SubscriptionAuthRoles[sub]
			roles = slices.DeleteFunc(slices.Clone(roles), func(x string) bool { return x == role })
			if len(roles) == 0 {
				delete(p.AuthPolicies.SubscriptionAuthRoles, sub)
			} else {
				p.AuthPolicies.SubscriptionAuthRoles[sub] = roles
			}
			return nil
		})
	})

	h.handle("GET "+nsBase+"/property/{key}", func(w http.ResponseWriter, r *http.Request) error {
		p, err := h.policiesOf(r)
		if err != nil {
			return err
		}
		v, found := p.Properties[r.PathValue("key")]
		if !found {
			return noContent(w)
		}
		return okText(w, v)
	})
	h.handle("PUT "+nsBase+"/property/{key}/{value}", func(w http.ResponseWriter, r *http.Request) error {
		k, v := r.PathValue("key"), r.PathValue("value")
		return h.updateNamespace(w, r, func(p *adminapi.Policies) error {
			p.Properties[k] = v
			return nil
		})
	})
	h.handle("DELETE "+nsBase+"/property/{key}", func(w http.ResponseWriter, r *http.Request) error {
		k := r.PathValue("key")
		return h.updateNamespace(w, r, func(p *adminapi.Policies) error {
			delete(p.Properties, k)
			return nil
		})
	})

	for _, pol := range namespacePolicies(h.cfg.Cluster) {
		h.registerNamespacePolicy(pol)
	}
}

func okText(w http.ResponseWriter, s string) error {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write([]byte(s))
	return err
}

// retentionCovers reports whether retention allows at least the backlog quota's size, Pulsar's rule
// when both are set (a quota beyond retention could never be reached).
func retentionCovers(ret adminapi.RetentionPolicies, q adminapi.BacklogQuota) bool {
	if ret.RetentionSizeInMB < 0 || q.LimitSize <= 0 {
		return true
	}
	return ret.RetentionSizeInMB*1024*1024 >= q.LimitSize
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

// updateNamespace applies fn to the path's namespace and answers 204.
func (h *Handler) updateNamespace(w http.ResponseWriter, r *http.Request, fn func(p *adminapi.Policies) error) error {
	ns, err := h.existingNamespace(r)
	if err != nil {
		return err
	}
	if err := h.cat.UpdateNamespace(r.Context(), ns.String(), fn); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) namespacesList(w http.ResponseWriter, r *http.Request) error {
	tenant := r.PathValue("tenant")
	if _, found := h.cat.Tenant(tenant); !found {
		return fail(http.StatusNotFound, "Tenant does not exist")
	}
	list := h.cat.Namespaces(tenant)
	if list == nil {
		list = []string{}
	}
	return ok(w, list)
}

func (h *Handler) namespaceGet(w http.ResponseWriter, r *http.Request) error {
	p, err := h.policiesOf(r)
	if err != nil {
		return err
	}
	return ok(w, p)
}

func (h *Handler) namespaceCreate(w http.ResponseWriter, r *http.Request) error {
	ns, err := h.namespaceFromPath(r)
	if err != nil {
		return err
	}
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
	if err := h.cat.CreateNamespace(r.Context(), ns.String(), p); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) namespaceDelete(w http.ResponseWriter, r *http.Request) error {
	ns, err := h.existingNamespace(r)
	if err != nil {
		return err
	}
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
	if err := h.cat.DeleteNamespace(r.Context(), ns.String()); err != nil {
		return err
	}
	return noContent(w)
}

// topicsOfNamespace lists the broker's topics of ns (empty without a TopicService).
func (h *Handler) topicsOfNamespace(ctx context.Context, ns string) ([]string, error) {
	if h.cfg.Topics == nil {
		return nil, nil
	}
	return h.cfg.Topics.ListTopics(ctx, ns)
}

// namespaceTopics lists topics and partitions (?mode=PERSISTENT (default), NON_PERSISTENT or ALL).
func (h *Handler) namespaceTopics(w http.ResponseWriter, r *http.Request) error {
	ns, err := h.existingNamespace(r)
	if err != nil {
		return err
	}
	var domains []naming.Domain
	switch strings.ToUpper(r.URL.Query().Get("mode")) {
	case "", "PERSISTENT":
		domains = []naming.Domain{naming.Persistent}
	case "NON_PERSISTENT":
		domains = []naming.Domain{naming.NonPersistent}
	case "ALL":
		domains = []naming.Domain{naming.Persistent, naming.NonPersistent}
	default:
		return fail(http.StatusBadRequest, "Invalid mode %q: want PERSISTENT, NON_PERSISTENT or ALL", r.URL.Query().Get("mode"))
	}
	list, err := h.listTopics(r.Context(), ns.String(), domains...)
	if err != nil {
		return err
	}
	return ok(w, list)
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

func (h *Handler) namespaceUnload(w http.ResponseWriter, r *http.Request) error {
	ns, err := h.existingNamespace(r)
	if err != nil {
		return err
	}
	if h.cfg.Topics == nil {
		return noContent(w)
	}
	topics, err := h.cfg.Topics.ListTopics(r.Context(), ns.String())
	if err != nil {
		return err
	}
	for _, t := range topics {
		if err := h.cfg.Topics.Unload(r.Context(), t); err != nil && !errors.Is(err, ErrTopicNotFound) {
			return err
		}
	}
	return noContent(w)
}

func (h *Handler) namespaceClearBacklog(w http.ResponseWriter, r *http.Request) error {
	return h.forEachSubscriptionInNamespace(w, r, func(ctx context.Context, topic, sub string) error {
		return h.cfg.Topics.ClearBacklog(ctx, topic, sub)
	})
}

func (h *Handler) namespaceUnsubscribe(w http.ResponseWriter, r *http.Request) error {
	return h.forEachSubscriptionInNamespace(w, r, func(ctx context.Context, topic, sub string) error {
		return h.cfg.Topics.DeleteSubscription(ctx, topic, sub, false)
	})
}

func (h *Handler) forEachSubscriptionInNamespace(w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, topic, sub string) error) error {
	ns, err := h.existingNamespace(r)
	if err != nil {
		return err
	}
	if h.cfg.Topics == nil {
		return fail(http.StatusServiceUnavailable, "Topic service not available")
	}
	only := r.PathValue("subscription")
	topics, err := h.cfg.Topics.ListTopics(r.Context(), ns.String())
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
	return noContent(w)
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
