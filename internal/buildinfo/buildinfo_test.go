package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/meridian-mq/meridian/adminapi"
)

func TestFromReadsModuleVCSAndGoVersion(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/meridian-mq/meridian", Version: "v0.0.0-20261201184702-f415bc7abcde+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "-buildmode", Value: "exe"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "f415bc7abcdef0123456789abcdef0123456789a"},
			{Key: "vcs.time", Value: "2026-12-01T18:47:02Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	want := adminapi.BuildInfo{
		Module: "github.com/meridian-mq/meridian", Version: "v0.0.0-20261201184702-f415bc7abcde+dirty",
		Commit: "f415bc7abcdef0123456789abcdef0123456789a", CommitTime: "2026-12-01T18:47:02Z", Modified: true,
		GoVersion: "go1.26.8",
	}
	if got := From(bi, true); got != want {
		t.Errorf("From = %+v\nwant %+v", got, want)
	}
	if got := From(nil, false); got.Version != "(devel)" {
		t.Errorf("without build info: %+v", got)
	}
	if got := From(&debug.BuildInfo{GoVersion: "go1.26.8"}, true); got.Version != "(devel)" || got.GoVersion != "go1.26.8" {
		t.Errorf("without a main module version: %+v", got)
	}
}

func TestReadReportsThisBinary(t *testing.T) {
	if got := Read(); got.GoVersion != runtime.Version() || got.Version == "" {
		t.Errorf("Read = %+v; want Go %s and a version", got, runtime.Version())
	}
}
