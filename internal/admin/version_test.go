package admin_test

import (
	"encoding/json"
	"runtime"
	"testing"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/buildinfo"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// /admin/v2/brokers/version answers the version as plain text, as Pulsar does; build-info adds the
// commit and the Go version as JSON.
func TestBrokerVersionAndBuildInfo(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	want := buildinfo.Read()
	if got := e.expect("GET", "/admin/v2/brokers/version", "", 200, ""); got != want.Version {
		t.Errorf("version = %q, want %q", got, want.Version)
	}
	var bi adminapi.BuildInfo
	if err := json.Unmarshal([]byte(e.expect("GET", "/admin/v2/brokers/build-info", "", 200, "")), &bi); err != nil {
		t.Fatal(err)
	}
	if bi != want || bi.GoVersion != runtime.Version() {
		t.Errorf("build-info = %+v, want %+v", bi, want)
	}
}
