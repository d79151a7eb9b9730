package harness

import (
	"testing"

	"github.com/meridian-mq/meridian/internal/metadata/etcdstore/etcdtest"
)

// Etcd is a single-member etcd server (the client's version, an etcdtest process) on free loopback
// ports, for tests that share a configuration store between clusters (`--config-store etcd://...`).
type Etcd struct{ server *etcdtest.Server }

// StartEtcd starts an etcd with its data in a temporary directory, waits until it serves and stops
// it in t.Cleanup.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	return &Etcd{server: etcdtest.Start(t)}
}

// ClientURL is the etcd client endpoint, http://127.0.0.1:port.
func (e *Etcd) ClientURL() string { return "http://" + e.Endpoint() }

// Endpoint is the client endpoint as host:port.
func (e *Etcd) Endpoint() string { return e.server.Endpoints()[0] }

// ConfigStoreURL is the `--config-store` value for this etcd with the given key prefix (empty: the
// broker's default prefix).
func (e *Etcd) ConfigStoreURL(prefix string) string {
	if prefix != "" {
		prefix = "/" + prefix
	}
	return e.server.URL(prefix)
}
