package admin

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/naming"
)

// Policy endpoints come from two tables of rows, one row a policy: namespacePolicies
// (nspolicies.go, `/admin/v2/namespaces/{tenant}/{namespace}/<path>`, the document is the
// namespace's Policies) and topicPolicies (topicpolicies.go, `.../{domain}/{tenant}/{namespace}/{topic}/<path>`,
// the topic's TopicPolicies). A row names its path and how to read, write and remove its value;
// registerNamespacePolicy and registerTopicPolicy turn it into routes, and policyRouteKeys into
// their permission entries (every policy route needs policyNeed), so a policy is one row.

// policy is one policy endpoint over a document D.
type policy[D any] struct {
	path string
	// get reads the value (nil: no GET); set=false answers 204, as Pulsar answers an unset policy.
	get func(doc *D) (v any, set bool)
	// applied is the namespace's value for a topic policy's GET ?applied=true (topic level only).
	applied   func(ns *adminapi.Policies) (v any, set bool)
	plainText bool // GET answers the value as text (Pulsar answers some Strings unquoted)
	// setMethods write the value with set (POST or PUT; none: read-only); remove is DELETE (nil: none).
	setMethods  []string
	set, remove policyChange[D]
	// replication: a write changes where the namespace replicates, so the replicators are brought
	// in step before the answer (Config.ReplicationApplied).
	replication bool
}

// policyChange reads and checks a write request before its target is looked up (so a bad request
// never reaches the store), and returns the change to apply to the freshest document inside the
// store's compare-and-set loop, once the target is known to exist.
type policyChange[D any] func(in *policyRequest) (change func(doc *D) error, err error)

// policyRequest is a policy write's request; its body is read on first use and kept.
type policyRequest struct {
	h    *Handler
	r    *http.Request
	raw  []byte
	read bool
}

// body returns the request body.
func (in *policyRequest) body() ([]byte, error) {
	if !in.read {
		b, err := readBody(in.r)
		if err != nil {
			return nil, err
		}
		in.raw, in.read = b, true
	}
	return in.raw, nil
}

// decodeInput strictly decodes the body into T; an empty body is refused.
func decodeInput[T any](in *policyRequest) (T, error) {
	return decodeChecked(in, decodeValue[T], nil)
}

// methods returns the methods the row serves.
func (p policy[D]) methods() []string {
	var out []string
	if p.get != nil {
		out = append(out, http.MethodGet)
	}
	out = append(out, p.setMethods...)
	if p.remove != nil {
		out = append(out, http.MethodDelete)
	}
	return out
}

// policyRouteKeys returns the permission-table keys of every policy route (the tables' routes do
// not depend on the cluster, which only their rate maps read).
func policyRouteKeys() []string {
	var keys []string
	for _, p := range namespacePolicies("") {
		for _, m := range p.methods() {
			keys = append(keys, m+" "+nsBase+"/"+p.path)
		}
	}
	for _, p := range topicPolicies("") {
		for _, m := range p.methods() {
			keys = append(keys, m+" /admin/v2/{domain}/{tenant}/{namespace}/{topic}/"+p.path) // RouteKey of both domains
		}
	}
	return keys
}

// registerPolicy registers a row's routes under base: read serves its GET, write makes the handler
// of a change (set for POST or PUT, remove for DELETE).
func registerPolicy[D any](h *Handler, base string, pol policy[D], read apiFunc, write func(policyChange[D]) apiFunc) {
	for _, m := range pol.methods() {
		fn := read
		if m == http.MethodDelete {
			fn = write(pol.remove)
		} else if m != http.MethodGet {
			fn = write(pol.set)
		}
		h.handle(m+" "+base+"/"+pol.path, fn)
	}
}

func (h *Handler) registerNamespacePolicy(pol policy[adminapi.Policies]) {
	read := func(w http.ResponseWriter, r *http.Request) error {
		p, err := h.policiesOf(r)
		if err != nil {
			return err
		}
		v, set := pol.get(&p)
		switch {
		case !set:
			return noContent(w)
		case pol.plainText:
			return okText(w, v.(string))
		}
		return ok(w, v)
	}
	registerPolicy(h, nsBase, pol, read, func(change policyChange[adminapi.Policies]) apiFunc {
		return h.namespaceWrite(pol.replication, change)
	})
}

// namespaceWrite reads the request, then checks the namespace and applies the change (and with
// replication, brings the replicators in step).
func (h *Handler) namespaceWrite(replication bool, change policyChange[adminapi.Policies]) apiFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		apply, err := change(&policyRequest{h: h, r: r})
		if err != nil {
			return err
		}
		ns, err := h.changeNamespace(r, apply)
		if err != nil {
			return err
		}
		if replication {
			h.replicationApplied(r, ns.String())
		}
		return noContent(w)
	}
}

// registerTopicPolicy registers a topic policy's routes under base. GET answers the topic-level
// value, or with ?applied=true the value in force (topic, else namespace).
func (h *Handler) registerTopicPolicy(base string, pol policy[adminapi.TopicPolicies]) {
	read := func(w http.ResponseWriter, r *http.Request) error {
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
	}
	registerPolicy(h, base, pol, read, func(change policyChange[adminapi.TopicPolicies]) apiFunc {
		return writeEndpoint(h.topicFromPath, h.topicPolicyWrite(pol.replication, change))
	})
}

// topicPolicyWrite reads the request, then checks that the topic exists and applies the change to
// the policies of its partitioned (base) name.
func (h *Handler) topicPolicyWrite(replication bool, change policyChange[adminapi.TopicPolicies]) func(*http.Request, naming.TopicName) error {
	return func(r *http.Request, t naming.TopicName) error {
		apply, err := change(&policyRequest{h: h, r: r})
		if err != nil {
			return err
		}
		if err := h.requireExistingTopic(r, t); err != nil {
			return err
		}
		if err := h.cat.UpdateTopicPolicies(r.Context(), t.Base().String(), apply); err != nil {
			return err
		}
		if replication {
			h.replicationApplied(r, t.NamespaceName().String())
		}
		return nil
	}
}

// ---- row constructors ----

// nullable reads a nullable field: unset while nil.
func nullable[D, T any](field func(*D) **T) func(*D) (any, bool) {
	return func(d *D) (any, bool) {
		v := *field(d)
		if v == nil {
			return nil, false
		}
		return *v, true
	}
}

// always reads a field that always has a value.
func always[D, T any](field func(*D) *T) func(*D) (any, bool) {
	return func(d *D) (any, bool) { return *field(d), true }
}

// assign is the change that sets a field to v.
func assign[D, T any](field func(*D) *T, v T) func(*D) error {
	return func(d *D) error {
		*field(d) = v
		return nil
	}
}

// decodeChecked is a write's value: the body decoded with decode, then checked (check may be nil).
func decodeChecked[T any](in *policyRequest, decode func([]byte) (T, error), check func(T) error) (T, error) {
	b, err := in.body()
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := decode(b)
	if err == nil && check != nil {
		err = check(v)
	}
	return v, err
}

// setWith is a write of a field from the body.
func setWith[D, T any](field func(*D) *T, decode func([]byte) (T, error), check func(T) error) policyChange[D] {
	return func(in *policyRequest) (func(*D) error, error) {
		v, err := decodeChecked(in, decode, check)
		if err != nil {
			return nil, err
		}
		return assign(field, v), nil
	}
}

// clearTo is a removal that sets a field to v.
func clearTo[D, T any](field func(*D) *T, v T) policyChange[D] {
	return func(*policyRequest) (func(*D) error, error) { return assign(field, v), nil }
}

// ptrPolicy is the common shape: a nullable field, written from a JSON value (then checked, if
// check is set), removed by DELETE.
func ptrPolicy[D, T any](path string, methods []string, field func(*D) **T, check func(T) error) policy[D] {
	return policy[D]{
		path: path, setMethods: methods, get: nullable(field),
		set: func(in *policyRequest) (func(*D) error, error) {
			v, err := decodeChecked(in, decodeValue[T], check)
			if err != nil {
				return nil, err
			}
			return assign(field, &v), nil
		},
		remove: clearTo(field, nil),
	}
}

// validAsNamespacePolicy checks a policy value by the namespace policies' rules (the enums and
// subscription types) before any document is read: set puts it into a default namespace document.
func validAsNamespacePolicy(set func(p *adminapi.Policies)) error {
	probe := adminapi.NewPolicies()
	set(&probe)
	return catalog.ValidatePolicies(&probe)
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

// decodeJSONObject keeps a body that is a JSON object as it was sent (offload policies: Meridian
// stores them for clients, it does not offload).
func decodeJSONObject(body []byte) (json.RawMessage, error) {
	var obj map[string]any
	if err := decodeBytes(body, &obj); err != nil {
		return nil, err
	}
	return append(json.RawMessage(nil), bytes.TrimSpace(body)...), nil
}

// rawObjectSet reads a raw JSON object policy: unset while empty or null.
func rawObjectSet(v json.RawMessage) (any, bool) {
	return v, len(v) > 0 && string(v) != "null"
}

func nonNegative(msg string) func(int) error {
	return func(v int) error {
		if v < 0 {
			return fail(http.StatusPreconditionFailed, "%s", msg)
		}
		return nil
	}
}

// nonNegativeJavaInt is nonNegative that also refuses values above math.MaxInt32, the range of
// Pulsar's int fields: a TTL or expiration time is multiplied into nanoseconds, where a larger value
// could wrap into a tiny age.
func nonNegativeJavaInt(msg string) func(int) error {
	return func(v int) error {
		if v < 0 || v > math.MaxInt32 {
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

// backlogQuotaPolicy is `.../backlogQuota?backlogQuotaType=` (destination_storage by default): POST
// sets the type's quota, DELETE removes it. check, if set, sees the document and the new quota
// first.
func backlogQuotaPolicy[D any](quotas func(*D) *map[string]adminapi.BacklogQuota, check func(d *D, typ string, q adminapi.BacklogQuota) error) policy[D] {
	return policy[D]{
		path: "backlogQuota", setMethods: post,
		set: func(in *policyRequest) (func(*D) error, error) {
			typ, q, err := backlogQuotaChange(in, true)
			return func(d *D) error {
				if check != nil {
					if err := check(d, typ, q); err != nil {
						return err
					}
				}
				if *quotas(d) == nil {
					*quotas(d) = map[string]adminapi.BacklogQuota{}
				}
				(*quotas(d))[typ] = q
				return nil
			}, err
		},
		remove: func(in *policyRequest) (func(*D) error, error) {
			typ, _, err := backlogQuotaChange(in, false)
			return func(d *D) error {
				delete(*quotas(d), typ)
				if len(*quotas(d)) == 0 {
					*quotas(d) = nil // a namespace's document fills it in again
				}
				return nil
			}, err
		},
	}
}

// backlogQuotaChange reads `POST .../backlogQuota?backlogQuotaType=...` (the type first, then the
// body); with the type alone (body=false) it is DELETE's.
func backlogQuotaChange(in *policyRequest, body bool) (typ string, q adminapi.BacklogQuota, err error) {
	if typ, err = backlogQuotaType(in.r); err != nil || !body {
		return typ, q, err
	}
	if q, err = decodeInput[adminapi.BacklogQuota](in); err != nil {
		return typ, q, err
	}
	q.Normalize()
	if q.Policy == "" {
		q.Policy = adminapi.BacklogPolicyProducerRequestHold
	}
	return typ, q, catalog.ValidateBacklogQuota(q)
}

func backlogQuotaType(r *http.Request) (string, error) {
	typ := r.URL.Query().Get("backlogQuotaType")
	if typ == "" {
		typ = adminapi.BacklogQuotaDestinationStorage
	}
	if typ != adminapi.BacklogQuotaDestinationStorage && typ != adminapi.BacklogQuotaMessageAge {
		return "", fail(http.StatusBadRequest, "Invalid backlogQuotaType %q: want destination_storage or message_age", typ)
	}
	return typ, nil
}

// replicationChange reads a replication list; the change checks it against the clusters registered
// and allowed for the tenant (once the target is known to exist) and stores it with set, which
// gets the list as sent and as checked (without repeats).
func replicationChange[D any](set func(d *D, sent, valid []string)) policyChange[D] {
	return func(in *policyRequest) (func(*D) error, error) {
		clusters, err := decodeInput[[]string](in)
		if err != nil {
			return nil, err
		}
		return func(d *D) error {
			valid, err := in.h.cat.ValidateReplicationClusters(in.r.PathValue("tenant"), clusters)
			if err != nil {
				return err
			}
			set(d, clusters, valid)
			return nil
		}, nil
	}
}
