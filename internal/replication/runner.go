package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Cursor properties the replicator keeps on its cursor, so stats can say where it started even after
// restarts.
const (
	PropStartMode     = "replication.startMode"
	PropStartPosition = "replication.startPosition"
	PropCreatedAt     = "replication.createdAt"
)

// RunnerConfig configures one replicator runner.
type RunnerConfig struct {
	Machine   MachineConfig // Local and Remote are required
	Topic     LocalTopic
	Producers RemoteProducerFactory
	// StartAt is where the cursor is created if it does not exist yet.
	StartAt StartAt
	Logger  *slog.Logger
	// Now is the clock (nil = time.Now).
	Now func() time.Time
	// TickInterval drives rates and the receipt timeout; default 1 s.
	TickInterval time.Duration
	// Schemas registers schemas on the remote before the entries that use them; nil = entries keep
	// their schema_version (when Producers implements SchemaTranslator, StartRunner uses it).
	Schemas SchemaTranslator
	// Budget is the broker-wide bound on entries held by replicators (nil = none): reads of a
	// catch-up wait for room in it (budget.go).
	Budget *MemoryBudget
	// StallTimeout: with a backlog and no progress for this long the replicator is reported
	// stalled (stall.go); 0 = DefaultStallTimeout.
	StallTimeout time.Duration
}

// Runner drives a Machine against a local topic and a remote producer: it owns one event-loop
// goroutine plus at most one connect, one read and one close goroutine at a time, all stopped by Stop.
type Runner struct {
	cfg    RunnerConfig
	log    *slog.Logger
	now    func() time.Time
	cursor Cursor
	start  struct {
		mode StartAt
		pos  mtypes.Position
	}

	mu      sync.Mutex // guards m, current and pastReconnects (the loop and Stats both use them)
	m       *Machine
	current RemoteProducer // the connected producer, for its connection state in Stats
	// pastReconnects sums the client-level reconnections of producers already closed.
	pastReconnects int64
	window         rateWindow
	stall          stallState
	inbox          mailbox
	cancel         context.CancelFunc
	done           chan struct{}
	workers        sync.WaitGroup

	// Loop-owned state.
	producers map[int64]RemoteProducer
	// waitCh is the topic's new-entry notification the loop waits on (nil: none), for entries at or
	// after waitFrom. It outlives the machine's wait it was asked for (a rewind drops that wait), and
	// is reused for the next one: the topic keeps a waiter until its next entry, so asking anew after
	// every rewind of an idle replicator would pile them up.
	waitCh   <-chan struct{}
	waitFrom mtypes.Position
	tailing  bool // the next read follows a new-entry notification (read inline)
	timerSeq map[TimerKind]int64
	timers   map[TimerKind]*time.Timer
	lastErr  string
	receipts []mtypes.Position // receipts being batched into one EvReceipts
	sendBuf  []Outbound        // sends being batched into one SendBatch
	sendGen  int64
	sendTo   batchSender
	held     int64 // bytes of cfg.Budget this replicator holds (what its machine keeps; see trueUp)
	// memoryLimited is set while a catch-up read waits for room in cfg.Budget (Stats).
	memoryLimited atomic.Bool
}

// readResult is a read's outcome with the budget it reserved (released by trueUp once the
// machine took what it keeps).
type readResult struct {
	ev       EvReadDone
	reserved int64
}

// StartRunner opens (creating if needed) the replication cursor synchronously, so that once it
// returns nothing written to the topic can be missed, and starts the replicator's goroutine.
func StartRunner(ctx context.Context, cfg RunnerConfig) (*Runner, error) {
	if cfg.Machine.Local == "" || cfg.Machine.Remote == "" || cfg.Topic == nil || cfg.Producers == nil {
		return nil, errors.New("replication: runner needs local and remote cluster, topic and producer factory")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = time.Second
	}
	if cfg.Schemas == nil {
		cfg.Schemas, _ = cfg.Producers.(SchemaTranslator)
	}
	r := &Runner{
		cfg: cfg, now: cfg.Now,
		log:       cfg.Logger.With("topic", cfg.Topic.Name(), "remote_cluster", cfg.Machine.Remote),
		m:         NewMachine(cfg.Machine),
		producers: map[int64]RemoteProducer{},
		timerSeq:  map[TimerKind]int64{},
		timers:    map[TimerKind]*time.Timer{},
		done:      make(chan struct{}),
	}
	r.stall.d.Timeout = cfg.StallTimeout
	r.inbox.init()
	cur, err := openReplicationCursor(ctx, cfg.Topic, cfg.Machine.Remote, cfg.StartAt, cfg.Now())
	if err != nil {
		return nil, err
	}
	r.cursor = cur
	props := cur.Properties()
	r.start.mode = StartAt(props[PropStartMode])
	if p, err := mtypes.ParseMarkDelete(props[PropStartPosition]); err == nil {
		r.start.pos = p
	} else if r.start.mode != "" {
		r.log.Warn("replication cursor has an unreadable start position", "value", props[PropStartPosition], "err", err)
	}
	// The rate window starts with a zero sample, so what is replicated before the first tick shows
	// as a rate at that tick (instead of becoming the baseline of every later sample).
	r.window.add(cfg.Now(), 0, 0)
	loopCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	md := cur.MarkDeletePosition()
	r.log.Info("replicator starting", "cursor", CursorName(cfg.Machine.Remote), "markDelete", md.String(),
		"startMode", string(r.start.mode))
	go r.loop(loopCtx, md)
	return r, nil
}

// openReplicationCursor opens the cursor of remote, creating it at startAt and recording where.
func openReplicationCursor(ctx context.Context, t LocalTopic, remote string, startAt StartAt, now time.Time) (Cursor, error) {
	if startAt == "" {
		startAt = StartLatest
	}
	cur, created, err := t.OpenCursor(ctx, CursorName(remote), startAt.Position())
	if err != nil {
		return nil, fmt.Errorf("replication: open cursor %s on %s: %w", CursorName(remote), t.Name(), err)
	}
	props := cur.Properties()
	if created || props[PropStartMode] == "" {
		if props == nil {
			props = map[string]string{}
		}
		mode := startAt
		if !created {
			// A cursor the broker created with a new topic, before its first entry: everything the
			// topic ever held is replicated.
			mode = StartEarliest
		}
		props[PropStartMode] = string(mode)
		props[PropStartPosition] = cur.MarkDeletePosition().String()
		props[PropCreatedAt] = now.UTC().Format(time.RFC3339Nano)
		if err := cur.SetProperties(ctx, props); err != nil {
			return nil, fmt.Errorf("replication: record start of cursor %s on %s: %w", CursorName(remote), t.Name(), err)
		}
	}
	return cur, nil
}

// SetRate changes the replicatorDispatchRate.
func (r *Runner) SetRate(rate Rate) { r.inbox.post(EvSetRate{Now: r.now(), Rate: rate}) }

// Remote returns the remote cluster's name.
func (r *Runner) Remote() string { return r.cfg.Machine.Remote }

// Stop stops the replicator and waits for its goroutines (closing the producer). The cursor stays.
func (r *Runner) Stop(ctx context.Context) error {
	r.cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("replication: stop replicator %s -> %s: %w", r.cfg.Topic.Name(), r.cfg.Machine.Remote, ctx.Err())
	}
	wait := make(chan struct{})
	go func() { r.workers.Wait(); close(wait) }()
	select {
	case <-wait:
	case <-ctx.Done():
		return fmt.Errorf("replication: stop replicator %s -> %s: %w", r.cfg.Topic.Name(), r.cfg.Machine.Remote, ctx.Err())
	}
	// A producer whose creation finished after the loop stopped is still registered on the remote;
	// close it, or the next replicator of this topic would be refused as a busy producer name.
	for _, it := range r.inbox.drain() {
		if cr, ok := it.v.(connectResult); ok && cr.p != nil {
			if err := cr.p.Close(ctx); err != nil {
				r.log.Debug("close replicator producer", "err", err)
			}
		}
		if rr, ok := it.v.(readResult); ok {
			r.cfg.Budget.Add(-rr.reserved)
		}
	}
	// The loop and every worker are gone: what the replicator held goes back to the budget.
	r.cfg.Budget.Add(-r.held)
	r.held = 0
	return nil
}

// Stats returns a snapshot of the replicator (outbound side only; Manager merges the inbound side).
func (r *Runner) Stats() Stats {
	r.mu.Lock()
	c := r.m.Counters()
	rate := r.m.cfg.Rate
	current := r.current
	reconnects := c.Reconnects + r.pastReconnects
	r.mu.Unlock()
	if cr, ok := current.(clientReconnects); ok {
		reconnects += cr.Reconnects()
	}
	now := r.now()
	s := Stats{
		Topic: r.cfg.Topic.Name(), LocalCluster: r.cfg.Machine.Local, RemoteCluster: r.cfg.Machine.Remote,
		Connected:              c.Phase == PhaseConnected,
		OutboundConnectedSince: c.ConnectedSince,
		MsgOutCount:            c.MsgOut, BytesOutCount: c.BytesOut,
		ReplicationBacklog: r.cursor.Backlog(),
		StartMode:          r.start.mode, StartPosition: r.start.pos,
		MarkDeletePosition: c.MarkDelete,
		LastProgress:       c.LastProgress,
		LastError:          c.LastError, LastErrorTime: c.LastErrorTime,
		Phase: c.Phase.String(), Reconnects: reconnects, Skipped: c.Skipped,
		RateLimited: c.RateLimited, Rate: rate, MemoryLimited: r.memoryLimited.Load(),
	}
	// The client reconnects by itself; while it does, the replicator is not connected, and the
	// reason is shown at once rather than after the receipt timeout.
	if cc, ok := current.(interface {
		Connected() bool
		LastError() error
	}); ok && s.Connected && !cc.Connected() {
		s.Connected = false
		s.OutboundConnectedSince = time.Time{}
		if s.LastError == "" {
			s.LastError = fmt.Sprintf("connection to %s lost; reconnecting", r.cfg.Machine.Remote)
			if err := cc.LastError(); err != nil {
				s.LastError += ": " + err.Error()
			}
			s.LastErrorTime = now
			if d, ok := current.(interface{ DisconnectedSince() time.Time }); ok && !d.DisconnectedSince().IsZero() {
				s.LastErrorTime = d.DisconnectedSince()
			}
		}
	}
	if s.Connected && s.LastError != "" && s.ReplicationBacklog == 0 && !s.OutboundConnectedSince.IsZero() &&
		s.LastErrorTime.Before(s.OutboundConnectedSince) {
		// The error came before the current connection, and the remote has everything stored
		// here: it is over. The next receipt would clear it, but an idle topic sends none, and an
		// alert on lastError (meridian_replication_error) would never clear after an outage.
		s.LastError, s.LastErrorTime = "", time.Time{}
	}
	if s.Connected {
		s.OutboundConnection = ProducerName(r.cfg.Machine.Local, r.cfg.Machine.Remote)
	}
	s.MsgRateOut, s.MsgThroughputOut = r.window.rates()
	oldest := c.OldestPendingPublishTime
	if oldest == 0 && s.ReplicationBacklog > 0 {
		// Nothing read yet (e.g. disconnected): the oldest unreplicated entry is the one after the
		// mark-delete position.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if es, err := r.cfg.Topic.Read(ctx, c.MarkDelete.Next(), 1, 1); err == nil && len(es) > 0 {
			oldest = es[0].PublishTime
		}
		cancel()
	}
	if oldest > 0 && s.ReplicationBacklog > 0 {
		s.ReplicationDelayInSeconds = max(0, int64(now.Sub(time.UnixMilli(oldest)).Seconds()))
	}
	if bs, ok := r.cursor.(backlogSizer); ok && s.ReplicationBacklog > 0 {
		s.ReplicationBacklogBytes = bs.BacklogBytes()
	}
	if stalled, since := r.stall.get(); stalled && s.ReplicationBacklog > 0 {
		s.Stalled, s.StalledSince, s.StalledReason = true, since, stallReason(s)
	}
	return s
}

func (r *Runner) loop(ctx context.Context, markDelete mtypes.Position) {
	defer close(r.done)
	ticker := time.NewTicker(r.cfg.TickInterval)
	defer ticker.Stop()
	r.handle(ctx, EvStart{Now: r.now(), MarkDelete: markDelete})
	for {
		select {
		case <-ctx.Done():
			for _, t := range r.timers {
				t.Stop()
			}
			r.handle(ctx, EvStop{Now: r.now()})
			return
		case <-r.inbox.notify:
			r.handleDrained(ctx, r.inbox.drain())
		case <-r.waitCh:
			r.waitCh = nil
			r.tailing = true
			r.handle(ctx, EvDataAvailable{Now: r.now()})
			r.tailing = false
		case <-ticker.C:
			now := r.now()
			r.mu.Lock()
			c := r.m.Counters()
			r.mu.Unlock()
			r.window.add(now, c.MsgOut, c.BytesOut)
			r.stall.observe(now, r.cursor.Backlog(), progressOf(c))
			r.handle(ctx, EvTick{Now: now})
		}
	}
}

// Internal inbox messages that carry more than a machine event.
type (
	connectResult struct {
		gen int64
		p   RemoteProducer
		err error
	}
	sendResult struct {
		gen    int64
		source mtypes.Position
		err    error
	}
	timerFired struct {
		kind TimerKind
		seq  int64
	}
)

// handleDrained handles what the mailbox held; consecutive receipts of one producer go to the
// machine as one EvReceipts (one pass over the window for the lot).
func (r *Runner) handleDrained(ctx context.Context, items []inboxItem) {
	var gen int64
	flush := func() {
		if len(r.receipts) > 0 {
			r.handle(ctx, EvReceipts{Now: r.now(), Gen: gen, Sources: r.receipts})
			r.receipts = r.receipts[:0]
		}
	}
	for i := range items {
		it := &items[i]
		if it.result && it.res.err == nil {
			if len(r.receipts) > 0 && it.res.gen != gen {
				flush()
			}
			gen = it.res.gen
			r.receipts = append(r.receipts, it.res.source)
			continue
		}
		flush()
		if it.result {
			r.handleInbox(ctx, it.res)
		} else {
			r.handleInbox(ctx, it.v)
		}
	}
	flush()
	r.inbox.recycle(items)
}

func (r *Runner) handleInbox(ctx context.Context, msg any) {
	now := r.now()
	switch v := msg.(type) {
	case connectResult:
		if v.err != nil {
			r.handle(ctx, EvConnectFailed{Now: now, Gen: v.gen, Err: v.err})
			return
		}
		r.mu.Lock()
		current := r.m.gen == v.gen && r.m.phase == PhaseConnecting
		r.mu.Unlock()
		if !current || ctx.Err() != nil {
			r.closeProducer(v.p)
			return
		}
		r.producers[v.gen] = v.p
		r.mu.Lock()
		r.current = v.p
		r.mu.Unlock()
		r.log.Info("replicator connected", "producer", ProducerName(r.cfg.Machine.Local, r.cfg.Machine.Remote))
		r.handle(ctx, EvConnected{Now: now, Gen: v.gen})
	case sendResult:
		if v.err != nil {
			r.handle(ctx, EvSendFailed{Now: now, Gen: v.gen, Err: v.err})
		} else {
			r.handle(ctx, EvReceipt{Now: now, Gen: v.gen, Source: v.source})
		}
	case timerFired:
		if r.timerSeq[v.kind] == v.seq {
			delete(r.timers, v.kind)
			r.handle(ctx, EvTimer{Now: now, Kind: v.kind})
		}
	case readResult:
		r.held += v.reserved
		r.handle(ctx, v.ev)
	case Event:
		r.handle(ctx, v)
	}
}

// trueUp makes the budget this replicator holds what its machine keeps: entries in flight and
// read ahead (loop only). It releases a read's reservation down to what the read brought, the
// entries the remote acknowledged, everything after a rewind; and it adds what tailing reads
// brought without waiting.
func (r *Runner) trueUp(keeps int64) {
	if d := keeps - r.held; d != 0 {
		r.cfg.Budget.Add(d)
		r.held = keeps
	}
}

// handle feeds one event to the machine and executes the resulting actions.
func (r *Runner) handle(ctx context.Context, ev Event) {
	r.mu.Lock()
	acts := r.m.Handle(ev)
	lastErr := r.m.c.LastError
	keeps := r.m.HeldBytes()
	r.mu.Unlock()
	r.trueUp(keeps)
	if lastErr != r.lastErr {
		if lastErr != "" {
			r.log.Warn("replicator error; retrying", "err", lastErr)
		} else {
			r.log.Info("replicator healthy again")
		}
		r.lastErr = lastErr
	}
	for _, a := range acts {
		if snd, ok := a.(ActSends); ok {
			if p, ok := r.producers[snd.Gen].(batchSender); ok {
				if len(r.sendBuf) > 0 && snd.Gen != r.sendGen {
					r.flushSends()
				}
				r.sendGen, r.sendTo = snd.Gen, p
				r.sendBuf = append(r.sendBuf, snd.Outs...)
				continue
			}
			r.flushSends()
			for _, out := range snd.Outs {
				r.execute(ctx, ActSend{Gen: snd.Gen, Out: out})
			}
			continue
		}
		if snd, ok := a.(ActSend); ok {
			if p, ok := r.producers[snd.Gen].(batchSender); ok {
				// Consecutive sends through a producer that takes batches go as one call.
				if len(r.sendBuf) > 0 && snd.Gen != r.sendGen {
					r.flushSends()
				}
				r.sendGen, r.sendTo = snd.Gen, p
				r.sendBuf = append(r.sendBuf, snd.Out)
				continue
			}
		}
		r.flushSends()
		r.execute(ctx, a)
	}
	r.flushSends()
}

// batchSender is implemented by remote producers that take several entries at once (the
// client's: one lock and one wake-up of its writer per batch instead of per entry). done is called
// once per entry, with its index in outs.
type batchSender interface {
	SendBatch(outs []Outbound, done func(i int, err error))
}

// flushSends hands the accumulated sends to their producer.
func (r *Runner) flushSends() {
	if len(r.sendBuf) == 0 {
		return
	}
	gen := r.sendGen
	sources := make([]mtypes.Position, len(r.sendBuf))
	for i, o := range r.sendBuf {
		sources[i] = o.Source
	}
	r.sendTo.SendBatch(r.sendBuf, func(i int, err error) {
		r.inbox.postResult(sendResult{gen: gen, source: sources[i], err: err})
	})
	clear(r.sendBuf)
	r.sendBuf, r.sendTo = r.sendBuf[:0], nil
}

func (r *Runner) execute(ctx context.Context, a Action) {
	switch a := a.(type) {
	case ActConnect:
		if ctx.Err() != nil {
			return
		}
		r.workers.Add(1)
		go func() {
			defer r.workers.Done()
			name := ProducerName(r.cfg.Machine.Local, r.cfg.Machine.Remote)
			p, err := r.cfg.Producers.NewProducer(ctx, r.cfg.Machine.Remote, r.cfg.Topic.Name(), name)
			if err != nil && p != nil {
				p = nil
			}
			if ctx.Err() != nil && p != nil {
				r.closeProducer(p)
				return
			}
			r.inbox.post(connectResult{gen: a.Gen, p: p, err: err})
		}()
	case ActCloseProducer:
		if p, ok := r.producers[a.Gen]; ok {
			delete(r.producers, a.Gen)
			r.mu.Lock()
			if r.current == p {
				r.current = nil
			}
			if cr, ok := p.(clientReconnects); ok {
				r.pastReconnects += cr.Reconnects()
			}
			r.mu.Unlock()
			r.closeProducer(p)
		}
	case ActRead:
		read := func(reserved int64) {
			es, err := r.cfg.Topic.Read(ctx, a.From, a.MaxEntries, a.MaxBytes)
			if err == nil && r.cfg.Schemas != nil {
				// Entries are handed over as read-only; translation copies what it changes.
				es, err = translateSchemas(ctx, r.cfg.Schemas, r.cfg.Machine.Local, r.cfg.Machine.Remote, r.cfg.Topic.Name(), es)
			}
			if ctx.Err() != nil {
				r.cfg.Budget.Add(-reserved)
				return
			}
			r.inbox.post(readResult{ev: EvReadDone{Now: r.now(), Epoch: a.Epoch, Entries: es, Err: err}, reserved: reserved})
		}
		if r.tailing {
			// Caught up and just woken by a new entry: it is in the entry cache, so read it here
			// rather than hand over to another goroutine and back (latency of the live path). It
			// does not wait for the budget: trueUp adds the little it brings.
			r.tailing = false
			read(0)
			return
		}
		r.workers.Add(1)
		go func() {
			defer r.workers.Done()
			// A catch-up read waits for room for the most it can bring; trueUp gives back the rest.
			if !r.cfg.Budget.TryAcquire(a.MaxBytes) {
				r.memoryLimited.Store(true)
				err := r.cfg.Budget.Acquire(ctx, a.MaxBytes)
				r.memoryLimited.Store(false)
				if err != nil {
					return // stopping
				}
			}
			read(a.MaxBytes)
		}()
	case ActSend:
		p, ok := r.producers[a.Gen]
		if !ok {
			r.inbox.postResult(sendResult{gen: a.Gen, source: a.Out.Source, err: errors.New("producer gone")})
			return
		}
		gen, src := a.Gen, a.Out.Source
		p.Send(a.Out, func(err error) { r.inbox.postResult(sendResult{gen: gen, source: src, err: err}) })
	case ActMarkDelete:
		err := r.cursor.MarkDelete(ctx, a.Pos)
		r.inbox.post(EvMarkDeleteDone{Now: r.now(), Pos: a.Pos, Err: err})
	case ActWaitForData:
		if r.waitCh != nil && r.waitFrom.Compare(a.From) <= 0 {
			return // the outstanding notification comes no later than this one would
		}
		r.waitCh, r.waitFrom = r.cfg.Topic.WaitForEntries(a.From), a.From
	case ActSetTimer:
		if t := r.timers[a.Kind]; t != nil {
			t.Stop()
		}
		r.timerSeq[a.Kind]++
		seq, kind := r.timerSeq[a.Kind], a.Kind
		r.timers[a.Kind] = time.AfterFunc(a.Delay, func() { r.inbox.post(timerFired{kind: kind, seq: seq}) })
	}
}

// clientReconnects is implemented by remote producers that reconnect by themselves (the client's):
// their reconnections count in the replicator's reconnects.
type clientReconnects interface{ Reconnects() int64 }

// closeProducer closes p in the background (bounded by 5 s) so a dead remote cannot block the loop.
func (r *Runner) closeProducer(p RemoteProducer) {
	r.workers.Add(1)
	go func() {
		defer r.workers.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			r.log.Debug("close replicator producer", "err", err)
		}
	}()
}

// mailbox is an unbounded, non-blocking queue into the event loop: producer callbacks and timers
// must never block on the loop. Send results, one per entry, are stored unboxed.
type mailbox struct {
	mu     sync.Mutex
	queue  []inboxItem
	spare  []inboxItem // the previous drain's slice, reused
	notify chan struct{}
}

// inboxItem is a send result (result set) or any other message.
type inboxItem struct {
	result bool
	res    sendResult
	v      any
}

func (b *mailbox) init() { b.notify = make(chan struct{}, 1) }

func (b *mailbox) post(v any) { b.add(inboxItem{v: v}) }

func (b *mailbox) postResult(r sendResult) { b.add(inboxItem{result: true, res: r}) }

func (b *mailbox) add(it inboxItem) {
	b.mu.Lock()
	first := len(b.queue) == 0
	b.queue = append(b.queue, it)
	b.mu.Unlock()
	// Only the first item after a drain wakes the loop: later ones are drained with it (a
	// replicator gets one result per entry; this saves a channel operation for all but one).
	if first {
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}
}

// drain takes everything queued; the caller hands the slice back with recycle when done.
func (b *mailbox) drain() []inboxItem {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue
	b.queue, b.spare = b.spare[:0], nil
	return q
}

// recycle returns a drained slice for reuse (cleared, so it holds no references).
func (b *mailbox) recycle(q []inboxItem) {
	clear(q)
	b.mu.Lock()
	if b.spare == nil && cap(q) <= 4096 {
		b.spare = q[:0]
	}
	b.mu.Unlock()
}
