package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/internal/metadata/etcdstore/etcdtest"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestSharedConfigurationStore starts two clusters, as real `meridian standalone` processes, on one
// etcd configuration store (--config-store) and checks that a tenant and namespace created through
// one cluster's admin API are visible through the other's within one second (docs/design.md, "Metadata and configuration": watches,
// not polling). It runs against etcd 3.7 (the client's version) and against Debian's etcd-server 3.4 (installed
// by .ci/run; skipped where no etcd binary is on PATH). The propagation time is logged.
func TestSharedConfigurationStore(t *testing.T) {
	stores := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"etcd-built", func(t *testing.T) string { return harness.StartEtcd(t).ConfigStoreURL("meridian-e2e") }},
		{"etcd-installed", func(t *testing.T) string { return etcdtest.StartInstalled(t).URL("/meridian-e2e") }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			url := st.url(t)
			east := harness.StartStandalone(t, harness.Options{Cluster: "east", ConfigStore: url})
			west := harness.StartStandalone(t, harness.Options{Cluster: "west", ConfigStore: url})
			eastAdmin, westAdmin := harness.NewAdmin(t, east), harness.NewAdmin(t, west)

			clusters, err := westAdmin.Clusters().List()
			if err != nil || !slices.Contains(clusters, "east") || !slices.Contains(clusters, "west") {
				t.Fatalf("clusters seen by west = %v, %v; want both registered in the shared store", clusters, err)
			}
			// East learns of west's registration through its watch, like any other change: a
			// tenant naming west is valid on east once that has arrived.
			harness.Eventually(t, time.Second, "west's registration visible on east", func() error {
				clusters, err := eastAdmin.Clusters().List()
				if err == nil && !slices.Contains(clusters, "west") {
					err = fmt.Errorf("east lists %v", clusters)
				}
				return err
			})
			if err := eastAdmin.Tenants().Create(utils.TenantData{Name: "acme", AllowedClusters: []string{"east", "west"}}); err != nil {
				t.Fatalf("create tenant on east: %v", err)
			}
			created := time.Now()
			if err := eastAdmin.Namespaces().CreateNamespace("acme/orders"); err != nil {
				t.Fatalf("create namespace on east: %v", err)
			}
			harness.Eventually(t, time.Second-time.Since(created), "the namespace created on east visible on west", func() error {
				nss, err := westAdmin.Namespaces().GetNamespaces("acme")
				if err == nil && !slices.Contains(nss, "acme/orders") {
					err = fmt.Errorf("west lists %v", nss)
				}
				return err
			})
			t.Logf("%s: namespace created on east visible on west after %v (including the create call's own answer)", st.name, time.Since(created).Round(time.Millisecond))
		})
	}
}
