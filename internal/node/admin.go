package node

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/console"
	"github.com/meridian-mq/meridian/internal/storage"
)

// mountAdmin mounts the admin REST API and /metrics on the web listener's mux, beside the
// readiness endpoint the node serves itself (the more specific pattern wins in http.ServeMux).
func (n *Node) mountAdmin() error {
	c := &n.components
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(&nodeCollector{n: n}, &tlsCollector{n: n}, connectionCollector{n: n})
	var replicationApplied func(context.Context, string) error
	if c.replication != nil {
		reg.MustRegister(c.replication.Collector(!n.opts.HideTopicLevelMetrics))
		replicationApplied = c.replication.Sync
	}
	h, err := admin.NewHandler(admin.Config{
		Cluster:           n.opts.Cluster,
		Catalog:           c.catalog,
		Topics:            topicService{broker: c.broker, cat: c.catalog, repl: c.replication, schema: c.schemas, member: c.member},
		Schemas:           c.schemas,
		Ready:             n.Healthy,
		Registry:          reg,
		Logger:            n.opts.Logger,
		AutoTopicCreation: n.opts.AutoTopicCreation,
		// Replicators follow replication changes before the admin call answers (not only by watch).
		ReplicationApplied: replicationApplied,
		Authorizer:         n.authz,
		Ownership:          c.adminOwnership(),
		// Pulsar's exposeTopicLevelMetricsInPrometheus=false.
		HideTopicLevelMetrics: n.opts.HideTopicLevelMetrics,
	})
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	c.admin = h
	n.mux.Handle("/", h)
	c.console = console.New(consoleSource{local: n.opts.Cluster, webURL: n.WebURL(), cat: c.catalog, repl: c.replication}, n.opts.ConsoleInterval, n.opts.ConsoleHistoryBytes, n.opts.Logger)
	reg.MustRegister(c.console.Collector())
	c.console.Start()
	// The page's assets are public (they hold no data, and the page asks for a token when the API
	// answers 401); the API needs a superuser (it shows every tenant's links).
	for _, pattern := range []string{"/console/", "/console/api/"} {
		h, err := admin.Guard(n.authz, pattern, c.console.Handler(), n.opts.Logger)
		if err != nil {
			return err
		}
		n.mux.Handle(pattern, h)
	}
	return nil
}

// nodeCollector exports the node's own figures: how receipts relate to fsync (so an operator sees
// a weakened durability mode in metrics, not only in the startup log), connection and frame
// counters of the binary-protocol server, the storage engine's sync figures and the broker core's
// publish latency.
type nodeCollector struct{ n *Node }

var (
	descFsyncMode    = prometheus.NewDesc("meridian_fsync_mode", "1 for the active --fsync mode: always (receipt after fsync) or interval (receipt before fsync).", []string{"mode"}, nil)
	descConnsOpen    = prometheus.NewDesc("meridian_connections_open", "Binary-protocol connections currently open.", nil, nil)
	descConnsTotal   = prometheus.NewDesc("meridian_connections_accepted_total", "Binary-protocol connections accepted.", nil, nil)
	descFramesIn     = prometheus.NewDesc("meridian_frames_received_total", "Frames received on the binary protocol.", nil, nil)
	descBadFrames    = prometheus.NewDesc("meridian_bad_frames_total", "Connections closed for oversized or malformed frames.", nil, nil)
	descChecksumErr  = prometheus.NewDesc("meridian_checksum_errors_total", "SEND commands refused for a wrong checksum.", nil, nil)
	descThrottled    = prometheus.NewDesc("meridian_connection_throttled_total", "Times a connection paused reading because of its publish or outbound limits.", nil, nil)
	descFsyncs       = prometheus.NewDesc("meridian_storage_fsyncs_total", "fsync calls issued by the storage engine.", nil, nil)
	descUnsynced     = prometheus.NewDesc("meridian_storage_unsynced_acks_total", "Appends acknowledged before fsync (--fsync=interval).", nil, nil)
	descJournalBytes = prometheus.NewDesc("meridian_storage_journal_bytes_total", "Bytes written to the storage journal.", nil, nil)
	descLeadCommits  = prometheus.NewDesc("meridian_storage_lead_commits_total", "Group commits run by the connection that read their SENDs, without a hand-off to the storage sync loop (a light load's usual case).", nil, nil)
	descDirectWrites = prometheus.NewDesc("meridian_storage_direct_writes_total", "Topic shares of group commits written straight to their segment file (--direct-write-bytes).", nil, nil)
	descDirectBytes  = prometheus.NewDesc("meridian_storage_direct_bytes_total", "Bytes written straight to segment files instead of the journal (--direct-write-bytes).", nil, nil)
	descSyncSeconds  = prometheus.NewDesc("meridian_storage_sync_seconds", "Duration of journal sync rounds (fdatasync).", nil, nil)
	descCommitSecs   = prometheus.NewDesc("meridian_storage_commit_seconds", "Time from a group commit's first append until it can be acknowledged (with --fsync always: until it is durable).", nil, nil)
	descIgnoredAcks  = prometheus.NewDesc("meridian_ignored_acks_total", "Acknowledgements not applied because they name no stored entry of their topic: positions of another cluster (a client moved by a switchover), of entries removed by retention, or after the last entry.", nil, nil)
	descPublishSecs  = prometheus.NewDesc("meridian_publish_latency_seconds", "Time from the broker taking a publish (a SEND, replicated ones included) to its receipt or error being handed to the connection: the producer's earlier publishes, dedup and the group commit.", nil, nil)
)

// Storage failure and capacity figures (docs/operations.md, "Disk full and I/O errors").
var (
	descStorageReady     = prometheus.NewDesc("meridian_storage_ready", "1 while the storage engine takes appends and makes them durable normally; 0 while it recovers from I/O errors or a full disk (the readiness endpoint says why).", nil, nil)
	descFsyncErrors      = prometheus.NewDesc("meridian_storage_fsync_errors_total", "Failed fsyncs of journal, segment and cursor files.", nil, nil)
	descFencedLedgers    = prometheus.NewDesc("meridian_storage_fenced_ledgers", "Open topic ledgers fenced after a storage failure (read-only until reopened).", nil, nil)
	descCheckpoints      = prometheus.NewDesc("meridian_storage_checkpoints_total", "Checkpoints that made a journal file's data durable in the topic files and retired it.", nil, nil)
	descCheckpointFails  = prometheus.NewDesc("meridian_storage_checkpoint_failures_total", "Checkpoints that failed (the journal is kept; retried in the background).", nil, nil)
	descCheckpointFailng = prometheus.NewDesc("meridian_storage_checkpoint_failing", "1 while the last checkpoint failed.", nil, nil)
	descCheckpointError  = prometheus.NewDesc("meridian_storage_last_checkpoint_error_info", "The last checkpoint failure (value 1; absent if none since the start).", []string{"error"}, nil)
	descJournalFailing   = prometheus.NewDesc("meridian_storage_journal_failing", "1 while the last journal write or fsync failed.", nil, nil)
	descRepairsPending   = prometheus.NewDesc("meridian_storage_repairs_pending", "Topic files waiting to be rewritten from the journal after an I/O error.", nil, nil)
	descRepairs          = prometheus.NewDesc("meridian_storage_repairs_total", "Topic files rewritten from the journal after an I/O error.", nil, nil)
	descRepairFailures   = prometheus.NewDesc("meridian_storage_repair_failures_total", "Attempts to rewrite a topic file that failed (retried).", nil, nil)
	descJournalBacklog   = prometheus.NewDesc("meridian_storage_journal_backlog_files", "Journal files not yet retired by a checkpoint (normally 1-2).", nil, nil)
	descJournalBacklogMx = prometheus.NewDesc("meridian_storage_journal_backlog_limit_files", "Journal files at which appends wait for a slow checkpoint, or are refused while checkpoints fail.", nil, nil)
	descBacklogWaits     = prometheus.NewDesc("meridian_storage_journal_backlog_waits_total", "Times the journal waited at its backlog bound for a checkpoint that was only slow (appends waited meanwhile).", nil, nil)
	descBacklogWaitSecs  = prometheus.NewDesc("meridian_storage_journal_backlog_wait_seconds_total", "Time the journal spent waiting at its backlog bound for a slow checkpoint.", nil, nil)
	descTornTails        = prometheus.NewDesc("meridian_storage_recovered_torn_tails_total", "Torn file tails cut by recovery at startup.", nil, nil)
	descCacheBytes       = prometheus.NewDesc("meridian_storage_cache_bytes", "Bytes held by the broker-wide entry cache.", nil, nil)
	descCacheLimit       = prometheus.NewDesc("meridian_storage_cache_limit_bytes", "The entry cache's bound (managedLedgerCacheSizeMB).", nil, nil)
	descOpenFiles        = prometheus.NewDesc("meridian_storage_open_files", "Files the storage engine holds open.", nil, nil)
)

// maxErrorLabel bounds the error text exported as a label.
const maxErrorLabel = 1024

func (nc *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFsyncMode, descConnsOpen, descConnsTotal, descFramesIn, descBadFrames, descChecksumErr, descThrottled, descFsyncs, descLeadCommits, descUnsynced, descJournalBytes, descDirectWrites, descDirectBytes, descSyncSeconds, descCommitSecs, descPublishSecs, descIgnoredAcks,
		descStorageReady, descFsyncErrors, descFencedLedgers, descCheckpoints, descCheckpointFails, descCheckpointFailng, descCheckpointError, descJournalFailing,
		descRepairsPending, descRepairs, descRepairFailures, descJournalBacklog, descJournalBacklogMx, descBacklogWaits, descBacklogWaitSecs, descTornTails, descCacheBytes, descCacheLimit, descOpenFiles} {
		ch <- d
	}
}

func (nc *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := nc.n
	for _, mode := range []FsyncMode{FsyncAlways, FsyncInterval} {
		v := 0.0
		if n.opts.Fsync == mode {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descFsyncMode, prometheus.GaugeValue, v, string(mode))
	}
	if s := n.components.server; s != nil {
		st := s.Stats()
		ch <- prometheus.MustNewConstMetric(descConnsOpen, prometheus.GaugeValue, float64(st.ConnectionsOpen))
		ch <- prometheus.MustNewConstMetric(descConnsTotal, prometheus.CounterValue, float64(st.ConnectionsAccepted))
		ch <- prometheus.MustNewConstMetric(descFramesIn, prometheus.CounterValue, float64(st.FramesIn))
		ch <- prometheus.MustNewConstMetric(descBadFrames, prometheus.CounterValue, float64(st.BadFrames))
		ch <- prometheus.MustNewConstMetric(descChecksumErr, prometheus.CounterValue, float64(st.ChecksumErrors))
		ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, float64(st.Throttled))
	}
	if e := n.components.engine; e != nil {
		m := e.Metrics()
		ch <- prometheus.MustNewConstMetric(descFsyncs, prometheus.CounterValue, float64(m.Fsyncs))
		ch <- prometheus.MustNewConstMetric(descLeadCommits, prometheus.CounterValue, float64(m.LeadCommits))
		ch <- prometheus.MustNewConstMetric(descUnsynced, prometheus.CounterValue, float64(m.UnsyncedAcks))
		ch <- prometheus.MustNewConstMetric(descJournalBytes, prometheus.CounterValue, float64(m.BytesWritten))
		ch <- prometheus.MustNewConstMetric(descDirectWrites, prometheus.CounterValue, float64(m.DirectWrites))
		ch <- prometheus.MustNewConstMetric(descDirectBytes, prometheus.CounterValue, float64(m.DirectBytes))
		ch <- latencyHistogramMetric(descSyncSeconds, m.SyncLatency)
		ch <- latencyHistogramMetric(descCommitSecs, m.CommitLatency)
		collectStorageHealth(ch, m)
	}
	if b := n.components.broker; b != nil {
		ch <- latencyHistogramMetric(descPublishSecs, b.PublishLatency())
		ch <- prometheus.MustNewConstMetric(descIgnoredAcks, prometheus.CounterValue, float64(b.IgnoredAcks()))
	}
}

// latencyHistogramMetric turns a storage latency snapshot into a Prometheus histogram (cumulative
// buckets, seconds).
func latencyHistogramMetric(desc *prometheus.Desc, h storage.LatencyHistogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(storage.LatencyBounds))
	var cum uint64
	for i, bound := range storage.LatencyBounds {
		cum += uint64(h.Counts[i])
		buckets[bound.Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(desc, uint64(h.Count()), h.Sum.Seconds(), buckets)
}

// collectStorageHealth exports the storage engine's failure, recovery and capacity figures.
func collectStorageHealth(ch chan<- prometheus.Metric, m storage.EngineMetrics) {
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(descStorageReady, flag(m.Unhealthy == ""))
	counter(descFsyncErrors, m.FsyncErrors)
	gauge(descFencedLedgers, float64(m.FencedLedgers))
	counter(descCheckpoints, m.Checkpoints)
	counter(descCheckpointFails, m.CheckpointFailures)
	gauge(descCheckpointFailng, flag(m.CheckpointFailing))
	if e := m.LastCheckpointError; e != "" {
		if len(e) > maxErrorLabel {
			e = e[:maxErrorLabel]
		}
		ch <- prometheus.MustNewConstMetric(descCheckpointError, prometheus.GaugeValue, 1, e)
	}
	gauge(descJournalFailing, flag(m.JournalFailing))
	gauge(descRepairsPending, float64(m.RepairsPending))
	counter(descRepairs, m.Repairs)
	counter(descRepairFailures, m.RepairFailures)
	gauge(descJournalBacklog, float64(m.JournalBacklogFiles))
	gauge(descJournalBacklogMx, float64(m.JournalBacklogLimit))
	counter(descBacklogWaits, m.JournalBacklogWaits)
	ch <- prometheus.MustNewConstMetric(descBacklogWaitSecs, prometheus.CounterValue, m.JournalBacklogWait.Seconds())
	counter(descTornTails, m.RecoveredTornTails)
	gauge(descCacheBytes, float64(m.CacheBytes))
	gauge(descCacheLimit, float64(m.CacheLimit))
	gauge(descOpenFiles, float64(m.OpenFiles))
}
