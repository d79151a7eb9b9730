package adminapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitReadyAndErrors(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/admin/v2/brokers/ready":
			if calls.Add(1) < 3 {
				http.Error(w, `{"reason":"starting"}`, http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok"))
		case "/admin/v2/clusters/x":
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"reason":"Cluster does not exist"}`))
		case "/admin/v2/clusters/y":
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte(`plain text`))
		}
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL+"/", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 10*time.Millisecond); err != nil || calls.Load() != 3 {
		t.Fatalf("WaitReady = %v after %d calls", err, calls.Load())
	}
	_, err = c.GetCluster(ctx, "x")
	if !IsStatus(err, 404) || err.(*Error).Reason != "Cluster does not exist" {
		t.Fatalf("err = %#v", err)
	}
	_, err = c.GetCluster(ctx, "y")
	if !IsStatus(err, 502) || err.(*Error).Reason != "plain text" {
		t.Fatalf("err = %#v", err)
	}
	if _, err := NewClient("ftp://x", nil); err == nil {
		t.Fatal("ftp URL accepted")
	}
	if _, err := TopicRESTPath("persistent://a/b/c/d"); err == nil {
		t.Fatal("four-segment topic accepted")
	}
	if p, _ := TopicRESTPath("my?topic#1"); p != "persistent/public/default/my%3Ftopic%231" {
		t.Fatalf("path = %q", p)
	}
	// Names the broker refuses are refused here, before a request (tenant and namespace: Pulsar's
	// NamedEntity characters; topic: no white space or control characters).
	for _, bad := range []string{"my topic", "public/default/t\t", "pub lic/default/t", "public/de!fault/t", "a/b/c/d"} {
		if _, err := TopicRESTPath(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("TopicRESTPath(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	for _, bad := range []string{"a b/ns", "t/n s", "t", "t/n/x"} {
		if _, err := NamespacePath(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("NamespacePath(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}
