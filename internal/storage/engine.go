package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Engine owns one broker data directory: all ledgers, their cursors, the journal with its
// group-commit sync loop, the checkpointer and the entry cache.
type Engine struct {
	opts       Options
	fs         vfs.FS
	log        *slog.Logger
	dir        string
	ledgersDir string
	journalDir string
	files      *fileCache
	cache      *entryCache

	mu      sync.Mutex // ledgers, closed, nextSlot
	ledgers map[string]*Ledger
	closed  bool
	slot    uint32

	freeMu       sync.Mutex // freeJournals
	freeJournals []string   // recycled journal files (recycle.go)

	stateMu       sync.Mutex // ledger id allocation and the state file
	nextLedgerID  int64
	ledgerIDLimit int64
	firstJournal  uint64
	inc           incarnationTable // fixed once Open returns (incarnation.go)
	legacyDirs    legacyDirSet     // ledger directories with crc-based hashed names (legacydirs.go)
	unconfirmed   []*segWrite      // applier: writes with entries that failed at apply (unconfirmed.go)
	offload                        // slow file work off the applier (janitor.go)

	// Queue shared by all appenders; drained by the sync loop.
	qmu      sync.Mutex
	qcond    *sync.Cond
	pending  *batch
	jseq     uint64 // journal sequence the pending batch will be written to
	jsize    int64  // size of journal jseq including the pending batch
	stopping bool
	applying bool         // the applier is working on a batch
	syncDone []syncResult // SyncInterval: background fsyncs finished, for the sync loop
	// SyncAlways: fsyncs of batches in flight reported by the commit syncers (pipelinesync.go).
	commitDone []*commitInFlight

	// Owned by the sync loop.
	journal    vfs.File
	journalOff int64
	journalSeq uint64
	dirtyFiles map[string]struct{}
	dirtyDirs  map[string]struct{}
	unsynced   map[*Ledger]struct{} // SyncInterval: ledgers with written, unsynced appends
	lastSync   time.Time            // when the last fsync of the journal started
	// SyncInterval: fsyncs handed to the background syncer (intervalsync.go) and not yet
	// reported back, and how many of them also close a rotated journal file.
	syncsInFlight, closeSyncsInFlight int
	syncReq                           chan syncRequest // sync loop -> background syncer
	syncerDone                        chan struct{}
	prevUnclean                       bool   // the next journal file follows an abandoned one
	pendingVoids                      []byte // void records to write first in the next group commit (sync loop only)
	arena                             []byte // segment write buffer, reused by every batch
	// bypassOff: the file system cannot bypass the page cache (unbuffered.go).
	bypassOff atomic.Bool
	// SyncAlways with SyncPipelineDepth > 1 (pipelinesync.go): batches written whose fsync is in
	// flight, oldest first, and the commit syncers that run those fsyncs.
	inflight      []*commitInFlight
	commitFDs     []vfs.File // descriptors of the current journal file for the fsyncs in flight
	commitReq     chan *commitInFlight
	commitSyncers sync.WaitGroup
	// Direct writes (directwrite.go): per-ledger state, the count of batches planned, whether the
	// sync loop should let the applier catch up before the next batch, and the jobs handed to the
	// applier and finished by it (handedJobs: sync loop; appliedJobs: under qmu).
	direct                  map[*Ledger]*directState
	directGroups            map[groupKey]int
	directRecs              [][]byte // writeDirect's scratch list of one group's records
	planned                 uint64
	wantDirect              bool
	handedJobs, appliedJobs uint64
	// The next journal file, being made ahead of rotation (nextjournal.go), and its makers.
	nextJournal *preparedJournal
	jfull       bool // the current journal file is full size: appends overwrite allocated blocks (nextjournal.go)
	// successorReady: the current file is not full size and its full-size successor is ready,
	// latched once per sync-loop round (noteSuccessorReady)
	successorReady bool
	preparers      sync.WaitGroup

	applyCh chan applyJob // sync loop -> applier
	// freeBatches: batches to fill again (applier -> sync loop, under qmu), a stack: the sync
	// loop takes the one freed last (see takeFreeBatch).
	freeBatches []*batch
	spare       *batch      // taken from freeBatches by the sync loop, the next pending batch (under qmu)
	demand      batchDemand // recent batch sizes (under qmu; see batchDemand.trim)
	ckptMu      sync.Mutex  // serialises checkpoints
	ckptCh      chan checkpointJob
	ckptCarry   *checkpointJob // a failed checkpoint's files, retried with the next one (checkpointer only)
	loopDone    chan struct{}
	ckptDone    chan struct{}
	bgStop      chan struct{}
	bgDone      chan struct{}
	closeOnce   sync.Once
	closeErr    error
	lastCkptErr atomic.Value
	// io: I/O failures, the repairs they need and the journal backlog (health.go, repair.go).
	io ioState

	m engineCounters
}

type engineCounters struct {
	fsyncs, syncRounds, fsyncErrors, fsyncNanos, fsyncMaxNanos atomic.Int64
	bytesWritten, entriesWritten, unsyncedAcks                 atomic.Int64
	directWrites, directBytes                                  atomic.Int64
	cursorFlushes, trimmedSegments, tornTails, checkpoints     atomic.Int64
	journalFills                                               atomic.Int64 // journal files zero-filled to full size (nextjournal.go)
	syncLatency, commitLatency                                 LatencyRecorder
}

// batch is one group commit: journal bytes plus what to do once they are durable.
type batch struct {
	seq    uint64
	buf    []byte
	items  []item
	rotate bool // close this journal file after the batch
	moved  bool // encoded for an abandoned journal file
	// cacheArena: the segment arena of this batch is its own, and the entry cache keeps slices
	// of it (set by layoutEntries).
	cacheArena bool
	// Direct writes of this batch (directwrite.go) and the journal bytes written instead of buf
	// when there are any.
	direct []*segWrite
	jbuf   []byte
	// writes: the segment writes the applier laid out for b (layoutEntries) and has not written
	// yet (writeSegments).
	writes []*segWrite
	// dbuf holds the records of b's direct writes that nothing refers to once b is applied
	// (writeDirect: the entry cache copies them).
	dbuf []byte
	// opened is when the first item joined the batch (for the commit latency histogram).
	opened time.Time
}

type itemKind uint8

const (
	kEntry itemKind = iota
	kCursor
	kDelCursor
	kTrim
	kDelLedger
	kSeal
	kBarrier
	kFail // report err in order
	kCreate
	kRepair // rewrite the files that wait for it (repair.go)
)

type item struct {
	kind        itemKind
	l           *Ledger
	ledgerID    int64
	entryID     int64
	publishTime int64
	off, n      int // the segment record (kEntry) or cursor-log body (kCursor, kDelCursor) in buf
	err         error
	done        func(Position, error)
	cursor      *Cursor   // kCursor: clears its in-flight flag
	version     uint64    // kCursor: state version written
	fileOff     int64     // kEntry: where its record went in the segment file
	w           *segWrite // kEntry: the segment write it is part of
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
		opts:       opts,
		fs:         opts.FS,
		log:        opts.Logger.With("component", "storage"),
		dir:        path.Clean(opts.Dir),
		files:      newFileCache(opts.FS, opts.MaxOpenFiles),
		cache:      newEntryCache(opts.CacheBytes),
		ledgers:    map[string]*Ledger{},
		dirtyFiles: map[string]struct{}{},
		dirtyDirs:  map[string]struct{}{},
		ckptCh:     make(chan checkpointJob, 4),
		loopDone:   make(chan struct{}),
		ckptDone:   make(chan struct{}),
		bgStop:     make(chan struct{}),
		bgDone:     make(chan struct{}),
	}
	e.initIO()
	e.ledgersDir = e.dir + "/ledgers"
	e.journalDir = e.dir + "/journal"
	e.qcond = sync.NewCond(&e.qmu)
	e.pending = &batch{}
	e.applyCh = make(chan applyJob, 2)
	// Batches: the pending one, the ones whose fsync is in flight, and up to two with the
	// applier; the sync loop takes a free one before it cuts the pending batch.
	for range 2 + opts.SyncPipelineDepth {
		e.freeBatches = append(e.freeBatches, &batch{})
	}
	start := time.Now()
	if err := e.recover(ctx); err != nil {
		e.files.closeAll()
		return nil, err
	}
	e.log.Info("storage opened", "dir", e.dir, "sync", opts.Sync.String(), "recovery", time.Since(start).String())
	if opts.Sync == SyncInterval {
		e.syncReq = make(chan syncRequest, 4)
		e.syncerDone = make(chan struct{})
		go e.backgroundSyncer()
	}
	if opts.Sync == SyncAlways && opts.SyncPipelineDepth > 1 {
		e.commitReq = make(chan *commitInFlight, opts.SyncPipelineDepth)
		for range opts.SyncPipelineDepth {
			e.commitSyncers.Add(1)
			go e.commitSyncer()
		}
	}
	e.startJanitor()
	go e.syncLoop()
	go e.applier()
	go e.checkpointer()
	go e.background()
	return e, nil
}

// ---- state file and ledger ids ----

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
		old := e.ledgerIDLimit
		e.ledgerIDLimit = e.nextLedgerID + ledgerIDBlock
		if err := e.writeState(); err != nil {
			e.ledgerIDLimit = old
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

// ensureLedgerDir creates a ledger's directory (and its NAME file for hashed names).
// Its durability is left to the next checkpoint: the journal has everything needed to rebuild it.
func (e *Engine) ensureLedgerDir(name, dir string) error {
	if _, err := e.fs.Stat(dir); err == nil {
		return nil
	}
	if err := e.fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("storage: create ledger dir: %w", err)
	}
	if _, hashed := dirName(name); hashed {
		f, err := e.fs.OpenFile(dir+"/NAME", vfs.ReadWrite|vfs.Create|vfs.Trunc)
		if err != nil {
			return fmt.Errorf("storage: write NAME: %w", err)
		}
		_, err = f.WriteAt([]byte(name), 0)
		e.files.retireFile(dir+"/NAME", f) // written back before it is closed (fdretire.go)
		if err != nil {
			return fmt.Errorf("storage: write NAME: %w", err)
		}
		e.dirtyFiles[dir+"/NAME"] = struct{}{}
	}
	e.dirtyDirs[dir] = struct{}{}
	e.dirtyDirs[e.ledgersDir] = struct{}{}
	return nil
}

// ---- public API ----

// OpenLedger opens the ledger called name, creating it if absent. While it is open, every call
// returns the same *Ledger. name is opaque and may contain '/'. Opening starts a new ledger id.
func (e *Engine) OpenLedger(ctx context.Context, name string) (*Ledger, error) {
	if err := checkLedgerName(name); err != nil {
		return nil, err
	}
	if err := e.repairPendingFor(name); err != nil {
		return nil, err
	}
	e.mu.Lock()
	for {
		if e.closed {
			e.mu.Unlock()
			return nil, ErrClosed
		}
		l, ok := e.ledgers[name]
		if !ok {
			break
		}
		if l.flags.Load()&flagClosing != 0 {
			// Being closed: wait until its pending work is done, then load it afresh.
			e.mu.Unlock()
			select {
			case <-l.closedCh:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			e.mu.Lock()
			if e.ledgers[name] == l {
				delete(e.ledgers, name)
			}
			continue
		}
		e.mu.Unlock()
		<-l.ready
		if l.loadErr != nil {
			return nil, l.loadErr
		}
		return l, nil
	}
	e.slot++
	l := &Ledger{e: e, name: name, slot: e.slot, ready: make(chan struct{})}
	e.ledgers[name] = l
	e.mu.Unlock()

	err := l.load(ctx)
	if err == nil && !l.dirMade {
		// A new ledger: make its existence durable (one shared group commit), so a topic
		// created without data still exists after a restart.
		err = l.persistCreation(ctx)
	}
	if err != nil {
		l.loadErr = err
		e.mu.Lock()
		delete(e.ledgers, name)
		e.mu.Unlock()
	}
	close(l.ready)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// LedgerExists reports whether a ledger called name exists (open, or with a directory on disk).
func (e *Engine) LedgerExists(ctx context.Context, name string) (bool, error) {
	e.mu.Lock()
	_, ok := e.ledgers[name]
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return false, ErrClosed
	}
	if ok {
		return true, nil
	}
	dir := e.ledgerDir(name)
	if _, err := e.fs.Stat(dir); err != nil {
		if vfs.IsNotExist(err) {
			return false, nil
		}
		return false, fmt.Errorf("storage: stat ledger: %w", err)
	}
	return e.checkNameFile(name, dir) == nil, nil
}

func (e *Engine) readNameFile(dir string) (string, error) {
	f, err := e.fs.OpenFile(dir+"/NAME", vfs.ReadOnly)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sz, err := f.Size()
	if err != nil {
		return "", err
	}
	if sz > MaxLedgerNameBytes {
		return "", fmt.Errorf("%w: NAME file too large", ErrCorrupt)
	}
	b := make([]byte, sz)
	if _, err := f.ReadAt(b, 0); err != nil && int64(len(b)) != sz {
		return "", err
	}
	return string(b), nil
}

// ListLedgers lists the names of existing ledgers (open or on disk) starting with prefix, sorted.
func (e *Engine) ListLedgers(ctx context.Context, prefix string) ([]string, error) {
	set := map[string]struct{}{}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	for n := range e.ledgers {
		if strings.HasPrefix(n, prefix) {
			set[n] = struct{}{}
		}
	}
	e.mu.Unlock()
	des, err := e.fs.ReadDir(e.ledgersDir)
	if err != nil && !vfs.IsNotExist(err) {
		return nil, fmt.Errorf("storage: list ledgers: %w", err)
	}
	for _, de := range des {
		if !de.IsDir {
			continue
		}
		n, ok := nameFromDir(de.Name)
		if !ok && strings.HasPrefix(de.Name, "~") {
			n, err = e.readNameFile(e.ledgersDir + "/" + de.Name)
			ok = err == nil
		}
		if ok && strings.HasPrefix(n, prefix) {
			set[n] = struct{}{}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// DeleteLedger closes the ledger if open and removes its data and cursors. Deleting a ledger
// that does not exist is not an error.
func (e *Engine) DeleteLedger(ctx context.Context, name string) error {
	l, err := e.OpenLedger(ctx, name)
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	e.enqueue(l, func(b *batch) item {
		var start int
		b.buf, start = beginJournalRecord(b.buf, jDelLedger, l.slot)
		finishJournalRecord(b.buf, start)
		return item{kind: kDelLedger, done: func(_ Position, err error) { ch <- err }}
	})
	select {
	case err = <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// Close flushes cursors, syncs, checkpoints and closes every ledger and file.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		ls := make([]*Ledger, 0, len(e.ledgers))
		for _, l := range e.ledgers {
			ls = append(ls, l)
		}
		e.mu.Unlock()
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
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		close(e.bgStop)
		<-e.bgDone
		e.qmu.Lock()
		e.stopping = true
		e.qcond.Broadcast()
		e.qmu.Unlock()
		<-e.loopDone
		e.jan.close()
		close(e.ckptCh)
		<-e.ckptDone
		if err := e.finalCheckpoint(); err != nil {
			errs = append(errs, err)
		}
		if e.journal != nil {
			_ = e.journal.Close()
		}
		e.files.closeAll()
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}

// Metrics returns a snapshot of engine-wide counters.
func (e *Engine) Metrics() EngineMetrics {
	e.mu.Lock()
	open := len(e.ledgers)
	fenced := 0
	for _, l := range e.ledgers {
		if l.Err() != nil {
			fenced++
		}
	}
	e.mu.Unlock()
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
	}
	if v, ok := e.lastCkptErr.Load().(string); ok {
		m.LastCheckpointError = v
	}
	e.fillHealthMetrics(&m)
	return m
}

// ---- queue ----

// enqueue appends one item, built by fill under the queue lock (which fixes the order of
// journal records and of entry ids per ledger), announcing the ledger in this journal file first.
func (e *Engine) enqueue(l *Ledger, fill func(b *batch) item) {
	e.qmu.Lock()
	b := e.pending
	if e.stopping {
		e.qmu.Unlock()
		it := fill(&batch{seq: b.seq})
		if it.done != nil {
			// Never call back on the caller's goroutine (it may hold locks done needs).
			go it.done(Position{}, ErrClosed)
		}
		return
	}
	if l != nil && l.announced != b.seq {
		b.buf = appendAnnounce(b.buf, l.slot, l.name)
		l.announced = b.seq
	}
	before := len(b.buf)
	wasEmpty := len(b.items) == 0
	it := fill(b)
	it.l = l
	b.items = append(b.items, it)
	e.jsize += int64(len(b.buf) - before)
	if wasEmpty {
		b.opened = time.Now()
		e.qcond.Signal()
	}
	e.qmu.Unlock()
}

// ---- sync loop ----

func (e *Engine) syncLoop() {
	defer close(e.applyCh)
	e.lastSync = time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		e.qmu.Lock()
		if e.spare == nil {
			e.spare = e.takeFreeBatch() // back-pressure: the applier is at most two batches behind
		}
		for !e.stopping && len(e.unsynced) == 0 && len(e.syncDone) == 0 && len(e.commitDone) == 0 &&
			(len(e.pending.items) == 0 || len(e.inflight) >= e.opts.SyncPipelineDepth) {
			e.qcond.Wait()
		}
		if len(e.commitDone) > 0 {
			e.qmu.Unlock()
			e.finishCommits()
			continue
		}
		if len(e.syncDone) > 0 {
			done := e.syncDone
			e.syncDone = nil
			e.qmu.Unlock()
			e.finishBackgroundSyncs(done)
			continue
		}
		if len(e.pending.items) == 0 && e.stopping {
			e.qmu.Unlock()
			e.stopCommitSyncers()
			e.stopBackgroundSyncer()
			if len(e.unsynced) > 0 {
				if err := e.syncJournal(); err != nil {
					e.abandonJournal(e.journalSeq, err)
				}
			}
			e.discardPreparedJournal()
			return
		}
		if len(e.pending.items) == 0 {
			// SyncInterval with unsynced data: wait for the interval or new work (or, with an
			// fsync already running, for its result).
			if e.syncsInFlight > 0 {
				e.qcond.Wait()
				e.qmu.Unlock()
				continue
			}
			wait := e.opts.SyncInterval - time.Since(e.lastSync)
			if wait > 0 {
				if timer == nil {
					timer = time.AfterFunc(wait, func() { e.qmu.Lock(); e.qcond.Broadcast(); e.qmu.Unlock() })
				} else {
					timer.Reset(wait)
				}
				e.qcond.Wait()
				e.qmu.Unlock()
				continue
			}
			e.qmu.Unlock()
			e.startBackgroundSync(false)
			continue
		}
		// Let the batch the applier is finishing rejoin: its appenders' next appends would
		// otherwise always miss this group commit and the two halves of a closed-loop load
		// alternate with half-size fsyncs. The wait is bounded by the apply of one batch plus a
		// few scheduler yields; with an open-loop load the applier is idle and nothing waits.
		// With an fsync in flight the pending batch is cut at once instead (pipelinesync.go):
		// its fsync then overlaps the one in flight, which is the point of pipelining.
		for e.applying && !e.stopping && len(e.inflight) == 0 {
			e.qcond.Wait()
		}
		for i := 0; i < 4 && !e.stopping; i++ {
			n := len(e.pending.items)
			e.qmu.Unlock()
			runtime.Gosched()
			e.qmu.Lock()
			if len(e.pending.items) == n {
				break
			}
		}
		e.noteSuccessorReady()
		if e.needsDrain() || (e.wantDirect && (len(e.inflight) > 0 || e.appliedJobs != e.handedJobs)) {
			// The pending batch is committed inline (it rotates or opens the journal file, or
			// has no journal bytes to order it): the batches in flight go first. Or a ledger
			// was armed for direct writes: its next entries may go straight to its segment once
			// everything before is durable and written there (directwrite.go).
			e.qmu.Unlock()
			e.drainCommits()
			if e.wantDirect {
				e.waitApplied()
				e.wantDirect = false
			}
			continue
		}
		b := e.pending
		e.pending, e.spare = e.spare, nil // emptied by the applier when it freed it
		e.pending.seq = b.seq
		e.pending.moved = false
		e.prepareFullSuccessor()
		b.rotate = e.rotateDue()
		if b.rotate {
			e.pending.seq = b.seq + 1
			e.jsize = headerSize
		}
		e.jseq = e.pending.seq
		e.qmu.Unlock()

		e.commit(b)
	}
}

// applier applies durable batches (segment writes, visibility, callbacks) while the sync loop
// already writes and fsyncs the next one: a group commit round costs max(fsync, apply), not
// their sum. Batches are applied strictly in order, so callbacks stay in append order.
func (e *Engine) applier() {
	defer close(e.loopDone)
	for job := range e.applyCh {
		if job.b != nil {
			e.qmu.Lock()
			e.applying = true
			e.qmu.Unlock()
			if job.err != nil {
				e.failBatch(job.b, job.err)
			} else {
				e.apply(job.b)
			}
		}
		if job.rotate {
			e.handOffCheckpoint(job.seq)
		}
		if job.b != nil {
			for i := range job.b.items {
				job.b.items[i] = item{}
			}
			clear(job.b.direct)
			job.b.direct = job.b.direct[:0]
		}
		e.qmu.Lock()
		e.applying = false
		e.appliedJobs++
		if job.b != nil {
			e.demand.note(job.b)
			job.b.buf = job.b.buf[:0]
			job.b.items = job.b.items[:0]
			e.demand.trim(job.b)
			e.freeBatches = append(e.freeBatches, job.b)
		}
		e.qcond.Broadcast()
		e.qmu.Unlock()
	}
}

// takeFreeBatch takes the batch freed last, waiting for one (sync loop only, e.qmu held).
//
// Why a stack: a batch's buffers keep the capacity of the largest group commit they held (a
// catch-up's are 10-60 MB). Taken in turn, as from a queue, every batch grows to that size and
// is cold when its turn comes again; taken last-freed first, the batches the pipeline does not
// need at once stay at the bottom, small or idle, and the one reused is the one just written
// (its memory recently touched). Idle ones give their buffers back (releaseIdleBatches).
func (e *Engine) takeFreeBatch() *batch {
	for len(e.freeBatches) == 0 {
		e.qcond.Wait()
	}
	b := e.freeBatches[len(e.freeBatches)-1]
	e.freeBatches[len(e.freeBatches)-1] = nil
	e.freeBatches = e.freeBatches[:len(e.freeBatches)-1]
	return b
}

// batchKeep is the capacity a batch's buffers keep however small the recent group commits were.
const batchKeep = 1 << 20

// batchDemand is the largest journal buffer and item count of the batches freed in the current
// and the previous demand window (releaseIdleBatches starts a window every batchDemandWindow).
type batchDemand struct {
	buf, items         int // current window
	prevBuf, prevItems int // previous window
	since              time.Time
}

// batchDemandWindow is how long a demand window lasts: a batch's buffers are dropped after one to
// two windows without a batch that needed them. (Not CursorFlushInterval itself, which may be set
// much shorter: buffers would then be dropped and regrown between the bursts of a steady load.)
const batchDemandWindow = time.Second

func (d *batchDemand) note(b *batch) {
	d.buf = max(d.buf, len(b.buf), len(b.jbuf), len(b.dbuf))
	d.items = max(d.items, len(b.items))
}

// trim drops b's buffers where their capacity exceeds four times the recent demand (and
// batchKeep): after a burst the engine's batches would otherwise each keep the largest group
// commit they ever carried (a catch-up's are 40-100 MB: hundreds of MB across the pool) for as
// long as the process runs, raising the heap's size and the garbage collector's goal. A dropped
// buffer's memory is reused by the heap's next allocations instead of fresh memory.
func (d *batchDemand) trim(b *batch) {
	limit := max(batchKeep, 4*max(d.buf, d.prevBuf))
	if cap(b.buf) > limit && len(b.buf) == 0 {
		b.buf = nil
	}
	if cap(b.jbuf) > limit {
		b.jbuf = nil
	}
	if cap(b.dbuf) > limit {
		b.dbuf = nil
	}
	if n := max(d.items, d.prevItems); cap(b.items) > max(batchKeep/int(unsafe.Sizeof(item{})), 4*n) && len(b.items) == 0 {
		b.items = nil
	}
}

// releaseIdleBatches starts a new demand window when the current one is batchDemandWindow old and
// trims the free batches, the spare and an empty pending batch to it (background goroutine): an
// engine whose load fell gives back what it no longer needs.
func (e *Engine) releaseIdleBatches(now time.Time) {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	d := &e.demand
	if now.Sub(d.since) < batchDemandWindow*9/10 { // (a tick a little early does not skip a window)
		return
	}
	d.prevBuf, d.prevItems = d.buf, d.items
	d.buf, d.items, d.since = 0, 0, now
	for _, b := range e.freeBatches {
		d.trim(b)
	}
	if e.spare != nil {
		d.trim(e.spare)
	}
	if len(e.pending.items) == 0 {
		d.trim(e.pending)
	}
}

// toApplier hands a job to the applier, counting it (sync loop only).
func (e *Engine) toApplier(job applyJob) {
	if job.b != nil && job.err == nil && len(job.b.items) > 0 {
		e.m.commitLatency.Observe(time.Since(job.b.opened))
	}
	e.handedJobs++
	e.applyCh <- job
}

// waitApplied waits until the applier has finished every job handed to it (sync loop only).
func (e *Engine) waitApplied() {
	e.qmu.Lock()
	for e.appliedJobs != e.handedJobs {
		e.qcond.Wait()
	}
	e.qmu.Unlock()
}

// applyJob is one batch (or a bare journal rotation) handed from the sync loop to the applier.
type applyJob struct {
	b      *batch
	err    error
	rotate bool // after this, journal file seq is closed: hand its files to the checkpointer
	seq    uint64
}

// commit writes one batch to the journal and makes it durable (SyncAlways), then hands it to
// the applier.
func (e *Engine) commit(b *batch) {
	e.planDirect(b, e.opts.Sync == SyncAlways && !b.moved && len(e.pendingVoids) == 0 &&
		e.journal != nil && e.journalSeq == b.seq)
	if e.pipelined(b) {
		e.commitAsync(b)
		return
	}
	var err error
	closing := b.rotate && e.journal != nil && e.journalSeq == b.seq
	if len(b.buf) > 0 || len(e.pendingVoids) > 0 || closing {
		if e.journal == nil || e.journalSeq != b.seq {
			err = e.openJournal(b.seq)
		}
		if err == nil {
			buf := journalBuf(b)
			if b.moved || len(e.pendingVoids) > 0 {
				// Void records of a failed batch go first, so they are durable no later than
				// any later record of those ledgers; a batch encoded for an abandoned journal
				// file announces its ledgers again.
				buf = append(append([]byte(nil), e.pendingVoids...), e.announcements(b)...)
			}
			if b.rotate {
				// A rotated file ends with an end record: what follows in a recycled file is stale.
				buf = appendEndRecord(buf)
			}
			sealJournalRecords(buf, journalSeed(e.journalSeq))
			_, err = e.journal.WriteAt(buf, e.journalOff)
			if err != nil {
				err = fmt.Errorf("storage: journal write: %w", err)
			} else {
				e.journalOff += int64(len(buf))
				e.m.bytesWritten.Add(int64(len(buf)))
			}
		}
		if err == nil && e.opts.Sync == SyncAlways {
			err = e.syncJournal()
		}
		if err == nil {
			err = syncDirect(b)
		}
	}
	if err != nil {
		e.undoDirect(b)
		e.abandonJournal(b.seq, err)
		e.voidBatch(b)
		e.toApplier(applyJob{b: b, err: err})
		return
	}
	e.releaseDirect(b)
	if len(b.buf) > 0 || len(e.pendingVoids) > 0 {
		e.io.noteJournalOK()
	}
	e.pendingVoids = e.pendingVoids[:0]
	if e.opts.Sync == SyncInterval {
		for _, it := range b.items {
			if it.kind == kEntry {
				if e.unsynced == nil {
					e.unsynced = map[*Ledger]struct{}{}
				}
				e.unsynced[it.l] = struct{}{}
			}
		}
	}
	e.toApplier(applyJob{b: b, rotate: b.rotate && e.journal != nil, seq: b.seq})
	switch {
	case b.rotate && e.journal != nil && e.opts.Sync == SyncInterval:
		// The background syncer fsyncs and closes the file; the next batches go to a new
		// one meanwhile (whose header says this one may end torn until that fsync is done).
		e.startBackgroundSync(true)
	case b.rotate && e.journal != nil:
		e.closeJournal()
		e.carryDirect(b.seq)
	case e.opts.Sync == SyncInterval && len(e.unsynced) > 0 && e.syncsInFlight == 0 &&
		time.Since(e.lastSync) >= e.opts.SyncInterval:
		e.startBackgroundSync(false)
	}
}

// voidBatch prepares void records for the entries of a batch that failed: all its ledgers are
// fenced by the applier, and none of these entries (nor any later one of those ledgers that is
// already queued) was acknowledged. They are written at the start of the next group commit.
func (e *Engine) voidBatch(b *batch) {
	type key struct {
		l  *Ledger
		id int64
	}
	first := map[key]int64{}
	var order []key
	for _, it := range b.items {
		if it.kind != kEntry || it.l == nil {
			continue
		}
		k := key{it.l, it.ledgerID}
		if v, ok := first[k]; !ok || it.entryID < v {
			if !ok {
				order = append(order, k)
			}
			first[k] = it.entryID
		}
	}
	for _, k := range order {
		e.pendingVoids = appendAnnounce(e.pendingVoids, k.l.slot, k.l.name)
		var start int
		e.pendingVoids, start = beginJournalRecord(e.pendingVoids, jVoid, k.l.slot)
		e.pendingVoids = binary.LittleEndian.AppendUint64(e.pendingVoids, uint64(k.id))
		e.pendingVoids = binary.LittleEndian.AppendUint64(e.pendingVoids, uint64(first[k]))
		finishJournalRecord(e.pendingVoids, start)
	}
}

func (e *Engine) announcements(b *batch) []byte {
	if !b.moved {
		return b.buf
	}
	var out []byte
	seen := map[*Ledger]bool{}
	for _, it := range b.items {
		if it.l != nil && !seen[it.l] {
			seen[it.l] = true
			out = appendAnnounce(out, it.l.slot, it.l.name)
		}
	}
	return append(out, b.buf...)
}

// syncJournal fsyncs the journal (sync loop only).
func (e *Engine) syncJournal() error {
	if e.journal == nil {
		return nil
	}
	start := time.Now()
	err := vfs.DataSync(e.journal)
	d := time.Since(start)
	e.lastSync = time.Now()
	e.recordSync(d)
	if err != nil {
		e.m.fsyncErrors.Add(1)
		return fmt.Errorf("storage: journal fsync: %w", err)
	}
	clear(e.unsynced)
	return nil
}

// abandonJournal gives up journal file seq after a failed write or fsync: nothing written since
// its last good fsync may be on disk, so it is never written again. Ledgers with acknowledged
// unsynced appends (SyncInterval) are fenced; later batches go to a new file whose header says
// that this one may end torn (sync loop only).
func (e *Engine) abandonJournal(seq uint64, err error) {
	if e.io.journalFailing() {
		e.log.Debug("journal write or fsync failed again; continuing in a new journal file", "seq", seq, "err", err)
	} else {
		e.log.Error("journal write or fsync failed; continuing in a new journal file", "seq", seq, "err", err)
	}
	e.io.noteJournalFailed(err)
	e.qmu.Lock()
	if e.pending.seq <= seq {
		e.pending.seq = seq + 1
		e.pending.moved = len(e.pending.items) > 0
		e.jsize = headerSize + int64(len(e.pending.buf))
	}
	e.jseq = e.pending.seq
	e.qmu.Unlock()
	e.prevUnclean = true
	for l := range e.unsynced {
		l.fence(err)
	}
	clear(e.unsynced)
	if e.journal != nil && e.journalSeq == seq {
		e.closeJournal()
		e.toApplier(applyJob{rotate: true, seq: seq})
	}
}

func (e *Engine) closeJournal() {
	if e.journal != nil {
		e.closeCommitDescriptors()
		_ = e.journal.Close()
		e.journal = nil
	}
}

func (e *Engine) openJournal(seq uint64) error {
	e.closeJournal()
	f := e.takePreparedJournal(seq) // made ahead of time (nextjournal.go)
	if f == nil {
		var flags uint32
		if e.prevUnclean || e.closeSyncsInFlight > 0 {
			// The previous file was abandoned, or its final fsync (SyncInterval) has not
			// finished: its tail may be torn although it is not the last file.
			flags = journalFlagPrevUnclean
		}
		var err error
		if f, _, err = e.makeJournalFile(seq, flags, false, nil); err != nil {
			return err
		}
	}
	e.journal, e.journalSeq, e.journalOff = f, seq, headerSize
	e.openCommitDescriptors(seq) // before the first write to the file (pipelinesync.go)
	e.io.noteJournalOpened(seq)
	e.prevUnclean = false
	e.jfull = e.fullSize(f)
	e.successorReady = false
	if e.jfull {
		e.prepareJournal(seq + 1)
	} // else once it holds prefillAfter bytes (prepareFullSuccessor)
	return nil
}

// apply writes a durable batch's effects to the ledgers' files and memory, then completes it.
//
// Entries are acknowledged before their segment write: they are durable in the journal, and the
// write (page cache, or the device with direct I/O) would otherwise sit between the fsync and
// every receipt. Readers do not see the gap: the entry cache holds every applied entry, and a
// reader that must read the file waits for the write (segment.written, Ledger.waitWritten). The
// write still comes before anything else of the batch is applied (a seal, a trim, a cursor
// record, a barrier) and before the applier takes the next job, so the checkpoint, which follows
// a rotation job, finds every segment written. A failed segment write after the acknowledgement
// fences the ledger and stops all checkpoints (writeSegments): the journal keeps the entries until
// a restart replays them.
func (e *Engine) apply(b *batch) {
	e.layoutEntries(b)
	var slab []byte
	for i := range b.items {
		it := &b.items[i]
		l := it.l
		if it.kind != kEntry && it.kind != kFail && len(b.writes) > 0 {
			e.writeSegments(b)
		}
		switch it.kind {
		case kFail:
			it.done(Position{}, it.err)
		case kBarrier:
			if it.done != nil {
				it.done(Position{}, nil)
			}
		case kEntry:
			p, err := l.applyEntry(it, b.cacheArena, &slab)
			if err == nil && e.opts.Sync == SyncInterval {
				e.m.unsyncedAcks.Add(1)
			}
			e.m.entriesWritten.Add(1)
			it.done(p, err)
		case kCursor, kDelCursor:
			err := l.applyCursorRecord(b.buf[it.off : it.off+it.n])
			if it.cursor != nil {
				if err != nil {
					it.cursor.flushFailed()
				} else {
					it.cursor.flushed(it.version)
				}
			}
			e.m.cursorFlushes.Add(1)
			if it.done != nil {
				it.done(Position{}, err)
			}
		case kTrim:
			l.applyTrim(it.ledgerID)
			if it.done != nil {
				it.done(Position{}, nil)
			}
		case kSeal:
			l.applySeal(it.ledgerID)
			if it.done != nil {
				it.done(Position{}, nil)
			}
		case kCreate:
			var err error
			if !l.dirMade {
				if err = e.ensureLedgerDir(l.name, l.dirPath()); err == nil {
					l.dirMade = true
				}
			}
			if it.done != nil {
				it.done(Position{}, err)
			}
		case kDelLedger:
			err := l.applyDelete()
			if it.done != nil {
				it.done(Position{}, err)
			}
		case kRepair:
			e.runRepairs()
			it.done(Position{}, nil)
		}
	}
	if len(b.writes) > 0 {
		e.writeSegments(b)
	}
	e.cutUnconfirmedWrites()
}

// ---- background: cursor flushes, trimming ----

func (e *Engine) background() {
	defer close(e.bgDone)
	flush := time.NewTicker(e.opts.CursorFlushInterval)
	defer flush.Stop()
	trim := time.NewTicker(e.opts.TrimInterval)
	defer trim.Stop()
	for {
		select {
		case <-e.bgStop:
			return
		case <-flush.C:
			for _, l := range e.openLedgers() {
				l.flushCursors(nil, nil)
			}
			e.releaseIdleBatches(time.Now())
		case <-trim.C:
			for _, l := range e.openLedgers() {
				if err := l.Trim(context.Background()); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFenced) {
					e.log.Warn("periodic trim failed", "ledger", l.name, "err", err)
				}
			}
		}
	}
}

func (e *Engine) openLedgers() []*Ledger {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*Ledger, 0, len(e.ledgers))
	for _, l := range e.ledgers {
		select {
		case <-l.ready:
			if l.loadErr == nil {
				out = append(out, l)
			}
		default:
		}
	}
	return out
}

func (e *Engine) forget(l *Ledger) {
	e.mu.Lock()
	if e.ledgers[l.name] == l {
		delete(e.ledgers, l.name)
	}
	e.mu.Unlock()
	e.rememberClosed(l) // its files may still wait for a checkpoint (repair.go)
}
