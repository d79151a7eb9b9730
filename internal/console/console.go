// Package console serves the replication console: a web page on the admin listener (/console/) that
// draws the clusters this one knows and its replication links, with the recent history of every
// active outbound link (docs/console.md). The page's assets are embedded in the binary (no CDN, no
// build chain); the page reads one JSON document, /console/api/overview, every few seconds.
//
// The history is kept here: a Sampler owned by the node reads the links from a Source every
// Interval and keeps at most MaxSamples per active outbound link. A link that is no longer
// reported (its replicator stopped, its topic unloaded or deleted) loses its history; inbound links
// and idle topics keep none.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

//go:embed assets
var assets embed.FS

// MaxSamples is the history kept per active outbound link: 15 minutes at the default interval.
const MaxSamples = 180

// DefaultInterval is the sampling interval (MaxSamples of it make 15 minutes).
const DefaultInterval = 5 * time.Second

// Cluster is one cluster this one knows.
type Cluster struct {
	Name             string `json:"name"`
	ServiceURL       string `json:"serviceUrl,omitempty"`
	BrokerServiceURL string `json:"brokerServiceUrl,omitempty"`
	Local            bool   `json:"local"`
}

// LinkState is one replication link of one topic as the Source reports it now.
type LinkState struct {
	Topic  string `json:"topic"`
	Remote string `json:"remote"`
	// Outbound: this cluster's replicator to Remote; otherwise Remote replicates into this topic.
	Outbound     bool    `json:"outbound"`
	Connected    bool    `json:"connected"`
	Backlog      int64   `json:"backlog"`
	RateOut      float64 `json:"rateOut"`
	RateIn       float64 `json:"rateIn"`
	DelaySeconds int64   `json:"delaySeconds"`
	LastError    string  `json:"lastError,omitempty"`
	// SentTotal counts the entries the remote acknowledged; it tells progress from a backlog that
	// only looks still.
	SentTotal int64 `json:"sentTotal"`
	// Stalled: the replicator's own stall detection (a backlog and no progress for the stall
	// timeout), since StalledSince (unix ms), and why.
	Stalled       bool   `json:"stalled,omitempty"`
	StalledSince  int64  `json:"stalledSince,omitempty"`
	StalledReason string `json:"stalledReason,omitempty"`
}

// Source supplies the console's data: the known clusters, the replication links and the replicated
// subscriptions now.
type Source interface {
	LocalCluster() string
	Clusters() []Cluster
	Links() []LinkState
	Subscriptions() []SubscriptionSync
}

// FailoverChecker is optionally implemented by a Source: it runs the failover checklist for a
// namespace and a target cluster (internal/failover) and returns its report.
type FailoverChecker interface {
	// authorization is the request's Authorization header: the check reads the admin APIs as the
	// user who asked.
	FailoverCheck(ctx context.Context, namespace, target, authorization string) (any, error)
}

// SubscriptionSync is the sync of one replicated subscription with one other cluster.
type SubscriptionSync struct {
	Topic        string `json:"topic"`
	Subscription string `json:"subscription"`
	Remote       string `json:"remote"`
	// Outbound: this cluster writes the subscription's state for Remote; otherwise it applies the
	// states Remote writes.
	Outbound bool `json:"outbound"`
	// LagMs is the sync lag (outbound) or the apply lag (inbound) in milliseconds.
	LagMs         int64    `json:"lagMs"`
	PendingStates int      `json:"pendingStates,omitempty"`
	WaitingFor    []string `json:"waitingFor,omitempty"`
}

// Sample is one point of a link's history.
type Sample struct {
	At           int64   `json:"at"` // unix milliseconds
	Backlog      int64   `json:"backlog"`
	RateOut      float64 `json:"rateOut"`
	DelaySeconds int64   `json:"delaySeconds"`
	Connected    bool    `json:"connected"`
}

// Link is a LinkState with its history and what the console concludes from it.
type Link struct {
	LinkState
	// State is ok, behind, not-draining, stalled, disconnected or error (the worst that applies);
	// inbound links are "inbound".
	State string `json:"state"`
	// ETASeconds is the time the backlog needs to drain at the rate it drained over the recent
	// history; absent when it does not drain.
	ETASeconds *float64 `json:"etaSeconds,omitempty"`
	History    []Sample `json:"history,omitempty"`
}

// Overview is the document /console/api/overview answers.
type Overview struct {
	Cluster         string             `json:"cluster"`
	Clusters        []Cluster          `json:"clusters"`
	Links           []Link             `json:"links"`
	Subscriptions   []SubscriptionSync `json:"subscriptions"`
	SampledAt       int64              `json:"sampledAt"`
	IntervalSeconds float64            `json:"intervalSeconds"`
	MaxSamples      int                `json:"maxSamples"`
}

type linkKey struct{ topic, remote string }

// SampleBytes is what one sample costs in memory (its fields and its share of the slice), the unit
// the history budget counts in.
const SampleBytes = int64(unsafe.Sizeof(Sample{}))

// DefaultHistoryBytes is the default budget of the links' history: 16 MiB, the full 15 minutes of
// about 2,900 links.
const DefaultHistoryBytes = 16 << 20

// history holds the samples of the active outbound links, within a byte budget. It is written by
// the sampler and read by HTTP handlers, under mu.
type history struct {
	mu     sync.Mutex
	series map[linkKey][]Sample // oldest first, at most MaxSamples
	// budget bounds the memory of all series (MaxSamples each are reserved for every link that has
	// one); links beyond it get none, counted in refused.
	budget  int64
	refused int
}

// reserved is the memory the series hold at most. Called with mu held.
func (h *history) reserved() int64 { return int64(len(h.series)) * MaxSamples * SampleBytes }

// record appends one sample per outbound link and forgets the links not reported any more.
func (h *history) record(at time.Time, links []LinkState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Links no longer reported lose their history first, so the budget goes to those that run.
	running := make(map[linkKey]bool, len(links))
	for _, l := range links {
		if l.Outbound {
			running[linkKey{l.Topic, l.Remote}] = true
		}
	}
	for k := range h.series {
		if !running[k] {
			delete(h.series, k)
		}
	}
	h.refused = 0
	for _, l := range links {
		if !l.Outbound {
			continue
		}
		k := linkKey{l.Topic, l.Remote}
		if _, ok := h.series[k]; !ok && h.budget > 0 && h.reserved()+MaxSamples*SampleBytes > h.budget {
			h.refused++
			continue
		}
		s, ok := h.series[k]
		if !ok {
			s = make([]Sample, 0, MaxSamples) // the whole reservation at once: the budget is exact
		}
		s = append(s, Sample{At: at.UnixMilli(), Backlog: l.Backlog, RateOut: l.RateOut, DelaySeconds: l.DelaySeconds, Connected: l.Connected})
		if len(s) > MaxSamples {
			s = slices.Delete(s, 0, len(s)-MaxSamples)
		}
		h.series[k] = s
	}
}

// usage returns the memory reserved for the history, its budget and the links refused one.
func (h *history) usage() (reserved, budget int64, refused int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reserved(), h.budget, h.refused
}

func (h *history) of(topic, remote string) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.series[linkKey{topic, remote}])
}

// etaWindow is how much history the drain rate is taken over.
const etaWindow = 12

// assess concludes a link's state and catch-up time from its current values and its history.
func assess(l LinkState, hist []Sample) Link {
	out := Link{LinkState: l, History: hist}
	if !l.Outbound {
		out.State = "inbound"
		return out
	}
	var drain float64 // entries per second leaving the backlog over the recent history
	if n := len(hist); n >= 2 {
		first, last := hist[max(0, n-etaWindow)], hist[n-1]
		if dt := float64(last.At-first.At) / 1000; dt > 0 {
			drain = float64(first.Backlog-last.Backlog) / dt
		}
	}
	if l.Backlog > 0 && drain > 0 {
		eta := math.Ceil(float64(l.Backlog) / drain)
		out.ETASeconds = &eta
	}
	switch {
	case !l.Connected:
		out.State = "disconnected"
	case l.LastError != "" && !l.Stalled:
		out.State = "error"
	case l.Stalled:
		out.State = "stalled"
	case l.Backlog == 0:
		out.State = "ok"
	case len(hist) >= etaWindow && drain <= 0 && l.RateOut == 0:
		out.State = "not-draining"
	default:
		out.State = "behind"
	}
	return out
}

// Console serves the page and the overview, and samples the Source in the background.
type Console struct {
	src      Source
	interval time.Duration
	log      *slog.Logger
	hist     history

	stop context.CancelFunc
	done chan struct{}
}

// New returns a console over src; Start begins sampling. interval 0 means DefaultInterval;
// historyBytes bounds the links' history (0: DefaultHistoryBytes, negative: no bound).
func New(src Source, interval time.Duration, historyBytes int64, log *slog.Logger) *Console {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = slog.Default()
	}
	if historyBytes == 0 {
		historyBytes = DefaultHistoryBytes
	}
	return &Console{src: src, interval: interval, log: log, hist: history{series: map[linkKey][]Sample{}, budget: max(historyBytes, 0)}}
}

// Start runs the sampler until Close. The Console owns that goroutine.
func (c *Console) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop, c.done = cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		t := time.NewTicker(c.interval)
		defer t.Stop()
		c.hist.record(time.Now(), c.src.Links())
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				c.hist.record(now, c.src.Links())
			}
		}
	}()
}

// Close stops the sampler and waits for it.
func (c *Console) Close() {
	if c.stop != nil {
		c.stop()
		<-c.done
	}
}

// Overview is the current document: the clusters, every link with its state, and the history of
// the outbound ones.
func (c *Console) Overview() Overview {
	links := c.src.Links()
	out := Overview{
		Cluster: c.src.LocalCluster(), Clusters: c.src.Clusters(), Links: make([]Link, 0, len(links)),
		SampledAt: time.Now().UnixMilli(), IntervalSeconds: c.interval.Seconds(), MaxSamples: MaxSamples,
	}
	for _, l := range links {
		out.Links = append(out.Links, assess(l, c.hist.of(l.Topic, l.Remote)))
	}
	out.Subscriptions = c.src.Subscriptions()
	if out.Subscriptions == nil {
		out.Subscriptions = []SubscriptionSync{}
	}
	slices.SortFunc(out.Links, func(a, b Link) int {
		if a.Topic != b.Topic {
			return strings.Compare(a.Topic, b.Topic)
		}
		return strings.Compare(a.Remote, b.Remote)
	})
	return out
}

// Handler serves /console/ (the page) and /console/api/overview.
func (c *Console) Handler() http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	mux := http.NewServeMux()
	mux.Handle("GET /console/", http.StripPrefix("/console/", http.FileServerFS(static)))
	mux.HandleFunc("GET /console/api/failover-check", func(w http.ResponseWriter, r *http.Request) {
		fc, ok := c.src.(FailoverChecker)
		ns, target := r.URL.Query().Get("namespace"), r.URL.Query().Get("to")
		switch {
		case !ok:
			http.Error(w, "the failover check is not available on this broker", http.StatusNotImplemented)
			return
		case strings.Count(ns, "/") != 1 || target == "":
			http.Error(w, "give namespace=tenant/namespace and to=cluster", http.StatusBadRequest)
			return
		}
		report, err := fc.FailoverCheck(r.Context(), ns, target, r.Header.Get("Authorization"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err := json.NewEncoder(w).Encode(report); err != nil {
			c.log.Debug("console: writing the failover check failed", "err", err)
		}
	})
	mux.HandleFunc("GET /console/api/overview", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err := json.NewEncoder(w).Encode(c.Overview()); err != nil {
			c.log.Debug("console: writing the overview failed", "err", err)
		}
	})
	return mux
}

var (
	descHistoryBytes   = prometheus.NewDesc("meridian_console_history_bytes", "Memory reserved for the replication console's link history (15 minutes of samples per active outbound link).", nil, nil)
	descHistoryBudget  = prometheus.NewDesc("meridian_console_history_limit_bytes", "--console-history-bytes: the budget of the console's link history (0: no bound).", nil, nil)
	descHistoryRefused = prometheus.NewDesc("meridian_console_links_without_history", "Active outbound links the console keeps no history for because its budget is used up.", nil, nil)
)

// Collector exports the history's memory, its budget and the links it had no room for.
func (c *Console) Collector() prometheus.Collector { return historyCollector{c} }

type historyCollector struct{ c *Console }

func (h historyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHistoryBytes
	ch <- descHistoryBudget
	ch <- descHistoryRefused
}

func (h historyCollector) Collect(ch chan<- prometheus.Metric) {
	reserved, budget, refused := h.c.hist.usage()
	ch <- prometheus.MustNewConstMetric(descHistoryBytes, prometheus.GaugeValue, float64(reserved))
	ch <- prometheus.MustNewConstMetric(descHistoryBudget, prometheus.GaugeValue, float64(budget))
	ch <- prometheus.MustNewConstMetric(descHistoryRefused, prometheus.GaugeValue, float64(refused))
}
