package node

import (
	"context"
	"fmt"

	"github.com/meridian-mq/meridian/adminapi"

	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/schema"
)

// newSchemaRegistry builds the schema registry on the cluster's local metadata store (Pulsar keeps
// schemas per cluster; replication registers them on remotes), with compatibility strategies from
// the namespace policies.
func newSchemaRegistry(local metadata.Store, cat *catalog.Catalog) *schema.Registry {
	return schema.New(local, schema.Options{Strategy: schemaStrategy(cat)})
}

// schemaStrategy resolves a topic's compatibility strategy as Pulsar does: the namespace's
// schema_compatibility_strategy unless UNDEFINED, else its older
// schema_auto_update_compatibility_strategy (default "Full"), else the broker default FULL.
func schemaStrategy(cat *catalog.Catalog) schema.StrategySource {
	return func(_ context.Context, topic naming.TopicName) schema.Strategy {
		p, ok := cat.NamespaceShared(topic.NamespaceName().String())
		if !ok {
			return schema.DefaultStrategy
		}
		s, err := schema.ParseStrategy(p.SchemaCompatibilityStrategy)
		if err == nil && s != schema.StrategyUndefined {
			return s
		}
		legacy, err := schema.ParseStrategy(p.SchemaAutoUpdateCompatibilityStrategy)
		if err != nil {
			legacy = schema.StrategyUndefined
		}
		return legacy.Resolve(schema.DefaultStrategy)
	}
}

// schemaAutoUpdate reports the namespace policy is_allow_auto_update_schema (default true): may
// producers register new schema versions.
func schemaAutoUpdate(cat *catalog.Catalog) func(context.Context, naming.NamespaceName) bool {
	return func(_ context.Context, ns naming.NamespaceName) bool {
		p, ok := cat.NamespaceShared(ns.String())
		if !ok || p.IsAllowAutoUpdateSchema == nil {
			return true
		}
		return *p.IsAllowAutoUpdateSchema
	}
}

// schemaValidationEnforced reports the namespace policy schema_validation_enforced (default false):
// producers without a schema are refused on topics that have one.
func schemaValidationEnforced(cat *catalog.Catalog) func(context.Context, naming.NamespaceName) bool {
	return func(_ context.Context, ns naming.NamespaceName) bool {
		p, ok := cat.NamespaceShared(ns.String())
		return ok && p.SchemaValidationEnforced
	}
}

// localSchemaReader reads a schema version of this cluster's registry for the replicators.
func localSchemaReader(reg *schema.Registry) replication.LocalSchemaReader {
	return func(ctx context.Context, topic string, version int64) (adminapi.SchemaPayload, error) {
		t, err := naming.ParseTopic(topic)
		if err != nil {
			return adminapi.SchemaPayload{}, err
		}
		v, err := reg.Get(ctx, t, version)
		if err != nil {
			return adminapi.SchemaPayload{}, err
		}
		if v.Deleted {
			return adminapi.SchemaPayload{}, fmt.Errorf("schema version %d of %s: %w", version, topic, schema.ErrNotFound)
		}
		return adminapi.SchemaPayload{Type: v.Type.String(), Schema: string(v.Data), Properties: v.Properties}, nil
	}
}
