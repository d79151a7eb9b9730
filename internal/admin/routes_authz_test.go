package admin

import (
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/auth"
)

// TestEveryPolicyRouteHasOneEntry: the policy tables' routes take their permission from the
// tables, so none may also be listed in routePermissions; a route listed twice is refused, by name.
func TestEveryPolicyRouteHasOneEntry(t *testing.T) {
	if _, err := permissionTable(); err != nil {
		t.Fatal(err)
	}
	keys := policyRouteKeys()
	if len(keys) < 100 {
		t.Fatalf("only %d policy routes", len(keys))
	}
	listedTwice := keys[len(keys)/2]
	_, err := mergePermissions(map[string]auth.Need{listedTwice: auth.NeedSuperUser}, keys, policyNeed)
	if err == nil || !strings.Contains(err.Error(), listedTwice) {
		t.Fatalf("a policy route also in routePermissions: err = %v, want one naming %q", err, listedTwice)
	}
	for _, k := range keys {
		if need, _, _ := RoutePermission(k); need != policyNeed {
			t.Errorf("%s needs %v, want %v", k, need, policyNeed)
		}
	}
}
