// Package stores opens a metadata.Store from a URL. It lives apart from package metadata because it
// links every implementation (bbolt, etcd client), and the implementations import metadata.
package stores

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/etcdstore"
	"github.com/meridian-mq/meridian/internal/metadata/localstore"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// Open opens the store named by url (see metadata.ParseURL):
//
//	""  or "local"                     the local bbolt store, dataDir/metadata.db (dataDir created if needed)
//	"etcd://h1:2379,h2:2379[/prefix]"  etcd, keys under /prefix (default /meridian); fails if etcd does
//	                                   not answer within ctx (10 s when ctx has no deadline)
//	"memory"                           an in-memory store (tests)
//
// The local store holds an exclusive lock on its file: open it once per process and share the Store
// (for example as both the local and the configuration store when no --config-store is given).
func Open(ctx context.Context, url string, dataDir string) (metadata.Store, error) {
	loc, err := metadata.ParseURL(url)
	if err != nil {
		return nil, err
	}
	switch loc.Kind {
	case "local":
		if dataDir == "" {
			return nil, fmt.Errorf("local metadata store: no data dir")
		}
		return localstore.OpenDir(dataDir, localstore.Options{})
	case "memory":
		return memstore.New(), nil
	case "etcd":
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, etcdOpenTimeout)
			defer cancel()
		}
		return etcdstore.Open(ctx, etcdstore.Config{Endpoints: loc.Endpoints, Prefix: loc.Prefix, Logger: slog.Default()})
	default:
		return nil, fmt.Errorf("metadata store URL %q: unknown kind %q", url, loc.Kind)
	}
}
