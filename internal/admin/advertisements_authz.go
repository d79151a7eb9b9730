package admin

import (
	"net/http"
	"slices"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/naming"
)

// authorizeAdvertisement decides who may post an advertisement, once its body is read (the
// route's guard only lets superusers and replicator roles through): a superuser any (Pulsar's
// peers link as superusers); a role registered as cluster X's replicator role only an
// advertisement whose source is X and whose topics are in namespaces that replicate from X, the
// same namespaces X's replicated entries may enter (docs/security.md, "Replication links").
// Without authorization everything is allowed.
func (h *Handler) authorizeAdvertisement(r *http.Request, adv adminapi.ReplicationAdvertisement) error {
	a := h.cfg.Authorizer
	if a == nil {
		return nil
	}
	id, _ := auth.IdentityFrom(r.Context())
	if a.IsSuperUser(id.Role) {
		return nil
	}
	refuse := func(err error) error {
		h.log.Info("replication advertisement refused: not authorized", "remote", r.RemoteAddr, "role", id.Role, "source", adv.Source, "err", err)
		return fail(http.StatusForbidden, "Not authorized: %v", err)
	}
	if err := a.Authorize(id.Role, auth.NeedReplicator, auth.Resource{Cluster: adv.Source}); err != nil {
		return refuse(err)
	}
	for topic := range adv.Topics {
		tn, err := naming.ParseTopic(topic)
		if err != nil {
			return fail(http.StatusBadRequest, "Advertised topic %q: %v", topic, err)
		}
		ns := tn.NamespaceName().String()
		p, ok := h.cat.NamespaceShared(ns)
		if !ok || !slices.Contains(p.ReplicationClusters, adv.Source) {
			return fail(http.StatusForbidden, "Not authorized: namespace %s does not replicate from cluster %q", ns, adv.Source)
		}
	}
	return nil
}
