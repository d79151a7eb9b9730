// Package buildinfo reports how the running binary was built: the main module's version, the VCS
// commit it was built from and the Go version, as the Go toolchain records them
// (runtime/debug.ReadBuildInfo). `meridian version`, `meridianctl version` and the admin API's
// /admin/v2/brokers/version and /admin/v2/brokers/build-info serve it.
package buildinfo

import (
	"runtime/debug"

	"github.com/meridian-mq/meridian/adminapi"
)

// Read returns the build information of the running binary.
func Read() adminapi.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	return From(bi, ok)
}

// From extracts the fields of a debug.BuildInfo (ok false: the binary carries none, as when it
// was built without module support).
func From(bi *debug.BuildInfo, ok bool) adminapi.BuildInfo {
	if !ok || bi == nil {
		return adminapi.BuildInfo{Version: unknown}
	}
	out := adminapi.BuildInfo{Module: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if out.Version == "" {
		out.Version = unknown
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			out.Commit = s.Value
		case "vcs.time":
			out.CommitTime = s.Value
		case "vcs.modified":
			out.Modified = s.Value == "true"
		}
	}
	return out
}

// unknown is the version of a binary without module version information (a test binary, or one
// built from a directory that is not a module's checkout).
const unknown = "(devel)"
