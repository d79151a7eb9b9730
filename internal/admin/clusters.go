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
		h.metrics.ServeHTTP(w, r)
		return nil
	})
	h.handle("/", h.notFound)
	h.brokerStatsRoutes()

	// brokers
	h.handle("GET /admin/v2/brokers/ready", h.brokersReady)
	h.handle("GET /admin/v2/brokers/health", h.brokersHealth)
	h.handle("GET /admin/v2/brokers", h.brokersList)
	h.handle("GET /admin/v2/brokers/{cluster}", h.brokersOfCluster)
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
	h.handle("GET /admin/v2/clusters/{cluster}", h.clusterGet)
	h.handle("PUT /admin/v2/clusters/{cluster}", h.clusterCreate)
	h.handle("POST /admin/v2/clusters/{cluster}", h.clusterUpdate)
	h.handle("DELETE /admin/v2/clusters/{cluster}", h.clusterDelete)
	h.handle("GET /admin/v2/clusters/{cluster}/peers", h.clusterPeersGet)
	h.handle("GET /admin/v2/clusters/{cluster}/replicatorRoles", h.replicatorRolesGet)
	h.handle("POST /admin/v2/clusters/{cluster}/replicatorRoles", h.replicatorRolesSet)
	h.handle("POST /admin/v2/clusters/{cluster}/peers", h.clusterPeersSet)
	h.migrationRoutes()
	h.handle("GET /admin/v2/clusters/{cluster}/failureDomains", func(w http.ResponseWriter, r *http.Request) error {
		if _, found := h.cat.Cluster(r.PathValue("cluster")); !found {
			return fail(http.StatusNotFound, "Cluster does not exist")
		}
		return ok(w, map[string]any{})
	})

	// tenants
	h.handle("GET /admin/v2/tenants", h.tenantsList)
	h.handle("GET /admin/v2/tenants/{tenant}", h.tenantGet)
	h.handle("PUT /admin/v2/tenants/{tenant}", h.tenantCreate)
	h.handle("POST /admin/v2/tenants/{tenant}", h.tenantUpdate)
	h.handle("DELETE /admin/v2/tenants/{tenant}", h.tenantDelete)

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

func (h *Handler) brokersOfCluster(w http.ResponseWriter, r *http.Request) error {
	c := r.PathValue("cluster")
	if _, found := h.cat.Cluster(c); !found {
		return fail(http.StatusNotFound, "Cluster does not exist")
	}
	if c != h.cfg.Cluster {
		// Brokers of another cluster are not known here (Pulsar redirects to that cluster).
		return ok(w, []string{})
	}
	return ok(w, h.activeBrokers())
}

func (h *Handler) leaderBroker(w http.ResponseWriter, r *http.Request) error {
	d, _ := h.cat.Cluster(h.cfg.Cluster)
	return ok(w, adminapi.BrokerInfo{BrokerID: h.brokerID(), ServiceURL: d.ServiceURL})
}

// ---- clusters ----

func (h *Handler) clustersList(w http.ResponseWriter, r *http.Request) error {
	return ok(w, h.cat.Clusters())
}

func (h *Handler) clusterGet(w http.ResponseWriter, r *http.Request) error {
	d, found := h.cat.Cluster(r.PathValue("cluster"))
	if !found {
		return fail(http.StatusNotFound, "Cluster does not exist")
	}
	return ok(w, d)
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

func (h *Handler) clusterCreate(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("cluster")
	if err := naming.ValidateCluster(name); err != nil {
		return fail(http.StatusPreconditionFailed, "Cluster name is not valid: %v", err)
	}
	d, err := decodeCluster(r)
	if err != nil {
		return err
	}
	if err := h.cat.CreateCluster(r.Context(), name, d); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) clusterUpdate(w http.ResponseWriter, r *http.Request) error {
	d, err := decodeCluster(r)
	if err != nil {
		return err
	}
	// replicatorRoles and the migration state have their own endpoints: an update keeps them
	// (replicatorRoles unless the body names it).
	err = h.cat.UpdateClusterWith(r.Context(), r.PathValue("cluster"), func(v *adminapi.ClusterData) error {
		roles, migrated, target := v.ReplicatorRoles, v.Migrated, v.MigratedClusterURL
		*v = d
		if v.ReplicatorRoles == nil {
			v.ReplicatorRoles = roles
		}
		v.Migrated, v.MigratedClusterURL = migrated, target
		return nil
	})
	if err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) clusterDelete(w http.ResponseWriter, r *http.Request) error {
	if err := h.cat.DeleteCluster(r.Context(), r.PathValue("cluster")); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) clusterPeersGet(w http.ResponseWriter, r *http.Request) error {
	d, found := h.cat.Cluster(r.PathValue("cluster"))
	if !found {
		return fail(http.StatusNotFound, "Cluster does not exist")
	}
	if d.PeerClusterNames == nil {
		return noContent(w)
	}
	return ok(w, d.PeerClusterNames)
}

func (h *Handler) clusterPeersSet(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("cluster")
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
	err := h.cat.UpdateClusterWith(r.Context(), name, func(d *adminapi.ClusterData) error {
		d.PeerClusterNames = peers
		return nil
	})
	if err != nil {
		return err
	}
	return noContent(w)
}

// ---- tenants ----

func (h *Handler) tenantsList(w http.ResponseWriter, r *http.Request) error {
	return ok(w, h.cat.Tenants())
}

func (h *Handler) tenantGet(w http.ResponseWriter, r *http.Request) error {
	t, found := h.cat.Tenant(r.PathValue("tenant"))
	if !found {
		return fail(http.StatusNotFound, "Tenant does not exist")
	}
	return ok(w, t)
}

func decodeTenant(r *http.Request) (adminapi.TenantInfo, error) {
	var t adminapi.TenantInfo
	return t, decodeBody(r, &t)
}

func (h *Handler) tenantCreate(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("tenant")
	if err := naming.ValidateTenant(name); err != nil {
		return fail(http.StatusPreconditionFailed, "Tenant name is not valid: %v", err)
	}
	t, err := decodeTenant(r)
	if err != nil {
		return err
	}
	if err := h.cat.CreateTenant(r.Context(), name, t); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) tenantUpdate(w http.ResponseWriter, r *http.Request) error {
	t, err := decodeTenant(r)
	if err != nil {
		return err
	}
	if err := h.cat.UpdateTenant(r.Context(), r.PathValue("tenant"), t); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) tenantDelete(w http.ResponseWriter, r *http.Request) error {
	if err := h.cat.DeleteTenant(r.Context(), r.PathValue("tenant")); err != nil {
		return err
	}
	return noContent(w)
}
