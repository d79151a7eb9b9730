package admin

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/naming"
)

// Broker stats and ownership endpoints that pulsaradmin, pulsarctl and dashboards call, in Pulsar's
// shapes. One broker serves a cluster here, so it owns every bundle of every namespace the cluster
// serves, and a namespace has one bundle (fullBundle).

const fullBundle = "0x00000000_0xffffffff"

func (h *Handler) brokerStatsRoutes() {
	h.handle("GET /admin/v2/broker-stats/metrics", h.brokerStatsMetrics)
	h.handle("GET /admin/v2/broker-stats/topics", h.brokerStatsTopics)
	h.handle("GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", h.ownedNamespaces)
}

// servedNamespaces are the namespaces this cluster serves: those replicated to it (a namespace
// without replication clusters is served by the cluster it was created in, as with Pulsar).
func (h *Handler) servedNamespaces() []string {
	var out []string
	for _, ns := range h.cat.AllNamespaces() {
		p, found := h.cat.Namespace(ns)
		if !found {
			continue
		}
		if len(p.ReplicationClusters) == 0 || slices.Contains(p.ReplicationClusters, h.cfg.Cluster) {
			out = append(out, ns)
		}
	}
	return out
}

// ownedNamespaces answers Pulsar's map of bundle -> NamespaceOwnershipStatus.
func (h *Handler) ownedNamespaces(w http.ResponseWriter, r *http.Request) error {
	cluster, broker := r.PathValue("cluster"), r.PathValue("broker")
	if _, found := h.cat.Cluster(cluster); !found {
		return fail(http.StatusNotFound, "Cluster does not exist")
	}
	if cluster != h.cfg.Cluster || broker != h.brokerID() {
		return fail(http.StatusNotFound, "Broker %s is not a broker of cluster %s served here (this broker is %s of %s)", broker, cluster, h.brokerID(), h.cfg.Cluster)
	}
	out := map[string]adminapi.NamespaceOwnershipStatus{}
	for _, ns := range h.servedNamespaces() {
		out[ns+"/"+fullBundle] = adminapi.NamespaceOwnershipStatus{BrokerAssignment: "shared", IsControlled: false, IsActive: true}
	}
	return ok(w, out)
}

// brokerStatsTopics answers Pulsar's namespace -> bundle -> domain -> topic -> stats map of every
// topic of the namespaces this broker serves.
func (h *Handler) brokerStatsTopics(w http.ResponseWriter, r *http.Request) error {
	svc, err := h.topics()
	if err != nil {
		return err
	}
	out := map[string]map[string]map[string]map[string]adminapi.TopicStats{}
	for _, ns := range h.servedNamespaces() {
		topics, err := svc.ListTopics(r.Context(), ns)
		if err != nil {
			return err
		}
		for _, topic := range topics {
			st, err := svc.TopicStats(r.Context(), topic, adminapi.GetStatsOptions{})
			if err != nil {
				h.log.Debug("broker-stats/topics: topic stats", "topic", topic, "err", err)
				continue // deleted meanwhile
			}
			domain := "persistent"
			if t, err := naming.ParseTopic(topic); err == nil && !t.IsPersistent() {
				domain = "non-persistent"
			}
			if out[ns] == nil {
				out[ns] = map[string]map[string]map[string]adminapi.TopicStats{fullBundle: {}}
			}
			byDomain := out[ns][fullBundle]
			if byDomain[domain] == nil {
				byDomain[domain] = map[string]adminapi.TopicStats{}
			}
			byDomain[domain][topic] = st
		}
	}
	return ok(w, out)
}

// topicInternalInfo answers Pulsar's ManagedLedgerInfo of a topic: its ledgers (segments here)
// and cursors with their mark-delete positions.
func topicInternalInfo(r *http.Request, c topicCall) (adminapi.ManagedLedgerInfo, error) {
	st, err := c.svc.InternalStats(r.Context(), c.topic.String())
	if err != nil {
		return adminapi.ManagedLedgerInfo{}, err
	}
	info := adminapi.ManagedLedgerInfo{
		Ledgers:    make([]adminapi.ManagedLedgerLedgerInfo, 0, len(st.Ledgers)),
		Cursors:    make(map[string]adminapi.ManagedCursorInfo, len(st.Cursors)),
		Properties: map[string]string{},
	}
	if ts, err := c.svc.TopicStats(r.Context(), c.topic.String(), adminapi.GetStatsOptions{ExcludePublishers: true, ExcludeConsumers: true}); err == nil && ts.TopicCreationTimeStamp > 0 {
		info.CreationDate = time.UnixMilli(ts.TopicCreationTimeStamp).UTC().Format(time.RFC3339Nano)
	}
	for _, l := range st.Ledgers {
		entries, size, ts := l.Entries, l.Size, l.Timestamp
		info.Ledgers = append(info.Ledgers, adminapi.ManagedLedgerLedgerInfo{LedgerID: l.LedgerID, Entries: &entries, Size: &size, Timestamp: &ts, IsOffloaded: l.Offloaded})
	}
	for name, c := range st.Cursors {
		ci := adminapi.ManagedCursorInfo{CursorsLedgerID: -1, IndividualDeletedMessages: []adminapi.MessageRangeInfo{}, Properties: map[string]int64{}}
		if p, ok := parsePositionInfo(c.MarkDeletePosition); ok {
			ci.MarkDelete = &p
		}
		info.Cursors[name] = ci
	}
	return info, nil
}

// parsePositionInfo reads "ledgerId:entryId".
func parsePositionInfo(s string) (adminapi.PositionInfo, bool) {
	l, e, found := strings.Cut(s, ":")
	if !found {
		return adminapi.PositionInfo{}, false
	}
	lid, err1 := strconv.ParseInt(l, 10, 64)
	eid, err2 := strconv.ParseInt(e, 10, 64)
	if err1 != nil || err2 != nil {
		return adminapi.PositionInfo{}, false
	}
	return adminapi.PositionInfo{LedgerID: lid, EntryID: eid}, true
}
