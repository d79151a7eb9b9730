package admin

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/buildinfo"
	"github.com/meridian-mq/meridian/internal/naming"
)

func (h *Handler) routes() {
	h.handle("GET /metrics", func(w http.ResponseWriter, r *http.Request) error {
		h.serveMetrics(w, r)
		return nil
	})
	h.handle("/", h.notFound)
	h.brokerStatsRoutes()

	// brokers
	h.handle("GET /admin/v2/brokers/ready", h.brokersReady)
	h.handle("GET /admin/v2/brokers/health", h.brokersHealth)
	h.handle("GET /admin/v2/brokers", h.brokersList)
	h.handle("GET /admin/v2/brokers/{cluster}", readEndpoint(h.existingCluster, h.brokersOfCluster))
	h.handle("GET /admin/v2/brokers/leaderBroker", h.leaderBroker)
	h.handle("GET /admin/v2/brokers/configuration", h.dynamicConfigNames)
	h.handle("GET /admin/v2/brokers/configuration/values", func(w http.ResponseWriter, r *http.Request) error {
		return ok(w, nonNilMap(h.cat.DynamicConfig()))
	})
	h.handle("GET /admin/v2/brokers/configuration/runtime", func(w http.ResponseWriter, r *http.Request) error {
		return ok(w, nonNilMap(h.cat.DynamicConfig()))
	})
	h.handle("POST /admin/v2/brokers/configuration/{name}/{value...}", func(w http.ResponseWriter, r *http.Request) error {
		if err := h.cat.SetDynamicConfig(r.Context(), r.PathValue("name"), r.PathValue("value")); err != nil {
			return err
		}
		// Pulsar answers this write with 200, and the client test suite checks it.
		w.WriteHeader(http.StatusOK)
		return nil
	})
	h.handle("DELETE /admin/v2/brokers/configuration/{name}", func(w http.ResponseWriter, r *http.Request) error {
		if err := h.cat.DeleteDynamicConfig(r.Context(), r.PathValue("name")); err != nil {
			return err
		}
		return noContent(w)
	})
	h.handle("GET /admin/v2/brokers/internal-configuration", func(w http.ResponseWriter, r *http.Request) error {
		return ok(w, map[string]any{})
	})
	// Pulsar answers its version as plain text; build-info adds the commit and the Go version.
	h.handle("GET /admin/v2/brokers/version", func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, err := w.Write([]byte(buildinfo.Read().Version))
		return err
	})
	h.handle("GET /admin/v2/brokers/build-info", func(w http.ResponseWriter, r *http.Request) error {
		return ok(w, buildinfo.Read())
	})

	// clusters
	h.handle("GET /admin/v2/clusters", h.clustersList)
	h.handle("GET /admin/v2/clusters/{cluster}", readEndpoint(h.existingCluster, func(_ *http.Request, d adminapi.ClusterData) (adminapi.ClusterData, error) {
		return d, nil
	}))
	h.handle("PUT /admin/v2/clusters/{cluster}", writeEndpoint(pathValue("cluster"), h.clusterCreate))
	h.handle("POST /admin/v2/clusters/{cluster}", writeEndpoint(pathValue("cluster"), h.clusterUpdate))
	h.handle("DELETE /admin/v2/clusters/{cluster}", writeEndpoint(pathValue("cluster"), func(r *http.Request, name string) error {
		return h.cat.DeleteCluster(r.Context(), name)
	}))
	h.handle("GET /admin/v2/clusters/{cluster}/peers", endpoint(h.existingCluster, func(_ *http.Request, d adminapi.ClusterData) ([]string, error) {
		return d.PeerClusterNames, nil
	}, okOrNoContent))
	h.handle("GET /admin/v2/clusters/{cluster}/replicatorRoles", readEndpoint(h.existingCluster, replicatorRolesGet))
	h.handle("POST /admin/v2/clusters/{cluster}/replicatorRoles", writeEndpoint(pathValue("cluster"), h.replicatorRolesSet))
	h.handle("POST /admin/v2/clusters/{cluster}/peers", writeEndpoint(pathValue("cluster"), h.clusterPeersSet))
	h.migrationRoutes()
	h.handle("GET /admin/v2/clusters/{cluster}/failureDomains", readEndpoint(h.existingCluster, func(*http.Request, adminapi.ClusterData) (map[string]any, error) {
		return map[string]any{}, nil
	}))

	// tenants
	h.handle("GET /admin/v2/tenants", h.tenantsList)
	h.handle("GET /admin/v2/tenants/{tenant}", readEndpoint(h.existingTenant, func(_ *http.Request, t adminapi.TenantInfo) (adminapi.TenantInfo, error) {
		return t, nil
	}))
	h.handle("PUT /admin/v2/tenants/{tenant}", writeEndpoint(pathValue("tenant"), h.tenantCreate))
	h.handle("POST /admin/v2/tenants/{tenant}", writeEndpoint(pathValue("tenant"), func(r *http.Request, name string) error {
		t, err := decodeTenant(r)
		if err != nil {
			return err
		}
		return h.cat.UpdateTenant(r.Context(), name, t)
	}))
	h.handle("DELETE /admin/v2/tenants/{tenant}", writeEndpoint(pathValue("tenant"), func(r *http.Request, name string) error {
		return h.cat.DeleteTenant(r.Context(), name)
	}))

	h.namespaceRoutes()
	h.topicRoutes()
	h.topicPermissionRoutes()
	h.lookupRoutes()
	h.schemaRoutes()
	h.advertisementRoutes()
}

// notFound answers paths no endpoint serves; when the path exists for other methods it answers 405
// with Allow, as a ServeMux without the catch-all would.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) error {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return fail(http.StatusMethodNotAllowed, "Method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))
	}
	return fail(http.StatusNotFound, "Not found: %s %s", r.Method, r.URL.Path)
}

// ---- brokers ----

// storeCheckTimeout bounds the configuration store check of /health and /metrics.
const storeCheckTimeout = time.Second

// dynamicConfigNames are Pulsar's dynamic broker settings most often changed at runtime; Meridian
// stores any name it is given (GET .../configuration lists these plus every name set).
var dynamicConfigNames = []string{
	"allowAutoSubscriptionCreation", "allowAutoTopicCreation", "allowAutoTopicCreationType", "defaultNumPartitions",
	"brokerDeduplicationEnabled", "brokerDeleteInactiveTopicsEnabled", "backlogQuotaDefaultLimitBytes",
	"backlogQuotaDefaultLimitSecond", "defaultRetentionTimeInMinutes", "defaultRetentionSizeInMB", "ttlDurationDefaultInSeconds",
	"dispatchThrottlingRatePerTopicInMsg", "dispatchThrottlingRatePerTopicInByte", "dispatchThrottlingRatePerReplicatorInMsg",
	"dispatchThrottlingRatePerReplicatorInByte", "maxProducersPerTopic", "maxConsumersPerTopic", "maxConsumersPerSubscription",
	"maxUnackedMessagesPerConsumer", "maxUnackedMessagesPerSubscription", "maxMessageSize", "replicationProducerQueueSize",
}

func (h *Handler) dynamicConfigNames(w http.ResponseWriter, r *http.Request) error {
	names := slices.Clone(dynamicConfigNames)
	for k := range h.cat.DynamicConfig() {
		if !slices.Contains(names, k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return ok(w, names)
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (h *Handler) readyErr(r *http.Request) error {
	if h.cfg.Ready != nil {
		if err := h.cfg.Ready(r.Context()); err != nil {
			return fail(http.StatusServiceUnavailable, "Broker is not ready: %v", err)
		}
	}
	return nil
}

func (h *Handler) brokersReady(w http.ResponseWriter, r *http.Request) error {
	if err := h.readyErr(r); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain")
	_, err := w.Write([]byte("ok"))
	return err
}

func (h *Handler) brokersHealth(w http.ResponseWriter, r *http.Request) error {
	if err := h.readyErr(r); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeCheckTimeout)
	defer cancel()
	if err := h.cat.CheckStore(ctx); err != nil {
		return fail(http.StatusServiceUnavailable, "%v", err)
	}
	w.Header().Set("Content-Type", "text/plain")
	_, err := w.Write([]byte("ok"))
	return err
}

// brokerID is "host:port" of this broker's web service, as Pulsar names brokers.
func (h *Handler) brokerID() string {
	d, _ := h.cat.Cluster(h.cfg.Cluster)
	if u, err := url.Parse(d.ServiceURL); err == nil && u.Host != "" {
		return u.Host
	}
	return "localhost:8080"
}

func (h *Handler) brokersList(w http.ResponseWriter, r *http.Request) error {
	return ok(w, h.activeBrokers())
}

// activeBrokers lists the cluster's live brokers by their web host:port, as Pulsar does: every
// registered broker of a cluster of several, else this one.
func (h *Handler) activeBrokers() []string {
	if h.cfg.Ownership != nil {
		return h.cfg.Ownership.Brokers()
	}
	return []string{h.brokerID()}
}

func (h *Handler) brokersOfCluster(r *http.Request, _ adminapi.ClusterData) ([]string, error) {
	if r.PathValue("cluster") != h.cfg.Cluster {
		// Brokers of another cluster are not known here (Pulsar redirects to that cluster).
		return []string{}, nil
	}
	return h.activeBrokers(), nil
}

func (h *Handler) leaderBroker(w http.ResponseWriter, r *http.Request) error {
	d, _ := h.cat.Cluster(h.cfg.Cluster)
	return ok(w, adminapi.BrokerInfo{BrokerID: h.brokerID(), ServiceURL: d.ServiceURL})
}

// ---- clusters ----

func (h *Handler) clustersList(w http.ResponseWriter, r *http.Request) error {
	return ok(w, h.cat.Clusters())
}

// existingCluster is the path's cluster, which must exist.
func (h *Handler) existingCluster(r *http.Request) (adminapi.ClusterData, error) {
	d, found := h.cat.Cluster(r.PathValue("cluster"))
	if !found {
		return d, fail(http.StatusNotFound, "Cluster does not exist")
	}
	return d, nil
}

func decodeCluster(r *http.Request) (adminapi.ClusterData, error) {
	var d adminapi.ClusterData
	b, err := readBody(r)
	if err != nil {
		return d, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return d, nil
	}
	// The cluster's name is in the path only; a body field Pulsar does not define is refused.
	return d, decodeBytes(b, &d)
}

func (h *Handler) clusterCreate(r *http.Request, name string) error {
	if err := naming.ValidateCluster(name); err != nil {
		return fail(http.StatusPreconditionFailed, "Cluster name is not valid: %v", err)
	}
	d, err := decodeCluster(r)
	if err != nil {
		return err
	}
	return h.cat.CreateCluster(r.Context(), name, d)
}

func (h *Handler) clusterUpdate(r *http.Request, name string) error {
	d, err := decodeCluster(r)
	if err != nil {
		return err
	}
	// replicatorRoles and the migration state have their own endpoints: an update keeps them
	// (replicatorRoles unless the body names it).
	return h.cat.UpdateClusterWith(r.Context(), name, func(v *adminapi.ClusterData) error {
		roles, migrated, target := v.ReplicatorRoles, v.Migrated, v.MigratedClusterURL
		*v = d
		if v.ReplicatorRoles == nil {
			v.ReplicatorRoles = roles
		}
		v.Migrated, v.MigratedClusterURL = migrated, target
		return nil
	})
}

func (h *Handler) clusterPeersSet(r *http.Request, name string) error {
	var peers []string
	if err := decodeBody(r, &peers); err != nil {
		return err
	}
	for _, p := range peers {
		if p == name {
			return fail(http.StatusPreconditionFailed, "Own cluster cannot be part of peer cluster list")
		}
		if _, found := h.cat.Cluster(p); !found {
			return fail(http.StatusPreconditionFailed, "Peer cluster %s does not exist", p)
		}
	}
	return h.cat.UpdateClusterWith(r.Context(), name, func(d *adminapi.ClusterData) error {
		d.PeerClusterNames = peers
		return nil
	})
}

// ---- tenants ----

func (h *Handler) tenantsList(w http.ResponseWriter, r *http.Request) error {
	return ok(w, h.cat.Tenants())
}

// existingTenant is the path's tenant, which must exist.
func (h *Handler) existingTenant(r *http.Request) (adminapi.TenantInfo, error) {
	t, found := h.cat.Tenant(r.PathValue("tenant"))
	if !found {
		return t, fail(http.StatusNotFound, "Tenant does not exist")
	}
	return t, nil
}

func decodeTenant(r *http.Request) (adminapi.TenantInfo, error) {
	var t adminapi.TenantInfo
	return t, decodeBody(r, &t)
}

func (h *Handler) tenantCreate(r *http.Request, name string) error {
	if err := naming.ValidateTenant(name); err != nil {
		return fail(http.StatusPreconditionFailed, "Tenant name is not valid: %v", err)
	}
	t, err := decodeTenant(r)
	if err != nil {
		return err
	}
	return h.cat.CreateTenant(r.Context(), name, t)
}
