package admin_test

import (
	"testing"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// TestTranslatePositionRequests: what translatePosition refuses, and its answer by publish time
// (the fake topic service has no inbound index: message ids are not supported by it).
func TestTranslatePositionRequests(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	e.expect("PUT", "/admin/v2/persistent/public/default/tr", "", 204, "")
	base := "/admin/v2/persistent/public/default/tr/translatePosition"
	e.expect("GET", base, "", 400, "give messageId")
	e.expect("GET", base+"?messageId=1:2", "", 400, "cluster is required")
	e.expect("GET", base+"?cluster=west&messageId=x", "", 400, "Invalid messageId")
	e.expect("GET", base+"?cluster=west&messageId=1:-2", "", 400, "Invalid messageId")
	e.expect("GET", base+"?publishTime=soon", "", 400, "Invalid publishTime")
	e.expect("GET", base+"?cluster=west&messageId=1:2", "", 501, "not supported")
	e.expect("GET", base+"?publishTime=1000", "", 200, `"method":"publish-time","exact":false`)
	e.expect("GET", "/admin/v2/persistent/public/nope/tr/translatePosition?publishTime=1", "", 404, "Namespace does not exist")
}
