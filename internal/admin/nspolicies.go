package admin

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
)

// nsPolicy is one `/admin/v2/namespaces/{tenant}/{ns}/<path>` policy endpoint: how to read the value
// from the policies (set=false answers 204), how to write it from a request body, how to remove it.
type nsPolicy struct {
	path       string
	setMethods []string // methods that write (POST, PUT); empty = read-only
	get        func(p *adminapi.Policies) (v any, set bool)
	set        func(p *adminapi.Policies, body []byte) error
	remove     func(p *adminapi.Policies) // nil = no DELETE
	plainText  bool                       // GET answers the value as text (Pulsar answers some Strings unquoted)
}

func (h *Handler) registerNamespacePolicy(pol nsPolicy) {
	h.handle("GET "+nsBase+"/"+pol.path, func(w http.ResponseWriter, r *http.Request) error {
		p, err := h.policiesOf(r)
		if err != nil {
			return err
		}
		v, set := pol.get(&p)
		if !set {
			return noContent(w)
		}
		if pol.plainText {
			return okText(w, v.(string))
		}
		return ok(w, v)
	})
	for _, m := range pol.setMethods {
		h.handle(m+" "+nsBase+"/"+pol.path, func(w http.ResponseWriter, r *http.Request) error {
			body, err := readBody(r)
			if err != nil {
				return err
			}
			// Decode and validate once before touching the store, so a bad body never reaches it; the
			// CAS loop applies the same body to the freshest document.
			probe := adminapi.NewPolicies()
			if err := pol.set(&probe, body); err != nil {
				return err
			}
			return h.updateNamespace(w, r, func(p *adminapi.Policies) error { return pol.set(p, body) })
		})
	}
	if pol.remove != nil {
		h.handle("DELETE "+nsBase+"/"+pol.path, func(w http.ResponseWriter, r *http.Request) error {
			return h.updateNamespace(w, r, func(p *adminapi.Policies) error {
				pol.remove(p)
				return nil
			})
		})
	}
}

// decodeValue strictly decodes a policy body into T; an empty body is refused.
func decodeValue[T any](body []byte) (T, error) {
	var v T
	return v, decodeBytes(body, &v)
}

// decodeLenientBool accepts true/false and "true"/"false" (pulsaradmin sends encryptionRequired as a
// JSON string).
func decodeLenientBool(body []byte) (bool, error) {
	t := bytes.TrimSpace(body)
	if len(t) > 0 && t[0] == '"' {
		var s string
		if err := json.Unmarshal(t, &s); err == nil {
			if b, err := strconv.ParseBool(s); err == nil {
				return b, nil
			}
		}
		return false, fail(http.StatusBadRequest, "invalid JSON: want true or false")
	}
	return decodeValue[bool](body)
}

// decodeLenientString accepts a JSON string, or a bare word (Pulsar's String endpoints take both).
func decodeLenientString(body []byte) (string, error) {
	t := strings.TrimSpace(string(body))
	if t == "" {
		return "", fail(http.StatusBadRequest, "Request body is empty; a value is required")
	}
	if t[0] == '"' {
		var s string
		if err := json.Unmarshal([]byte(t), &s); err != nil {
			return "", fail(http.StatusBadRequest, "invalid JSON string: %v", err)
		}
		return s, nil
	}
	return t, nil
}

// ptrPolicy is the common shape: a nullable field, GET/POST(or PUT)/DELETE.
func ptrPolicy[T any](path string, methods []string, field func(p *adminapi.Policies) **T, check func(T) error) nsPolicy {
	return nsPolicy{
		path:       path,
		setMethods: methods,
		get: func(p *adminapi.Policies) (any, bool) {
			v := *field(p)
			if v == nil {
				return nil, false
			}
			return *v, true
		},
		set: func(p *adminapi.Policies, body []byte) error {
			v, err := decodeValue[T](body)
			if err != nil {
				return err
			}
			if check != nil {
				if err := check(v); err != nil {
					return err
				}
			}
			*field(p) = &v
			return nil
		},
		remove: func(p *adminapi.Policies) { *field(p) = nil },
	}
}

// clusterMapPolicy is a per-cluster rate map entry for the serving cluster.
func clusterMapPolicy[T any](path, cluster string, field func(p *adminapi.Policies) map[string]T, check func(T) error) nsPolicy {
	return nsPolicy{
		path:       path,
		setMethods: []string{http.MethodPost},
		get: func(p *adminapi.Policies) (any, bool) {
			v, found := field(p)[cluster]
			return v, found
		},
		set: func(p *adminapi.Policies, body []byte) error {
			v, err := decodeValue[T](body)
			if err != nil {
				return err
			}
			if check != nil {
				if err := check(v); err != nil {
					return err
				}
			}
			field(p)[cluster] = v
			return nil
		},
		remove: func(p *adminapi.Policies) { delete(field(p), cluster) },
	}
}

func nonNegative(msg string) func(int) error {
	return func(v int) error {
		if v < 0 {
			return fail(http.StatusPreconditionFailed, "%s", msg)
		}
		return nil
	}
}

func nonNegative64(msg string) func(int64) error {
	return func(v int64) error {
		if v < 0 {
			return fail(http.StatusPreconditionFailed, "%s", msg)
		}
		return nil
	}
}

var (
	post     = []string{http.MethodPost}
	put      = []string{http.MethodPut}
	noWrites []string
)

// namespacePolicies lists the generic namespace policy endpoints (the ones with special behaviour —
// replication, backlog quotas, permissions, properties — are registered in namespaces.go).
func namespacePolicies(cluster string) []nsPolicy {
	pols := []nsPolicy{
		replicateSubscriptionStateNamespacePolicy(),
		ptrPolicy("messageTTL", post, func(p *adminapi.Policies) **int { return &p.MessageTTLInSeconds }, nonNegative("Invalid value for message TTL")),
		ptrPolicy("retention", post, func(p *adminapi.Policies) **adminapi.RetentionPolicies { return &p.RetentionPolicies }, func(v adminapi.RetentionPolicies) error {
			return catalog.ValidateRetention(v)
		}),
		ptrPolicy("autoTopicCreation", post, func(p *adminapi.Policies) **adminapi.AutoTopicCreationOverride { return &p.AutoTopicCreationOverride },
			func(v adminapi.AutoTopicCreationOverride) error {
				if err := v.Validate(); err != nil {
					return fail(http.StatusPreconditionFailed, "Invalid configuration for autoTopicCreationOverride. the detail is %v", err)
				}
				return nil
			}),
		ptrPolicy("autoSubscriptionCreation", post, func(p *adminapi.Policies) **adminapi.AutoSubscriptionCreationOverride {
			return &p.AutoSubscriptionCreationOverride
		}, nil),
		ptrPolicy("deduplication", post, func(p *adminapi.Policies) **bool { return &p.DeduplicationEnabled }, nil),
		ptrPolicy("offloadDeletionLagMs", put, func(p *adminapi.Policies) **int64 { return &p.OffloadDeletionLagMs }, nonNegative64("offloadDeletionLagMs must be 0 or more")),
		ptrPolicy("offloadThresholdInSeconds", put, func(p *adminapi.Policies) **int64 { return &p.OffloadThresholdInSeconds }, nonNegative64("Invalid value for offloadThresholdInSecond")),
		ptrPolicy("compactionThreshold", put, func(p *adminapi.Policies) **int64 { return &p.CompactionThreshold }, nonNegative64("compactionThreshold must be 0 or more")),
		ptrPolicy("maxConsumersPerSubscription", post, func(p *adminapi.Policies) **int { return &p.MaxConsumersPerSubscription }, nonNegative("maxConsumersPerSubscription must be 0 or more")),
		ptrPolicy("maxConsumersPerTopic", post, func(p *adminapi.Policies) **int { return &p.MaxConsumersPerTopic }, nonNegative("maxConsumersPerTopic must be 0 or more")),
		ptrPolicy("maxProducersPerTopic", post, func(p *adminapi.Policies) **int { return &p.MaxProducersPerTopic }, nonNegative("maxProducersPerTopic must be 0 or more")),
		ptrPolicy("maxUnackedMessagesPerConsumer", post, func(p *adminapi.Policies) **int { return &p.MaxUnackedMessagesPerConsumer }, nonNegative("maxUnackedMessagesPerConsumer must be 0 or more")),
		ptrPolicy("maxUnackedMessagesPerSubscription", post, func(p *adminapi.Policies) **int { return &p.MaxUnackedMessagesPerSubscription }, nonNegative("maxUnackedMessagesPerSubscription must be 0 or more")),
		ptrPolicy("maxSubscriptionsPerTopic", post, func(p *adminapi.Policies) **int { return &p.MaxSubscriptionsPerTopic }, nonNegative("maxSubscriptionsPerTopic must be 0 or more")),
		ptrPolicy("maxTopicsPerNamespace", post, func(p *adminapi.Policies) **int { return &p.MaxTopicsPerNamespace }, nonNegative("maxTopicsPerNamespace must be 0 or more")),
		ptrPolicy("subscriptionExpirationTime", post, func(p *adminapi.Policies) **int { return &p.SubscriptionExpirationTimeMinutes }, nonNegative("Invalid value for subscription expiration time")),
		ptrPolicy("deduplicationSnapshotInterval", post, func(p *adminapi.Policies) **int { return &p.DeduplicationSnapshotIntervalSeconds }, nonNegative("deduplicationSnapshotInterval must be 0 or more")),
		ptrPolicy("persistence", post, func(p *adminapi.Policies) **adminapi.PersistencePolicies { return &p.Persistence }, func(v adminapi.PersistencePolicies) error {
			if v.BookkeeperEnsemble < v.BookkeeperWriteQuorum || v.BookkeeperWriteQuorum < v.BookkeeperAckQuorum {
				return fail(http.StatusPreconditionFailed, "Bookkeeper Ensemble (%d) >= WriteQuorum (%d) >= AckQuoru (%d)", v.BookkeeperEnsemble, v.BookkeeperWriteQuorum, v.BookkeeperAckQuorum)
			}
			return nil
		}),
		ptrPolicy("persistence/bookieAffinity", post, func(p *adminapi.Policies) **adminapi.BookieAffinityGroupData { return &p.BookieAffinityGroup }, nil),
		ptrPolicy("inactiveTopicPolicies", post, func(p *adminapi.Policies) **adminapi.InactiveTopicPolicies { return &p.InactiveTopicPolicies }, nil),
		ptrPolicy("delayedDelivery", post, func(p *adminapi.Policies) **adminapi.DelayedDeliveryPolicies { return &p.DelayedDeliveryPolicies }, nil),
		ptrPolicy("isAllowAutoUpdateSchema", post, func(p *adminapi.Policies) **bool { return &p.IsAllowAutoUpdateSchema }, nil),
		ptrPolicy("entryFilters", post, func(p *adminapi.Policies) **adminapi.EntryFilters { return &p.EntryFilters }, nil),
		ptrPolicy("dispatcherPauseOnAckStatePersistent", post, func(p *adminapi.Policies) **bool { return &p.DispatcherPauseOnAckStatePersistent }, nil),

		clusterMapPolicy("dispatchRate", cluster, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.TopicDispatchRate }, catalog.ValidateDispatchRate),
		clusterMapPolicy("subscriptionDispatchRate", cluster, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.SubscriptionDispatchRate }, catalog.ValidateDispatchRate),
		clusterMapPolicy("replicatorDispatchRate", cluster, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.ReplicatorDispatchRate }, catalog.ValidateDispatchRate),
		clusterMapPolicy("subscribeRate", cluster, func(p *adminapi.Policies) map[string]adminapi.SubscribeRate { return p.ClusterSubscribeRate }, nil),
		clusterMapPolicy[adminapi.PublishRate]("publishRate", cluster, func(p *adminapi.Policies) map[string]adminapi.PublishRate { return p.PublishMaxMessageRate }, nil),

		{
			path: "offloadThreshold", setMethods: put,
			get: func(p *adminapi.Policies) (any, bool) { return p.OffloadThreshold, true },
			set: func(p *adminapi.Policies, body []byte) error {
				v, err := decodeValue[int64](body)
				p.OffloadThreshold = v
				return err
			},
		},
		{
			path: "schemaValidationEnforced", setMethods: post,
			get: func(p *adminapi.Policies) (any, bool) { return p.SchemaValidationEnforced, true },
			set: func(p *adminapi.Policies, body []byte) error {
				v, err := decodeLenientBool(body)
				p.SchemaValidationEnforced = v
				return err
			},
			remove: func(p *adminapi.Policies) { p.SchemaValidationEnforced = false },
		},
		{
			path: "encryptionRequired", setMethods: post,
			get: func(p *adminapi.Policies) (any, bool) { return p.EncryptionRequired, true },
			set: func(p *adminapi.Policies, body []byte) error {
				v, err := decodeLenientBool(body)
				p.EncryptionRequired = v
				return err
			},
		},
		enumPolicy("schemaCompatibilityStrategy", put, func(p *adminapi.Policies) *string { return &p.SchemaCompatibilityStrategy }),
		enumPolicy("schemaAutoUpdateCompatibilityStrategy", put, func(p *adminapi.Policies) *string { return &p.SchemaAutoUpdateCompatibilityStrategy }),
		enumPolicy("subscriptionAuthMode", post, func(p *adminapi.Policies) *string { return &p.SubscriptionAuthMode }),
		{
			path: "antiAffinity", setMethods: post, plainText: true,
			get: func(p *adminapi.Policies) (any, bool) { return p.AntiAffinityGroup, p.AntiAffinityGroup != "" },
			set: func(p *adminapi.Policies, body []byte) error {
				v, err := decodeLenientString(body)
				p.AntiAffinityGroup = v
				return err
			},
			remove: func(p *adminapi.Policies) { p.AntiAffinityGroup = "" },
		},
		{
			path: "subscriptionTypesEnabled", setMethods: post,
			get: func(p *adminapi.Policies) (any, bool) { return p.SubscriptionTypesEnabled, true },
			set: func(p *adminapi.Policies, body []byte) error {
				v, err := decodeValue[[]string](body)
				p.SubscriptionTypesEnabled = v
				return err
			},
			remove: func(p *adminapi.Policies) { p.SubscriptionTypesEnabled = []string{} },
		},
		{
			path: "offloadPolicies", setMethods: post,
			get: func(p *adminapi.Policies) (any, bool) {
				return p.OffloadPolicies, len(p.OffloadPolicies) > 0 && string(p.OffloadPolicies) != "null"
			},
			set: func(p *adminapi.Policies, body []byte) error {
				var obj map[string]any
				if err := decodeBytes(body, &obj); err != nil {
					return err
				}
				p.OffloadPolicies = append(json.RawMessage(nil), bytes.TrimSpace(body)...)
				return nil
			},
			remove: func(p *adminapi.Policies) { p.OffloadPolicies = nil },
		},
		{
			path: "resourcegroup", setMethods: noWrites,
			get: func(p *adminapi.Policies) (any, bool) {
				if p.ResourceGroupName == nil {
					return nil, false
				}
				return *p.ResourceGroupName, true
			},
			remove: func(p *adminapi.Policies) { p.ResourceGroupName = nil },
		},
	}
	return pols
}

// enumPolicy is a string field written as a JSON string (PUT/POST) and read back as a JSON string;
// the catalog validates the value against Pulsar's enum.
func enumPolicy(path string, methods []string, field func(p *adminapi.Policies) *string) nsPolicy {
	return nsPolicy{
		path: path, setMethods: methods,
		get: func(p *adminapi.Policies) (any, bool) { return *field(p), true },
		set: func(p *adminapi.Policies, body []byte) error {
			v, err := decodeLenientString(body)
			if err != nil {
				return err
			}
			*field(p) = v
			return catalog.ValidatePolicies(p)
		},
	}
}
