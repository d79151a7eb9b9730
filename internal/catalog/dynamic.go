package catalog

import (
	"context"
	"maps"
)

// DynamicConfig returns the brokers' dynamic configuration overrides (Pulsar's
// `/admin/v2/brokers/configuration`): name -> value as given. It lives in the configuration store,
// so clusters sharing a store share it. Meridian stores and returns these values; which ones a broker
// acts on is documented in docs/admin.md.
func (c *Catalog) DynamicConfig() map[string]string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return maps.Clone(c.dynamic.val)
}

// SetDynamicConfig sets one dynamic configuration value.
func (c *Catalog) SetDynamicConfig(ctx context.Context, name, value string) error {
	if name == "" {
		return refuse(ErrPrecondition, "Configuration name is empty")
	}
	return update(ctx, c, keyDynamicConfig, func() map[string]string { return map[string]string{} },
		func(v *map[string]string, _ bool) (bool, error) {
			if *v == nil {
				*v = map[string]string{}
			}
			(*v)[name] = value
			return false, nil
		})
}

// DeleteDynamicConfig removes one dynamic configuration value (ErrNotFound if it is not set).
func (c *Catalog) DeleteDynamicConfig(ctx context.Context, name string) error {
	return update(ctx, c, keyDynamicConfig, func() map[string]string { return map[string]string{} },
		func(v *map[string]string, exists bool) (bool, error) {
			if _, ok := (*v)[name]; !exists || !ok {
				return false, refuse(ErrNotFound, "Configuration %s is not set", name)
			}
			delete(*v, name)
			return len(*v) == 0, nil
		})
}
