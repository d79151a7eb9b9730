package auth

import (
	"errors"
	"slices"
	"testing"
)

type fakePolicies struct {
	admins      map[string][]string
	ns          map[string]NamespacePermissions
	replicators map[string][]string
}

func (f fakePolicies) ReplicatorRoles(c string) []string { return f.replicators[c] }
func (f fakePolicies) IsReplicatorRole(role string) bool {
	for _, roles := range f.replicators {
		if slices.Contains(roles, role) {
			return true
		}
	}
	return false
}

func (f fakePolicies) TenantAdminRoles(t string) ([]string, bool) { r, ok := f.admins[t]; return r, ok }
func (f fakePolicies) NamespacePermissions(ns string) (NamespacePermissions, bool) {
	p, ok := f.ns[ns]
	return p, ok
}

func TestAuthorize(t *testing.T) {
	const topic = "persistent://acme/app/orders"
	src := fakePolicies{
		admins:      map[string][]string{"acme": {"acme-admin"}, "other": {"other-admin"}},
		replicators: map[string][]string{"west": {"west-link"}},
		ns: map[string]NamespacePermissions{
			"acme/app": {
				Roles:         map[string][]string{"ns-producer": {"produce"}, "ns-consumer": {"consume"}},
				Topics:        map[string]map[string][]string{topic: {"topic-consumer": {"consume"}, "topic-producer": {"produce"}}},
				Subscriptions: map[string][]string{"billing": {"ns-consumer"}},
			},
		},
	}
	a := NewAuthorizer([]string{"root"}, src)
	orders := Resource{Tenant: "acme", Namespace: "acme/app", Topic: topic}
	other := Resource{Tenant: "acme", Namespace: "acme/app", Topic: "persistent://acme/app/other"}
	withSub := func(r Resource, s string) Resource { r.Subscription = s; return r }
	for _, tc := range []struct {
		role string
		need Need
		res  Resource
		ok   bool
	}{
		{"root", NeedSuperUser, Resource{}, true},
		{"acme-admin", NeedSuperUser, Resource{}, false},
		{"root", NeedTenantAdmin, orders, true},
		{"acme-admin", NeedTenantAdmin, orders, true},
		{"acme-admin", NeedConsume, withSub(orders, "billing"), true}, // tenant admins bypass subscription roles
		{"other-admin", NeedTenantAdmin, orders, false},
		{"other-admin", NeedProduce, orders, false},
		{"ns-producer", NeedProduce, orders, true},
		{"ns-producer", NeedProduce, other, true},
		{"ns-producer", NeedConsume, orders, false},
		{"ns-producer", NeedLookup, orders, true},
		{"ns-producer", NeedTenantAdmin, orders, false},
		{"ns-consumer", NeedConsume, withSub(orders, "billing"), true},
		{"ns-consumer", NeedConsume, withSub(orders, "anything"), true},
		{"topic-consumer", NeedConsume, withSub(orders, "anything"), true},
		{"topic-consumer", NeedConsume, withSub(orders, "billing"), false}, // not in the subscription's roles
		{"topic-consumer", NeedConsume, withSub(other, "x"), false},        // the grant is for orders only
		{"topic-consumer", NeedLookup, orders, true},
		{"topic-consumer", NeedLookup, other, false},
		{"topic-consumer", NeedNamespaceAccess, orders, false},
		{"ns-consumer", NeedNamespaceAccess, orders, true},
		{"topic-producer", NeedProduce, orders, true},
		{"topic-producer", NeedProduce, other, false},
		{"stranger", NeedLookup, orders, false},
		{"stranger", NeedAuthenticated, Resource{}, true},
		{"", NeedAuthenticated, Resource{}, false},
		{"", NeedNone, Resource{}, true},
		{"stranger", NeedProduce, Resource{Tenant: "ghost", Namespace: "ghost/ns", Topic: "persistent://ghost/ns/t"}, false},
		{"stranger", Need(0), orders, false},
		{"root", NeedReplicator, Resource{Topic: topic, Cluster: "west"}, true},
		{"west-link", NeedReplicator, Resource{Topic: topic, Cluster: "west"}, true},
		{"west-link", NeedReplicator, Resource{Topic: topic, Cluster: "east"}, false},
		{"acme-admin", NeedReplicator, Resource{Tenant: "acme", Topic: topic, Cluster: "west"}, false}, // tenant admins do not replicate
		{"ns-producer", NeedReplicator, Resource{Topic: topic, Cluster: "west"}, false},
		{"west-link", NeedLookup, orders, true}, // before creating its producer
		{"west-link", NeedProduce, orders, false},
		{"west-link", NeedConsume, orders, false},
	} {
		err := a.Authorize(tc.role, tc.need, tc.res)
		if (err == nil) != tc.ok {
			t.Errorf("Authorize(%q, %v, %v) = %v, want allowed=%v", tc.role, tc.need, tc.res, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrForbidden) {
			t.Errorf("Authorize(%q, %v, %v) = %v, not ErrForbidden", tc.role, tc.need, tc.res, err)
		}
	}
}
