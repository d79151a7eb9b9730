package adminapi

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestMultiHostAdminURL: an admin URL naming several brokers is used host by host; a broker that
// refuses the connection is skipped, so every request is answered.
func TestMultiHostAdminURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/base/admin/v2/brokers/ready" {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	c, err := NewClient("http://"+deadAddr+","+srv.Listener.Addr().String()+"/base", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := c.Ready(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"http://a:1,", "ftp://a", "http://"} {
		if _, err := NewClient(bad, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
