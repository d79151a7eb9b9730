package admin

import (
	"errors"
	"net/http"
	"strconv"
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
	h.handle("GET "+schemaBase+"/schema", h.schemaGetLatest)
	h.handle("GET "+schemaBase+"/schema/{version}", h.schemaGetVersion)
	h.handle("GET "+schemaBase+"/schemas", h.schemaGetAll)
	h.handle("POST "+schemaBase+"/schema", h.schemaPost)
	h.handle("DELETE "+schemaBase+"/schema", h.schemaDelete)
	h.handle("POST "+schemaBase+"/version", h.schemaVersionOf)
	h.handle("POST "+schemaBase+"/compatibility", h.schemaCompatibility)
}

// schemaTopic resolves the path's topic (persistent domain; the registry keys by base name) and
// checks the namespace and that a registry is configured.
func (h *Handler) schemaTopic(r *http.Request) (naming.TopicName, *schema.Registry, error) {
	t, err := naming.ParseTopic("persistent://" + r.PathValue("tenant") + "/" + r.PathValue("namespace") + "/" + r.PathValue("topic"))
	if err != nil {
		return t, nil, fail(http.StatusPreconditionFailed, "Topic name is not valid: %v", err)
	}
	if err := h.requireTopicNamespace(t); err != nil {
		return t, nil, err
	}
	if h.cfg.Schemas == nil {
		return t, nil, fail(http.StatusServiceUnavailable, "Schema registry not available")
	}
	return t.Base(), h.cfg.Schemas, nil
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

func toSchemaResponse(v schema.Version) getSchemaResponse {
	props := v.Properties
	if props == nil {
		props = map[string]string{}
	}
	return getSchemaResponse{Version: v.Version, Type: v.Type.String(), Timestamp: v.Timestamp, Data: string(v.Data), Properties: props}
}

func (h *Handler) schemaGetLatest(w http.ResponseWriter, r *http.Request) error {
	t, reg, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	v, err := reg.Latest(r.Context(), t)
	if err != nil {
		return schemaError(err)
	}
	return ok(w, toSchemaResponse(v))
}

func (h *Handler) schemaGetVersion(w http.ResponseWriter, r *http.Request) error {
	t, reg, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(r.PathValue("version"), 10, 64)
	if err != nil || n < 0 {
		return fail(http.StatusBadRequest, "Invalid schema version %q", r.PathValue("version"))
	}
	v, err := reg.Get(r.Context(), t, n)
	if err != nil {
		return schemaError(err)
	}
	if v.Deleted {
		return fail(http.StatusNotFound, "Schema not found")
	}
	return ok(w, toSchemaResponse(v))
}

func (h *Handler) schemaGetAll(w http.ResponseWriter, r *http.Request) error {
	t, reg, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	live, err := reg.Live(r.Context(), t)
	if err != nil {
		return schemaError(err)
	}
	out := struct {
		Schemas []getSchemaResponse `json:"getSchemaResponses"`
	}{Schemas: []getSchemaResponse{}}
	for _, v := range live {
		out.Schemas = append(out.Schemas, toSchemaResponse(v))
	}
	return ok(w, out)
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

func (h *Handler) schemaPost(w http.ResponseWriter, r *http.Request) error {
	t, reg, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	info, err := decodeSchemaPayload(r, t.Local)
	if err != nil {
		return err
	}
	if info.IsNone() {
		return fail(http.StatusUnprocessableEntity, "Schema type %s declares no schema; nothing to register", info.Type)
	}
	v, err := reg.Put(r.Context(), t, info)
	if err != nil {
		return schemaError(err)
	}
	return ok(w, map[string]int64{"version": v})
}

func (h *Handler) schemaDelete(w http.ResponseWriter, r *http.Request) error {
	t, reg, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	v, err := reg.Delete(r.Context(), t, queryBool(r, "force"))
	if err != nil {
		return schemaError(err)
	}
	return ok(w, map[string]int64{"version": v})
}

func (h *Handler) schemaVersionOf(w http.ResponseWriter, r *http.Request) error {
	t, reg, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	info, err := decodeSchemaPayload(r, t.Local)
	if err != nil {
		return err
	}
	v, err := reg.Find(r.Context(), t, info)
	if err != nil {
		return schemaError(err)
	}
	return ok(w, map[string]int64{"version": v})
}

func (h *Handler) schemaCompatibility(w http.ResponseWriter, r *http.Request) error {
	t, reg, err := h.schemaTopic(r)
	if err != nil {
		return err
	}
	info, err := decodeSchemaPayload(r, t.Local)
	if err != nil {
		return err
	}
	strategy, err := reg.Check(r.Context(), t, info)
	compatible := err == nil
	if err != nil && !errors.Is(err, schema.ErrIncompatible) {
		return schemaError(err)
	}
	if strategy == schema.StrategyUndefined {
		strategy = schema.DefaultStrategy
	}
	return ok(w, map[string]any{"compatibility": compatible, "schemaCompatibilityStrategy": strings.ToUpper(strategy.String())})
}
