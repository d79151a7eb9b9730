package harness

import (
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd is an embedded single-member etcd server on free loopback ports, for tests that share a
// configuration store between clusters (`--config-store etcd://...`).
type Etcd struct {
	server    *embed.Etcd
	clientURL string
}

// StartEtcd starts an embedded etcd with its data in a temporary directory, waits until it serves
// (at most 20 s) and closes it in t.Cleanup.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "meridian-test"
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	clientURL := mustURL(t, "http://"+FreeAddr(t))
	peerURL := mustURL(t, "http://"+FreeAddr(t))
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("harness: start embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("harness: embedded etcd failed: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatalf("harness: embedded etcd not ready within 20s")
	}
	return &Etcd{server: e, clientURL: clientURL.String()}
}

// ClientURL is the etcd client endpoint, http://127.0.0.1:port.
func (e *Etcd) ClientURL() string { return e.clientURL }

// Endpoint is the client endpoint as host:port.
func (e *Etcd) Endpoint() string { return e.server.Clients[0].Addr().String() }

// ConfigStoreURL is the `--config-store` value for this etcd with the given key prefix (empty: the
// broker's default prefix).
func (e *Etcd) ConfigStoreURL(prefix string) string {
	u := "etcd://" + e.Endpoint()
	if prefix != "" {
		u += "/" + prefix
	}
	return u
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("harness: %v", fmt.Errorf("parse %q: %w", s, err))
	}
	return u
}
