package admin

import (
	"net/http"
	"net/http/pprof"
)

// Go's profiling endpoints (net/http/pprof) under /debug/pprof/, served by the admin API only, so
// only on the web listeners and never on the binary protocol's. They are superuser routes in
// routePermissions: with authorization on, only superusers profile the broker (a profile shows
// the process's command line, its goroutines' stacks and what its memory holds). The package's
// registration on http.DefaultServeMux is never served: no listener of Meridian uses that mux.
// docs/operations.md, "Profiling".
var profilingHandlers = map[string]http.HandlerFunc{
	"GET /debug/pprof/":        pprof.Index, // and every named profile: heap, goroutine, allocs, block, mutex, ...
	"GET /debug/pprof/cmdline": pprof.Cmdline,
	"GET /debug/pprof/profile": pprof.Profile, // CPU, ?seconds=N (default 30)
	"GET /debug/pprof/symbol":  pprof.Symbol,
	"POST /debug/pprof/symbol": pprof.Symbol,
	"GET /debug/pprof/trace":   pprof.Trace, // execution trace, ?seconds=N (default 1)
}

// profilingRoutes registers the profiling endpoints behind their permission entries.
func (h *Handler) profilingRoutes() {
	for pattern, fn := range profilingHandlers {
		h.patterns = append(h.patterns, pattern)
		h.mux.Handle(pattern, h.guard(pattern, fn))
	}
}
