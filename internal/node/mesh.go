package node

import (
	"context"
	"fmt"
	"slices"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/naming"
)

// Catalog returns the node's view of the configuration store.
func (n *Node) Catalog() *catalog.Catalog { return n.components.catalog }

// ReplicateFullMesh makes namespace public/default replicate between all clusters (full mesh),
// through the configuration store that n shares with the others (the `--clusters` mode and
// brokertest.StartClusters): every cluster is added to tenant public's allowed clusters (by
// compare-and-swap, keeping every cluster listed there), then the namespace's replication_clusters
// become exactly clusters. Each node registers its own cluster on start, through its own view of
// the store: n's view may show the others' only a moment later, so this waits for them (up to the
// catalog's catch-up timeout). Idempotent.
func ReplicateFullMesh(ctx context.Context, n *Node, clusters []string) error {
	cat := n.Catalog()
	if err := cat.WaitForClusters(ctx, clusters...); err != nil {
		return fmt.Errorf("full mesh: %w", err)
	}
	if err := cat.AllowClusters(ctx, naming.DefaultTenant, clusters...); err != nil {
		return fmt.Errorf("full mesh: allow clusters for tenant %s: %w", naming.DefaultTenant, err)
	}
	ns := naming.DefaultTenant + "/" + naming.DefaultNamespace
	err := cat.UpdateNamespace(ctx, ns, func(p *adminapi.Policies) error {
		p.ReplicationClusters = slices.Clone(clusters)
		return nil
	})
	if err != nil {
		return fmt.Errorf("full mesh: replication clusters of %s: %w", ns, err)
	}
	return nil
}
