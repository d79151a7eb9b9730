package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	url := server(t)
	out := mustCtl(t, url, "version")
	for _, want := range []string{"client", "go " + runtime.Version(), "broker " + url, "version "} {
		if !strings.Contains(out, want) {
			t.Errorf("version lacks %q:\n%s", want, out)
		}
	}
	var rep versionReport
	if err := json.Unmarshal([]byte(mustCtl(t, url, "-o", "json", "version")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Client.GoVersion != runtime.Version() || rep.Broker == nil || rep.Broker.GoVersion != runtime.Version() || rep.Broker.Version == "" {
		t.Errorf("json version = %+v broker %+v", rep, rep.Broker)
	}

	// The client's build needs no broker; asking the broker too fails when it is unreachable, after
	// printing the client's.
	if r := ctl(t, "http://127.0.0.1:1", "version", "--client"); r.code != 0 || !strings.Contains(r.stdout, "client") {
		t.Errorf("version --client = %+v", r)
	}
	if r := ctl(t, "http://127.0.0.1:1", "version"); r.code != 1 || !strings.Contains(r.stdout, "client") || !strings.Contains(r.stderr, "is the broker running") {
		t.Errorf("version against no broker = %+v", r)
	}

	// A Pulsar broker has no build-info: its plain-text version is shown.
	pulsar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/admin/v2/brokers/version" {
			w.Write([]byte("3.0.7"))
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(pulsar.Close)
	if out := mustCtl(t, pulsar.URL, "version"); !strings.Contains(out, "broker "+pulsar.URL+"  version 3.0.7") {
		t.Errorf("version against Pulsar:\n%s", out)
	}
}
