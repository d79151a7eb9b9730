package admin_test

import (
	"context"
	"testing"

	"github.com/meridian-mq/meridian/internal/metadata"
)

func TestClusterMigrationEndpoints(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		e := newEnv(t, s)
		const target = `{"serviceUrl":"http://green:8080","serviceUrlTls":"https://green:8081","brokerServiceUrl":"pulsar://green:6650","brokerServiceUrlTls":"pulsar+ssl://green:6651"}`
		e.expect("GET", "/admin/v2/clusters/standalone/migrate", "", 200, `{"migrated":false}`)
		e.expect("POST", "/admin/v2/clusters/standalone/migrate?migrated=true", "", 400, "Cluster url must not be empty")
		e.expect("POST", "/admin/v2/clusters/standalone/migrate?migrated=true", `{}`, 400, "Cluster url must not be empty")
		e.expect("POST", "/admin/v2/clusters/standalone/migrate?migrated=true", `{"brokerServiceUrl":"http://green:6650"}`, 400, "Invalid brokerServiceUrl")
		e.expect("POST", "/admin/v2/clusters/standalone/migrate?migrated=true", `{"brokerServiceUrl":`, 400, "invalid JSON")
		e.expect("POST", "/admin/v2/clusters/nope/migrate?migrated=true", target, 404, "Cluster does not exist")
		e.expect("GET", "/admin/v2/clusters/nope/migrate", "", 404, "Cluster does not exist")

		// migrated=false with a URL: the target is known, nothing moves yet.
		e.expect("POST", "/admin/v2/clusters/standalone/migrate?migrated=false", target, 200, "")
		e.expect("GET", "/admin/v2/clusters/standalone/migrate", "", 200, `{"migrated":false,"migratedClusterUrl":`+target+`}`)
		e.expect("POST", "/admin/v2/clusters/standalone/migrate?migrated=true", target, 200, "")
		e.expect("GET", "/admin/v2/clusters/standalone/migrate", "", 200, `{"migrated":true,"migratedClusterUrl":`+target+`}`)
		d, ok := e.cat.Cluster("standalone")
		if !ok || !d.Migrated || d.MigratedClusterURL == nil || d.MigratedClusterURL.BrokerServiceURL != "pulsar://green:6650" {
			t.Fatalf("catalog has %+v", d)
		}
		// Another cluster is untouched (clusters sharing one store keep their own state).
		e.expect("GET", "/admin/v2/clusters/west/migrate", "", 200, `{"migrated":false}`)
		// Updating the cluster's URLs keeps the migration state.
		e.expect("POST", "/admin/v2/clusters/standalone", `{"serviceUrl":"http://127.0.0.1:8080","brokerServiceUrl":"pulsar://127.0.0.1:6650"}`, 204, "")
		e.expect("GET", "/admin/v2/clusters/standalone/migrate", "", 200, `{"migrated":true,`)
		// The state is in the store: a fresh catalog over it reads it.
		if got, err := e.client.GetCluster(context.Background(), "standalone"); err != nil || !got.Migrated {
			t.Fatalf("GET cluster = %+v, %v", got, err)
		}
		// Back: migrated=false without a body clears the target.
		e.expect("POST", "/admin/v2/clusters/standalone/migrate?migrated=false", "", 200, "")
		e.expect("GET", "/admin/v2/clusters/standalone/migrate", "", 200, `{"migrated":false}`)
	})
}

func TestNamespaceMigrationEndpoint(t *testing.T) {
	stores(t, func(t *testing.T, s metadata.Store) {
		e := newEnv(t, s)
		e.expect("GET", "/admin/v2/namespaces/public/default/migration", "", 200, "false")
		e.expect("POST", "/admin/v2/namespaces/public/default/migration", "true", 204, "")
		e.expect("GET", "/admin/v2/namespaces/public/default/migration", "", 200, "true")
		if p, ok := e.cat.Namespace("public/default"); !ok || !p.Migrated {
			t.Fatalf("namespace policies: %+v", p)
		}
		e.expect("GET", "/admin/v2/namespaces/public/default", "", 200, `"migrated":true`)
		e.expect("POST", "/admin/v2/namespaces/public/default/migration", `"false"`, 204, "")
		e.expect("GET", "/admin/v2/namespaces/public/default/migration", "", 200, "false")
		e.expect("POST", "/admin/v2/namespaces/public/default/migration", "maybe", 400, "")
		e.expect("POST", "/admin/v2/namespaces/public/nope/migration", "true", 404, "")
	})
}
