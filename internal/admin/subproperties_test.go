package admin_test

import (
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// TestSubscriptionPropertiesEndpoints: GET/PUT .../subscription/{sub}/properties (Pulsar's), with
// the properties of the create body, the limits and a partitioned topic's partitions.
func TestSubscriptionPropertiesEndpoints(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	base := "/admin/v2/persistent/public/default"
	e.expect("PUT", base+"/t", "", 204, "")
	e.expect("PUT", base+"/t/subscription/s", `{"ledgerId":-1,"entryId":-1,"properties":{"a":"1"}}`, 204, "")
	if b := e.expect("GET", base+"/t/subscription/s/properties", "", 200, ""); b != `{"a":"1"}` {
		t.Fatalf("properties from the create body: %s", b)
	}
	e.expect("PUT", base+"/t/subscription/s/properties", `{"b":"2"}`, 204, "")
	if b := e.expect("GET", base+"/t/subscription/s/properties", "", 200, ""); b != `{"b":"2"}` {
		t.Fatalf("properties after PUT: %s", b)
	}
	e.expect("PUT", base+"/t/subscription/s/properties", `{"k":"`+strings.Repeat("v", 16<<10)+`"}`, 412, "16384")
	e.expect("GET", base+"/t/subscription/nope/properties", "", 404, "Subscription not found")
	e.expect("PUT", base+"/t/subscription/nope/properties", `{}`, 404, "Subscription not found")

	e.expect("PUT", base+"/p/partitions", "2", 204, "")
	e.expect("PUT", base+"/p/subscription/s", "", 204, "")
	e.expect("PUT", base+"/p/subscription/s/properties", `{"c":"3"}`, 204, "")
	if b := e.expect("GET", base+"/p/subscription/s/properties", "", 200, ""); b != `{"c":"3"}` {
		t.Fatalf("partitioned properties: %s", b)
	}
}
