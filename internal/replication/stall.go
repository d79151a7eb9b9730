package replication

import (
	"fmt"
	"sync"
	"time"
)

// DefaultStallTimeout is how long a replicator with a backlog may make no progress before it is
// reported stalled (ManagerOptions.StallTimeout, --replication-stall-timeout).
const DefaultStallTimeout = 60 * time.Second

// StallDetector decides from samples whether a replicator is stalled: it has a backlog and has made
// no progress for Timeout. It is fed (time, backlog, progress) samples, where progress is any
// counter that moves whenever the replicator makes progress (entries acknowledged by the remote or
// skipped); it keeps no goroutine and reads no clock. The clock of a stall starts at the later of
// the last progress and the moment the backlog appeared: a replicator that was idle (no backlog)
// for an hour is not stalled the moment an entry arrives.
type StallDetector struct {
	Timeout time.Duration

	seen         bool
	lastProgress int64
	since        time.Time // last progress, or when the backlog appeared
}

// Observe takes one sample and reports whether the replicator is stalled and since when.
func (d *StallDetector) Observe(now time.Time, backlog, progress int64) (stalled bool, since time.Time) {
	switch {
	case !d.seen:
		d.seen, d.lastProgress, d.since = true, progress, now
	case progress != d.lastProgress:
		d.lastProgress, d.since = progress, now
	}
	if backlog <= 0 {
		d.since = now
		return false, time.Time{}
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultStallTimeout
	}
	if now.Sub(d.since) < timeout {
		return false, time.Time{}
	}
	return true, d.since
}

// stallState is a Runner's detector with its last verdict, shared by the loop (which samples it on
// every tick) and Stats.
type stallState struct {
	mu      sync.Mutex
	d       StallDetector
	stalled bool
	since   time.Time
}

func (s *stallState) observe(now time.Time, backlog, progress int64) {
	s.mu.Lock()
	s.stalled, s.since = s.d.Observe(now, backlog, progress)
	s.mu.Unlock()
}

func (s *stallState) get() (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalled, s.since
}

// progressOf is the progress counter of a replicator: entries acknowledged by the remote plus
// entries skipped (the cursor advances past both).
func progressOf(c Counters) int64 {
	n := c.EntriesOut
	for _, k := range c.Skipped {
		n += k
	}
	return n
}

// stallReason says why a stalled replicator is stuck, as far as its stats tell.
func stallReason(s Stats) string {
	switch {
	case s.LastError != "":
		return s.LastError
	case !s.Connected:
		return fmt.Sprintf("not connected to %s", s.RemoteCluster)
	case s.MemoryLimited:
		return "waiting for room in the broker's replication memory (--replication-memory-bytes)"
	case s.RateLimited:
		return "held back by the replicator dispatch rate"
	}
	return fmt.Sprintf("connected, but %s acknowledges nothing", s.RemoteCluster)
}

// backlogSizer is optionally implemented by a Cursor: the bytes of its backlog (an estimate is fine).
type backlogSizer interface {
	BacklogBytes() int64
}
