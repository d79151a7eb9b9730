package auth

import (
	"errors"
	"fmt"
	"slices"
)

// Authorization follows Pulsar's PulsarAuthorizationProvider: a superuser may do everything; a
// tenant's admin roles may do everything inside the tenant; other roles get the actions granted to
// them on a namespace or on one topic (by the tenant's admins), and, for a subscription that lists
// roles, only those roles may consume through it. docs/security.md, "Authorization".

// Action is a permission granted on a namespace or a topic (Pulsar's AuthAction).
type Action string

// Pulsar's actions. Meridian enforces produce and consume; the others are stored and returned.
const (
	ActionProduce   Action = "produce"
	ActionConsume   Action = "consume"
	ActionFunctions Action = "functions"
	ActionSources   Action = "sources"
	ActionSinks     Action = "sinks"
	ActionPackages  Action = "packages"
)

// Actions lists every action a grant may name.
var Actions = []Action{ActionProduce, ActionConsume, ActionFunctions, ActionSources, ActionSinks, ActionPackages}

// ValidAction reports whether s names an Action.
func ValidAction(s string) bool { return slices.Contains(Actions, Action(s)) }

// Need is what an operation requires of a role.
type Need int

// The needs, from the most open to the most closed.
const (
	// NeedNone: open to everyone, credentials or not (readiness probes; /metrics, whose
	// authentication the HTTP middleware decides with authenticateMetricsEndpoint).
	NeedNone Need = iota + 1
	// NeedAuthenticated: any authenticated role (the anonymous role included).
	NeedAuthenticated
	// NeedLookup: produce or consume on the topic (Pulsar's canLookup).
	NeedLookup
	// NeedProduce: produce on the topic or its namespace.
	NeedProduce
	// NeedConsume: consume on the topic or its namespace, and, when Resource.Subscription has a
	// role list, a role on it.
	NeedConsume
	// NeedNamespaceAccess: produce or consume on the namespace itself (listing its topics).
	NeedNamespaceAccess
	// NeedTenantAdmin: an admin role of the resource's tenant (or a superuser).
	NeedTenantAdmin
	// NeedSuperUser: a role in superUserRoles.
	NeedSuperUser
	// NeedReplicator: publishing entries replicated from Resource.Cluster: a superuser (as
	// Pulsar's peers replicate) or a role registered as that cluster's replicator role.
	NeedReplicator
	// NeedSomeReplicator: a superuser or a role registered as some cluster's replicator role. It
	// guards routes whose source cluster is named in the request body, which the route's guard
	// does not read: the handler then checks NeedReplicator for that cluster.
	NeedSomeReplicator
)

var needNames = map[Need]string{
	NeedNone: "none", NeedAuthenticated: "authenticated", NeedLookup: "lookup", NeedProduce: "produce",
	NeedConsume: "consume", NeedNamespaceAccess: "namespace-access", NeedTenantAdmin: "tenant-admin", NeedSuperUser: "superuser", NeedReplicator: "replicator",
	NeedSomeReplicator: "some-replicator",
}

func (n Need) String() string {
	if s, ok := needNames[n]; ok {
		return s
	}
	return fmt.Sprintf("Need(%d)", int(n))
}

// Resource is what an operation touches. Topic is the fully qualified name of the topic as
// permissions name it: a partitioned topic's base name, never one partition's.
type Resource struct {
	Tenant       string
	Namespace    string // "tenant/ns"
	Topic        string // "persistent://tenant/ns/local"
	Subscription string
	// Cluster is the source cluster of replicated entries (NeedReplicator).
	Cluster string
}

func (r Resource) String() string {
	switch {
	case r.Topic != "" && r.Subscription != "":
		return r.Topic + " subscription " + r.Subscription
	case r.Topic != "":
		return r.Topic
	case r.Namespace != "":
		return r.Namespace
	case r.Tenant != "":
		return "tenant " + r.Tenant
	}
	return "the broker"
}

// NamespacePermissions are the grants stored in a namespace's policies (Pulsar's auth_policies).
type NamespacePermissions struct {
	// Roles: role -> actions on the whole namespace (namespace_auth).
	Roles map[string][]string
	// Topics: topic -> role -> actions (destination_auth).
	Topics map[string]map[string][]string
	// Subscriptions: subscription -> roles allowed to consume through it (subscription_auth_roles).
	Subscriptions map[string][]string
}

// PolicySource gives the authorizer the stored tenant admins and namespace grants. Lookups are
// reads of the configuration store's in-memory view: no I/O.
type PolicySource interface {
	// TenantAdminRoles returns the tenant's admin roles; false when the tenant does not exist.
	TenantAdminRoles(tenant string) ([]string, bool)
	// NamespacePermissions returns the namespace's grants; false when it does not exist.
	NamespacePermissions(namespace string) (NamespacePermissions, bool)
	// ReplicatorRoles returns the roles registered to replicate from cluster (none: only
	// superusers may).
	ReplicatorRoles(cluster string) []string
	// IsReplicatorRole reports whether role is registered as some cluster's replicator role.
	IsReplicatorRole(role string) bool
}

// ErrForbidden is the class of every authorization refusal (errors.Is).
var ErrForbidden = errors.New("not authorized")

// ErrTenantNotFound: an operation that needs a tenant's admin names a tenant that does not exist.
// Pulsar answers it as "Tenant does not exist" (404) to every role, rather than as a permission
// no role could have; superusers are not refused (the operation reports it).
var ErrTenantNotFound = errors.New("Tenant does not exist")

type forbidden struct{ reason string }

func (f *forbidden) Error() string        { return f.reason }
func (f *forbidden) Is(target error) bool { return target == ErrForbidden }

// Authorizer decides whether a role may do an operation. Safe for concurrent use; it holds no
// state of its own beyond the superuser roles.
type Authorizer struct {
	superUsers []string
	src        PolicySource
}

// NewAuthorizer builds an Authorizer over the stored policies.
func NewAuthorizer(superUserRoles []string, src PolicySource) *Authorizer {
	return &Authorizer{superUsers: slices.Clone(superUserRoles), src: src}
}

// IsSuperUser reports whether role is in superUserRoles.
func (a *Authorizer) IsSuperUser(role string) bool {
	return role != "" && slices.Contains(a.superUsers, role)
}

// IsTenantAdmin reports whether role administers the tenant (superusers do every tenant).
func (a *Authorizer) IsTenantAdmin(role, tenant string) bool {
	if a.IsSuperUser(role) {
		return true
	}
	if role == "" || tenant == "" {
		return false
	}
	admins, ok := a.src.TenantAdminRoles(tenant)
	return ok && slices.Contains(admins, role)
}

// Authorize returns nil when role may do an operation needing need on res, else an error
// matching ErrForbidden that says what is missing (no secret is involved, so it is safe to send).
func (a *Authorizer) Authorize(role string, need Need, res Resource) error {
	switch need {
	case NeedNone:
		return nil
	case NeedAuthenticated:
		if role == "" {
			return &forbidden{"credentials are required"}
		}
		return nil
	case NeedSuperUser:
		if a.IsSuperUser(role) {
			return nil
		}
		return &forbidden{fmt.Sprintf("role %q is not a superuser", role)}
	case NeedReplicator:
		if a.IsSuperUser(role) || (role != "" && res.Cluster != "" && slices.Contains(a.src.ReplicatorRoles(res.Cluster), role)) {
			return nil
		}
		return &forbidden{fmt.Sprintf("role %q may not replicate from cluster %q into %s: it is neither a superuser nor that cluster's replicator role", role, res.Cluster, res)}
	case NeedSomeReplicator:
		if a.IsSuperUser(role) || (role != "" && a.src.IsReplicatorRole(role)) {
			return nil
		}
		return &forbidden{fmt.Sprintf("role %q is neither a superuser nor a cluster's replicator role", role)}
	}
	if role == "" {
		return &forbidden{"credentials are required"}
	}
	if a.IsTenantAdmin(role, res.Tenant) {
		return nil
	}
	if need == NeedTenantAdmin && res.Tenant != "" {
		if _, exists := a.src.TenantAdminRoles(res.Tenant); !exists {
			return ErrTenantNotFound
		}
	}
	deny := func(what string) error {
		return &forbidden{fmt.Sprintf("role %q is not authorized to %s on %s", role, what, res)}
	}
	switch need {
	case NeedTenantAdmin:
		return deny("administer")
	case NeedProduce:
		if a.has(role, res, ActionProduce) {
			return nil
		}
		return deny("produce")
	case NeedConsume:
		if a.canConsume(role, res) {
			return nil
		}
		return deny("consume")
	case NeedLookup:
		if a.has(role, res, ActionProduce) || a.canConsume(role, Resource{Tenant: res.Tenant, Namespace: res.Namespace, Topic: res.Topic}) {
			return nil
		}
		// A replicator looks the topic up before it creates its producer (checked then).
		if a.src.IsReplicatorRole(role) {
			return nil
		}
		return deny("look up")
	case NeedNamespaceAccess:
		ns := Resource{Tenant: res.Tenant, Namespace: res.Namespace}
		if a.has(role, ns, ActionProduce) || a.has(role, ns, ActionConsume) {
			return nil
		}
		return deny("list topics")
	}
	return &forbidden{fmt.Sprintf("operation needs %v, which no role has", need)}
}

// canConsume: consume granted, and the subscription (if any and if it lists roles) lists role.
func (a *Authorizer) canConsume(role string, res Resource) bool {
	if !a.has(role, res, ActionConsume) {
		return false
	}
	if res.Subscription == "" {
		return true
	}
	p, ok := a.src.NamespacePermissions(res.Namespace)
	if !ok {
		return false
	}
	roles := p.Subscriptions[res.Subscription]
	return len(roles) == 0 || slices.Contains(roles, role)
}

// has reports whether action is granted to role on the namespace or on the topic.
func (a *Authorizer) has(role string, res Resource, action Action) bool {
	p, ok := a.src.NamespacePermissions(res.Namespace)
	if !ok {
		return false
	}
	if slices.Contains(p.Roles[role], string(action)) {
		return true
	}
	return res.Topic != "" && slices.Contains(p.Topics[res.Topic][role], string(action))
}
