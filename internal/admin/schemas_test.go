package admin_test

import (
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/schema"
)

// The schema REST endpoints against the real registry on memstore, with pulsaradmin's shapes.
func TestSchemas(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	reg := schema.New(s, schema.Options{})
	h, err := admin.NewHandler(admin.Config{Cluster: "standalone", Catalog: e.cat, Topics: e.topics, Schemas: reg, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.srv = srv
	base := "/admin/v2/schemas/public/default/st"
	e.expect("GET", base+"/schema", "", 404, "Schema not found")
	e.expect("POST", base+"/schema", `{"type":"STRING","schema":"","properties":null}`, 200, `"version":0`)
	e.expect("GET", base+"/schema", "", 200, `"type":"STRING"`)
	e.expect("GET", base+"/schemas", "", 200, `"getSchemaResponses":[{"version":0`)
	e.expect("POST", base+"/version", `{"type":"STRING","schema":"","properties":null}`, 200, `"version":0`)
	e.expect("POST", base+"/compatibility", `{"type":"STRING","schema":""}`, 200, `"compatibility":true,"schemaCompatibilityStrategy":"FULL"`)
	avro := `{"type":"AVRO","schema":"{\"type\":\"record\",\"name\":\"r\",\"fields\":[{\"name\":\"a\",\"type\":\"int\"}]}"}`
	e.expect("POST", base+"/compatibility", avro, 200, `"compatibility":false`)
	e.expect("POST", base+"/schema", avro, 409, "incompatible")
	e.expect("POST", base+"/schema", `{"type":"NOPE","schema":""}`, 422, "unknown schema type")
	e.expect("POST", base+"/schema", `{"type":"STRING","bogus":1}`, 200, `"version":0`) // unknown fields are ignored: the stored schema again
	e.expect("GET", base+"/schema/0", "", 200, `"version":0`)
	e.expect("GET", base+"/schema/7", "", 404, "Schema not found")
	e.expect("DELETE", base+"/schema", "", 200, `"version":1`)
	e.expect("GET", base+"/schema", "", 404, "Schema not found")
	e.expect("POST", base+"/schema", avro, 200, `"version":2`)
	e.expect("DELETE", base+"/schema?force=true", "", 200, "")
	e.expect("GET", base+"/schemas", "", 200, `"getSchemaResponses":[]`)
	e.expect("GET", "/admin/v2/schemas/public/nope/st/schema", "", 404, "Namespace does not exist")
}
