package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/naming"
)

// bootstrapCatalog runs on every start, before the broker serves:
//
//   - it registers this cluster with its advertised URLs (or updates them);
//   - tenant public is created with allowedClusters [cluster] when it does not exist. When it exists
//     and this cluster is new to the store (its entry did not exist before this start), or another
//     cluster created the tenant between this catalog's view and its own attempt, the cluster adds
//     itself to the tenant's allowedClusters by compare-and-swap, keeping every cluster listed;
//     otherwise the tenant is left as it is, so an operator's later edits stand;
//   - namespace public/default is created with replication_clusters [cluster] when it does not
//     exist and the tenant allows this cluster. An existing one is never touched: whether and where
//     it replicates is the operator's choice.
//
// Several clusters sharing a configuration store may run it at the same moment against stale
// views: what another cluster already created is never an error. Only the store failing is.
func bootstrapCatalog(ctx context.Context, cat *catalog.Catalog, cluster string, urls adminapi.ClusterData, log *slog.Logger) error {
	_, known := cat.Cluster(cluster)
	if err := cat.EnsureCluster(ctx, cluster, urls); err != nil {
		return fmt.Errorf("register cluster %s: %w", cluster, err)
	}
	tenant := naming.DefaultTenant
	join := !known
	if _, ok := cat.Tenant(tenant); !ok {
		err := cat.CreateTenant(ctx, tenant, adminapi.TenantInfo{AllowedClusters: []string{cluster}})
		switch {
		case err == nil:
			join = false
		case catalog.IsKind(err, catalog.ErrAlreadyExists):
			join = true // another cluster created it after this catalog loaded its view
		default:
			return fmt.Errorf("create tenant %s: %w", tenant, err)
		}
	}
	if join {
		err := cat.AllowClusters(ctx, tenant, cluster)
		switch {
		case err == nil:
			log.Info("joined tenant", "tenant", tenant, "cluster", cluster)
		case catalog.IsKind(err, catalog.ErrNotFound):
			// Deleted since it was seen: nothing to join, and the namespace step says so.
		default:
			return fmt.Errorf("allow cluster %s for tenant %s: %w", cluster, tenant, err)
		}
	}
	return ensureDefaultNamespace(ctx, cat, cluster, log)
}

// ensureDefaultNamespace creates public/default replicating to cluster alone, unless it exists.
// Without the tenant allowing cluster it cannot be created here; the cluster starts anyway.
func ensureDefaultNamespace(ctx context.Context, cat *catalog.Catalog, cluster string, log *slog.Logger) error {
	tenant := naming.DefaultTenant
	ns := tenant + "/" + naming.DefaultNamespace
	if _, ok := cat.Namespace(ns); ok {
		return nil
	}
	info, ok := cat.Tenant(tenant)
	if !ok || !slices.Contains(info.AllowedClusters, cluster) {
		log.Warn("namespace not created: the cluster is not allowed for its tenant; allow it (tenant update) or create the namespace through an allowed cluster",
			"namespace", ns, "cluster", cluster, "tenant", tenant, "allowedClusters", info.AllowedClusters)
		return nil
	}
	policies := adminapi.NewPolicies()
	policies.ReplicationClusters = []string{cluster}
	err := cat.CreateNamespace(ctx, ns, policies)
	switch {
	case err == nil, catalog.IsKind(err, catalog.ErrAlreadyExists):
		return nil
	case catalog.IsKind(err, catalog.ErrForbidden), catalog.IsKind(err, catalog.ErrNotFound):
		// The tenant changed between the look and the write (an operator's edit).
		log.Warn("namespace not created", "namespace", ns, "cluster", cluster, "err", err)
		return nil
	default:
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
}
