package admin

import (
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/meridian-mq/meridian/internal/auth"
)

// routePermissions is what every route on the web listener needs (docs/security.md,
// "Authorization"): the admin API's routes, registered through Handler.handle, and the routes the
// node mounts beside it through Guard, except the policy tables' routes (policyNeed). Keys are the
// patterns as registered, with a topic domain written "{domain}". TestEveryRouteHasAPermission
// fails, naming the route, when one is missing: adding a route means adding its line here, or its
// row to a policy table.
var routePermissions = map[string]auth.Need{
	// Open, or any authenticated role.
	"GET /metrics":                     auth.NeedNone,
	"/":                                auth.NeedAuthenticated,
	"GET /admin/v2/brokers/ready":      auth.NeedNone,
	"GET /admin/v2/brokers/version":    auth.NeedAuthenticated,
	"GET /admin/v2/brokers/build-info": auth.NeedAuthenticated,
	"GET /admin/v2/clusters":           auth.NeedAuthenticated,
	// Brokers, clusters, tenants, the console: superusers (tenant admins may read their tenant).
	"GET /admin/v2/brokers/health":                           auth.NeedSuperUser,
	"GET /admin/v2/brokers":                                  auth.NeedSuperUser,
	"GET /admin/v2/brokers/{cluster}":                        auth.NeedSuperUser,
	"GET /admin/v2/brokers/leaderBroker":                     auth.NeedSuperUser,
	"GET /admin/v2/brokers/configuration":                    auth.NeedSuperUser,
	"GET /admin/v2/brokers/configuration/values":             auth.NeedSuperUser,
	"GET /admin/v2/brokers/configuration/runtime":            auth.NeedSuperUser,
	"POST /admin/v2/brokers/configuration/{name}/{value...}": auth.NeedSuperUser,
	"DELETE /admin/v2/brokers/configuration/{name}":          auth.NeedSuperUser,
	"GET /admin/v2/brokers/internal-configuration":           auth.NeedSuperUser,
	"GET /admin/v2/clusters/{cluster}":                       auth.NeedSuperUser,
	// Blue-green switchover (docs/geo-replication.md §7): superusers, as in Pulsar.
	"GET /admin/v2/clusters/{cluster}/migrate":  auth.NeedSuperUser,
	"POST /admin/v2/clusters/{cluster}/migrate": auth.NeedSuperUser,
	// Go's profiles of the process (profiling.go): superusers.
	"GET /debug/pprof/":                 auth.NeedSuperUser,
	"POST /internal/v1/bundle-handover": auth.NeedSuperUser, // broker to broker (handover.go)
	"GET /debug/pprof/cmdline":          auth.NeedSuperUser,
	"GET /debug/pprof/profile":          auth.NeedSuperUser,
	"GET /debug/pprof/symbol":           auth.NeedSuperUser,
	"POST /debug/pprof/symbol":          auth.NeedSuperUser,
	"GET /debug/pprof/trace":            auth.NeedSuperUser,
	// Broker-wide figures (every tenant's topics): superusers.
	"GET /admin/v2/broker-stats/metrics":                       auth.NeedSuperUser,
	"GET /admin/v2/broker-stats/topics":                        auth.NeedSuperUser,
	"GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces": auth.NeedSuperUser,
	// Advertised positions: written by another cluster's replication manager (a superuser link, or
	// the source cluster's replicator role for its own advertisements: the handler checks the
	// source the body names, advertisements_authz.go), read by the namespace's admins after a failover.
	"POST /admin/v2/replication/advertisements":                         auth.NeedSomeReplicator,
	"GET /admin/v2/namespaces/{tenant}/{namespace}/replicationSources":  auth.NeedTenantAdmin,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/internal-info": auth.NeedLookup,
	// Position translation reads positions, as message-id-by-time does.
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/translatePosition": auth.NeedConsume,
	"PUT /admin/v2/clusters/{cluster}":                                      auth.NeedSuperUser,
	"POST /admin/v2/clusters/{cluster}":                                     auth.NeedSuperUser,
	"DELETE /admin/v2/clusters/{cluster}":                                   auth.NeedSuperUser,
	"GET /admin/v2/clusters/{cluster}/peers":                                auth.NeedSuperUser,
	"POST /admin/v2/clusters/{cluster}/peers":                               auth.NeedSuperUser,
	"GET /admin/v2/clusters/{cluster}/replicatorRoles":                      auth.NeedSuperUser,
	"POST /admin/v2/clusters/{cluster}/replicatorRoles":                     auth.NeedSuperUser,
	"GET /admin/v2/clusters/{cluster}/failureDomains":                       auth.NeedSuperUser,
	"GET /admin/v2/tenants":                                                 auth.NeedSuperUser,
	"GET /admin/v2/tenants/{tenant}":                                        auth.NeedTenantAdmin,
	"PUT /admin/v2/tenants/{tenant}":                                        auth.NeedSuperUser,
	"POST /admin/v2/tenants/{tenant}":                                       auth.NeedSuperUser,
	"DELETE /admin/v2/tenants/{tenant}":                                     auth.NeedSuperUser,
	"/console/":                                                             auth.NeedNone, // the page's assets: no data, and the login form
	"/console/api/":                                                         auth.NeedSuperUser,
	// Namespaces: their admins; listing topics needs produce or consume on the namespace. Their
	// policies (namespacePolicies) need policyNeed.
	"GET /admin/v2/namespaces/{tenant}":                                                      auth.NeedTenantAdmin,
	"GET /admin/v2/namespaces/{tenant}/{namespace}":                                          auth.NeedTenantAdmin,
	"PUT /admin/v2/namespaces/{tenant}/{namespace}":                                          auth.NeedTenantAdmin,
	"DELETE /admin/v2/namespaces/{tenant}/{namespace}":                                       auth.NeedTenantAdmin,
	"GET /admin/v2/namespaces/{tenant}/{namespace}/topics":                                   auth.NeedNamespaceAccess,
	"PUT /admin/v2/namespaces/{tenant}/{namespace}/unload":                                   auth.NeedTenantAdmin,
	"PUT /admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload":                          auth.NeedTenantAdmin,
	"POST /admin/v2/namespaces/{tenant}/{namespace}/clearBacklog":                            auth.NeedTenantAdmin,
	"POST /admin/v2/namespaces/{tenant}/{namespace}/clearBacklog/{subscription}":             auth.NeedTenantAdmin,
	"POST /admin/v2/namespaces/{tenant}/{namespace}/unsubscribe/{subscription}":              auth.NeedTenantAdmin,
	"GET /admin/v2/namespaces/{tenant}/{namespace}/permissions":                              auth.NeedTenantAdmin,
	"POST /admin/v2/namespaces/{tenant}/{namespace}/permissions/{role}":                      auth.NeedTenantAdmin,
	"DELETE /admin/v2/namespaces/{tenant}/{namespace}/permissions/{role}":                    auth.NeedTenantAdmin,
	"GET /admin/v2/namespaces/{tenant}/{namespace}/permissions/subscription":                 auth.NeedTenantAdmin,
	"POST /admin/v2/namespaces/{tenant}/{namespace}/permissions/subscription/{subscription}": auth.NeedTenantAdmin,
	"DELETE /admin/v2/namespaces/{tenant}/{namespace}/permissions/{subscription}/{role}":     auth.NeedTenantAdmin,
	"GET /admin/v2/namespaces/{tenant}/{namespace}/property/{key}":                           auth.NeedTenantAdmin,
	"PUT /admin/v2/namespaces/{tenant}/{namespace}/property/{key}/{value}":                   auth.NeedTenantAdmin,
	"DELETE /admin/v2/namespaces/{tenant}/{namespace}/property/{key}":                        auth.NeedTenantAdmin,
	"GET /admin/v2/{domain}/{tenant}/{namespace}":                                            auth.NeedNamespaceAccess,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/partitioned":                                auth.NeedNamespaceAccess,
	// Lookup and schemas.
	"GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}":              auth.NeedLookup,
	"GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle":       auth.NeedLookup,
	"GET /lookup/v2/destination/{domain}/{tenant}/{namespace}/{topic}":        auth.NeedLookup,
	"GET /lookup/v2/destination/{domain}/{tenant}/{namespace}/{topic}/bundle": auth.NeedLookup,
	"GET /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema":               auth.NeedLookup,
	"GET /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema/{version}":     auth.NeedLookup,
	"GET /admin/v2/schemas/{tenant}/{namespace}/{topic}/schemas":              auth.NeedLookup,
	"POST /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema":              auth.NeedTenantAdmin,
	"DELETE /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema":            auth.NeedTenantAdmin,
	"POST /admin/v2/schemas/{tenant}/{namespace}/{topic}/version":             auth.NeedLookup,
	"POST /admin/v2/schemas/{tenant}/{namespace}/{topic}/compatibility":       auth.NeedLookup,
	// Topics and subscriptions: reads need lookup, subscription operations consume (with the subscription's roles), the rest the tenant's admins, as do their policies (topicPolicies).
	"PUT /admin/v2/{domain}/{tenant}/{namespace}/{topic}":                                                           auth.NeedTenantAdmin,
	"DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}":                                                        auth.NeedTenantAdmin,
	"PUT /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions":                                                auth.NeedTenantAdmin,
	"POST /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions":                                               auth.NeedTenantAdmin,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions":                                                auth.NeedLookup,
	"DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions":                                             auth.NeedTenantAdmin,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/stats":                                                     auth.NeedLookup,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitioned-stats":                                         auth.NeedLookup,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/internalStats":                                             auth.NeedLookup,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitioned-internalStats":                                 auth.NeedLookup,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/lastMessageId":                                             auth.NeedConsume,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/messageid/{timestamp}":                                     auth.NeedConsume,
	"PUT /admin/v2/{domain}/{tenant}/{namespace}/{topic}/unload":                                                    auth.NeedTenantAdmin,
	"POST /admin/v2/{domain}/{tenant}/{namespace}/{topic}/terminate":                                                auth.NeedTenantAdmin,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/properties":                                                auth.NeedLookup,
	"PUT /admin/v2/{domain}/{tenant}/{namespace}/{topic}/properties":                                                auth.NeedTenantAdmin,
	"DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/properties":                                             auth.NeedTenantAdmin,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscriptions":                                             auth.NeedConsume,
	"PUT /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}":                               auth.NeedConsume,
	"DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}":                            auth.NeedConsume,
	"POST /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/resetcursor":                  auth.NeedConsume,
	"POST /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/resetcursor/{timestamp}":      auth.NeedConsume,
	"POST /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/skip/{n}":                     auth.NeedConsume,
	"POST /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/skip_all":                     auth.NeedConsume,
	"POST /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/expireMessages/{seconds}":     auth.NeedConsume,
	"POST /admin/v2/{domain}/{tenant}/{namespace}/{topic}/all_subscription/expireMessages/{seconds}":                auth.NeedConsume,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/position/{n}":                  auth.NeedConsume,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/ledger/{ledger}/entry/{entry}":                             auth.NeedConsume,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/properties":                    auth.NeedConsume,
	"PUT /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/properties":                    auth.NeedConsume,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/replicatedSubscriptionStatus":  auth.NeedConsume,
	"POST /admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}/replicatedSubscriptionStatus": auth.NeedConsume,
	"GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions":                                               auth.NeedTenantAdmin,
	"POST /admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions/{role}":                                       auth.NeedTenantAdmin,
	"DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions/{role}":                                     auth.NeedTenantAdmin,
}

// policyNeed is what every route of the policy tables (namespacePolicies, topicPolicies) needs:
// the tenant's admin, as in Pulsar. The tables' rows are those routes' entries.
const policyNeed = auth.NeedTenantAdmin

// permissionTable is every route's need: routePermissions and the policy tables' routes. A route
// with an entry in both is an error (NewHandler returns it), so each route has exactly one.
var permissionTable = sync.OnceValues(func() (map[string]auth.Need, error) {
	return mergePermissions(routePermissions, policyRouteKeys(), policyNeed)
})

// mergePermissions adds the keys with need to listed, naming any key already there.
func mergePermissions(listed map[string]auth.Need, keys []string, need auth.Need) (map[string]auth.Need, error) {
	out := maps.Clone(listed)
	var twice []string
	for _, k := range keys {
		if _, found := out[k]; found {
			twice = append(twice, k)
			continue
		}
		out[k] = need
	}
	if len(twice) > 0 {
		return out, fmt.Errorf("admin: routes with two permission entries (routePermissions and a policy table, or two rows): %s", strings.Join(twice, ", "))
	}
	return out, nil
}
