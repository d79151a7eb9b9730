package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/wire"
)

// consumerState is one attached consumer.
type consumerState struct {
	dc             *dconsumer
	name           string
	sub            *subscriptionState
	sink           ConsumerSink
	opts           SubscribeOptions
	connectedSince time.Time

	// sendMu serialises calls into the sink and guards closed, so nothing is sent after Closed.
	sendMu sync.Mutex
	closed bool

	msgOut, bytesOut, msgRedeliver, msgAcked atomic.Int64
	entriesOut                               atomic.Int64
	lastAcked, lastConsumed, lastFlow        atomic.Int64 // unix ms
	rateOut, rateBytesOut, rateRedeliver     rate
	rateAck                                  rate
}

// send hands deliveries to the sink unless the consumer is closed. The counters are updated first,
// so that stats read by whoever sees the deliveries already count them.
func (c *consumerState) send(ds []Delivery) {
	var msgs, bytes int64
	for i := range ds {
		msgs += int64(ds[i].NumMessages)
		bytes += int64(len(ds[i].Data))
		if ds[i].RedeliveryCount > 0 {
			c.msgRedeliver.Add(int64(ds[i].NumMessages))
		}
	}
	c.msgOut.Add(msgs)
	c.bytesOut.Add(bytes)
	c.entriesOut.Add(int64(len(ds)))
	c.sub.msgOut.Add(msgs)
	c.sub.bytesOut.Add(bytes)
	tr := c.sub.topic.counters()
	tr.msgOut.Add(msgs)
	tr.bytesOut.Add(bytes)
	c.lastConsumed.Store(c.sub.topic.b.nowMs())
	c.sendMu.Lock()
	if !c.closed {
		c.sink.SendMessages(ds)
	}
	c.sendMu.Unlock()
}

// notifyActive sends an ACTIVE_CONSUMER_CHANGE unless the consumer is closed.
func (c *consumerState) notifyActive(active bool) {
	c.sendMu.Lock()
	if !c.closed {
		c.sink.ActiveConsumerChanged(active)
	}
	c.sendMu.Unlock()
}

// markClosed closes the consumer once; notify tells the sink (broker-initiated close).
func (c *consumerState) markClosed(notify bool) bool {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.closed {
		return false
	}
	c.closed = true
	if notify {
		c.sink.Closed(c.sub.topic.reassigned())
	}
	return true
}

func (c *consumerState) isClosed() bool {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.closed
}

// subscriptionState is one subscription: a cursor, its consumers and (while it has consumers) a
// dispatcher goroutine.
type subscriptionState struct {
	name       string
	topic      *topicState
	cursor     *storage.Cursor
	durable    bool
	replicated atomic.Bool

	// stateMu serialises writes of the persisted state (substate.go); lastStateWrite is when the
	// last one happened (unix ms).
	stateMu        sync.Mutex
	lastStateWrite atomic.Int64

	// opMu serialises structural operations (subscribe, close, seek, unsubscribe), so that a seek
	// and a re-subscribe never interleave. Never taken by the dispatcher goroutine.
	opMu sync.Mutex
	// resetting is set (under opMu) while a seek disconnects consumers: a non-durable subscription
	// then survives losing its last consumer, so the reconnecting reader finds it at the new
	// position (as Pulsar keeps it during a cursor reset).
	resetting bool

	mu    sync.Mutex        // guards everything below; never held across storage I/O or sink calls
	props map[string]string // subscription properties
	// stateChanged: the properties or the replicated flag changed since the state was persisted.
	stateChanged bool
	// syncRecord is the replication sync's record of a replicated subscription (substate.go).
	syncRecord  string
	d           *dispatchState
	consumers   []*consumerState
	consumerSeq uint64
	deleted     bool
	// caughtUp: a sequential read from caughtUpRead found nothing while the log ended at caughtUpAt;
	// no need to read again until either changes.
	caughtUp     bool
	caughtUpAt   mtypes.Position
	caughtUpRead mtypes.Position
	wake         chan struct{}
	stop         context.CancelFunc // dispatcher; nil when not running
	done         chan struct{}

	msgOut, bytesOut, msgExpired   atomic.Int64
	msgDropped                     atomic.Int64 // non-persistent: messages no consumer could take
	rateOut, rateBytesOut          rate
	lastMarkDeleteMove, lastExpire atomic.Int64
	// lastActive is when the subscription last had a consumer (unix ms): created, or its last
	// consumer left. Subscription expiration counts from it.
	lastActive  atomic.Int64
	rateExpired rate
}

func newSubscription(t *topicState, name string, cursor *storage.Cursor, durable bool) *subscriptionState {
	s := &subscriptionState{
		name:    name,
		topic:   t,
		cursor:  cursor,
		durable: durable,
		wake:    make(chan struct{}, 1),
	}
	s.d = newDispatchState(mtypes.SubExclusive, int32(t.name.PartitionIndex), next(s.markDelete()))
	s.lastActive.Store(t.b.nowMs())
	s.d.maxUnacked = int64(max(t.b.cfg.MaxUnackedMessagesPerConsumer, 0))
	s.d.maxUnackedSub = int64(max(t.b.cfg.MaxUnackedMessagesPerSubscription, 0))
	if durable && cursor != nil {
		s.restoreState()
	}
	return s
}

// markDelete is the cursor's mark-delete position ((-1,-1) without a cursor: non-persistent topics).
func (s *subscriptionState) markDelete() mtypes.Position {
	if s.cursor == nil {
		return mtypes.Position{LedgerID: -1, EntryID: -1}
	}
	return s.cursor.MarkDeletePosition()
}

// notify wakes the dispatcher (non-blocking).
func (s *subscriptionState) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// addConsumer attaches a consumer (the caller holds s.opMu).
func (s *subscriptionState) addConsumer(opts SubscribeOptions, sink ConsumerSink) (*consumerState, error) {
	// The topic's close sets its state before it takes each subscription's opMu (held here) to
	// disconnect consumers: either it sees this consumer, or this check sees the close.
	if s.topic.isClosed() {
		return nil, fmt.Errorf("topic %s is closing: %w", s.topic.name, ErrTopicFenced)
	}
	s.mu.Lock()
	if s.deleted {
		s.mu.Unlock()
		return nil, fmt.Errorf("subscription %q is being deleted: %w", s.name, ErrServiceNotReady)
	}
	if len(s.consumers) > 0 {
		if s.d.subType != opts.Type {
			t := s.d.subType
			s.mu.Unlock()
			return nil, fmt.Errorf("subscription %q is %s, not %s: %w", s.name, t, opts.Type, ErrConsumerBusy)
		}
		if opts.Type == mtypes.SubExclusive {
			s.mu.Unlock()
			return nil, fmt.Errorf("exclusive subscription %q already has a consumer: %w", s.name, ErrConsumerBusy)
		}
	} else {
		s.d.subType = opts.Type
		s.d.rr = 0
	}
	if opts.Type == mtypes.SubKeyShared && opts.KeyShared != nil && opts.KeyShared.Mode == mtypes.KeySharedSticky {
		if err := s.checkStickyRangesLocked(opts.KeyShared.Ranges); err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
	s.consumerSeq++
	c := &consumerState{
		name:           opts.ConsumerName,
		sub:            s,
		sink:           sink,
		opts:           opts,
		connectedSince: s.topic.b.clock.Now(),
	}
	c.dc = newDConsumer(s.consumerSeq, opts.ConsumerName, opts.PriorityLevel)
	c.dc.owner = c
	if opts.KeyShared != nil && opts.KeyShared.Mode == mtypes.KeySharedSticky {
		c.dc.sticky = slices.Clone(opts.KeyShared.Ranges)
	}
	s.consumers = append(s.consumers, c)
	changes := s.d.addConsumer(c.dc, s.markDelete())
	if opts.KeyShared != nil && opts.KeyShared.AllowOutOfOrderDelivery {
		c.dc.joinedAt = nil // the consumer accepted out-of-order delivery across joins
	}
	start := s.stop == nil && s.cursor != nil // non-persistent topics push from the publish path
	if start {
		ctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		s.done = make(chan struct{})
		go s.run(ctx, s.done)
	}
	s.mu.Unlock()
	// The remote gets the subscription without waiting for an ack: when a consumer makes it
	// replicated, or when the first consumer attaches to one a policy or the admin API made
	// replicated.
	if marked := opts.ReplicateSubscriptionState && s.markReplicated(); marked || start {
		s.topic.b.syncChanged(s, true)
	}
	s.sendActiveChanges(changes)
	s.notify()
	return c, nil
}

// checkStickyRangesLocked refuses sticky hash ranges that are empty, out of 0..65535, or overlap
// each other or another consumer's (Pulsar's ConsumerAssignException).
func (s *subscriptionState) checkStickyRangesLocked(ranges []HashRange) error {
	if len(ranges) == 0 {
		return fmt.Errorf("sticky Key_Shared consumer without hash ranges: %w", ErrConsumerAssign)
	}
	for i, r := range ranges {
		if r.Start < 0 || r.End >= keyHashSpace || r.Start > r.End {
			return fmt.Errorf("invalid hash range [%d, %d]: %w", r.Start, r.End, ErrConsumerAssign)
		}
		for _, q := range ranges[:i] {
			if r.Start <= q.End && q.Start <= r.End {
				return fmt.Errorf("hash ranges [%d, %d] and [%d, %d] overlap: %w", q.Start, q.End, r.Start, r.End, ErrConsumerAssign)
			}
		}
		for _, c := range s.consumers {
			for _, q := range c.dc.sticky {
				if r.Start <= q.End && q.Start <= r.End {
					return fmt.Errorf("hash range [%d, %d] conflicts with consumer %q: %w", r.Start, r.End, c.name, ErrConsumerAssign)
				}
			}
		}
	}
	return nil
}

func (s *subscriptionState) sendActiveChanges(changes []activeChange) {
	for _, ch := range changes {
		if ch.to.owner != nil {
			ch.to.owner.notifyActive(ch.active)
		}
	}
}

// removeConsumer detaches c. notify tells its sink (broker-initiated close).
func (s *subscriptionState) removeConsumer(c *consumerState, notify bool) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.removeConsumerLocked(c, notify)
}

// removeConsumerLocked detaches c; the caller holds s.opMu. A non-durable subscription is deleted
// with its last consumer.
func (s *subscriptionState) removeConsumerLocked(c *consumerState, notify bool) {
	if !c.markClosed(notify) {
		return
	}
	s.mu.Lock()
	i := slices.Index(s.consumers, c)
	if i < 0 {
		s.mu.Unlock()
		return
	}
	s.consumers = slices.Delete(s.consumers, i, i+1)
	changes := s.d.removeConsumer(c.dc, s.markDelete())
	last := len(s.consumers) == 0
	var stop context.CancelFunc
	var done chan struct{}
	if last {
		stop, done = s.stop, s.done
		s.stop, s.done = nil, nil
	}
	s.mu.Unlock()
	s.sendActiveChanges(changes)
	if stop != nil {
		stop()
		<-done
	}
	if last {
		s.lastActive.Store(s.topic.b.nowMs())
		s.persistRedeliveriesIfChanged()
		s.topic.b.syncChanged(s, true) // a consumer that moves to another cluster: the final state now
	}
	if last && !s.durable && !s.resetting {
		s.topic.dropSubscription(s)
	}
	s.notify()
}

// closeAll disconnects every consumer (broker-initiated) and stops the dispatcher; the caller holds
// s.opMu. except is closed without notification.
func (s *subscriptionState) closeAllLocked(except *consumerState) {
	s.mu.Lock()
	cs := slices.Clone(s.consumers)
	s.mu.Unlock()
	for _, c := range cs {
		s.removeConsumerLocked(c, c != except)
	}
}

// flow adds permits to a consumer.
func (s *subscriptionState) flow(c *consumerState, permits uint32) {
	c.lastFlow.Store(s.topic.b.nowMs())
	s.mu.Lock()
	if !slices.Contains(s.consumers, c) {
		s.mu.Unlock()
		return
	}
	s.d.flow(c.dc, permits)
	s.mu.Unlock()
	s.notify()
}

// resubscribed implements Consumer.Resubscribed.
func (s *subscriptionState) resubscribed(c *consumerState) {
	s.mu.Lock()
	if !slices.Contains(s.consumers, c) {
		s.mu.Unlock()
		return
	}
	if s.cursor == nil {
		c.dc.permits = 0 // non-persistent: nothing is kept to deliver again
	} else if s.d.resubscribed(c.dc, s.cursor.MarkDeletePosition()) {
		s.caughtUp = false
	}
	s.mu.Unlock()
	s.notify()
}

// ack applies acknowledgements from consumer c.
func (s *subscriptionState) ack(ctx context.Context, c *consumerState, acks []Ack, cumulative bool) error {
	defer s.notify() // a consumer blocked on its unacked limit may take messages again
	defer s.topic.b.syncChanged(s, false)
	if c.isClosed() {
		return ErrConsumerNotFound
	}
	if len(acks) == 0 || s.cursor == nil {
		return nil // non-persistent: nothing to acknowledge
	}
	c.lastAcked.Store(s.topic.b.nowMs())
	acks, refused := s.checkAcks(c, acks) // ackcheck.go
	if len(acks) == 0 {
		return refused
	}
	s.mu.Lock()
	subType := s.d.subType
	s.mu.Unlock()
	if cumulative {
		if subType == mtypes.SubShared || subType == mtypes.SubKeyShared {
			return fmt.Errorf("cumulative ack on a %s subscription: %w", subType, ErrNotAllowed)
		}
		a := acks[len(acks)-1]
		upTo := a.Position
		if a.AckSet != nil {
			// A cumulative ack inside a batch: everything before the entry, and the acked part of it.
			upTo = mtypes.Position{LedgerID: a.Position.LedgerID, EntryID: a.Position.EntryID - 1}
		}
		before := s.cursor.MarkDeletePosition()
		if err := s.cursor.MarkDelete(ctx, upTo); err != nil {
			return fmt.Errorf("cumulative ack %s on %q: %w", upTo, s.name, err)
		}
		if s.cursor.MarkDeletePosition() != before {
			s.lastMarkDeleteMove.Store(s.topic.b.nowMs())
		}
		s.mu.Lock()
		s.d.ackedUpTo(upTo)
		s.mu.Unlock()
		c.msgAcked.Add(1)
		if a.AckSet != nil {
			return s.ackBatch(ctx, c, a)
		}
		return nil
	}
	// A refused batch ack does not stop the others of the same command (the first error is
	// returned, for the ACK_RESPONSE).
	var whole []mtypes.Position
	var batchErr error
	for _, a := range acks {
		if a.AckSet != nil {
			if err := s.ackBatch(ctx, c, a); err != nil && batchErr == nil {
				batchErr = err
			}
			continue
		}
		whole = append(whole, a.Position)
	}
	if len(whole) == 0 {
		return batchErr
	}
	before := s.cursor.MarkDeletePosition()
	if err := s.cursor.Delete(ctx, whole...); err != nil {
		return fmt.Errorf("ack on %q: %w", s.name, err)
	}
	if s.cursor.MarkDeletePosition() != before {
		s.lastMarkDeleteMove.Store(s.topic.b.nowMs())
	}
	s.mu.Lock()
	s.d.acked(whole...)
	s.mu.Unlock()
	c.msgAcked.Add(int64(len(whole)))
	return batchErr
}

// ackBatch applies a batch-index acknowledgement (a.AckSet: bit set = still unacknowledged). The
// batch size is the entry's own: the one dispatched (read from the entry's metadata), or, for an
// entry not pending here (delivered before a restart), the stored entry's. An ack that does not
// fit the entry is refused (batchack.go).
func (s *subscriptionState) ackBatch(ctx context.Context, c *consumerState, a Ack) error {
	s.mu.Lock()
	size := s.d.batchSize(a.Position)
	s.mu.Unlock()
	if size == 0 {
		e, err := s.topic.ledger.ReadEntry(ctx, a.Position)
		if err != nil {
			return fmt.Errorf("batch ack %s on %q: %w", a.Position, s.name, err)
		}
		size = entryInfoOf(e, s.topic.b.log).numMessages
	}
	if err := checkBatchAck(a, size); err != nil {
		s.topic.b.log.Warn("batch acknowledgement refused", slog.String("topic", s.topic.name.String()),
			slog.String("subscription", s.name), slog.String("consumer", c.name), slog.Any("err", err))
		return err
	}
	acked, left := batchAckIndexes(a.AckSet, size)
	if err := s.cursor.AckBatchIndexes(ctx, a.Position, size, acked); err != nil {
		return fmt.Errorf("batch ack %s on %q: %w", a.Position, s.name, err)
	}
	s.mu.Lock()
	if left == 0 || s.cursor.IsAcknowledged(a.Position) {
		s.d.acked(a.Position)
	} else {
		s.d.partiallyAcked(a.Position, left)
	}
	s.mu.Unlock()
	c.msgAcked.Add(int64(len(acked)))
	return nil
}

// redeliver implements Consumer.RedeliverUnacknowledged.
func (s *subscriptionState) redeliver(c *consumerState, positions []mtypes.Position) {
	s.mu.Lock()
	if !slices.Contains(s.consumers, c) {
		s.mu.Unlock()
		return
	}
	if s.cursor == nil {
		// non-persistent: nothing is kept to redeliver
	} else if s.d.singleActive() && s.d.active != c.dc {
		// Only the active consumer may ask for a redelivery (as in Pulsar).
	} else if s.d.singleActive() {
		s.d.rewind(s.cursor.MarkDeletePosition())
		s.caughtUp = false
	} else {
		var ps []mtypes.Position
		if len(positions) > 0 {
			ps = positions
		}
		s.d.redeliverPending(c.dc, ps)
	}
	s.mu.Unlock()
	s.notify()
}

// resolve turns the wire sentinels into real positions.
func (s *subscriptionState) resolve(p mtypes.Position) mtypes.Position {
	if p == mtypes.Earliest {
		return s.topic.ledger.FirstPosition()
	}
	// Beyond the end (the Latest sentinel, or an id not written yet) means "after the last entry":
	// a read position past the next entry would skip everything written later.
	if end := next(s.topic.ledger.LastConfirmed()); p.Compare(end) > 0 {
		return end
	}
	return p
}

// seek implements Consumer.Seek and SeekByTime.
func (s *subscriptionState) seek(ctx context.Context, c *consumerState, p mtypes.Position, byTime bool, ts int64) error {
	if c.isClosed() {
		return ErrConsumerNotFound
	}
	if err := s.topic.needStorage(); err != nil {
		return err
	}
	return s.reset(ctx, p, byTime, ts)
}

// reset moves the subscription (seek, admin reset-cursor), disconnecting every consumer first.
func (s *subscriptionState) reset(ctx context.Context, p mtypes.Position, byTime bool, ts int64) error {
	if byTime {
		found, err := s.topic.ledger.FindByTime(ctx, ts)
		if err != nil {
			return fmt.Errorf("seek %q by time %d: %w", s.name, ts, err)
		}
		p = found
	}
	p = s.resolve(p)
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.resetting = true
	s.closeAllLocked(nil)
	s.resetting = false
	if err := s.cursor.ResetTo(ctx, p); err != nil {
		return fmt.Errorf("reset %q to %s: %w", s.name, p, err)
	}
	s.mu.Lock()
	s.d.reset(next(s.cursor.MarkDeletePosition()))
	if p.Compare(s.d.readPos) > 0 {
		s.d.readPos = p
	}
	s.caughtUp = false
	s.mu.Unlock()
	s.lastMarkDeleteMove.Store(s.topic.b.nowMs())
	s.persistRedeliveriesIfChanged() // the counts went with the old position
	return nil
}

// lastMessageID implements Consumer.LastMessageID.
func (s *subscriptionState) lastMessageID(ctx context.Context) (LastMessageID, error) {
	res := LastMessageID{BatchIndex: -1, MarkDelete: s.markDelete()}
	last, ok, err := s.topic.lastEntry(ctx)
	if err != nil {
		return res, err
	}
	if !ok {
		res.Position = mtypes.Position{LedgerID: -1, EntryID: -1}
		return res, nil
	}
	res.Position = last.pos
	if last.batched {
		res.BatchIndex = int32(last.numMessages - 1)
	}
	return res, nil
}

// unsubscribe implements Consumer.Unsubscribe.
func (s *subscriptionState) unsubscribe(ctx context.Context, c *consumerState, force bool) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if c.isClosed() {
		return ErrConsumerNotFound
	}
	s.mu.Lock()
	others := len(s.consumers) > 1
	s.mu.Unlock()
	if others && !force {
		return fmt.Errorf("subscription %q has other consumers: %w", s.name, ErrNotAllowed)
	}
	return s.deleteLocked(ctx, c)
}

// deleteLocked disconnects all consumers (except is closed silently) and deletes the
// subscription and its cursor; the caller holds s.opMu.
func (s *subscriptionState) deleteLocked(ctx context.Context, except *consumerState) error {
	s.mu.Lock()
	s.deleted = true
	s.mu.Unlock()
	s.closeAllLocked(except)
	if s.cursor == nil {
		s.topic.dropSubscription(s)
		return nil
	}
	if err := s.topic.ledger.DeleteCursor(ctx, s.name); err != nil && !errors.Is(err, storage.ErrNotFound) {
		s.mu.Lock()
		s.deleted = false
		s.mu.Unlock()
		return fmt.Errorf("delete subscription %q: %w", s.name, err)
	}
	s.topic.dropSubscription(s)
	return nil
}

// run is the dispatcher goroutine: it reads entries for the consumers' permits and hands them out.
func (s *subscriptionState) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	b := s.topic.b
	b.settle(ctx, s)
	replayStalled := false
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		lc := s.topic.ledger.LastConfirmed()
		s.d.markDelete = s.cursor.MarkDeletePosition()
		now := b.nowMs()
		nextDue := s.d.releaseDelayed(now)
		persistNow, persistAt := s.redeliveriesDueLocked(now)
		caughtUp := s.caughtUp && s.caughtUpAt == lc && s.caughtUpRead == s.d.readPos
		plan, ok := s.d.plan(b.cfg.DispatchMaxEntries, lc, caughtUp, replayStalled)
		s.mu.Unlock()
		if persistNow {
			s.persistRedeliveries()
		} else if persistAt > 0 && (nextDue == 0 || persistAt < nextDue) {
			nextDue = persistAt // changed counts wait at most redeliveryPersistInterval
		}
		if !ok {
			var due <-chan time.Time
			if nextDue > 0 {
				d := delayWait(nextDue, now)
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				due = timer.C
			}
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				replayStalled = false
			case <-due:
			}
			continue
		}
		entries, err := s.read(ctx, plan)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errStoragePanic) {
				// Do not retry a read that crashes: unload the topic (clients reconnect, storage
				// reopens the ledger) and wait to be stopped.
				b.fenceTopicAsync(s.topic, err)
				<-ctx.Done()
				return
			}
			if s.handleReadError(plan, err) {
				continue
			}
			b.log.Warn("dispatcher read failed", slog.String("topic", s.topic.name.String()),
				slog.String("subscription", s.name), slog.Any("err", err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		infos := make([]entryInfo, len(entries))
		for i, e := range entries {
			infos[i] = entryInfoOf(e, b.log)
			if infos[i].numMessages > 1 {
				infos[i].acked = s.cursor.AckedBatchIndexes(e.Position)
			}
		}
		s.mu.Lock()
		if plan.seq && len(entries) == 0 && plan.gen == s.d.gen {
			s.caughtUp, s.caughtUpAt, s.caughtUpRead = true, lc, plan.from
		}
		replayBefore := len(s.d.replay)
		res := s.d.assign(plan, infos, s.cursor.IsAcknowledged, now)
		if !plan.seq && len(res.deliveries) == 0 && len(s.d.replay) == replayBefore {
			replayStalled = true
		}
		s.mu.Unlock()
		if len(res.markers) > 0 {
			if err := s.cursor.Delete(ctx, res.markers...); err != nil && ctx.Err() == nil {
				b.log.Warn("acknowledging marker entries failed", slog.String("subscription", s.name), slog.Any("err", err))
			}
			s.mu.Lock()
			s.d.acked(res.markers...)
			s.mu.Unlock()
		}
		s.deliver(res.deliveries)
	}
}

// deliver groups deliveries per consumer, keeping their order, and sends them.
func (s *subscriptionState) deliver(ds []delivery) {
	for len(ds) > 0 {
		to := ds[0].to
		batch := make([]Delivery, 0, len(ds))
		rest := ds[:0:0]
		for _, d := range ds {
			if d.to == to {
				batch = append(batch, d.d)
			} else {
				rest = append(rest, d)
			}
		}
		if to.owner != nil {
			to.owner.send(batch)
		}
		ds = rest
	}
}

// errStoragePanic marks a storage read that panicked.
var errStoragePanic = errors.New("storage read panicked")

// read performs a read plan. A panic inside storage is turned into an error (with its stack in the
// log), so that one damaged ledger cannot take the whole broker down.
func (s *subscriptionState) read(ctx context.Context, p readPlan) (entries []mtypes.Entry, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.topic.b.log.Error("storage read panicked", slog.String("topic", s.topic.name.String()),
				slog.String("subscription", s.name), slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
			entries, err = nil, fmt.Errorf("%w: %v", errStoragePanic, r)
		}
	}()
	if p.seq {
		return s.topic.ledger.Read(ctx, p.from, p.max, s.topic.readBytesHint(p.max))
	}
	out := make([]mtypes.Entry, 0, len(p.replay))
	for _, pos := range p.replay {
		e, err := s.topic.ledger.ReadEntry(ctx, pos)
		if err != nil {
			if errors.Is(err, storage.ErrTrimmed) || errors.Is(err, storage.ErrNotFound) {
				s.mu.Lock()
				s.d.acked(pos) // gone: nothing to redeliver
				s.mu.Unlock()
				continue
			}
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// handleReadError deals with reads of trimmed data: sequential reading jumps to the first stored
// entry. It reports whether the error was handled.
func (s *subscriptionState) handleReadError(p readPlan, err error) bool {
	if !p.seq || !(errors.Is(err, storage.ErrTrimmed) || errors.Is(err, storage.ErrNotFound)) {
		return false
	}
	first := s.topic.ledger.FirstPosition()
	s.mu.Lock()
	if p.gen == s.d.gen && s.d.readPos.Compare(first) < 0 {
		s.d.readPos = first
	}
	s.mu.Unlock()
	return true
}

// entryInfoOf extracts what dispatch needs from an entry's metadata. An entry whose metadata does
// not parse is dispatched as one message (the client validates and discards it), as Pulsar does.
func entryInfoOf(e mtypes.Entry, log *slog.Logger) entryInfo {
	info := entryInfo{pos: e.Position, data: e.Data, numMessages: 1, publishTime: e.PublishTime}
	md, err := wire.ScanDispatchMetadata(e.Data)
	if err != nil {
		log.Warn("entry metadata does not parse; dispatching it as is", slog.String("position", e.Position.String()), slog.Any("err", err))
		return info
	}
	if md.HasNumMessages {
		info.numMessages = batchMessages(int(md.NumMessagesInBatch))
	}
	if md.NumChunksFromMsg > 1 {
		info.chunkUUID = string(md.UUID)
		info.lastChunk = md.ChunkID >= md.NumChunksFromMsg-1
	}
	info.marker = md.Marker
	info.deliverAt = md.DeliverAtTime
	if k := md.OrderingKey; len(k) > 0 {
		info.keyHash = keyHash(k)
	} else {
		info.keyHash = keyHash(md.PartitionKey)
	}
	return info
}

// expire acknowledges every entry published before cutoffMs (unix ms).
func (s *subscriptionState) expire(ctx context.Context, cutoffMs int64) error {
	if s.cursor == nil {
		return nil
	}
	p, err := s.topic.ledger.FindByTime(ctx, cutoffMs)
	if err != nil {
		return fmt.Errorf("expire on %q: %w", s.name, err)
	}
	upTo := mtypes.Position{LedgerID: p.LedgerID, EntryID: p.EntryID - 1}
	if upTo.Compare(s.cursor.MarkDeletePosition()) <= 0 {
		return nil
	}
	before := s.cursor.Backlog()
	if err := s.cursor.MarkDelete(ctx, upTo); err != nil {
		return fmt.Errorf("expire on %q: %w", s.name, err)
	}
	s.msgExpired.Add(max(before-s.cursor.Backlog(), 0))
	s.lastExpire.Store(s.topic.b.nowMs())
	s.mu.Lock()
	s.d.ackedUpTo(upTo)
	s.mu.Unlock()
	return nil
}

// maxDelayWait bounds one wait of the dispatcher for a delayed entry; a longer delay is waited for
// in several (each wake-up recomputes what is due).
const maxDelayWait = 24 * time.Hour

// delayWait is how long the dispatcher waits for an entry due at due (Unix ms) at now. due is the
// producer's deliver_at_time: a time more than about 292 years ahead overflowed the conversion to a
// negative wait, and the dispatcher spun on a timer that fired at once.
func delayWait(due, now int64) time.Duration {
	if due-now >= int64(maxDelayWait/time.Millisecond) {
		return maxDelayWait
	}
	return time.Duration(due-now) * time.Millisecond
}
