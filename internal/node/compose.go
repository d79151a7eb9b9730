package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/stores"
	"github.com/meridian-mq/meridian/internal/storage"
)

// components are the pieces a node builds, in start order.
type components struct {
	engine      *storage.Engine
	localStore  metadata.Store
	configStore metadata.Store // == localStore without --config-store
	ownsConfig  bool           // configStore is ours to close
}

// storageDir is where the storage engine keeps its files inside the data dir.
func storageDir(dataDir string) string { return filepath.Join(dataDir, "storage") }

// compose builds the components and starts serving. Called from start with the listeners bound.
func (n *Node) compose(ctx context.Context) error {
	c := &n.components
	sync := storage.SyncAlways
	if n.opts.Fsync == FsyncInterval {
		sync = storage.SyncInterval
	}
	var err error
	c.engine, err = storage.Open(ctx, storage.Options{
		Dir:          storageDir(n.opts.DataDir),
		Sync:         sync,
		MaxEntrySize: n.opts.MaxMessageSize + frameOverhead,
		Logger:       n.opts.Logger,
	})
	if err != nil {
		return fmt.Errorf("open storage: %w", err)
	}
	c.localStore, err = stores.Open(ctx, "", n.opts.DataDir)
	if err != nil {
		return fmt.Errorf("open local metadata store: %w", err)
	}
	switch {
	case n.opts.SharedConfigStore != nil:
		c.configStore = n.opts.SharedConfigStore
	case n.opts.ConfigStore != "":
		c.configStore, err = stores.Open(ctx, n.opts.ConfigStore, n.opts.DataDir)
		if err != nil {
			return fmt.Errorf("open configuration store %s: %w", n.opts.ConfigStore, err)
		}
		c.ownsConfig = true
	default:
		c.configStore = c.localStore
	}
	return nil
}

// frameOverhead is what a stored entry may carry beyond the message itself (Pulsar's frame padding:
// the checksum, metadata and batch headers).
const frameOverhead = 10 * 1024

// close stops the components in reverse start order.
func (c *components) close(ctx context.Context, log *slog.Logger) error {
	var errs []error
	if c.engine != nil {
		if err := c.engine.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close storage: %w", err))
		}
	}
	if c.ownsConfig && c.configStore != nil {
		if err := c.configStore.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close configuration store: %w", err))
		}
	}
	if c.localStore != nil {
		if err := c.localStore.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close local metadata store: %w", err))
		}
	}
	_ = ctx
	_ = log
	return errors.Join(errs...)
}
