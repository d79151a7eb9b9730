package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/wire"
)

// pubSlot is one publish waiting for its completion to be delivered in order. It also carries
// what the storage completion needs (appendDone), so a publish needs no closure capturing a dozen
// variables; slots are recycled through slotPool once delivered, so a publish in a steady stream
// allocates nothing here.
type pubSlot struct {
	appendDoneFn func(mtypes.Position, error) // s.appendDone, bound once per slot
	done         func(PublishResult)
	res          PublishResult
	ready        bool
	bytes        int64
	taken        time.Time // when the broker core took the publish: the publish latency starts here

	// Set for an append (publish to a persistent topic that reaches storage).
	p          *producerState
	dd         *dedupState // the dedup state the entry was checked against; nil without dedup
	tracked    bool        // dedup records the entry's sequence id once stored
	chunk      bool
	msgs       int64
	acceptedMs int64  // broker clock when the publish was accepted (LastPublishTimeStamp)
	replTicket uint64 // the replicated index's admission to commit; 0 = none
	replIndex  ReplicatedEntryIndex
	marker     []byte // a replicator's marker entry: handed to the subscription sync once stored
}

// producerState is one attached producer.
type producerState struct {
	topic          *topicState
	public         *Producer
	id             uint64
	name           string
	opts           ProducerOptions
	isReplicator   bool
	lastSequenceID int64
	topicEpoch     uint64
	hasTopicEpoch  bool
	connectedSince time.Time
	limiter        *MemoryLimiter

	closed atomic.Bool // no more publishes accepted

	qmu      sync.Mutex
	queue    []*pubSlot
	draining bool
	idle     chan struct{} // closed when the queue empties while someone waits; guarded by qmu

	msgIn, bytesIn, chunksIn atomic.Int64
	rateIn, rateBytesIn      rate
	rateChunks               rate
}

// publish implements Producer.Publish.
func (p *producerState) publish(req PublishRequest, done func(PublishResult)) {
	p.limiter.Acquire(int64(len(req.Entry)))
	p.publishCharged(req, done, nil)
}

// publishCharged is publish of a request already charged to the limiter.
func (p *producerState) publishCharged(req PublishRequest, done func(PublishResult), lead *storage.Lead) {
	t := p.topic
	n := int64(len(req.Entry))
	slot := newSlot(done, n, time.Now())
	p.qmu.Lock()
	p.queue = append(p.queue, slot)
	p.qmu.Unlock()

	t.pubMu.Lock()
	res, now := p.publishLocked(slot, &req, t.b.nowMs(), lead)
	t.pubMu.Unlock()
	if now {
		p.complete(slot, res)
	}
}

// newSlot takes a publish slot from the pool.
func newSlot(done func(PublishResult), bytes int64, taken time.Time) *pubSlot {
	slot := slotPool.Get().(*pubSlot)
	if slot.appendDoneFn == nil { // new
		slot.appendDoneFn = slot.appendDone
	}
	slot.done, slot.bytes, slot.taken = done, bytes, taken
	return slot
}

// maxPublishGroup bounds the slots publishBatch collects on its stack.
const maxPublishGroup = 256

// earlyResult is a publish of a group answered without an append (refused, duplicate,
// non-persistent), completed once the topic's lock is released.
type earlyResult struct {
	slot *pubSlot
	res  PublishResult
}

// publishBatch implements Producer.PublishBatch (charged: PublishBatchCharged): the requests are
// admitted to the queue (and charged to the limiter) at once and published under one hold of the
// topic's lock, each exactly as publish would (a refused or duplicate request in the middle
// completes on its own, the others go on).
func (p *producerState) publishBatch(reqs []PublishRequest, done func(PublishResult), charged bool, lead *storage.Lead) {
	for len(reqs) > maxPublishGroup {
		p.publishBatch(reqs[:maxPublishGroup], done, charged, lead)
		reqs = reqs[maxPublishGroup:]
	}
	switch len(reqs) {
	case 0:
		return
	case 1:
		if charged {
			p.publishCharged(reqs[0], done, lead)
		} else {
			p.publish(reqs[0], done)
		}
		return
	}
	t := p.topic
	var slotsBuf [maxPublishGroup]*pubSlot
	slots := slotsBuf[:len(reqs)]
	var total int64
	taken := time.Now() // one clock read per group
	for i := range reqs {
		n := int64(len(reqs[i].Entry))
		total += n
		slots[i] = newSlot(done, n, taken)
	}
	if !charged {
		p.limiter.AcquireN(total, int64(len(reqs)))
	}
	p.qmu.Lock()
	p.queue = append(p.queue, slots...)
	p.qmu.Unlock()

	var early []earlyResult
	nowMs := t.b.nowMs() // one clock read per group
	t.pubMu.Lock()
	for i := range reqs {
		// Once appended, a slot belongs to storage's completion (it may be delivered and
		// recycled at any time): only the early results are kept here.
		if res, now := p.publishLocked(slots[i], &reqs[i], nowMs, lead); now {
			early = append(early, earlyResult{slots[i], res})
		}
	}
	t.pubMu.Unlock()
	clear(slots)
	for _, e := range early {
		p.complete(e.slot, e.res)
	}
}

// publishBatchLeading is publishBatch (charged) with its appends inside a storage lead
// (storage.Engine.LeadCommitBegin), for a caller that waits for its socket next. Between its first
// append and the lead's end the publish waits for nothing outside storage: its appends are made
// under the topic's publish lock, each later request of the group is decided in memory (a dedup
// cursor it must create is a storage call, which wakes the sync loop first), and early results
// are completed without blocking. Hence one chunk only: a second would wait for the publish lock
// again, whose holder may wait for the first chunk's appends. A replicator's group is published
// without a lead (its index admission may wait), as is a non-persistent topic's (no storage).
func (p *producerState) publishBatchLeading(reqs []PublishRequest, done func(PublishResult), arrived func() bool) {
	var lead *storage.Lead
	if l := p.topic.ledger; l != nil && !p.isReplicator && len(reqs) <= maxPublishGroup {
		lead = l.LeadCommitBegin()
	}
	p.publishBatch(reqs, done, true, lead)
	if lead != nil {
		lead.End(arrived)
	}
}

// publishLocked publishes one request whose slot is queued; the caller holds topic.pubMu. nowMs is
// the broker clock's time of the publish (read once per group). It returns now = true with the
// result when the request is answered without an append (the caller completes the slot once the
// lock is released); otherwise storage completes it.
func (p *producerState) publishLocked(slot *pubSlot, req *PublishRequest, nowMs int64, lead *storage.Lead) (res PublishResult, now bool) {
	t := p.topic
	n := slot.bytes
	if req.NumMessages <= 0 {
		req.NumMessages = 1
	}
	highest := highestSequenceID(req.SequenceID, req.HighestSequenceID, req.NumMessages)
	res = PublishResult{SequenceID: req.SequenceID, HighestSequenceID: highest}
	if req.NumMessages > maxBatchMessages {
		res.Err = fmt.Errorf("%d messages in one entry, above the limit of %d: %w", req.NumMessages, maxBatchMessages, ErrNotAllowed)
		return res, true
	}
	if req.HighestSequenceID > 0 && req.HighestSequenceID < req.SequenceID {
		res.Err = fmt.Errorf("lowest sequence id %d above highest %d: %w", req.SequenceID, req.HighestSequenceID, ErrInvalidRequest)
		return res, true
	}
	if err := p.publishable(); err != nil {
		res.Err = err
		return res, true
	}
	if t.nonPersistent() {
		t.dispatchNonPersistent(req.Entry, req.Marker)
		p.msgIn.Add(int64(req.NumMessages))
		p.bytesIn.Add(n)
		tr := t.counters()
		tr.msgIn.Add(int64(req.NumMessages))
		tr.bytesIn.Add(n)
		tr.lastPublish.Store(nowMs)
		res.Position = mtypes.Position{} // Pulsar answers 0:0 on non-persistent topics
		return res, true
	}
	if p.isReplicator && t.replIndex != nil {
		// Replicated entries are deduplicated by their origin position, never by producer dedup.
		var dup bool
		var dl, de int64
		var ticket uint64
		var err error
		if oa, ok := t.replIndex.(OriginAdmitter); ok && req.HasOrigin {
			dup, dl, de, ticket, err = oa.AdmitOriginTicket(req.Entry, req.Origin)
		} else {
			dup, dl, de, ticket, err = t.replIndex.AdmitTicket(req.Entry)
		}
		switch {
		case err != nil:
			res.Err = fmt.Errorf("replicated entry: %w: %w", ErrDedupUnknown, err)
			return res, true
		case dup:
			res.Duplicate = true
			res.Position = mtypes.Position{LedgerID: dl, EntryID: de}
			return res, true
		}
		if ticket != 0 {
			slot.replTicket, slot.replIndex = ticket, t.replIndex
		}
	}
	if p.isReplicator && req.Marker {
		// A copy: req.Entry is the connection's read buffer, reused before the append completes.
		slot.marker = slices.Clone(req.Entry)
	}
	key := p.name
	deduped := !req.Marker && !p.isReplicator
	// A chunked message is recorded with its last chunk; its other chunks are checked against what
	// is recorded (a resent message is refused whole), but record nothing.
	checked := deduped && (!req.Chunk || req.LastChunk)
	earlyChunk := deduped && req.Chunk && !req.LastChunk
	t.dedupMu.Lock()
	dd := t.dedup
	if dd != nil && t.dedupCursor == nil {
		// Deduplication was turned on after this producer was added: the cursor must exist
		// before the first entry it covers (rare; addProducer normally creates it).
		t.dedupMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := t.ensureDedupCursorLocked(ctx)
		cancel()
		if err != nil {
			if slot.replTicket != 0 {
				slot.replIndex.Commit(slot.replTicket, 0, 0, err)
				slot.replTicket, slot.replIndex = 0, nil
			}
			res.Err = fmt.Errorf("storing entry on %s: %w: %w", t.name, ErrPersistence, err)
			return res, true
		}
		t.dedupMu.Lock()
		dd = t.dedup
	}
	if dd != nil && (checked || earlyChunk) {
		status := dedupNew
		if checked {
			status = dd.check(key, req.SequenceID, highest)
		} else {
			status = dd.checkChunk(key, req.SequenceID)
		}
		switch status {
		case dedupDuplicate:
			t.dedupMu.Unlock()
			res.Duplicate = true
			res.Position = mtypes.Position{LedgerID: -1, EntryID: -1}
			return res, true
		case dedupUnknown:
			t.dedupMu.Unlock()
			res.Err = fmt.Errorf("sequence id %d of %q not yet persisted: %w", req.SequenceID, key, ErrDedupUnknown)
			return res, true
		}
	}
	t.dedupMu.Unlock()
	pt := req.PublishTime
	if pt <= 0 {
		pt = nowMs
	}
	if pt < t.lastAppendTime {
		pt = t.lastAppendTime // keep publish times non-decreasing in the log (seek by time)
	}
	t.lastAppendTime = pt
	t.inflight.Add(1)
	slot.p, slot.dd, slot.tracked, slot.chunk = p, dd, dd != nil && checked, req.Chunk
	slot.msgs, slot.res, slot.acceptedMs = int64(req.NumMessages), res, nowMs
	t.ledger.AppendAsyncIn(lead, req.Entry, pt, slot.appendDoneFn)
	return PublishResult{}, false
}

// appendDone is the storage completion of the slot's append.
func (s *pubSlot) appendDone(pos mtypes.Position, err error) {
	if s.replTicket != 0 {
		if err != nil {
			s.replIndex.Commit(s.replTicket, 0, 0, err)
		} else {
			s.replIndex.Commit(s.replTicket, pos.LedgerID, pos.EntryID, nil)
		}
	}
	if s.marker != nil {
		if err == nil {
			s.p.topic.b.markerStored(s.p.topic, pos, s.marker)
		}
		s.marker = nil
	}
	s.p.topic.appended(s, pos, err)
}

// publishable reports why the producer may not publish now; the caller holds topic.pubMu.
func (p *producerState) publishable() error {
	if p.closed.Load() {
		return fmt.Errorf("producer %q: %w", p.name, ErrProducerClosed)
	}
	return p.topic.publishableLocked()
}

// complete records a result and delivers every result at the head of the queue, in order.
func (p *producerState) complete(slot *pubSlot, res PublishResult) {
	p.qmu.Lock()
	slot.res, slot.ready = res, true
	if p.draining {
		p.qmu.Unlock()
		return
	}
	p.draining = true
	for {
		i := 0
		for i < len(p.queue) && p.queue[i].ready {
			i++
		}
		if i == 0 {
			p.draining = false
			if len(p.queue) == 0 && p.idle != nil {
				close(p.idle)
				p.idle = nil
			}
			p.qmu.Unlock()
			return
		}
		batch := p.queue[:i:i]
		p.queue = p.queue[i:]
		if len(p.queue) == 0 {
			p.queue = nil
		}
		p.qmu.Unlock()
		var bytes int64
		for _, s := range batch {
			bytes += s.bytes
		}
		p.limiter.ReleaseN(bytes, int64(len(batch)))
		answered := time.Now() // one clock read per batch of answers
		for j, s := range batch {
			p.topic.b.publishLatency.Observe(answered.Sub(s.taken))
			s.done(s.res)
			// Delivered: nothing refers to the slot any more (storage called appendDone, which
			// touches its slot only before complete), so it can serve another publish.
			batch[j] = nil
			*s = pubSlot{appendDoneFn: s.appendDoneFn}
			slotPool.Put(s)
		}
		p.qmu.Lock()
	}
}

// slotPool recycles publish slots (about 200 B each) across producers; a pool rather than a list
// per producer: no producer keeps spare slots while idle, and the GC empties it when unused.
var slotPool = sync.Pool{New: func() any { return new(pubSlot) }}

// waitIdle waits until every accepted publish has completed.
func (p *producerState) waitIdle(ctx context.Context) error {
	p.qmu.Lock()
	if len(p.queue) == 0 && !p.draining {
		p.qmu.Unlock()
		return nil
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	ch := p.idle
	p.qmu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close implements Producer.Close.
func (p *producerState) close(ctx context.Context) error {
	if p.closed.Swap(true) {
		return nil
	}
	err := p.waitIdle(ctx)
	p.topic.removeProducer(p)
	return err
}

// appended is the storage completion of one publish (slot holds its request's state).
func (t *topicState) appended(slot *pubSlot, pos mtypes.Position, err error) {
	p, res, dd, tracked, key := slot.p, slot.res, slot.dd, slot.tracked, slot.p.name
	msgs, bytes, chunk := slot.msgs, slot.bytes, slot.chunk
	defer t.inflight.Done()
	if err != nil {
		if dd != nil {
			t.dedupMu.Lock()
			dd.failed()
			t.dedupMu.Unlock()
		}
		switch {
		case errors.Is(err, storage.ErrEntryTooLarge):
			res.Err = fmt.Errorf("storing entry on %s: %w: %w", t.name, wire.ErrTooLarge, err)
		case errors.Is(err, storage.ErrClosed):
			res.Err = fmt.Errorf("storing entry on %s: %w: %w", t.name, ErrTopicFenced, err)
		default:
			res.Err = fmt.Errorf("storing entry on %s: %w: %w", t.name, ErrPersistence, err)
		}
		p.complete(slot, res)
		if t.ledger.Err() != nil || errors.Is(err, storage.ErrClosed) {
			t.b.fenceTopicAsync(t, err)
		}
		return
	}
	if tracked {
		t.dedupMu.Lock()
		dd.persistedEntry(key, res.HighestSequenceID)
		if dd == t.dedup && dd.sinceSnapshot >= t.b.cfg.DedupSnapshotInterval && !t.snapshotRunning {
			// This runs on the storage applier, which every topic's receipts wait for: the
			// snapshot is built and written in the background.
			t.snapshotRunning = true
			dd.sinceSnapshot = 0
			t.startSnapshot(dd, pos)
		}
		t.dedupMu.Unlock()
	}
	p.msgIn.Add(msgs)
	p.bytesIn.Add(bytes)
	if chunk {
		p.chunksIn.Add(1)
	}
	tr := t.counters()
	tr.msgIn.Add(msgs)
	tr.bytesIn.Add(bytes)
	tr.writes.observe(time.Since(slot.taken), bytes)
	// The time the publish was accepted (a clock read per SEND group on the publishing side rather
	// than one per entry here; the stored entries' timestamps differ by the storage latency).
	tr.lastPublish.Store(slot.acceptedMs)
	res.Position = pos
	p.complete(slot, res)
	t.notifySubscriptions()
	t.releaseWaiters(pos, false)
}
