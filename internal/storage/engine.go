package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Engine owns one broker data directory: all ledgers, their cursors, the journal with its
// group-commit sync loop, the checkpointer and the entry cache.
//
// Open starts its goroutines and Close stops them; each owns a part of the Engine that only it
// touches while it runs (Open sets it up before, Close reads it after):
//   - the sync loop (runSyncLoop, syncloop.go) cuts the pending batch, writes it to the journal
//     and makes it durable, then hands it to the applier; it owns syncLoop, and starts and stops
//     the background syncer (intervalsync.go), the commit syncers (pipelinesync.go) and the
//     journal file preparers (nextjournal.go);
//   - the applier (runApplier, applier.go) makes durable batches visible, writes the segment
//     files and calls the callbacks in append order; it owns applier, which the sync loop uses
//     instead only while the applier has finished every job and waits for the next one (a light
//     load: applyOnSyncLoop);
//   - the checkpointer (runCheckpointer, checkpoint.go) fsyncs what a closed journal file covers
//     and retires it, and retries repairs; it owns checkpointer (but for its mutex);
//   - the background goroutine (runBackground, background.go) flushes cursors and trims;
//   - the janitor (janitor.go) unlinks the trash and compacts cursor logs.
//
// What goroutines share is in types that hold the mutex guarding it: queue (appenders, the sync
// loop and the applier), table (the open ledgers), recycled, durableState, cursorLogs, io.
type Engine struct {
	// Fixed once Open returns, or safe for concurrent use by themselves.
	opts       Options
	fs         vfs.FS
	log        *slog.Logger
	dir        string
	ledgersDir string
	journalDir string
	files      *fileCache
	cache      *entryCache
	inc        incarnationTable // fixed once Open returns (incarnation.go)
	legacyDirs legacyDirSet     // ledger directories with crc-based hashed names (legacydirs.go)
	bypassOff  atomic.Bool      // the file system cannot bypass the page cache (unbuffered.go)
	m          engineCounters

	// Shared, each under its own mutex.
	queue        appendQueue      // appenders, the sync loop and the applier (queue.go)
	table        ledgerTable      // the open ledgers (ledgertable.go)
	recycled     recycledJournals // journal files to reuse (recycle.go)
	durableState                  // the state file's values and the ledger id counter, under stateMu
	cursorLogs   cursorLogLock    // the cursor logs' file work (janitor.go)
	io           ioState          // I/O failures, the repairs they need, the journal backlog (health.go, repair.go)
	imports      importState      // ledger imports' needs and imported segments' incarnations (transfer_state.go)

	// Each goroutine's own.
	syncLoop     syncLoopState     // the sync loop and the goroutines it starts (syncloop.go)
	applier      applierState      // the applier (applier.go)
	checkpointer checkpointerState // the checkpointer (checkpoint.go)
	background   backgroundState   // cursor flushes and trims (background.go)
	janitor      *janitor          // slow file work off the applier (janitor.go)

	closeOnce sync.Once
	closeErr  error
}

type engineCounters struct {
	fsyncs, syncRounds, fsyncErrors, fsyncNanos, fsyncMaxNanos atomic.Int64
	bytesWritten, entriesWritten, unsyncedAcks                 atomic.Int64
	directWrites, directBytes                                  atomic.Int64
	cursorFlushes, trimmedSegments, tornTails, checkpoints     atomic.Int64
	journalFills                                               atomic.Int64 // journal files zero-filled to full size (nextjournal.go)
	leadCommits                                                atomic.Int64 // group commits run by a lead (leadcommit.go)
	backlogWaits, backlogWaitNanos                             atomic.Int64 // the sync loop waiting for a checkpoint at the backlog bound (health.go)
	syncLatency, commitLatency                                 LatencyRecorder
}

const (
	defaultCacheBytes        = 64 << 20
	defaultJournalBytes      = 64 << 20
	defaultSegmentBytes      = 128 << 20
	defaultSegmentEntries    = 500_000
	defaultMaxOpenFiles      = 256
	defaultSyncPipelineDepth = 2
	defaultDirectWriteBytes  = 1 << 20
	defaultBypassCacheBytes  = 64 << 10
	ledgerIDBlock            = 4096
	stateFile                = "meridian.state"
)

// Open opens (creating if needed) the engine in opts.Dir, replaying the journal tail.
func Open(ctx context.Context, opts Options) (*Engine, error) {
	if err := checkOptions(opts); err != nil {
		return nil, err
	}
	if opts.FS == nil {
		opts.FS = vfs.OS{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxEntrySize <= 0 {
		opts.MaxEntrySize = DefaultMaxEntrySize
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = 100 * time.Millisecond
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = defaultCacheBytes
	}
	if opts.JournalFileBytes <= 0 {
		opts.JournalFileBytes = defaultJournalBytes
	}
	if opts.SegmentMaxBytes <= 0 {
		opts.SegmentMaxBytes = defaultSegmentBytes
	}
	if opts.SegmentMaxEntries <= 0 {
		opts.SegmentMaxEntries = defaultSegmentEntries
	}
	if opts.MaxOpenFiles <= 0 {
		opts.MaxOpenFiles = defaultMaxOpenFiles
	}
	if opts.CursorFlushInterval <= 0 {
		opts.CursorFlushInterval = time.Second
	}
	if opts.TrimInterval <= 0 {
		opts.TrimInterval = time.Minute
	}
	if opts.SyncPipelineDepth <= 0 {
		opts.SyncPipelineDepth = defaultSyncPipelineDepth
	}
	if opts.DirectWriteBytes == 0 {
		opts.DirectWriteBytes = defaultDirectWriteBytes
	}
	if opts.BypassCacheBytes == 0 {
		opts.BypassCacheBytes = defaultBypassCacheBytes
	}
	if opts.Sync != SyncAlways {
		opts.DirectWriteBytes = -1
	}
	e := &Engine{
		opts:  opts,
		fs:    opts.FS,
		log:   opts.Logger.With("component", "storage"),
		dir:   path.Clean(opts.Dir),
		files: newFileCache(opts.FS, opts.MaxOpenFiles),
		cache: newEntryCache(opts.CacheBytes),
		table: ledgerTable{ledgers: map[string]*Ledger{}},
		applier: applierState{
			done:       make(chan struct{}),
			dirtyFiles: map[string]struct{}{},
			dirtyDirs:  map[string]struct{}{},
		},
		checkpointer: checkpointerState{jobs: make(chan checkpointJob, 4), done: make(chan struct{})},
		background:   backgroundState{stop: make(chan struct{}), done: make(chan struct{})},
	}
	e.initIO()
	e.ledgersDir = e.dir + "/ledgers"
	e.journalDir = e.dir + "/journal"
	e.queue.cond = sync.NewCond(&e.queue.mu)
	e.queue.pending = &batch{}
	e.applier.jobs = make(chan applyJob, 2)
	// Batches: the pending one, the ones whose fsync is in flight, and up to two with the
	// applier; the sync loop takes a free one before it cuts the pending batch.
	for range 2 + opts.SyncPipelineDepth {
		e.queue.freeBatches = append(e.queue.freeBatches, &batch{})
	}
	start := time.Now()
	if err := e.recover(ctx); err != nil {
		e.files.closeAll()
		return nil, err
	}
	e.log.Info("storage opened", "dir", e.dir, "sync", opts.Sync.String(), "recovery", time.Since(start).String())
	if opts.Sync == SyncInterval {
		e.syncLoop.interval.req = make(chan syncRequest, 4)
		e.syncLoop.interval.done = make(chan struct{})
		go e.backgroundSyncer()
	}
	if opts.Sync == SyncAlways && opts.SyncPipelineDepth > 1 {
		e.syncLoop.pipeline.req = make(chan *commitInFlight, opts.SyncPipelineDepth)
		for range opts.SyncPipelineDepth {
			e.syncLoop.pipeline.syncers.Add(1)
			go e.commitSyncer()
		}
	}
	e.startJanitor()
	go e.runSyncLoop()
	go e.runApplier()
	go e.runCheckpointer()
	go e.runBackground()
	return e, nil
}

// ---- state file and ledger ids ----

// durableState is what the state file records, and the ledger id counter. Recovery sets it before
// the goroutines start; afterwards stateMu guards it.
type durableState struct {
	stateMu       sync.Mutex
	nextLedgerID  int64  // the next ledger id to hand out
	ledgerIDLimit int64  // ids below it may have been handed out: the state file records it
	firstJournal  uint64 // the first journal file recovery replays
}

// writeState writes the state file (stateMu held, or before the goroutines start).
func (e *Engine) writeState() error {
	b := encodeEngineState(engineState{ledgerIDLimit: uint64(e.ledgerIDLimit), firstJournal: e.firstJournal, incarnations: e.inc.durable})
	p := e.dir + "/" + stateFile
	if err := replaceFileDurably(e.fs, p, p+".tmp", b); err != nil {
		return fmt.Errorf("storage: write state: %w", err)
	}
	return nil
}

// newLedgerID hands out a ledger id that was never used before (also across restarts).
func (e *Engine) newLedgerID() (int64, error) {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	if e.nextLedgerID >= e.ledgerIDLimit {
		next, old := e.nextLedgerID, e.ledgerIDLimit
		if e.opts.LedgerIDBlock != nil {
			first, err := e.opts.LedgerIDBlock(e.nextLedgerID, ledgerIDBlock)
			if err != nil {
				return 0, fmt.Errorf("storage: reserve ledger ids: %w", err)
			}
			if first < e.nextLedgerID {
				return 0, fmt.Errorf("storage: reserved ledger ids start at %d, below %d already used here", first, e.nextLedgerID)
			}
			e.nextLedgerID = first
		}
		e.ledgerIDLimit = e.nextLedgerID + ledgerIDBlock
		if err := e.writeState(); err != nil {
			e.nextLedgerID, e.ledgerIDLimit = next, old
			return 0, err
		}
	}
	id := e.nextLedgerID
	e.nextLedgerID++
	return id, nil
}

// ---- paths ----

func segPath(dir string, id int64) string { return fmt.Sprintf("%s/%016x.seg", dir, id) }
func idxPath(dir string, id int64) string { return fmt.Sprintf("%s/%016x.idx", dir, id) }
func cursorLogPath(dir string) string     { return dir + "/cursors.log" }
func (e *Engine) journalPath(seq uint64) string {
	return fmt.Sprintf("%s/%016x.jnl", e.journalDir, seq)
}

func parseHexName(name, ext string) (int64, bool) {
	if !strings.HasSuffix(name, ext) || len(name) != 16+len(ext) {
		return 0, false
	}
	v, err := strconv.ParseUint(name[:16], 16, 63)
	return int64(v), err == nil
}

// Close flushes cursors, syncs, checkpoints and closes every ledger and file.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.table.mu.Lock()
		ls := make([]*Ledger, 0, len(e.table.ledgers))
		for _, l := range e.table.ledgers {
			ls = append(ls, l)
		}
		e.table.mu.Unlock()
		var errs []error
		var errMu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for _, l := range ls {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				<-l.ready
				if l.loadErr == nil {
					if err := l.Close(); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFenced) {
						errMu.Lock()
						errs = append(errs, err)
						errMu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		e.table.mu.Lock()
		e.table.closed = true
		e.table.mu.Unlock()
		close(e.background.stop)
		<-e.background.done
		e.queue.mu.Lock()
		e.queue.stopping = true
		e.queue.cond.Broadcast()
		e.queue.mu.Unlock()
		<-e.applier.done
		e.janitor.close()
		close(e.checkpointer.jobs)
		<-e.checkpointer.done
		if err := e.finalCheckpoint(); err != nil {
			errs = append(errs, err)
		}
		if e.syncLoop.journal != nil {
			_ = e.syncLoop.journal.Close()
		}
		e.files.closeAll()
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}

// Metrics returns a snapshot of engine-wide counters.
func (e *Engine) Metrics() EngineMetrics {
	e.table.mu.Lock()
	open := len(e.table.ledgers)
	fenced := 0
	for _, l := range e.table.ledgers {
		if l.Err() != nil {
			fenced++
		}
	}
	e.table.mu.Unlock()
	m := EngineMetrics{
		SyncMode:           e.opts.Sync.String(),
		Fsyncs:             e.m.fsyncs.Load(),
		SyncRounds:         e.m.syncRounds.Load(),
		FsyncErrors:        e.m.fsyncErrors.Load(),
		FsyncLatencySum:    time.Duration(e.m.fsyncNanos.Load()),
		FsyncLatencyMax:    time.Duration(e.m.fsyncMaxNanos.Load()),
		SyncLatency:        e.m.syncLatency.Snapshot(),
		CommitLatency:      e.m.commitLatency.Snapshot(),
		BytesWritten:       e.m.bytesWritten.Load(),
		EntriesWritten:     e.m.entriesWritten.Load(),
		UnsyncedAcks:       e.m.unsyncedAcks.Load(),
		DirectWrites:       e.m.directWrites.Load(),
		DirectBytes:        e.m.directBytes.Load(),
		CacheHits:          e.cache.hits.Load(),
		CacheMisses:        e.cache.misses.Load(),
		CacheBytes:         e.cache.size(),
		CacheLimit:         max(e.opts.CacheBytes, 0),
		OpenFiles:          e.files.open() + e.journalDescriptors(),
		OpenLedgers:        open,
		FencedLedgers:      fenced,
		CursorFlushes:      e.m.cursorFlushes.Load(),
		TrimmedSegments:    e.m.trimmedSegments.Load(),
		RecoveredTornTails: e.m.tornTails.Load(),
		Checkpoints:        e.m.checkpoints.Load(),
		JournalFills:       e.m.journalFills.Load(),
		LeadCommits:        e.m.leadCommits.Load(),
	}
	if v, ok := e.checkpointer.lastErr.Load().(string); ok {
		m.LastCheckpointError = v
	}
	e.fillHealthMetrics(&m)
	return m
}
