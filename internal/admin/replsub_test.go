package admin_test

import (
	"testing"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// TestReplicatedSubscriptionStatusEndpoints: Pulsar's GET/POST
// .../subscription/{sub}/replicatedSubscriptionStatus (a map of topic or partition to flag; the body
// true or false), PUT .../subscription/{sub}?replicated=true, and a partitioned topic's partitions.
func TestReplicatedSubscriptionStatusEndpoints(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	base := "/admin/v2/persistent/public/default"
	e.expect("PUT", base+"/t", "", 204, "")
	e.expect("PUT", base+"/t/subscription/s", "", 204, "")
	if b := e.expect("GET", base+"/t/subscription/s/replicatedSubscriptionStatus", "", 200, ""); b != `{"persistent://public/default/t":false}` {
		t.Fatalf("status of a new subscription: %s", b)
	}
	e.expect("POST", base+"/t/subscription/s/replicatedSubscriptionStatus", "true", 204, "")
	if b := e.expect("GET", base+"/t/subscription/s/replicatedSubscriptionStatus", "", 200, ""); b != `{"persistent://public/default/t":true}` {
		t.Fatalf("status after POST true: %s", b)
	}
	e.expect("POST", base+"/t/subscription/s/replicatedSubscriptionStatus", "false", 204, "")
	if b := e.expect("GET", base+"/t/subscription/s/replicatedSubscriptionStatus", "", 200, ""); b != `{"persistent://public/default/t":false}` {
		t.Fatalf("status after POST false: %s", b)
	}
	e.expect("POST", base+"/t/subscription/s/replicatedSubscriptionStatus", "maybe", 400, "")
	e.expect("POST", base+"/t/subscription/s/replicatedSubscriptionStatus", "", 400, "")
	e.expect("GET", base+"/t/subscription/nope/replicatedSubscriptionStatus", "", 404, "Subscription not found")
	e.expect("POST", base+"/t/subscription/nope/replicatedSubscriptionStatus", "true", 404, "Subscription not found")

	e.expect("PUT", base+"/t/subscription/r?replicated=true", "", 204, "")
	if b := e.expect("GET", base+"/t/subscription/r/replicatedSubscriptionStatus", "", 200, ""); b != `{"persistent://public/default/t":true}` {
		t.Fatalf("status of a subscription created with ?replicated=true: %s", b)
	}

	e.expect("PUT", base+"/p/partitions", "2", 204, "")
	e.expect("PUT", base+"/p/subscription/s", "", 204, "")
	e.expect("POST", base+"/p/subscription/s/replicatedSubscriptionStatus", "true", 204, "")
	want := `{"persistent://public/default/p-partition-0":true,"persistent://public/default/p-partition-1":true}`
	if b := e.expect("GET", base+"/p/subscription/s/replicatedSubscriptionStatus", "", 200, ""); b != want {
		t.Fatalf("partitioned status: %s, want %s", b, want)
	}
}

// TestReplicateSubscriptionStatePolicies: the namespace and topic policy replicateSubscriptionState
// (PIP-398's paths): POST true/false/null, GET, DELETE, and the topic's ?applied=true fallback.
func TestReplicateSubscriptionStatePolicies(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	ns := "/admin/v2/namespaces/public/default/replicateSubscriptionState"
	e.expect("GET", ns, "", 204, "")
	e.expect("POST", ns, "true", 204, "")
	if b := e.expect("GET", ns, "", 200, ""); b != "true" {
		t.Fatalf("namespace policy: %s", b)
	}
	e.expect("POST", ns, "null", 204, "")
	e.expect("GET", ns, "", 204, "")
	e.expect("POST", ns, "false", 204, "")
	if b := e.expect("GET", ns, "", 200, ""); b != "false" {
		t.Fatalf("namespace policy: %s", b)
	}
	e.expect("POST", ns, "[]", 400, "")
	e.expect("DELETE", ns, "", 204, "")
	e.expect("GET", ns, "", 204, "")

	base := "/admin/v2/persistent/public/default/t"
	e.expect("PUT", base, "", 204, "")
	e.expect("POST", ns, "true", 204, "")
	e.expect("GET", base+"/replicateSubscriptionState", "", 204, "")
	if b := e.expect("GET", base+"/replicateSubscriptionState?applied=true", "", 200, ""); b != "true" {
		t.Fatalf("applied topic policy falls back to the namespace: %s", b)
	}
	e.expect("POST", base+"/replicateSubscriptionState", "false", 204, "")
	if b := e.expect("GET", base+"/replicateSubscriptionState?applied=true", "", 200, ""); b != "false" {
		t.Fatalf("topic policy: %s", b)
	}
	e.expect("DELETE", base+"/replicateSubscriptionState", "", 204, "")
	e.expect("GET", base+"/replicateSubscriptionState", "", 204, "")
}
