package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/schema"
)

// This file serves Pulsar's schema registry REST API (/admin/v2/schemas/{tenant}/{namespace}/{topic}/...)
// on internal/schema's registry, mounted by MountSchemas. Shapes are Pulsar's (pulsaradmin's
// utils.GetSchemaResponse, GetAllSchemasResponse, PostSchemaPayload, IsCompatibility):
//
//	GET    .../schema            latest schema              404 when none
//	GET    .../schema/{version}  one version                404 when missing or deleted
//	GET    .../schemas           every live version         {"getSchemaResponses":[...]}
//	DELETE .../schema[?force=]   tombstone (or erase all)   {"version":N}
//	POST   .../schema            register a payload         {"version":{"version":N}}; 409 incompatible
//	POST   .../compatibility     test a payload             {"compatibility":b,"schemaCompatibilityStrategy":"FULL"}
//	POST   .../version           version of a payload       {"version":N}; 404 when not registered

// getSchemaResponse is Pulsar's GetSchemaResponse.
type getSchemaResponse struct {
	Version    int64             `json:"version"`
	Type       string            `json:"type"`
	Timestamp  int64             `json:"timestamp"`
	Data       string            `json:"data"`
	Properties map[string]string `json:"properties"`
}

// postSchemaPayload is Pulsar's PostSchemaPayload.
type postSchemaPayload struct {
	Type       string            `json:"type"`
	Schema     string            `json:"schema"`
	Properties map[string]string `json:"properties"`
}

// MountSchemas serves the schema REST API on reg. Call it once, after NewHandler and before the
// handler serves requests.
func (h *Handler) MountSchemas(reg *schema.Registry) {
	const base = "/admin/v2/schemas/{tenant}/{namespace}/{topic}/"
	s := schemaAPI{h: h, reg: reg}
	h.handle("GET "+base+"schema", s.latest)
	h.handle("GET "+base+"schema/{version}", s.version)
	h.handle("GET "+base+"schemas", s.all)
	h.handle("DELETE "+base+"schema", s.delete)
	h.handle("POST "+base+"schema", s.post)
	h.handle("POST "+base+"compatibility", s.compatibility)
	h.handle("POST "+base+"version", s.versionOf)
}

type schemaAPI struct {
	h   *Handler
	reg *schema.Registry
}

// topic parses the path's topic; schemas belong to the topic's base name in either domain.
func (s schemaAPI) topic(r *http.Request) (naming.TopicName, error) {
	t, err := naming.ParseTopic("persistent://" + r.PathValue("tenant") + "/" + r.PathValue("namespace") + "/" + r.PathValue("topic"))
	if err != nil {
		return naming.TopicName{}, fail(http.StatusPreconditionFailed, "Invalid topic name: %v", err)
	}
	if _, ok := s.h.cat.NamespaceShared(t.NamespaceName().String()); !ok {
		return naming.TopicName{}, fail(http.StatusNotFound, "Namespace does not exist")
	}
	return t, nil
}

// schemaError maps registry errors to Pulsar's statuses.
func schemaError(err error) error {
	switch {
	case errors.Is(err, schema.ErrNotFound):
		return fail(http.StatusNotFound, "Schema not found")
	case errors.Is(err, schema.ErrIncompatible):
		return fail(http.StatusConflict, "%v", err)
	case errors.Is(err, schema.ErrInvalidSchema):
		return fail(http.StatusUnprocessableEntity, "Invalid schema definition data: %v", err)
	}
	return err
}

func responseOf(v schema.Version) getSchemaResponse {
	props := v.Properties
	if props == nil {
		props = map[string]string{}
	}
	return getSchemaResponse{Version: v.Version, Type: v.Type.String(), Timestamp: v.Timestamp, Data: string(v.Data), Properties: props}
}

func (s schemaAPI) latest(w http.ResponseWriter, r *http.Request) error {
	t, err := s.topic(r)
	if err != nil {
		return err
	}
	v, err := s.reg.Latest(r.Context(), t)
	if err != nil {
		return schemaError(err)
	}
	return ok(w, responseOf(v))
}

func (s schemaAPI) version(w http.ResponseWriter, r *http.Request) error {
	t, err := s.topic(r)
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(r.PathValue("version"), 10, 64)
	if err != nil || n < 0 {
		return fail(http.StatusBadRequest, "Invalid schema version %q", r.PathValue("version"))
	}
	v, err := s.reg.Get(r.Context(), t, n)
	if err == nil && v.Deleted {
		err = schema.ErrNotFound
	}
	if err != nil {
		return schemaError(err)
	}
	return ok(w, responseOf(v))
}

func (s schemaAPI) all(w http.ResponseWriter, r *http.Request) error {
	t, err := s.topic(r)
	if err != nil {
		return err
	}
	live, err := s.reg.Live(r.Context(), t)
	if err != nil {
		return schemaError(err)
	}
	out := make([]getSchemaResponse, 0, len(live))
	for _, v := range live {
		out = append(out, responseOf(v))
	}
	return ok(w, map[string]any{"getSchemaResponses": out})
}

func (s schemaAPI) delete(w http.ResponseWriter, r *http.Request) error {
	t, err := s.topic(r)
	if err != nil {
		return err
	}
	force := r.URL.Query().Get("force") == "true"
	v, err := s.reg.Delete(r.Context(), t, force)
	if err != nil {
		return schemaError(err)
	}
	return ok(w, map[string]int64{"version": v})
}

// payload reads a PostSchemaPayload.
func (s schemaAPI) payload(r *http.Request) (schema.Info, error) {
	body, err := readBody(r)
	if err != nil {
		return schema.Info{}, err
	}
	var p postSchemaPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return schema.Info{}, fail(http.StatusBadRequest, "Invalid schema payload: %v", err)
	}
	ty, err := schema.ParseType(p.Type)
	if err != nil {
		return schema.Info{}, fail(http.StatusUnprocessableEntity, "%v", err)
	}
	return schema.Info{Name: r.PathValue("topic"), Type: ty, Data: []byte(p.Schema), Properties: p.Properties}, nil
}

func (s schemaAPI) post(w http.ResponseWriter, r *http.Request) error {
	t, err := s.topic(r)
	if err != nil {
		return err
	}
	info, err := s.payload(r)
	if err != nil {
		return err
	}
	if info.IsNone() {
		return fail(http.StatusUnprocessableEntity, "A BYTES schema is not stored")
	}
	v, err := s.reg.Put(r.Context(), t, info)
	if err != nil {
		return schemaError(err)
	}
	return ok(w, map[string]any{"version": map[string]int64{"version": v}})
}

func (s schemaAPI) compatibility(w http.ResponseWriter, r *http.Request) error {
	t, err := s.topic(r)
	if err != nil {
		return err
	}
	info, err := s.payload(r)
	if err != nil {
		return err
	}
	strategy, err := s.reg.Check(r.Context(), t, info)
	if err != nil && !errors.Is(err, schema.ErrIncompatible) && !errors.Is(err, schema.ErrInvalidSchema) {
		return err
	}
	return ok(w, map[string]any{"compatibility": err == nil, "schemaCompatibilityStrategy": strategy.String()})
}

func (s schemaAPI) versionOf(w http.ResponseWriter, r *http.Request) error {
	t, err := s.topic(r)
	if err != nil {
		return err
	}
	info, err := s.payload(r)
	if err != nil {
		return err
	}
	v, err := s.reg.Find(r.Context(), t, info)
	if err != nil {
		return schemaError(err)
	}
	return ok(w, map[string]int64{"version": v})
}
