package admin

import (
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/naming"
)

// topicPermissionRoutes registers Pulsar's topic-level grants
// (`/admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions[/{role}]`), stored in the
// namespace's auth_policies.destination_auth under the topic's name. A partitioned topic's grants
// are made on its name and cover its partitions; a grant on one partition is refused.
func (h *Handler) topicPermissionRoutes() {
	for _, domain := range []string{string(naming.Persistent), string(naming.NonPersistent)} {
		base := "/admin/v2/" + domain + "/{tenant}/{namespace}/{topic}/permissions"
		h.handle("GET "+base, readEndpoint(h.topicInExistingNamespace, h.topicPermissionsGet))
		h.handle("POST "+base+"/{role}", writeEndpoint(h.grantableTopic, h.topicPermissionGrant))
		h.handle("DELETE "+base+"/{role}", writeEndpoint(h.grantableTopic, h.topicPermissionRevoke))
	}
}

// topicPermissionsGet answers Pulsar's map role -> actions in force on the topic: the namespace's
// grants with the topic's own added.
func (h *Handler) topicPermissionsGet(_ *http.Request, t naming.TopicName) (map[string][]string, error) {
	p, _ := h.cat.Namespace(t.NamespaceName().String())
	out := map[string][]string{}
	for role, actions := range p.AuthPolicies.NamespaceAuth {
		out[role] = slices.Clone(actions)
	}
	for role, actions := range p.AuthPolicies.DestinationAuth[t.Base().String()] {
		out[role] = mergeActions(out[role], actions)
	}
	return out, nil
}

func (h *Handler) topicPermissionGrant(r *http.Request, t naming.TopicName) error {
	var actions []string
	if err := decodeBody(r, &actions); err != nil {
		return err
	}
	if err := validActions(actions); err != nil {
		return err
	}
	role, name := r.PathValue("role"), t.String()
	_, err := h.changeNamespace(r, func(p *adminapi.Policies) error {
		if p.AuthPolicies.DestinationAuth[name] == nil {
			p.AuthPolicies.DestinationAuth[name] = map[string][]string{}
		}
		p.AuthPolicies.DestinationAuth[name][role] = mergeActions(nil, actions)
		return nil
	})
	return err
}

func (h *Handler) topicPermissionRevoke(r *http.Request, t naming.TopicName) error {
	role, name := r.PathValue("role"), t.String()
	_, err := h.changeNamespace(r, func(p *adminapi.Policies) error {
		grants := p.AuthPolicies.DestinationAuth[name]
		if _, found := grants[role]; !found {
			return fail(http.StatusPreconditionFailed, "Permissions are not set at the topic level")
		}
		delete(grants, role)
		if len(grants) == 0 {
			delete(p.AuthPolicies.DestinationAuth, name)
		}
		return nil
	})
	return err
}

// grantableTopic is the path's topic when grants may name it: in an existing namespace, and not
// one partition of a partitioned topic.
func (h *Handler) grantableTopic(r *http.Request) (naming.TopicName, error) {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return t, err
	}
	if t.IsPartition() {
		return t, fail(http.StatusPreconditionFailed, "Permissions are granted on the partitioned topic %s, not on one partition", t.Base())
	}
	return t, nil
}

// validActions refuses an action Pulsar does not define.
func validActions(actions []string) error {
	for _, a := range actions {
		if !auth.ValidAction(a) {
			return fail(http.StatusBadRequest, "Invalid auth action %q", a)
		}
	}
	return nil
}

// mergeActions returns the sorted union of a and b without repeats.
func mergeActions(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	sort.Strings(out)
	return slices.Compact(out)
}

// replicatorRolesGet answers the roles allowed to publish entries replicated from the cluster
// (Meridian's; superusers always may).
func replicatorRolesGet(_ *http.Request, d adminapi.ClusterData) ([]string, error) {
	if d.ReplicatorRoles == nil {
		return []string{}, nil
	}
	return d.ReplicatorRoles, nil
}

// replicatorRolesSet replaces the cluster's replicator roles (a JSON list; [] removes them all).
func (h *Handler) replicatorRolesSet(r *http.Request, name string) error {
	var roles []string
	if err := decodeBody(r, &roles); err != nil {
		return err
	}
	for _, role := range roles {
		if strings.TrimSpace(role) == "" {
			return fail(http.StatusPreconditionFailed, "A replicator role must not be empty")
		}
	}
	roles = mergeActions(nil, roles)
	return h.cat.UpdateClusterWith(r.Context(), name, func(v *adminapi.ClusterData) error {
		v.ReplicatorRoles = roles
		if len(roles) == 0 {
			v.ReplicatorRoles = nil
		}
		return nil
	})
}
