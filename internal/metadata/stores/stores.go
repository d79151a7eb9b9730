// Package stores opens a metadata.Store from a URL. It lives apart from package metadata because it
// links every implementation (bbolt, etcd client), and the implementations import metadata.
package stores

import (
	"context"
	"errors"
	"fmt"

	"github.com/meridian-mq/meridian/internal/metadata"
)

// Open opens the store named by url (see metadata.ParseURL): "" for the local bbolt store in
// dataDir/metadata.db, "etcd://h1:2379,h2:2379[/prefix]" for etcd (default prefix /meridian), "memory"
// for an in-memory store. The local store holds an exclusive lock on its file: open it once per
// process and share the Store.
func Open(ctx context.Context, url string, dataDir string) (metadata.Store, error) {
	loc, err := metadata.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("opening %s metadata store: %w", loc.Kind, errors.ErrUnsupported)
}
