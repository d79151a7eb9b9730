package replication

import (
	"testing"
	"time"
)

func TestStallDetector(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type sample struct {
		sec               int
		backlog, progress int64
		stalled           bool
		sinceSec          int
	}
	cases := []struct {
		name    string
		samples []sample
	}{
		{"idle without backlog is never stalled", []sample{
			{0, 0, 0, false, 0}, {30, 0, 0, false, 0}, {120, 0, 0, false, 0},
		}},
		{"backlog without progress stalls after the timeout, since its start", []sample{
			{0, 5, 0, false, 0}, {59, 5, 0, false, 0}, {60, 5, 0, true, 0}, {90, 7, 0, true, 0},
		}},
		{"the clock starts when the backlog appears, not at the last progress long ago", []sample{
			{0, 0, 3, false, 0}, {600, 0, 3, false, 0}, {601, 4, 3, false, 0}, {659, 4, 3, false, 0}, {660, 4, 3, true, 600},
		}},
		{"progress restarts the clock", []sample{
			{0, 5, 0, false, 0}, {50, 5, 1, false, 0}, {100, 5, 1, false, 0}, {110, 5, 1, true, 50},
		}},
		{"progress ends a stall", []sample{
			{0, 5, 0, false, 0}, {60, 5, 0, true, 0}, {61, 4, 1, false, 0},
		}},
		{"an empty backlog ends a stall", []sample{
			{0, 5, 0, false, 0}, {60, 5, 0, true, 0}, {61, 0, 0, false, 0}, {62, 1, 0, false, 0},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := StallDetector{Timeout: time.Minute}
			for _, s := range c.samples {
				stalled, since := d.Observe(at(s.sec), s.backlog, s.progress)
				if stalled != s.stalled {
					t.Fatalf("at %ds (backlog %d, progress %d): stalled %v, want %v", s.sec, s.backlog, s.progress, stalled, s.stalled)
				}
				if stalled && !since.Equal(at(s.sinceSec)) {
					t.Fatalf("at %ds: stalled since %v, want %ds", s.sec, since.Sub(t0), s.sinceSec)
				}
			}
		})
	}
}

func TestStallReason(t *testing.T) {
	for _, c := range []struct {
		s    Stats
		want string
	}{
		{Stats{RemoteCluster: "west", LastError: "dial tcp: connection refused"}, "dial tcp: connection refused"},
		{Stats{RemoteCluster: "west"}, "not connected to west"},
		{Stats{RemoteCluster: "west", Connected: true, MemoryLimited: true}, "waiting for room in the broker's replication memory (--replication-memory-bytes)"},
		{Stats{RemoteCluster: "west", Connected: true, RateLimited: true}, "held back by the replicator dispatch rate"},
		{Stats{RemoteCluster: "west", Connected: true}, "connected, but west acknowledges nothing"},
	} {
		if got := stallReason(c.s); got != c.want {
			t.Errorf("%+v: %q, want %q", c.s, got, c.want)
		}
	}
}
