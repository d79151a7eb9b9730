package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/naming"
)

// ---- clusters ----

// Clusters returns the registered cluster names, sorted.
func (c *Catalog) Clusters() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return sortedKeys(c.clusters)
}

// Cluster returns one cluster.
func (c *Catalog) Cluster(name string) (adminapi.ClusterData, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.clusters[name]
	return e.val, ok
}

// WaitForClusters waits until every named cluster is registered in this catalog's view (up to the
// catalog's catch-up timeout): a cluster registered through another catalog of the same store
// (another node) shows up here only once the watch delivers it.
func (c *Catalog) WaitForClusters(ctx context.Context, names ...string) error {
	err := c.waitFor(ctx, func() bool {
		for _, n := range names {
			if _, ok := c.clusters[n]; !ok {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("catalog: waiting for clusters %v to be registered: %w", names, err)
	}
	return nil
}

func validateClusterData(d adminapi.ClusterData) error {
	check := func(field, v string, schemes ...string) error {
		if v == "" {
			return nil
		}
		for _, one := range strings.Split(v, ",") {
			u, err := url.Parse(strings.TrimSpace(one))
			if err != nil || u.Host == "" || !slices.Contains(schemes, u.Scheme) {
				return refuse(ErrPrecondition, "Invalid %s %q: want %s://host:port", field, v, strings.Join(schemes, "|"))
			}
		}
		return nil
	}
	for _, f := range []struct {
		name, v string
		schemes []string
	}{
		{"serviceUrl", d.ServiceURL, []string{"http"}},
		{"serviceUrlTls", d.ServiceURLTLS, []string{"https"}},
		{"brokerServiceUrl", d.BrokerServiceURL, []string{"pulsar"}},
		{"brokerServiceUrlTls", d.BrokerServiceURLTLS, []string{"pulsar+ssl"}},
	} {
		if err := check(f.name, f.v, f.schemes...); err != nil {
			return err
		}
	}
	return nil
}

// CreateCluster registers a cluster; ErrAlreadyExists if it is registered.
func (c *Catalog) CreateCluster(ctx context.Context, name string, data adminapi.ClusterData) error {
	if err := naming.ValidateCluster(name); err != nil {
		return refuse(ErrPrecondition, "Cluster name is not valid: %v", err)
	}
	if err := validateClusterData(data); err != nil {
		return err
	}
	return update(ctx, c, clusterKey(name), func() adminapi.ClusterData { return adminapi.ClusterData{} },
		func(v *adminapi.ClusterData, exists bool) (bool, error) {
			if exists {
				return false, refuse(ErrAlreadyExists, "Cluster already exists")
			}
			*v = data
			return false, nil
		})
}

// validClusterName refuses names that are not cluster names (a '/' would address another key).
func validClusterName(name string) error {
	if err := naming.ValidateCluster(name); err != nil {
		return refuse(ErrPrecondition, "Cluster name is not valid: %v", err)
	}
	return nil
}

// validTenantName refuses names that are not tenant names (a '/' would address a namespace key).
func validTenantName(name string) error {
	if err := naming.ValidateTenant(name); err != nil {
		return refuse(ErrPrecondition, "Tenant name is not valid: %v", err)
	}
	return nil
}

// UpdateCluster replaces a cluster's data except its migration state (Migrated,
// MigratedClusterURL: see UpdateClusterWith); ErrNotFound if it is not registered.
func (c *Catalog) UpdateCluster(ctx context.Context, name string, data adminapi.ClusterData) error {
	if err := validClusterName(name); err != nil {
		return err
	}
	if err := validateClusterData(data); err != nil {
		return err
	}
	return update(ctx, c, clusterKey(name), func() adminapi.ClusterData { return adminapi.ClusterData{} },
		func(v *adminapi.ClusterData, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Cluster does not exist")
			}
			// The migration state changes only through its own endpoint (Pulsar keeps it apart
			// from the cluster data), so an update of the URLs never ends or starts a switchover.
			migrated, target := v.Migrated, v.MigratedClusterURL
			*v = data
			v.Migrated, v.MigratedClusterURL = migrated, target
			return false, nil
		})
}

// UpdateClusterWith applies fn to a registered cluster's data (read-modify-write).
func (c *Catalog) UpdateClusterWith(ctx context.Context, name string, fn func(*adminapi.ClusterData) error) error {
	if err := validClusterName(name); err != nil {
		return err
	}
	return update(ctx, c, clusterKey(name), func() adminapi.ClusterData { return adminapi.ClusterData{} },
		func(v *adminapi.ClusterData, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Cluster does not exist")
			}
			if err := fn(v); err != nil {
				return false, err
			}
			return false, validateClusterData(*v)
		})
}

// DeleteCluster removes a cluster. Refused (ErrPrecondition) while a tenant allows it or a namespace
// replicates to it, so that no policy names an unknown cluster.
func (c *Catalog) DeleteCluster(ctx context.Context, name string) error {
	if err := validClusterName(name); err != nil {
		return err
	}
	c.mu.RLock()
	if _, ok := c.clusters[name]; !ok {
		c.mu.RUnlock()
		return refuse(ErrNotFound, "Cluster does not exist")
	}
	for _, t := range sortedKeys(c.tenants) {
		if slices.Contains(c.tenants[t].val.AllowedClusters, name) {
			c.mu.RUnlock()
			return refuse(ErrPrecondition, "Cluster %s is still in the allowed clusters of tenant %s", name, t)
		}
	}
	for _, ns := range sortedKeys(c.namespaces) {
		if slices.Contains(c.namespaces[ns].val.ReplicationClusters, name) {
			c.mu.RUnlock()
			return refuse(ErrPrecondition, "Cluster %s is still in the replication clusters of namespace %s", name, ns)
		}
	}
	for _, t := range sortedKeys(c.topicPolicies) {
		if slices.Contains(c.topicPolicies[t].val.ReplicationClusters, name) {
			c.mu.RUnlock()
			return refuse(ErrPrecondition, "Cluster %s is still in the replication clusters of topic %s", name, t)
		}
	}
	c.mu.RUnlock()
	return update(ctx, c, clusterKey(name), func() adminapi.ClusterData { return adminapi.ClusterData{} },
		func(v *adminapi.ClusterData, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Cluster does not exist")
			}
			return true, nil
		})
}

// EnsureCluster registers a cluster or, if it exists, updates its serviceUrl and brokerServiceUrl
// (and their TLS forms) to data's when they differ, keeping every other field. Brokers call it on
// every start with their advertised URLs.
func (c *Catalog) EnsureCluster(ctx context.Context, name string, data adminapi.ClusterData) error {
	if err := naming.ValidateCluster(name); err != nil {
		return refuse(ErrPrecondition, "Cluster name is not valid: %v", err)
	}
	if err := validateClusterData(data); err != nil {
		return err
	}
	return update(ctx, c, clusterKey(name), func() adminapi.ClusterData { return adminapi.ClusterData{} },
		func(v *adminapi.ClusterData, exists bool) (bool, error) {
			if !exists {
				*v = data
				return false, nil
			}
			before := *v
			v.ServiceURL, v.BrokerServiceURL = data.ServiceURL, data.BrokerServiceURL
			if data.ServiceURLTLS != "" {
				v.ServiceURLTLS = data.ServiceURLTLS
			}
			if data.BrokerServiceURLTLS != "" {
				v.BrokerServiceURLTLS = data.BrokerServiceURLTLS
			}
			if before.ServiceURL == v.ServiceURL && before.BrokerServiceURL == v.BrokerServiceURL &&
				before.ServiceURLTLS == v.ServiceURLTLS && before.BrokerServiceURLTLS == v.BrokerServiceURLTLS {
				return false, errSkipWrite
			}
			return false, nil
		})
}

// ---- tenants ----

// Tenants returns the tenant names, sorted.
func (c *Catalog) Tenants() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return sortedKeys(c.tenants)
}

// Tenant returns one tenant.
func (c *Catalog) Tenant(name string) (adminapi.TenantInfo, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.tenants[name]
	return e.val, ok
}

func (c *Catalog) validateTenantInfo(info *adminapi.TenantInfo) error {
	if info.AdminRoles == nil {
		info.AdminRoles = []string{}
	}
	if len(info.AllowedClusters) == 0 {
		return refuse(ErrPrecondition, "Clusters can not be empty")
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	var clean []string
	for _, cl := range info.AllowedClusters {
		if strings.TrimSpace(cl) == "" {
			return refuse(ErrPrecondition, "Clusters can not be empty")
		}
		if _, ok := c.clusters[cl]; !ok {
			return refuse(ErrPrecondition, "Clusters do not exist: %s", cl)
		}
		if !slices.Contains(clean, cl) {
			clean = append(clean, cl)
		}
	}
	info.AllowedClusters = clean
	return nil
}

// CreateTenant creates a tenant whose allowed clusters must all be registered.
func (c *Catalog) CreateTenant(ctx context.Context, name string, info adminapi.TenantInfo) error {
	if err := naming.ValidateTenant(name); err != nil {
		return refuse(ErrPrecondition, "Tenant name is not valid: %v", err)
	}
	if err := c.validateTenantInfo(&info); err != nil {
		return err
	}
	return update(ctx, c, tenantKey(name), func() adminapi.TenantInfo { return adminapi.TenantInfo{} },
		func(v *adminapi.TenantInfo, exists bool) (bool, error) {
			if exists {
				return false, refuse(ErrAlreadyExists, "Tenant already exists")
			}
			*v = info
			return false, nil
		})
}

// UpdateTenant replaces a tenant's data. A cluster still used by one of the tenant's namespaces for
// replication cannot be removed from its allowed clusters (ErrPrecondition).
func (c *Catalog) UpdateTenant(ctx context.Context, name string, info adminapi.TenantInfo) error {
	if err := validTenantName(name); err != nil {
		return err
	}
	if err := c.validateTenantInfo(&info); err != nil {
		return err
	}
	c.mu.RLock()
	for _, ns := range sortedKeys(c.namespaces) {
		if !strings.HasPrefix(ns, name+"/") {
			continue
		}
		for _, cl := range c.namespaces[ns].val.ReplicationClusters {
			if !slices.Contains(info.AllowedClusters, cl) {
				c.mu.RUnlock()
				return refuse(ErrPrecondition, "Failed to update the tenant: namespace %s still replicates to cluster %s", ns, cl)
			}
		}
	}
	for _, t := range sortedKeys(c.topicPolicies) {
		if !topicInTenant(t, name) {
			continue
		}
		for _, cl := range c.topicPolicies[t].val.ReplicationClusters {
			if !slices.Contains(info.AllowedClusters, cl) {
				c.mu.RUnlock()
				return refuse(ErrPrecondition, "Failed to update the tenant: topic %s still replicates to cluster %s", t, cl)
			}
		}
	}
	c.mu.RUnlock()
	return update(ctx, c, tenantKey(name), func() adminapi.TenantInfo { return adminapi.TenantInfo{} },
		func(v *adminapi.TenantInfo, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Tenant does not exist")
			}
			*v = info
			return false, nil
		})
}

// DeleteTenant removes a tenant that has no namespaces.
func (c *Catalog) DeleteTenant(ctx context.Context, name string) error {
	if err := validTenantName(name); err != nil {
		return err
	}
	if len(c.Namespaces(name)) > 0 {
		if _, ok := c.Tenant(name); ok {
			return refuse(ErrConflict, "The tenant still has active namespaces")
		}
	}
	return update(ctx, c, tenantKey(name), func() adminapi.TenantInfo { return adminapi.TenantInfo{} },
		func(v *adminapi.TenantInfo, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Tenant does not exist")
			}
			return true, nil
		})
}

func topicInTenant(topic, tenant string) bool {
	i := strings.Index(topic, "://")
	return i >= 0 && strings.HasPrefix(topic[i+3:], tenant+"/")
}

// EnsureTenant creates the tenant if it does not exist; an existing tenant is left as it is.
func (c *Catalog) EnsureTenant(ctx context.Context, name string, info adminapi.TenantInfo) error {
	err := c.CreateTenant(ctx, name, info)
	if err != nil && IsKind(err, ErrAlreadyExists) {
		return nil
	}
	return err
}

// AllowClusters adds clusters to an existing tenant's allowedClusters by compare-and-swap: every
// cluster listed already stays, one another writer added a moment ago included. Each cluster must be
// registered; a missing tenant is ErrNotFound. It returns once this catalog shows the result.
func (c *Catalog) AllowClusters(ctx context.Context, tenant string, clusters ...string) error {
	if err := validTenantName(tenant); err != nil {
		return err
	}
	c.mu.RLock()
	for _, cl := range clusters {
		if _, ok := c.clusters[cl]; !ok {
			c.mu.RUnlock()
			return refuse(ErrPrecondition, "Clusters do not exist: %s", cl)
		}
	}
	c.mu.RUnlock()
	return update(ctx, c, tenantKey(tenant), func() adminapi.TenantInfo { return adminapi.TenantInfo{} },
		func(v *adminapi.TenantInfo, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Tenant does not exist")
			}
			before := len(v.AllowedClusters)
			for _, cl := range clusters {
				if !slices.Contains(v.AllowedClusters, cl) {
					v.AllowedClusters = append(v.AllowedClusters, cl)
				}
			}
			if len(v.AllowedClusters) == before {
				return false, errSkipWrite
			}
			if v.AdminRoles == nil {
				v.AdminRoles = []string{}
			}
			return false, nil
		})
}

// ---- namespaces ----

// Namespaces returns the "tenant/ns" names of a tenant, sorted.
func (c *Catalog) Namespaces(tenant string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for _, ns := range sortedKeys(c.namespaces) {
		if strings.HasPrefix(ns, tenant+"/") {
			out = append(out, ns)
		}
	}
	return out
}

// AllNamespaces returns every "tenant/ns", sorted.
func (c *Catalog) AllNamespaces() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return sortedKeys(c.namespaces)
}

// Namespace returns a namespace's policies (a copy the caller may modify).
func (c *Catalog) Namespace(ns string) (adminapi.Policies, bool) {
	c.mu.RLock()
	e, ok := c.namespaces[ns]
	c.mu.RUnlock()
	if !ok {
		return adminapi.Policies{}, false
	}
	return clonePolicies(e.val), true
}

// NamespaceShared returns the cached policies without copying them: cheap (no allocation) for hot
// paths such as loading thousands of topics, but the caller must treat the result as read-only — it
// is shared with every other reader and replaced, never modified, when the namespace changes.
func (c *Catalog) NamespaceShared(ns string) (*adminapi.Policies, bool) {
	c.mu.RLock()
	e, ok := c.namespaces[ns]
	c.mu.RUnlock()
	if !ok {
		return nil, false
	}
	return e.ptr, true
}

func clonePolicies(p adminapi.Policies) adminapi.Policies {
	var out adminapi.Policies
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("catalog: policies do not encode: %v", err))
	}
	out = adminapi.NewPolicies()
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("catalog: policies do not decode: %v", err))
	}
	out.Normalize()
	return out
}

// ValidateReplicationClusters applies Pulsar's rules to a replication list for a namespace or topic
// of tenant: not empty, no "global", every cluster registered (ErrForbidden "Invalid cluster id")
// and allowed for the tenant (ErrForbidden). It returns the list without duplicates.
func (c *Catalog) ValidateReplicationClusters(tenant string, clusters []string) ([]string, error) {
	if len(clusters) == 0 {
		return nil, refuse(ErrPrecondition, "ClusterIds should not be null or empty")
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	ti, ok := c.tenants[tenant]
	if !ok {
		return nil, refuse(ErrNotFound, "Tenant does not exist")
	}
	var out []string
	for _, cl := range clusters {
		if cl == "global" {
			return nil, refuse(ErrPrecondition, "Cannot specify global in the list of replication clusters")
		}
		if _, ok := c.clusters[cl]; !ok {
			return nil, refuse(ErrForbidden, "Invalid cluster id: %s", cl)
		}
		if !slices.Contains(ti.val.AllowedClusters, cl) {
			return nil, refuse(ErrForbidden, "Cluster [%s] is not in the list of allowed clusters list for tenant [%s]", cl, tenant)
		}
		if !slices.Contains(out, cl) {
			out = append(out, cl)
		}
	}
	return out, nil
}

// maxBundles bounds a namespace's bundles: each is an ownership record in a multi-broker cluster.
const maxBundles = 1024

// CreateNamespace creates a namespace with policies (already defaulted by the caller: an empty
// replication list is refused here). The tenant must exist and the replication clusters be valid.
func (c *Catalog) CreateNamespace(ctx context.Context, ns string, policies adminapi.Policies) error {
	name, err := parseNamespace(ns)
	if err != nil {
		return err
	}
	if _, ok := c.Tenant(name.Tenant); !ok {
		return refuse(ErrNotFound, "Tenant does not exist")
	}
	policies.Normalize()
	switch b := policies.Bundles; {
	case b == nil || (b.NumBundles <= 0 && len(b.Boundaries) < 2):
		policies.Bundles = adminapi.DefaultBundles()
	case b.NumBundles > maxBundles || len(b.Boundaries) > maxBundles+1:
		return refuse(ErrInvalid, "Invalid number of bundles: at most %d", maxBundles)
	case len(b.Boundaries) < 2:
		policies.Bundles = adminapi.EvenBundles(b.NumBundles)
	}
	clusters, err := c.ValidateReplicationClusters(name.Tenant, policies.ReplicationClusters)
	if err != nil {
		return err
	}
	policies.ReplicationClusters = clusters
	if err := ValidatePolicies(&policies); err != nil {
		return err
	}
	return update(ctx, c, namespaceKey(name), adminapi.NewPolicies,
		func(v *adminapi.Policies, exists bool) (bool, error) {
			if exists {
				return false, refuse(ErrAlreadyExists, "Namespace already exists")
			}
			*v = policies
			return false, nil
		})
}

// UpdateNamespace applies fn to a namespace's policies with compare-and-swap (fn may run more than
// once). The result is validated as a whole; the replication list too if fn changed it.
func (c *Catalog) UpdateNamespace(ctx context.Context, ns string, fn func(p *adminapi.Policies) error) error {
	name, err := parseNamespace(ns)
	if err != nil {
		return err
	}
	if _, ok := c.Tenant(name.Tenant); !ok {
		return refuse(ErrNotFound, "Tenant does not exist")
	}
	return update(ctx, c, namespaceKey(name), adminapi.NewPolicies,
		func(v *adminapi.Policies, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Namespace does not exist")
			}
			v.Normalize()
			before := slices.Clone(v.ReplicationClusters)
			old := clonePolicies(*v)
			if err := fn(v); err != nil {
				return false, err
			}
			v.Normalize()
			if !slices.Equal(before, v.ReplicationClusters) {
				clusters, err := c.ValidateReplicationClusters(name.Tenant, v.ReplicationClusters)
				if err != nil {
					return false, err
				}
				v.ReplicationClusters = clusters
			}
			return false, validatePolicyUpdate(&old, v)
		})
}

// DeleteNamespace removes a namespace. It is refused (ErrConflict) while partitioned topics exist in
// it; callers check the broker's topics first. Topic-level policies of the namespace are removed too.
func (c *Catalog) DeleteNamespace(ctx context.Context, ns string) error {
	name, err := parseNamespace(ns)
	if err != nil {
		return err
	}
	if _, ok := c.Tenant(name.Tenant); !ok {
		return refuse(ErrNotFound, "Tenant does not exist")
	}
	if len(c.PartitionedTopics(ns)) > 0 {
		return refuse(ErrConflict, "Cannot delete non empty namespace")
	}
	err = update(ctx, c, namespaceKey(name), adminapi.NewPolicies,
		func(v *adminapi.Policies, exists bool) (bool, error) {
			if !exists {
				return false, refuse(ErrNotFound, "Namespace does not exist")
			}
			return true, nil
		})
	if err != nil {
		return err
	}
	for _, t := range c.topicPoliciesIn(ns) {
		if err := c.DeleteTopicPolicies(ctx, t); err != nil && !IsKind(err, ErrNotFound) {
			c.log.Warn("leftover topic policies of a deleted namespace", "topic", t, "err", err)
		}
	}
	return nil
}

// EnsureNamespace creates the namespace if it does not exist; an existing one is left as it is.
func (c *Catalog) EnsureNamespace(ctx context.Context, ns string, policies adminapi.Policies) error {
	err := c.CreateNamespace(ctx, ns, policies)
	if err != nil && IsKind(err, ErrAlreadyExists) {
		return nil
	}
	return err
}

// IsKind reports whether err is a catalog refusal of the given kind.
func IsKind(err error, kind error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == kind
}
