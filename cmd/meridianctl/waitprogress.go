package main

import (
	"fmt"
	"math"
	"time"
)

// progressWindow is how far back waitProgress looks for the drain rate: long enough to smooth
// the replicators' one-second rate samples, short enough to follow a change of pace.
const progressWindow = 10 * time.Second

// waitProgress turns the successive reports of replication-status --wait into one progress line
// each: how many replicators are caught up, the total backlog, and at what rate it drains over the
// last progressWindow, with the time left at that rate. It only computes; the caller prints.
type waitProgress struct {
	samples []backlogSample // oldest first, within progressWindow of the newest
}

type backlogSample struct {
	at      time.Time
	backlog int64
}

func (p *waitProgress) observe(now time.Time, r replReport) string {
	p.samples = append(p.samples, backlogSample{now, r.Backlog})
	for len(p.samples) > 2 && now.Sub(p.samples[1].at) >= progressWindow {
		p.samples = p.samples[1:]
	}
	line := fmt.Sprintf("waiting for %s: %d of %d caught up; backlog %d entries", r.Namespace, r.Counts[replCaughtUp], len(r.Rows), r.Backlog)
	first := p.samples[0]
	dt := now.Sub(first.at).Seconds()
	if dt <= 0 || r.Backlog == 0 {
		return line
	}
	rate := float64(first.backlog-r.Backlog) / dt // entries per second leaving the backlog
	switch {
	case rate > 0:
		left := time.Duration(math.Ceil(float64(r.Backlog)/rate)) * time.Second
		return line + fmt.Sprintf("; draining %.0f/s, about %s left", rate, left)
	case rate < 0:
		return line + fmt.Sprintf("; growing %.0f/s", -rate)
	default:
		return line + fmt.Sprintf("; not draining (no change in %s)", now.Sub(first.at).Round(time.Second))
	}
}
