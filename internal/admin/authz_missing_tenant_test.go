package admin_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestMissingTenantIsNotFoundForEveryRole: a tenant-admin route on a tenant that does not exist
// answers 404 "Tenant does not exist" to a role that is not a superuser, as Pulsar's authorization
// does (pulsar-client-go's admin tests expect that reason), rather than 401/403 for a permission no
// one could have; on an existing tenant a role without the permission still gets 403.
func TestMissingTenantIsNotFoundForEveryRole(t *testing.T) {
	e := newAuthzEnv(t)
	const missing = "/admin/v2/namespaces/nowhere/default/autoTopicCreation"
	for _, role := range []string{"acme-admin", "anonymous", "root"} {
		body := e.expect(role, http.MethodPost, missing, `{"allowAutoTopicCreation":true,"topicType":"non-partitioned"}`, http.StatusNotFound)
		if !strings.Contains(body, `"reason":"Tenant does not exist"`) {
			t.Errorf("%s: body %s, want the reason \"Tenant does not exist\"", role, body)
		}
	}
	e.expect("other-admin", http.MethodPost, "/admin/v2/namespaces/acme/app/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"non-partitioned"}`, http.StatusForbidden)
	e.expect("", http.MethodPost, missing, `{}`, http.StatusUnauthorized)
}
