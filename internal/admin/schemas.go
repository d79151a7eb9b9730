package admin

import (
	"errors"
	"math"
	"net/http"
	"strings"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/schema"
)

// Schema registry REST (`/admin/v2/schemas/{tenant}/{namespace}/{topic}/...`), Pulsar's shapes:
//
//	GET    .../schema               latest schema             {"version","type","timestamp","data","properties"}
//	GET    .../schema/{version}     one version
//	GET    .../schemas              all live versions         {"getSchemaResponses":[...]}
//	POST   .../schema               register {"type","schema","properties"} -> {"version": n}
//	DELETE .../schema[?force=true]  tombstone (or erase)      {"version": n}
//	POST   .../version              version of an identical schema -> {"version": n}
//	POST   .../compatibility        -> {"compatibility": bool, "schemaCompatibilityStrategy": "FULL"}
//
// The topic has no domain in these paths (a schema belongs to the topic's base name in both domains).

const schemaBase = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"

// postSchemaPayload is what clients send (pulsaradmin's PostSchemaPayload).
type postSchemaPayload struct {
	Type       string            `json:"type"`
	Schema     string            `json:"schema"`
	Properties map[string]string `json:"properties"`
}

// getSchemaResponse is Pulsar's GetSchemaResponse.
type getSchemaResponse struct {
	Version    int64             `json:"version"`
	Type       string            `json:"type"`
	Timestamp  int64             `json:"timestamp"`
	Data       string            `json:"data"`
	Properties map[string]string `json:"properties"`
}

func (h *Handler) schemaRoutes() {
	h.handle("GET "+schemaBase+"/schema", readEndpoint(h.schemaTopic, func(r *http.Request, st schemaTarget) (getSchemaResponse, error) {
		return schemaAnswer(st.reg.Latest(r.Context(), st.topic))
	}))
	h.handle("GET "+schemaBase+"/schema/{version}", readEndpoint(h.schemaTopic, schemaGetVersion))
	h.handle("GET "+schemaBase+"/schemas", readEndpoint(h.schemaTopic, schemaGetAll))
	h.handle("POST "+schemaBase+"/schema", readEndpoint(h.schemaTopic, schemaPost))
	h.handle("DELETE "+schemaBase+"/schema", readEndpoint(h.schemaTopic, func(r *http.Request, st schemaTarget) (schemaVersion, error) {
		return versionAnswer(st.reg.Delete(r.Context(), st.topic, queryBool(r, "force")))
	}))
	h.handle("POST "+schemaBase+"/version", readEndpoint(h.schemaTopic, func(r *http.Request, st schemaTarget) (schemaVersion, error) {
		info, err := decodeSchemaPayload(r, st.topic.Local)
		if err != nil {
			return nil, err
		}
		return versionAnswer(st.reg.Find(r.Context(), st.topic, info))
	}))
	h.handle("POST "+schemaBase+"/compatibility", readEndpoint(h.schemaTopic, schemaCompatibility))
}

// schemaTarget is a schema request's topic (its base name) and the registry.
type schemaTarget struct {
	topic naming.TopicName
	reg   *schema.Registry
}

// schemaTopic resolves the path's topic (persistent domain; the registry keys by base name) and
// checks the namespace and that a registry is configured.
func (h *Handler) schemaTopic(r *http.Request) (schemaTarget, error) {
	t, err := naming.ParseTopic("persistent://" + r.PathValue("tenant") + "/" + r.PathValue("namespace") + "/" + r.PathValue("topic"))
	if err != nil {
		return schemaTarget{}, fail(http.StatusPreconditionFailed, "Topic name is not valid: %v", err)
	}
	if err := h.requireTopicNamespace(t); err != nil {
		return schemaTarget{}, err
	}
	if h.cfg.Schemas == nil {
		return schemaTarget{}, fail(http.StatusServiceUnavailable, "Schema registry not available")
	}
	return schemaTarget{topic: t.Base(), reg: h.cfg.Schemas}, nil
}

// schemaError maps registry errors to Pulsar's statuses.
func schemaError(err error) error {
	switch {
	case errors.Is(err, schema.ErrNotFound):
		return fail(http.StatusNotFound, "Schema not found")
	case errors.Is(err, schema.ErrIncompatible):
		return fail(http.StatusConflict, "%v", err)
	case errors.Is(err, schema.ErrInvalidSchema):
		return fail(http.StatusUnprocessableEntity, "%v", err)
	}
	return err
}

// schemaVersion is Pulsar's {"version": n} answer.
type schemaVersion = map[string]int64

// versionAnswer is a registry call's version as the answer, or its error as Pulsar's.
func versionAnswer(v int64, err error) (schemaVersion, error) {
	if err != nil {
		return nil, schemaError(err)
	}
	return schemaVersion{"version": v}, nil
}

// schemaAnswer is a registry call's schema as Pulsar's GetSchemaResponse, or its error as Pulsar's.
func schemaAnswer(v schema.Version, err error) (getSchemaResponse, error) {
	if err != nil {
		return getSchemaResponse{}, schemaError(err)
	}
	return toSchemaResponse(v), nil
}

func toSchemaResponse(v schema.Version) getSchemaResponse {
	props := v.Properties
	if props == nil {
		props = map[string]string{}
	}
	return getSchemaResponse{Version: v.Version, Type: v.Type.String(), Timestamp: v.Timestamp, Data: string(v.Data), Properties: props}
}

func schemaGetVersion(r *http.Request, st schemaTarget) (getSchemaResponse, error) {
	n, err := pathInt(r, "version", 0, math.MaxInt64, http.StatusBadRequest, "Invalid schema version %q")
	if err != nil {
		return getSchemaResponse{}, err
	}
	v, err := st.reg.Get(r.Context(), st.topic, n)
	if err == nil && v.Deleted {
		return getSchemaResponse{}, fail(http.StatusNotFound, "Schema not found")
	}
	return schemaAnswer(v, err)
}

// schemaList is Pulsar's answer listing a topic's live schemas.
type schemaList struct {
	Schemas []getSchemaResponse `json:"getSchemaResponses"`
}

func schemaGetAll(r *http.Request, st schemaTarget) (schemaList, error) {
	live, err := st.reg.Live(r.Context(), st.topic)
	if err != nil {
		return schemaList{}, schemaError(err)
	}
	out := schemaList{Schemas: []getSchemaResponse{}}
	for _, v := range live {
		out.Schemas = append(out.Schemas, toSchemaResponse(v))
	}
	return out, nil
}

// decodeSchemaPayload reads a POST body into the registry's Info.
func decodeSchemaPayload(r *http.Request, name string) (schema.Info, error) {
	var p postSchemaPayload
	if err := decodeBody(r, &p); err != nil {
		return schema.Info{}, err
	}
	typ, err := schema.ParseType(p.Type)
	if err != nil {
		return schema.Info{}, fail(http.StatusUnprocessableEntity, "%v", err)
	}
	return schema.Info{Name: name, Type: typ, Data: []byte(p.Schema), Properties: p.Properties}, nil
}

func schemaPost(r *http.Request, st schemaTarget) (schemaVersion, error) {
	info, err := decodeSchemaPayload(r, st.topic.Local)
	if err != nil {
		return nil, err
	}
	if info.IsNone() {
		return nil, fail(http.StatusUnprocessableEntity, "Schema type %s declares no schema; nothing to register", info.Type)
	}
	return versionAnswer(st.reg.Put(r.Context(), st.topic, info))
}

// schemaCompatibility is Pulsar's {"compatibility": bool, "schemaCompatibilityStrategy": "FULL"}.
func schemaCompatibility(r *http.Request, st schemaTarget) (map[string]any, error) {
	info, err := decodeSchemaPayload(r, st.topic.Local)
	if err != nil {
		return nil, err
	}
	strategy, err := st.reg.Check(r.Context(), st.topic, info)
	compatible := err == nil
	if err != nil && !errors.Is(err, schema.ErrIncompatible) {
		return nil, schemaError(err)
	}
	if strategy == schema.StrategyUndefined {
		strategy = schema.DefaultStrategy
	}
	return map[string]any{"compatibility": compatible, "schemaCompatibilityStrategy": strings.ToUpper(strategy.String())}, nil
}
