package admin

import (
	"net/http"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
)

func (h *Handler) lookupRoutes() {
	for _, prefix := range []string{"/lookup/v2/topic/", "/lookup/v2/destination/"} {
		for _, domain := range []string{"persistent", "non-persistent"} {
			base := prefix + domain + "/{tenant}/{namespace}/{topic}"
			h.handle("GET "+base, h.lookup)
			h.handle("GET "+base+"/bundle", func(w http.ResponseWriter, r *http.Request) error {
				t, err := h.topicInExistingNamespace(r)
				if err != nil {
					return err
				}
				if h.cfg.Ownership != nil {
					return okText(w, h.cfg.Ownership.BundleRange(t))
				}
				return okText(w, "0x00000000_0xffffffff")
			})
		}
	}
}

// lookup answers where a topic is served: this broker. In a cluster of several brokers only the
// owner gets here (ownerOnly redirects the others) and answers with its own URLs.
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
	if h.cfg.Ownership != nil {
		owner, err := h.cfg.Ownership.TopicOwner(r.Context(), t)
		if err != nil {
			return err
		}
		d := owner.URLs
		d.NativeURL = d.BrokerURL
		return ok(w, d)
	}
	d, found := h.cat.Cluster(h.cfg.Cluster)
	if !found {
		return fail(http.StatusServiceUnavailable, "This cluster (%s) is not registered yet", h.cfg.Cluster)
	}
	return ok(w, adminapi.LookupData{
		BrokerURL:    d.BrokerServiceURL,
		BrokerURLTLS: d.BrokerServiceURLTLS,
		HTTPURL:      d.ServiceURL,
		HTTPURLTLS:   d.ServiceURLTLS,
		NativeURL:    strings.TrimSpace(d.BrokerServiceURL),
	})
}
