package admin

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
)

// Blue-green migration (Pulsar's PIP-188 admin surface; docs/geo-replication.md "Planned
// switchover"). The state lives in the configuration store with the cluster it concerns:
// `migrated` and `migratedClusterUrl` of the cluster's own ClusterData, so that clusters sharing one
// store each keep their own. The namespace switch is the namespace policies' `migrated` flag; it
// moves a namespace's clients to the URL of the cluster-level migration (set with migrated=false to
// move only chosen namespaces), as Pulsar does.

// ClusterMigration is the answer of `GET /admin/v2/clusters/{cluster}/migrate` (Pulsar's
// ClusterPolicies).
type ClusterMigration struct {
	Migrated           bool                 `json:"migrated"`
	MigratedClusterURL *adminapi.ClusterURL `json:"migratedClusterUrl,omitempty"`
}

func (h *Handler) migrationRoutes() {
	h.handle("GET /admin/v2/clusters/{cluster}/migrate", readEndpoint(h.existingCluster, func(_ *http.Request, d adminapi.ClusterData) (ClusterMigration, error) {
		return ClusterMigration{Migrated: d.Migrated, MigratedClusterURL: d.MigratedClusterURL}, nil
	}))
	h.handle("POST /admin/v2/clusters/{cluster}/migrate", h.clusterMigrationSet)
}

// namespaceMigrationPolicy is `.../namespaces/{t}/{ns}/migration`: the namespace's switch (true or
// false, also as a JSON string).
func namespaceMigrationPolicy() nsPolicy {
	return fieldPolicy("migration", post, func(p *adminapi.Policies) *bool { return &p.Migrated }, decodeLenientBool, nil)
}

// clusterMigrationSet stores `migrated` and the target's URLs. migrated=true needs at least one
// URL (400 otherwise, Pulsar's "Cluster url must not be empty"); migrated=false keeps whatever URL
// the body gives (none clears it), so a namespace switch can use it.
func (h *Handler) clusterMigrationSet(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("cluster")
	migrated := queryBool(r, "migrated")
	b, err := readBody(r)
	if err != nil {
		return err
	}
	var target adminapi.ClusterURL
	if strings.TrimSpace(string(b)) != "" {
		if err := decodeBytes(b, &target); err != nil {
			return err
		}
	}
	empty := target == adminapi.ClusterURL{}
	if migrated && empty {
		return fail(http.StatusBadRequest, "Cluster url must not be empty")
	}
	if err := validateMigrationURL(target); err != nil {
		return err
	}
	if _, found := h.cat.Cluster(name); !found {
		return fail(http.StatusNotFound, "Cluster does not exist")
	}
	err = h.cat.UpdateClusterWith(r.Context(), name, func(d *adminapi.ClusterData) error {
		d.Migrated = migrated
		d.MigratedClusterURL = nil
		if !empty {
			t := target
			d.MigratedClusterURL = &t
		}
		return nil
	})
	if err != nil {
		return err
	}
	h.log.Info("cluster migration state changed", "cluster", name, "migrated", migrated,
		"brokerServiceUrl", target.BrokerServiceURL, "brokerServiceUrlTls", target.BrokerServiceURLTLS)
	// Pulsar answers this write with 200.
	w.WriteHeader(http.StatusOK)
	return nil
}

// validateMigrationURL checks each given URL's scheme and host: clients are sent the broker
// URLs as they are, and a malformed one would strand them.
func validateMigrationURL(u adminapi.ClusterURL) error {
	for _, f := range []struct {
		field, value string
		schemes      []string
	}{
		{"serviceUrl", u.ServiceURL, []string{"http"}},
		{"serviceUrlTls", u.ServiceURLTLS, []string{"https"}},
		{"brokerServiceUrl", u.BrokerServiceURL, []string{"pulsar"}},
		{"brokerServiceUrlTls", u.BrokerServiceURLTLS, []string{"pulsar+ssl"}},
	} {
		if f.value == "" {
			continue
		}
		p, err := url.Parse(f.value)
		if err != nil || p.Host == "" || !slices.Contains(f.schemes, p.Scheme) {
			return fail(http.StatusBadRequest, "Invalid %s %q: want %s://host:port", f.field, f.value, f.schemes[0])
		}
	}
	return nil
}
