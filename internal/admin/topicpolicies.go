package admin

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
)

// tpPolicy is one topic-level policy endpoint (`.../{topic}/<path>`). GET answers the topic-level
// value, or with ?applied=true the value in force (topic, else namespace); unset answers 204.
type tpPolicy struct {
	path       string
	setMethods []string
	get        func(tp *adminapi.TopicPolicies) (any, bool)
	applied    func(p *adminapi.Policies) (any, bool) // namespace fallback; nil = none
	set        func(tp *adminapi.TopicPolicies, body []byte, q url.Values) error
	remove     func(tp *adminapi.TopicPolicies)
}

func (h *Handler) registerTopicPolicy(base string, pol tpPolicy) {
	h.handle("GET "+base+"/"+pol.path, func(w http.ResponseWriter, r *http.Request) error {
		t, err := h.topicInExistingNamespace(r)
		if err != nil {
			return err
		}
		tp, _ := h.cat.TopicPolicies(t.String())
		if v, set := pol.get(&tp); set {
			return ok(w, v)
		}
		if queryBool(r, "applied") && pol.applied != nil {
			p, _ := h.cat.Namespace(t.NamespaceName().String())
			if v, set := pol.applied(&p); set {
				return ok(w, v)
			}
		}
		return noContent(w)
	})
	for _, m := range pol.setMethods {
		h.handle(m+" "+base+"/"+pol.path, func(w http.ResponseWriter, r *http.Request) error {
			t, err := h.topicFromPath(r)
			if err != nil {
				return err
			}
			body, err := readBody(r)
			if err != nil {
				return err
			}
			var probe adminapi.TopicPolicies
			if err := pol.set(&probe, body, r.URL.Query()); err != nil {
				return err
			}
			if err := h.requireExistingTopic(r, t); err != nil {
				return err
			}
			if err := h.cat.UpdateTopicPolicies(r.Context(), t.Base().String(), func(tp *adminapi.TopicPolicies) error {
				return pol.set(tp, body, r.URL.Query())
			}); err != nil {
				return err
			}
			return noContent(w)
		})
	}
	if pol.remove != nil {
		h.handle("DELETE "+base+"/"+pol.path, func(w http.ResponseWriter, r *http.Request) error {
			t, err := h.topicFromPath(r)
			if err != nil {
				return err
			}
			if err := h.requireExistingTopic(r, t); err != nil {
				return err
			}
			if err := h.cat.UpdateTopicPolicies(r.Context(), t.Base().String(), func(tp *adminapi.TopicPolicies) error {
				pol.remove(tp)
				return nil
			}); err != nil {
				return err
			}
			return noContent(w)
		})
	}
}

func tpPtr[T any](path string, field func(tp *adminapi.TopicPolicies) **T, ns func(p *adminapi.Policies) **T, check func(T) error) tpPolicy {
	pol := tpPolicy{
		path:       path,
		setMethods: post,
		get: func(tp *adminapi.TopicPolicies) (any, bool) {
			v := *field(tp)
			if v == nil {
				return nil, false
			}
			return *v, true
		},
		set: func(tp *adminapi.TopicPolicies, body []byte, _ url.Values) error {
			v, err := decodeValue[T](body)
			if err != nil {
				return err
			}
			if check != nil {
				if err := check(v); err != nil {
					return err
				}
			}
			*field(tp) = &v
			return nil
		},
		remove: func(tp *adminapi.TopicPolicies) { *field(tp) = nil },
	}
	if ns != nil {
		pol.applied = func(p *adminapi.Policies) (any, bool) {
			v := *ns(p)
			if v == nil {
				return nil, false
			}
			return *v, true
		}
	}
	return pol
}

func tpRate[T any](path, cluster string, field func(tp *adminapi.TopicPolicies) **T, ns func(p *adminapi.Policies) map[string]T, check func(T) error) tpPolicy {
	pol := tpPtr[T](path, field, nil, check)
	pol.applied = func(p *adminapi.Policies) (any, bool) {
		v, found := ns(p)[cluster]
		return v, found
	}
	return pol
}

func topicPolicies(cluster string) []tpPolicy {
	return []tpPolicy{
		replicateSubscriptionStateTopicPolicy(),
		{
			// Pulsar takes the TTL as a query parameter on POST.
			path: "messageTTL", setMethods: post,
			get: func(tp *adminapi.TopicPolicies) (any, bool) {
				if tp.MessageTTLInSeconds == nil {
					return nil, false
				}
				return *tp.MessageTTLInSeconds, true
			},
			applied: func(p *adminapi.Policies) (any, bool) {
				if p.MessageTTLInSeconds == nil {
					return nil, false
				}
				return *p.MessageTTLInSeconds, true
			},
			set: func(tp *adminapi.TopicPolicies, body []byte, q url.Values) error {
				var v int
				if s := q.Get("messageTTL"); s != "" {
					n, err := strconv.Atoi(s)
					if err != nil {
						return fail(http.StatusBadRequest, "Invalid messageTTL %q", s)
					}
					v = n
				} else {
					n, err := decodeValue[int](body)
					if err != nil {
						return err
					}
					v = n
				}
				if v < 0 {
					return fail(http.StatusPreconditionFailed, "Invalid value for message TTL")
				}
				tp.MessageTTLInSeconds = &v
				return nil
			},
			remove: func(tp *adminapi.TopicPolicies) { tp.MessageTTLInSeconds = nil },
		},
		tpPtr("maxProducers", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxProducerPerTopic }, func(p *adminapi.Policies) **int { return &p.MaxProducersPerTopic }, nonNegative("maxProducers must be 0 or more")),
		tpPtr("maxConsumers", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxConsumerPerTopic }, func(p *adminapi.Policies) **int { return &p.MaxConsumersPerTopic }, nonNegative("maxConsumers must be 0 or more")),
		tpPtr("maxUnackedMessagesOnConsumer", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxUnackedMessagesOnConsumer }, func(p *adminapi.Policies) **int { return &p.MaxUnackedMessagesPerConsumer }, nonNegative("maxUnackedNum must be 0 or more")),
		tpPtr("maxUnackedMessagesOnSubscription", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxUnackedMessagesOnSubscription }, func(p *adminapi.Policies) **int { return &p.MaxUnackedMessagesPerSubscription }, nonNegative("maxUnackedNum must be 0 or more")),
		tpPtr("maxConsumersPerSubscription", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxConsumersPerSubscription }, func(p *adminapi.Policies) **int { return &p.MaxConsumersPerSubscription }, nonNegative("maxConsumersPerSubscription must be 0 or more")),
		tpPtr("maxSubscriptionsPerTopic", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxSubscriptionsPerTopic }, func(p *adminapi.Policies) **int { return &p.MaxSubscriptionsPerTopic }, nonNegative("maxSubscriptionsPerTopic must be 0 or more")),
		tpPtr("maxMessageSize", func(tp *adminapi.TopicPolicies) **int { return &tp.MaxMessageSize }, nil, nonNegative("maxMessageSize must be 0 or more")),
		tpPtr("deduplicationSnapshotInterval", func(tp *adminapi.TopicPolicies) **int { return &tp.DeduplicationSnapshotIntervalSeconds }, func(p *adminapi.Policies) **int { return &p.DeduplicationSnapshotIntervalSeconds }, nonNegative("deduplicationSnapshotInterval must be 0 or more")),
		tpPtr("persistence", func(tp *adminapi.TopicPolicies) **adminapi.PersistencePolicies { return &tp.Persistence }, func(p *adminapi.Policies) **adminapi.PersistencePolicies { return &p.Persistence }, nil),
		tpPtr("delayedDelivery", func(tp *adminapi.TopicPolicies) **adminapi.DelayedDeliveryPolicies { return &tp.DelayedDelivery }, func(p *adminapi.Policies) **adminapi.DelayedDeliveryPolicies { return &p.DelayedDeliveryPolicies }, nil),
		tpPtr("deduplicationEnabled", func(tp *adminapi.TopicPolicies) **bool { return &tp.DeduplicationEnabled }, func(p *adminapi.Policies) **bool { return &p.DeduplicationEnabled }, nil),
		tpPtr("retention", func(tp *adminapi.TopicPolicies) **adminapi.RetentionPolicies { return &tp.RetentionPolicies }, func(p *adminapi.Policies) **adminapi.RetentionPolicies { return &p.RetentionPolicies }, catalog.ValidateRetention),
		tpPtr("compactionThreshold", func(tp *adminapi.TopicPolicies) **int64 { return &tp.CompactionThreshold }, func(p *adminapi.Policies) **int64 { return &p.CompactionThreshold }, nonNegative64("compactionThreshold must be 0 or more")),
		tpPtr("inactiveTopicPolicies", func(tp *adminapi.TopicPolicies) **adminapi.InactiveTopicPolicies { return &tp.InactiveTopicPolicies }, func(p *adminapi.Policies) **adminapi.InactiveTopicPolicies { return &p.InactiveTopicPolicies }, nil),
		tpPtr("schemaValidationEnforced", func(tp *adminapi.TopicPolicies) **bool { return &tp.SchemaValidationEnforced }, nil, nil),
		tpPtr("autoSubscriptionCreation", func(tp *adminapi.TopicPolicies) **adminapi.AutoSubscriptionCreationOverride {
			return &tp.AutoSubscriptionCreationOverride
		}, func(p *adminapi.Policies) **adminapi.AutoSubscriptionCreationOverride {
			return &p.AutoSubscriptionCreationOverride
		}, nil),
		tpPtr("entryFilters", func(tp *adminapi.TopicPolicies) **adminapi.EntryFilters { return &tp.EntryFilters }, func(p *adminapi.Policies) **adminapi.EntryFilters { return &p.EntryFilters }, nil),
		tpRate("dispatchRate", cluster, func(tp *adminapi.TopicPolicies) **adminapi.DispatchRate { return &tp.DispatchRate }, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.TopicDispatchRate }, catalog.ValidateDispatchRate),
		tpRate("subscriptionDispatchRate", cluster, func(tp *adminapi.TopicPolicies) **adminapi.DispatchRate { return &tp.SubscriptionDispatchRate }, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.SubscriptionDispatchRate }, catalog.ValidateDispatchRate),
		tpRate("replicatorDispatchRate", cluster, func(tp *adminapi.TopicPolicies) **adminapi.DispatchRate { return &tp.ReplicatorDispatchRate }, func(p *adminapi.Policies) map[string]adminapi.DispatchRate { return p.ReplicatorDispatchRate }, catalog.ValidateDispatchRate),
		tpRate[adminapi.PublishRate]("publishRate", cluster, func(tp *adminapi.TopicPolicies) **adminapi.PublishRate { return &tp.PublishRate }, func(p *adminapi.Policies) map[string]adminapi.PublishRate { return p.PublishMaxMessageRate }, nil),
		tpRate[adminapi.SubscribeRate]("subscribeRate", cluster, func(tp *adminapi.TopicPolicies) **adminapi.SubscribeRate { return &tp.SubscribeRate }, func(p *adminapi.Policies) map[string]adminapi.SubscribeRate { return p.ClusterSubscribeRate }, nil),
		{
			path: "schemaCompatibilityStrategy", setMethods: put,
			get: func(tp *adminapi.TopicPolicies) (any, bool) {
				if tp.SchemaCompatibilityStrategy == nil {
					return nil, false
				}
				return *tp.SchemaCompatibilityStrategy, true
			},
			applied: func(p *adminapi.Policies) (any, bool) { return p.SchemaCompatibilityStrategy, true },
			set: func(tp *adminapi.TopicPolicies, body []byte, _ url.Values) error {
				v, err := decodeLenientString(body)
				if err != nil {
					return err
				}
				probe := adminapi.NewPolicies()
				probe.SchemaCompatibilityStrategy = v
				if err := catalog.ValidatePolicies(&probe); err != nil {
					return err
				}
				tp.SchemaCompatibilityStrategy = &v
				return nil
			},
			remove: func(tp *adminapi.TopicPolicies) { tp.SchemaCompatibilityStrategy = nil },
		},
		{
			path: "subscriptionTypesEnabled", setMethods: post,
			get: func(tp *adminapi.TopicPolicies) (any, bool) {
				return tp.SubscriptionTypesEnabled, tp.SubscriptionTypesEnabled != nil
			},
			set: func(tp *adminapi.TopicPolicies, body []byte, _ url.Values) error {
				v, err := decodeValue[[]string](body)
				if err != nil {
					return err
				}
				probe := adminapi.NewPolicies()
				probe.SubscriptionTypesEnabled = v
				if err := catalog.ValidatePolicies(&probe); err != nil {
					return err
				}
				tp.SubscriptionTypesEnabled = v
				return nil
			},
			remove: func(tp *adminapi.TopicPolicies) { tp.SubscriptionTypesEnabled = nil },
		},
		{
			path: "offloadPolicies", setMethods: post,
			get: func(tp *adminapi.TopicPolicies) (any, bool) {
				return tp.OffloadPolicies, len(tp.OffloadPolicies) > 0 && string(tp.OffloadPolicies) != "null"
			},
			applied: func(p *adminapi.Policies) (any, bool) {
				return p.OffloadPolicies, len(p.OffloadPolicies) > 0 && string(p.OffloadPolicies) != "null"
			},
			set: func(tp *adminapi.TopicPolicies, body []byte, _ url.Values) error {
				var obj map[string]any
				if err := decodeBytes(body, &obj); err != nil {
					return err
				}
				tp.OffloadPolicies = append(json.RawMessage(nil), bytes.TrimSpace(body)...)
				return nil
			},
			remove: func(tp *adminapi.TopicPolicies) { tp.OffloadPolicies = nil },
		},
		{
			path: "backlogQuotaMap",
			get: func(tp *adminapi.TopicPolicies) (any, bool) {
				return tp.BacklogQuotaMap, len(tp.BacklogQuotaMap) > 0
			},
			applied: func(p *adminapi.Policies) (any, bool) { return p.BacklogQuotaMap, true },
		},
	}
}
