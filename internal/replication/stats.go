package replication

import (
	"sync"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Stats is a snapshot of one replicator (outbound, this cluster -> Remote) merged, where known,
// with the inbound side (Remote -> this cluster) of the same topic. Field names follow Pulsar's
// ReplicatorStats; Admin converts to the REST shape.
type Stats struct {
	Topic         string
	LocalCluster  string
	RemoteCluster string

	// Outbound.
	Connected                 bool
	OutboundConnection        string    // producer name on the remote
	OutboundConnectedSince    time.Time // zero while disconnected
	MsgRateOut                float64   // messages/s acknowledged by the remote (5 s window)
	MsgThroughputOut          float64   // bytes/s acknowledged by the remote
	MsgOutCount               int64
	BytesOutCount             int64
	ReplicationBacklog        int64 // entries after the cursor's mark-delete position
	ReplicationDelayInSeconds int64 // age of the oldest entry not yet acknowledged by the remote
	StartMode                 StartAt
	StartPosition             mtypes.Position // cursor mark-delete position when the cursor was created
	MarkDeletePosition        mtypes.Position
	LastProgress              time.Time // last remote receipt or cursor advance
	LastError                 string    // empty once the replicator made progress again
	LastErrorTime             time.Time
	Phase                     string
	Reconnects                int64
	Skipped                   map[SkipReason]int64 // entries not sent, by reason
	RateLimited               bool
	// MemoryLimited: a catch-up read waits for room in the broker's replication memory budget.
	MemoryLimited bool
	Rate          Rate
	// ReplicationBacklogBytes estimates the bytes of the backlog (0 when the cursor cannot tell).
	ReplicationBacklogBytes int64
	// Stalled: a backlog and no progress for the stall timeout (stall.go), since StalledSince.
	Stalled       bool
	StalledSince  time.Time
	StalledReason string

	// Inbound (from the remote's replicator), filled from the topic's Index.
	MsgRateIn             float64
	MsgThroughputIn       float64
	MsgInCount            int64
	BytesInCount          int64
	DuplicatesDropped     int64
	InboundConnectedSince time.Time
}

// Admin converts to the admin REST representation (adminapi.ReplicatorStats).
func (s Stats) Admin() adminapi.ReplicatorStats {
	a := adminapi.ReplicatorStats{
		MsgRateIn:                 s.MsgRateIn,
		MsgThroughputIn:           s.MsgThroughputIn,
		MsgRateOut:                s.MsgRateOut,
		MsgThroughputOut:          s.MsgThroughputOut,
		ReplicationBacklog:        s.ReplicationBacklog,
		Connected:                 s.Connected,
		ReplicationDelayInSeconds: s.ReplicationDelayInSeconds,
		OutboundConnection:        s.OutboundConnection,
		MsgOutCounter:             s.MsgOutCount,
		BytesOutCounter:           s.BytesOutCount,
		MsgInCounter:              s.MsgInCount,
		BytesInCounter:            s.BytesInCount,
		StartMode:                 string(s.StartMode),
		LastError:                 s.LastError,
		RateLimited:               s.RateLimited,
		MemoryLimited:             s.MemoryLimited,
		DuplicatesDropped:         s.DuplicatesDropped,
		Reconnects:                s.Reconnects,
		ReplicationBacklogBytes:   s.ReplicationBacklogBytes,
		Stalled:                   s.Stalled,
		StalledReason:             s.StalledReason,
	}
	if s.Stalled && !s.StalledSince.IsZero() {
		a.StalledSince = s.StalledSince.UnixMilli()
	}
	for reason, n := range s.Skipped {
		if n == 0 {
			continue
		}
		if a.Skipped == nil {
			a.Skipped = map[string]int64{}
		}
		a.Skipped[string(reason)] = n
	}
	if s.StartMode != "" || s.MarkDeletePosition != (mtypes.Position{}) {
		a.MarkDeletePosition = s.MarkDeletePosition.String()
	}
	if !s.OutboundConnectedSince.IsZero() {
		a.OutboundConnectedSince = s.OutboundConnectedSince.UTC().Format(time.RFC3339Nano)
	}
	if !s.InboundConnectedSince.IsZero() {
		a.InboundConnectedSince = s.InboundConnectedSince.UTC().Format(time.RFC3339Nano)
	}
	if s.StartMode != "" {
		a.StartPosition = s.StartPosition.String()
	}
	if !s.LastProgress.IsZero() {
		a.LastProgressTimestamp = s.LastProgress.UnixMilli()
	}
	if s.LastError != "" && !s.LastErrorTime.IsZero() {
		a.LastErrorTimestamp = s.LastErrorTime.UnixMilli()
	}
	return a
}

// rateWindow turns monotonic counters into per-second rates over the last few samples.
type rateWindow struct {
	mu      sync.Mutex
	samples [6]rateSample
	n, next int
}

type rateSample struct {
	at          time.Time
	msgs, bytes int64
}

// add records counters at time at (called about once a second).
func (w *rateWindow) add(at time.Time, msgs, bytes int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples[w.next] = rateSample{at, msgs, bytes}
	w.next = (w.next + 1) % len(w.samples)
	if w.n < len(w.samples) {
		w.n++
	}
}

// rates returns messages/s and bytes/s between the oldest and newest sample.
func (w *rateWindow) rates() (msgs, bytes float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n < 2 {
		return 0, 0
	}
	newest := w.samples[(w.next-1+len(w.samples))%len(w.samples)]
	oldest := w.samples[(w.next-w.n+len(w.samples))%len(w.samples)]
	dt := newest.at.Sub(oldest.at).Seconds()
	if dt <= 0 {
		return 0, 0
	}
	return float64(newest.msgs-oldest.msgs) / dt, float64(newest.bytes-oldest.bytes) / dt
}

// SplitInbound sorts a topic's replication links by direction. A replicator producer
// ("pulsar.repl.<src>-->...") among its publishers is cluster src's inbound link: it is listed in
// inbound, and it fills the inbound fields of this cluster's own replicator to src when there is one
// (as Pulsar's stats do). It never adds an outbound entry: a cluster that only receives from src has
// no replicator to src, and showing one (disconnected) would alarm on a healthy cluster.
//
// inbound holds what the topic's index counted per source (from Manager.AdminStats); the
// connections are added to it.
func SplitInbound(outbound map[string]adminapi.ReplicatorStats, inbound map[string]adminapi.InboundReplicationStats, publishers []adminapi.PublisherStats) (map[string]adminapi.ReplicatorStats, map[string]adminapi.InboundReplicationStats) {
	for _, p := range publishers {
		src, ok := RemoteOfProducer(p.ProducerName)
		if !ok {
			continue
		}
		if inbound == nil {
			inbound = map[string]adminapi.InboundReplicationStats{}
		}
		if inbound == nil {
			inbound = map[string]adminapi.InboundReplicationStats{}
		}
		in := inbound[src]
		in.ProducerName, in.Connection, in.ConnectedSince = p.ProducerName, p.Address, p.ConnectedSince
		if in.MsgRateIn == 0 && in.MsgThroughputIn == 0 {
			in.MsgRateIn, in.MsgThroughputIn = p.MsgRateIn, p.MsgThroughputIn
		}
		inbound[src] = in
		s, ok := outbound[src]
		if !ok {
			continue
		}
		s.InboundConnection = p.Address
		s.InboundConnectedSince = p.ConnectedSince
		if s.MsgRateIn == 0 && s.MsgThroughputIn == 0 {
			s.MsgRateIn, s.MsgThroughputIn = p.MsgRateIn, p.MsgThroughputIn
		}
		outbound[src] = s
	}
	return outbound, inbound
}
