package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// SyncMode says when an append is acknowledged.
type SyncMode int

const (
	// SyncAlways acknowledges an append only after its bytes are fsynced (group commit). The default.
	SyncAlways SyncMode = iota
	// SyncInterval acknowledges after the write reaches the OS and fsyncs every SyncInterval:
	// a crash of the machine (not of the process) can lose up to SyncInterval of acknowledged appends.
	SyncInterval
)

func (m SyncMode) String() string {
	switch m {
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	}
	return fmt.Sprintf("SyncMode(%d)", int(m))
}

// DefaultMaxEntrySize is the largest entry accepted by default: 5 MiB of message plus 10 KiB of overhead.
const DefaultMaxEntrySize = 5<<20 + 10<<10

// Options configure an Engine.
type Options struct {
	Dir          string
	FS           vfs.FS // nil = the real OS filesystem
	Sync         SyncMode
	SyncInterval time.Duration // for SyncInterval; default 100 ms
	CacheBytes   int64         // broker-wide entry cache bound; 0 = default 64 MiB, <0 = no cache
	MaxEntrySize int           // default DefaultMaxEntrySize
	Logger       *slog.Logger

	// Tuning; zero values pick the defaults.
	JournalFileBytes    int64         // journal file size that triggers a checkpoint (default 64 MiB): bounds recovery work
	SegmentMaxBytes     int64         // a ledger rolls to a new ledger id at this size (default 128 MiB)
	SegmentMaxEntries   int64         // ... or at this many entries (default 500,000)
	MaxOpenFiles        int           // bound on open segment and cursor files (default 256; an eighth of it for evicted ones being written back: fdretire.go), plus the journal's
	CursorFlushInterval time.Duration // how often changed durable cursors are persisted (default 1 s)
	TrimInterval        time.Duration // how often every open ledger is trimmed (default 1 min)
	// SyncPipelineDepth bounds the group commits whose fsync is in flight at once (SyncAlways;
	// default 2, 1 = each fsync finishes before the next batch is written; see pipelinesync.go).
	SyncPipelineDepth int
	// AlwaysPipeline hands every fsync it can to a commit syncer, even under a light load, where
	// the sync loop otherwise runs it itself (commitLight in pipelinesync.go). For tests of the
	// pipeline.
	AlwaysPipeline bool
	// DirectWriteBytes: when one ledger's entries in one group commit reach this many bytes, they
	// are written once, straight to the ledger's segment file (fsynced with the journal), and the
	// journal gets a small reference record instead of a second copy (SyncAlways only; default
	// 1 MiB; <0 = never; see directwrite.go).
	DirectWriteBytes int
	// BypassCacheBytes: the applier's write of one segment's share of a batch bypasses the page
	// cache (O_DIRECT, whole 4 KiB blocks) when it is at least this many bytes (default 64 KiB;
	// <0 = never; see unbuffered.go). Smaller writes, and file systems without direct I/O, use the
	// page cache.
	BypassCacheBytes int
	// MaxJournalBacklog bounds the journal kept while checkpoints fail (an I/O error, a full
	// disk) or lag (then appends wait for them at the bound: health.go): once that much waits for
	// a checkpoint after a failure, appends fail with ErrUnavailable instead of
	// filling the disk, until a checkpoint succeeds again (counted in whole journal files, at
	// least 3; default 8 journal files; see health.go).
	MaxJournalBacklog int64
	// LedgerIDBlock, when set, reserves ledger ids from outside this engine: the brokers of one
	// cluster draw blocks from their shared store, so a ledger id is unique in the whole cluster
	// (docs/cluster.md). It is given the first id this engine may use (ids below it are used here)
	// and the block size, and returns the block's first id, at least floor. Nil: ids come from
	// this engine's own counter.
	LedgerIDBlock func(floor, size int64) (int64, error)
}

// CursorOptions configure a new cursor.
type CursorOptions struct {
	// Initial is where a new cursor starts: Earliest, Latest or a position (the first entry to deliver).
	Initial mtypes.Position
	// Durable cursors are persisted; non-durable ones live in memory only.
	Durable bool
}

// EngineMetrics is a snapshot of engine-wide counters.
type EngineMetrics struct {
	SyncMode            string
	Fsyncs              int64         // file fsyncs issued by the sync loop
	SyncRounds          int64         // group-commit rounds
	FsyncErrors         int64         // failed fsyncs (each fences the ledgers involved)
	FsyncLatencySum     time.Duration // total time in sync rounds
	FsyncLatencyMax     time.Duration
	BytesWritten        int64
	EntriesWritten      int64
	UnsyncedAcks        int64 // appends acknowledged before fsync (SyncInterval mode)
	DirectWrites        int64 // ledger groups written straight to their segment (directwrite.go)
	DirectBytes         int64 // bytes of those writes (not in the journal)
	CacheHits           int64
	CacheMisses         int64
	CacheBytes          int64
	CacheLimit          int64
	OpenFiles           int
	OpenLedgers         int
	FencedLedgers       int
	CursorFlushes       int64
	TrimmedSegments     int64
	RecoveredTornTails  int64
	Checkpoints         int64
	JournalFills        int64  // journal files zero-filled to full size before use (fresh data directories; nextjournal.go)
	LeadCommits         int64  // group commits run on an appender's goroutine (leadcommit.go)
	LastCheckpointError string // the last checkpoint failure ever (CheckpointFailing says whether they still fail)
	// I/O failures and what the engine does about them (health.go, repair.go).
	CheckpointFailures  int64         // checkpoints that failed
	CheckpointFailing   bool          // the last checkpoint failed (the journal is kept; retried in the background)
	JournalFailing      bool          // the last journal write or fsync failed
	RepairsPending      int           // files waiting to be rewritten from the journal after an I/O error
	Repairs             int64         // files rewritten from the journal after an I/O error
	RepairFailures      int64         // attempts to rewrite them that failed (retried)
	JournalBacklogFiles int           // journal files not retired by a checkpoint yet (normally 1-2)
	JournalBacklogLimit int           // at this many, appends wait for a checkpoint, or fail while checkpoints fail (Options.MaxJournalBacklog)
	JournalBacklogWaits int64         // times the journal waited at the bound for a slow checkpoint (appends waited meanwhile)
	JournalBacklogWait  time.Duration // the time it waited, in all
	Unhealthy           string        // why Engine.Health fails, "" when it does not
	// SyncLatency: durations of journal sync rounds (the journal's fdatasync; on the pipelined
	// path, the usual one with SyncAlways, together with the direct writes' segment fdatasyncs
	// that run beside it). CommitLatency: from the first append of a group commit until it can
	// be acknowledged (with SyncAlways: until it is durable), the longest wait of any append in
	// that group commit, the acknowledgement itself excluded.
	SyncLatency, CommitLatency LatencyHistogram
}

// Errors.
var (
	ErrClosed        = errors.New("storage: closed")
	ErrFenced        = errors.New("storage: ledger fenced")
	ErrNotFound      = errors.New("storage: not found")
	ErrEntryTooLarge = errors.New("storage: entry too large")
	ErrCorrupt       = errors.New("storage: corrupt data")
	ErrTrimmed       = errors.New("storage: entry trimmed")
	// ErrUnavailable: the engine refuses appends for now (the journal backlog reached its bound
	// while checkpoints fail after an I/O error); it clears by itself (Engine.Health).
	ErrUnavailable = errors.New("storage: unavailable")
)
