package admin

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/naming"
)

// AdvertisementService is optionally implemented by a TopicService: it keeps what source clusters
// advertise (their last stored positions) and compares it with what arrived here
// (docs/replication-design.md, "Advertised positions").
type AdvertisementService interface {
	ReceiveAdvertisement(ctx context.Context, adv adminapi.ReplicationAdvertisement) error
	SourceStates(ctx context.Context, namespace string) ([]adminapi.SourceTopicState, error)
}

func (h *Handler) advertisementRoutes() {
	h.handle("POST /admin/v2/replication/advertisements", h.advertisementReceive)
	h.handle("GET /admin/v2/namespaces/{tenant}/{namespace}/replicationSources", readEndpoint(h.existingNamespace, h.replicationSources))
}

func (h *Handler) advertisements() (AdvertisementService, error) {
	svc, err := h.topics()
	if err != nil {
		return nil, err
	}
	as, ok := svc.(AdvertisementService)
	if !ok {
		return nil, fail(http.StatusNotImplemented, "Replication advertisements are not supported by this broker")
	}
	return as, nil
}

// advertisementReceive takes a source cluster's advertisement. The source must be a registered
// cluster, and the poster a superuser or the source's replicator role.
func (h *Handler) advertisementReceive(w http.ResponseWriter, r *http.Request) error {
	var adv adminapi.ReplicationAdvertisement
	if err := decodeBody(r, &adv); err != nil {
		return err
	}
	if err := h.authorizeAdvertisement(r, adv); err != nil {
		return err
	}
	if _, found := h.cat.Cluster(adv.Source); !found {
		return fail(http.StatusPreconditionFailed, "Cluster %q is not registered here", adv.Source)
	}
	as, err := h.advertisements()
	if err != nil {
		return err
	}
	if err := as.ReceiveAdvertisement(r.Context(), adv); err != nil {
		return fail(http.StatusBadRequest, "%v", err)
	}
	return noContent(w)
}

// replicationSources lists what sources advertised for the namespace's topics and how much of it
// arrived: after an unplanned failover, what the lost source held that this cluster never received.
func (h *Handler) replicationSources(r *http.Request, ns naming.NamespaceName) ([]adminapi.SourceTopicState, error) {
	as, err := h.advertisements()
	if err != nil {
		return nil, err
	}
	states, err := as.SourceStates(r.Context(), ns.String())
	if err != nil {
		return nil, err
	}
	if source := r.URL.Query().Get("source"); source != "" {
		states = slices.DeleteFunc(states, func(s adminapi.SourceTopicState) bool { return s.Source != source })
	}
	slices.SortFunc(states, func(a, b adminapi.SourceTopicState) int {
		if c := strings.Compare(a.Source, b.Source); c != 0 {
			return c
		}
		return strings.Compare(a.Topic, b.Topic)
	})
	if states == nil {
		states = []adminapi.SourceTopicState{}
	}
	return states, nil
}
