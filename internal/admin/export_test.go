package admin

import "github.com/prometheus/client_golang/prometheus"

// SetGathererForTest replaces the registry /metrics gathers from.
func SetGathererForTest(h *Handler, g prometheus.Gatherer) { h.gatherer = g }
