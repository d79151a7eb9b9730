package catalog_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/localstore"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

func benchCatalog(b *testing.B, s metadata.Store) *catalog.Catalog {
	ctx := context.Background()
	c, err := catalog.New(ctx, s, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if err := c.EnsureCluster(ctx, "east", adminapi.ClusterData{ServiceURL: "http://e:8080"}); err != nil {
		b.Fatal(err)
	}
	if err := c.EnsureTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"east"}}); err != nil {
		b.Fatal(err)
	}
	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{"east"}
	if err := c.EnsureNamespace(ctx, "public/default", p); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkNamespaceRead: a full policy document from the cache (a deep copy).
func BenchmarkNamespaceRead(b *testing.B) {
	s := memstore.New()
	b.Cleanup(func() { s.Close() })
	c := benchCatalog(b, s)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.Namespace("public/default"); !ok {
			b.Fatal("missing")
		}
	}
}

// BenchmarkNamespaceShared: the same document without a copy (read-only).
func BenchmarkNamespaceShared(b *testing.B) {
	s := memstore.New()
	b.Cleanup(func() { s.Close() })
	c := benchCatalog(b, s)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.NamespaceShared("public/default"); !ok {
			b.Fatal("missing")
		}
	}
}

// BenchmarkReplicationClusters: the effective replication list of a topic (what a broker asks on
// topic load and on every policy event).
func BenchmarkReplicationClusters(b *testing.B) {
	s := memstore.New()
	b.Cleanup(func() { s.Close() })
	c := benchCatalog(b, s)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.ReplicationClusters("persistent://public/default/t-partition-3"); !ok {
			b.Fatal("missing")
		}
	}
}

// BenchmarkUpdateNamespace: one CAS policy write, returned after the watch shows it in the cache.
func BenchmarkUpdateNamespace(b *testing.B) {
	for _, kind := range []string{"memstore", "localstore"} {
		b.Run(kind, func(b *testing.B) {
			var s metadata.Store = memstore.New()
			if kind == "localstore" {
				ls, err := localstore.Open(filepath.Join(b.TempDir(), "m.db"), localstore.Options{})
				if err != nil {
					b.Fatal(err)
				}
				s = ls
			}
			b.Cleanup(func() { s.Close() })
			c := benchCatalog(b, s)
			ctx := context.Background()
			ttl := 0
			for b.Loop() {
				ttl++
				if err := c.UpdateNamespace(ctx, "public/default", func(p *adminapi.Policies) error {
					v := ttl
					p.MessageTTLInSeconds = &v
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
