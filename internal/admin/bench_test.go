package admin_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// BenchmarkHandler: requests through the handler (routing, cache read or CAS write, JSON), without
// the network.
func BenchmarkHandler(b *testing.B) {
	for _, tc := range []struct{ name, method, path, body string }{
		{"GetPolicies", "GET", "/admin/v2/namespaces/public/default", ""},
		{"SetMessageTTL", "POST", "/admin/v2/namespaces/public/default/messageTTL", "3600"},
		{"TopicStats", "GET", "/admin/v2/persistent/public/default/bench/stats", ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := memstore.New()
			b.Cleanup(func() { s.Close() })
			e := newEnv(b, s)
			_ = e.topics.CreateTopic(b.Context(), "persistent://public/default/bench", nil)
			h := e.srv.Config.Handler
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
				if rec.Code >= 300 {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
