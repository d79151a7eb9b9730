package server

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/schema"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// This file serves the schema side of the protocol on internal/schema's registry
// (Server.SetSchemas): GET_SCHEMA, GET_OR_CREATE_SCHEMA, and the schema a PRODUCER or SUBSCRIBE
// declares. Without a registry the schema commands answer an error and declared schemas are
// accepted without a version, as before.

// schemaConfig is a server's schema registry and auto-update policy.
type schemaConfig struct {
	reg        *schema.Registry
	autoUpdate func(context.Context, naming.NamespaceName) bool
	// enforced: namespace policy schema_validation_enforced (nil = never).
	enforced func(context.Context, naming.NamespaceName) bool
}

// schemaConfigs holds each Server's schemaConfig. It lives beside Server rather than in Options so
// that schema support stays in this file; SetSchemas is called once, before Serve.
var schemaConfigs sync.Map // *Server -> *schemaConfig

// SetSchemas gives the server its schema registry. autoUpdate says whether producers may register
// new schema versions in a namespace (policy is_allow_auto_update_schema; nil means always).
// Call it before Serve; without it schema commands answer errors.
func (s *Server) SetSchemas(reg *schema.Registry, autoUpdate func(context.Context, naming.NamespaceName) bool) {
	if reg == nil {
		schemaConfigs.Delete(s)
		return
	}
	cfg := &schemaConfig{reg: reg, autoUpdate: autoUpdate}
	if v, ok := schemaConfigs.Load(s); ok {
		cfg.enforced = v.(*schemaConfig).enforced
	}
	schemaConfigs.Store(s, cfg)
}

// SetSchemaValidationEnforced gives the server the namespace policy schema_validation_enforced:
// when it is true, a producer that declares no schema is refused (IncompatibleSchema) on a topic
// that has one, as Pulsar does. Call it after SetSchemas, before Serve.
func (s *Server) SetSchemaValidationEnforced(enforced func(context.Context, naming.NamespaceName) bool) {
	v, ok := schemaConfigs.Load(s)
	if !ok {
		return
	}
	cfg := *v.(*schemaConfig)
	cfg.enforced = enforced
	schemaConfigs.Store(s, &cfg)
}

// schemaRegistry is the server's registry, nil without one.
func (c *conn) schemaRegistry() *schema.Registry {
	if v, ok := schemaConfigs.Load(c.s); ok {
		return v.(*schemaConfig).reg
	}
	return nil
}

// schemaErr maps registry errors onto the wire sentinels whose ServerError the client expects:
// incompatible or invalid schemas are IncompatibleSchema, a missing schema TopicNotFound (Pulsar's
// answer to GET_SCHEMA for an unknown topic or version).
func schemaErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, schema.ErrIncompatible), errors.Is(err, schema.ErrInvalidSchema):
		return fmt.Errorf("%w: %v", wire.ErrIncompatibleSchema, err)
	case errors.Is(err, schema.ErrNotFound):
		return fmt.Errorf("%w: %v", wire.ErrTopicNotFound, err)
	}
	return err
}

// schemaInfoOf converts a protocol schema (nil for none).
func schemaInfoOf(s *pulsarpb.Schema) *schema.Info {
	if s == nil {
		return nil
	}
	return &schema.Info{
		Name:       s.GetName(),
		Type:       schema.Type(s.GetType()),
		Data:       s.GetSchemaData(),
		Properties: keyValues(s.GetProperties()),
	}
}

// protoSchema converts a stored version for GET_SCHEMA.
func protoSchema(v schema.Version) *pulsarpb.Schema {
	out := &pulsarpb.Schema{
		Name:       proto.String(v.Name),
		SchemaData: append([]byte{}, v.Data...), // required field: never nil
		Type:       pulsarpb.Schema_Type(v.Type).Enum(),
	}
	for k, val := range v.Properties {
		out.Properties = append(out.Properties, &pulsarpb.KeyValue{Key: proto.String(k), Value: proto.String(val)})
	}
	return out
}

// schemaAutoUpdate tells whether producers may register new schema versions in ns.
func (c *conn) schemaAutoUpdate(ctx context.Context, ns naming.NamespaceName) bool {
	v, ok := schemaConfigs.Load(c.s)
	if !ok || v.(*schemaConfig).autoUpdate == nil {
		return true
	}
	return v.(*schemaConfig).autoUpdate(ctx, ns)
}

// handleGetSchema answers GET_SCHEMA: the requested version, or the latest when none is given.
func (c *conn) handleGetSchema(cmd *pulsarpb.CommandGetSchema) {
	reqID := cmd.GetRequestId()
	fail := func(err error) {
		code, msg := toServerError(schemaErr(err))
		c.sendCommand(&pulsarpb.CommandGetSchemaResponse{
			RequestId:    proto.Uint64(reqID),
			ErrorCode:    code.Enum(),
			ErrorMessage: proto.String(msg),
		})
	}
	reg := c.schemaRegistry()
	if reg == nil {
		fail(fmt.Errorf("%w: schema registry not available on this broker", schema.ErrNotFound))
		return
	}
	topic, err := naming.ParseTopic(cmd.GetTopic())
	if err != nil {
		fail(err)
		return
	}
	version, specific, err := schema.ParseVersion(cmd.GetSchemaVersion())
	if err != nil {
		fail(err)
		return
	}
	c.goRequest(func(ctx context.Context) {
		var v schema.Version
		var err error
		if specific {
			v, err = reg.GetLive(ctx, topic, version)
		} else {
			v, err = reg.Latest(ctx, topic)
		}
		if err != nil {
			fail(err)
			return
		}
		c.sendCommand(&pulsarpb.CommandGetSchemaResponse{
			RequestId:     proto.Uint64(reqID),
			Schema:        protoSchema(v),
			SchemaVersion: schema.VersionBytes(v.Version),
		})
	})
}

// handleGetOrCreateSchema answers GET_OR_CREATE_SCHEMA, which a producer sends before the first
// message of a schema it has no version for: the version of the schema, registered if needed.
func (c *conn) handleGetOrCreateSchema(cmd *pulsarpb.CommandGetOrCreateSchema) {
	reqID := cmd.GetRequestId()
	fail := func(err error) {
		code, msg := toServerError(schemaErr(err))
		c.sendCommand(&pulsarpb.CommandGetOrCreateSchemaResponse{
			RequestId:    proto.Uint64(reqID),
			ErrorCode:    code.Enum(),
			ErrorMessage: proto.String(msg),
		})
	}
	if c.schemaRegistry() == nil {
		fail(fmt.Errorf("%w: schema registry not available on this broker", schema.ErrIncompatible))
		return
	}
	topic, err := naming.ParseTopic(cmd.GetTopic())
	if err != nil {
		fail(err)
		return
	}
	info := schemaInfoOf(cmd.GetSchema())
	c.goRequest(func(ctx context.Context) {
		// The topic must exist (or be creatable): no schema is stored for a missing namespace.
		if _, err := c.s.opts.Broker.GetTopic(ctx, topic, true); err != nil {
			fail(err)
			return
		}
		version, err := c.producerSchema(ctx, topic, info)
		if err != nil {
			fail(err)
			return
		}
		if version == nil {
			// BYTES on a topic with a typed schema: accepted without a version.
			version = []byte{}
		}
		c.sendCommand(&pulsarpb.CommandGetOrCreateSchemaResponse{
			RequestId:     proto.Uint64(reqID),
			SchemaVersion: version,
		})
	})
}

// producerSchema applies the schema a producer declares (PRODUCER.schema or
// GET_OR_CREATE_SCHEMA) and returns its version for PRODUCER_SUCCESS.schema_version (nil when the
// producer declares none, or without a registry). Errors wrap wire.ErrIncompatibleSchema.
func (c *conn) producerSchema(ctx context.Context, topic naming.TopicName, info *schema.Info) ([]byte, error) {
	reg := c.schemaRegistry()
	if reg == nil {
		return nil, nil
	}
	if info == nil {
		return nil, c.checkSchemaless(ctx, reg, topic)
	}
	v, err := reg.ForProducer(ctx, topic, info, c.schemaAutoUpdate(ctx, topic.NamespaceName()))
	return v, schemaErr(err)
}

// checkSchemaless refuses a producer without a schema on a topic with one when the namespace
// enforces schema validation.
func (c *conn) checkSchemaless(ctx context.Context, reg *schema.Registry, topic naming.TopicName) error {
	v, ok := schemaConfigs.Load(c.s)
	if !ok || v.(*schemaConfig).enforced == nil || !v.(*schemaConfig).enforced(ctx, topic.NamespaceName()) {
		return nil
	}
	latest, err := reg.Latest(ctx, topic)
	if errors.Is(err, schema.ErrNotFound) || err == nil && latest.Type == schema.TypeNone {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: producers cannot connect without a schema to topic %s, which has one, while schema validation is enforced", wire.ErrIncompatibleSchema, topic)
}

// consumerSchema applies the schema a consumer declares (SUBSCRIBE.schema) on a loaded topic: it
// must be compatible with the topic's schema; an idle topic without one adopts it.
func (c *conn) consumerSchema(ctx context.Context, t *broker.Topic, info *schema.Info) error {
	reg := c.schemaRegistry()
	if reg == nil || info.IsNone() {
		return nil
	}
	idle := t.Producers() == 0 && t.LastPosition().EntryID < 0 && len(t.Subscriptions()) == 0
	return schemaErr(reg.ForConsumer(ctx, t.Name(), info, idle))
}
