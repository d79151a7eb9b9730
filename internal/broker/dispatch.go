package broker

import (
	"cmp"
	"container/heap"
	"slices"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// This file holds the dispatch decisions of one subscription as a deterministic state machine:
// which consumer is active, which positions to read next, and which consumer gets each entry. It
// does no I/O and takes no locks; subscription.go drives it under the subscription's mutex and does
// the storage reads and sink calls.

// next returns the position after p (Read treats it as "the first entry >= it").
func next(p mtypes.Position) mtypes.Position {
	return mtypes.Position{LedgerID: p.LedgerID, EntryID: p.EntryID + 1}
}

// entryInfo is what dispatch needs to know about one stored entry.
type entryInfo struct {
	pos         mtypes.Position
	data        []byte
	numMessages int
	marker      bool
	deliverAt   int64  // unix ms; 0 = immediately
	keyHash     uint32 // Key_Shared routing hash in 0..65535
	publishTime int64
	// acked is the bitset (bit set = acknowledged) of a partially acknowledged batch, from the cursor.
	acked []uint64
	// chunkUUID identifies a chunked message (MessageMetadata.uuid) when the entry is one of its
	// chunks; lastChunk marks its last chunk.
	chunkUUID string
	lastChunk bool
}

// dconsumer is the dispatcher's view of one consumer.
type dconsumer struct {
	seq      uint64 // join order, unique within the subscription
	name     string
	priority int32
	permits  int64
	// pending: entries delivered to this consumer and not yet acknowledged.
	pending map[mtypes.Position]pendingEntry
	unacked int64 // sum of pending messages
	// keyRange is the consumer's Key_Shared hash range (inclusive); sticky ranges when set by the client.
	sticky []HashRange
	// joinedAt (Key_Shared): the read position when the consumer joined a subscription that already
	// had consumers. Until everything before it is acknowledged, the consumer gets no entries at or
	// after it, so a key that moves to it never overtakes that key's older, still unacknowledged
	// messages at another consumer (Pulsar's "recently joined consumers").
	joinedAt *mtypes.Position
	owner    *consumerState // nil in pure tests
}

// pendingEntry is one delivered, unacknowledged entry.
type pendingEntry struct {
	left  int // messages not yet acknowledged
	total int // messages in the entry (batch size)
}

func newDConsumer(seq uint64, name string, priority int32) *dconsumer {
	return &dconsumer{seq: seq, name: name, priority: priority, pending: make(map[mtypes.Position]pendingEntry)}
}

// delivery is one assignment decided by the dispatcher.
type delivery struct {
	to *dconsumer
	d  Delivery
}

// dispatchState is one subscription's dispatch state.
type dispatchState struct {
	subType   mtypes.SubType
	partition int32
	consumers []*dconsumer // join order
	active    *dconsumer   // Exclusive/Failover only
	rr        int          // Shared round-robin cursor

	// readPos is the next position to read sequentially.
	readPos mtypes.Position
	// replay holds positions to deliver again (redelivery), sorted, without duplicates.
	replay []mtypes.Position
	// delayed holds Shared/Key_Shared entries whose deliver_at_time is in the future -> deliver time.
	delayed map[mtypes.Position]int64
	// delayQueue orders the delayed entries by due time (a min-heap with lazy deletion: an item
	// whose position left delayed, or got another time, is skipped when it surfaces), so releasing
	// due entries costs O(log n) each instead of a scan of every delayed entry per dispatch pass.
	delayQueue delayHeap
	// redeliveries counts earlier deliveries per position (Pulsar's redelivery tracker). The
	// subscription persists the largest counts (substate.go); redeliveriesChanged tells it that
	// they changed since it last did.
	redeliveries        map[mtypes.Position]uint32
	redeliveriesChanged bool
	// owner maps each pending position to the consumer holding it.
	owner map[mtypes.Position]*dconsumer
	// autoSplit owns the hash ranges of the auto-split Key_Shared consumers (keyshared.go).
	autoSplit autoSplitRanges
	// chunkOwner keeps the chunks of one chunked message on one Shared consumer, so the client can
	// reassemble it: message uuid -> the route to the consumer that got its first chunk
	// (chunkroute.go). chunkOf maps each pending chunk (but last chunks) to its message's uuid.
	chunkOwner map[string]*chunkRoute
	chunkOf    map[mtypes.Position]string
	// avgBatch is a moving average of messages per entry, so that a read is sized in entries from
	// permits counted in messages (as Pulsar's avgMessagesPerEntry).
	avgBatch float64
	// markDelete is the cursor's mark-delete position, refreshed by the driver before each plan.
	markDelete mtypes.Position
	// maxUnacked blocks a Shared/Key_Shared consumer holding this many unacknowledged messages
	// (Pulsar's maxUnackedMessagesPerConsumer); 0 = no limit.
	maxUnacked int64
	// maxUnackedSub blocks a whole Shared/Key_Shared subscription holding this many unacknowledged
	// messages (Pulsar's maxUnackedMessagesPerSubscription); 0 = no limit.
	maxUnackedSub int64
	// gen changes whenever readPos is moved backwards or the replay set is reset, so that a storage
	// read started before the change is discarded.
	gen uint64
}

func newDispatchState(t mtypes.SubType, partition int32, readPos mtypes.Position) *dispatchState {
	return &dispatchState{
		subType:      t,
		partition:    partition,
		readPos:      readPos,
		delayed:      make(map[mtypes.Position]int64),
		redeliveries: make(map[mtypes.Position]uint32),
		owner:        make(map[mtypes.Position]*dconsumer),
	}
}

// singleActive reports whether only one consumer receives messages at a time.
func (d *dispatchState) singleActive() bool {
	return d.subType == mtypes.SubExclusive || d.subType == mtypes.SubFailover
}

// pickActive chooses the active consumer of an Exclusive or Failover subscription: consumers sorted
// by priority level then name (then join order); for a partition i, consumer i mod n, else the first.
func pickActive(consumers []*dconsumer, partition int32) *dconsumer {
	if len(consumers) == 0 {
		return nil
	}
	sorted := slices.Clone(consumers)
	slices.SortStableFunc(sorted, func(a, b *dconsumer) int {
		if c := cmp.Compare(a.priority, b.priority); c != 0 {
			return c
		}
		if c := cmp.Compare(a.name, b.name); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	i := 0
	if partition > 0 {
		i = int(partition) % len(sorted)
	}
	return sorted[i]
}

// activeChange is an ACTIVE_CONSUMER_CHANGE to send.
type activeChange struct {
	to     *dconsumer
	active bool
}

// updateActive recomputes the active consumer of a Failover subscription. When it changes, the old
// active consumer's pending entries are rewound (redelivered to the new one) and every consumer is
// told its state. For Exclusive the only consumer is active and nothing is announced.
func (d *dispatchState) updateActive(markDelete mtypes.Position, announceAll bool) []activeChange {
	if !d.singleActive() {
		return nil
	}
	prev := d.active
	d.active = pickActive(d.consumers, d.partition)
	if d.subType != mtypes.SubFailover {
		return nil
	}
	if prev == d.active && !announceAll {
		return nil
	}
	if prev != d.active && prev != nil {
		d.rewind(markDelete)
	}
	out := make([]activeChange, 0, len(d.consumers))
	for _, c := range d.consumers {
		out = append(out, activeChange{to: c, active: c == d.active})
	}
	return out
}

// addConsumer registers a consumer; it returns the ACTIVE_CONSUMER_CHANGE notifications to send.
func (d *dispatchState) addConsumer(c *dconsumer, markDelete mtypes.Position) []activeChange {
	if d.subType == mtypes.SubKeyShared && len(d.consumers) > 0 && d.readPos.Compare(next(markDelete)) > 0 {
		at := d.readPos
		c.joinedAt = &at
	}
	if d.subType == mtypes.SubKeyShared && len(c.sticky) == 0 {
		d.autoSplit.add(c)
	}
	d.consumers = append(d.consumers, c)
	changes := d.updateActive(markDelete, true)
	if d.subType == mtypes.SubFailover && len(changes) == 0 {
		changes = []activeChange{{to: c, active: c == d.active}}
	}
	return changes
}

// removeConsumer unregisters a consumer, returning its pending entries for redelivery, and the
// ACTIVE_CONSUMER_CHANGE notifications to send.
func (d *dispatchState) removeConsumer(c *dconsumer, markDelete mtypes.Position) []activeChange {
	i := slices.Index(d.consumers, c)
	if i < 0 {
		return nil
	}
	d.consumers = slices.Delete(d.consumers, i, i+1)
	d.autoSplit.remove(c)
	if d.rr > i {
		d.rr--
	}
	if d.singleActive() {
		if len(c.pending) > 0 {
			d.rewind(markDelete)
		}
		if d.active == c {
			d.active = nil
			return d.updateActive(markDelete, true)
		}
		return nil
	}
	d.redeliverPending(c, nil)
	return nil
}

// flow adds permits.
func (d *dispatchState) flow(c *dconsumer, n uint32) { c.permits += int64(n) }

// resubscribed: c's client subscribed again under the same consumer id. Clients clear their
// receiver queue before they do and grant their permits afresh after the SUCCESS (pulsar-client-go
// sends its initial permits after every successful SUBSCRIBE). So c's permits go to 0, which keeps
// a redelivery from arriving before the client is ready for it (pulsar-client-go drops what its
// dispatcher holds when it processes the SUCCESS), and what c holds unacknowledged is delivered
// again: its pending entries on Shared and Key_Shared subscriptions, everything from markDelete on
// (a rewind) when it is the active consumer of an Exclusive or Failover one. It reports whether it
// rewound.
func (d *dispatchState) resubscribed(c *dconsumer, markDelete mtypes.Position) (rewound bool) {
	c.permits = 0
	if d.singleActive() {
		if d.active != c {
			return false
		}
		d.rewind(markDelete)
		return true
	}
	d.redeliverPending(c, nil)
	return false
}

// eligible reports whether c may receive entries now.
func (d *dispatchState) eligible(c *dconsumer) bool {
	if d.singleActive() {
		return c.permits > 0 && c == d.active
	}
	return d.canTake(c)
}

// canTake reports whether a Shared/Key_Shared consumer has permits and is not blocked on unacked
// messages.
func (d *dispatchState) canTake(c *dconsumer) bool {
	return c.permits > 0 && !d.blocked(c)
}

// subscriptionBlocked reports whether a Shared/Key_Shared subscription reached its unacked limit.
func (d *dispatchState) subscriptionBlocked() bool {
	if d.maxUnackedSub <= 0 || d.singleActive() {
		return false
	}
	var n int64
	for _, c := range d.consumers {
		n += c.unacked
	}
	return n >= d.maxUnackedSub
}

// blocked reports whether c reached the unacked-message limit.
func (d *dispatchState) blocked(c *dconsumer) bool {
	return d.maxUnacked > 0 && !d.singleActive() && c.unacked >= d.maxUnacked
}

// totalPermits is the sum of the eligible consumers' permits.
func (d *dispatchState) totalPermits() int64 {
	var n int64
	for _, c := range d.consumers {
		if d.eligible(c) {
			n += c.permits
		}
	}
	return n
}

// maxReplay bounds the Key_Shared replay set: beyond it, sequential reading waits for the stuck
// consumers (Pulsar bounds it the same way, by its unacked-message limits).
const maxReplay = 1000

// readPlan says what the dispatcher should read next.
type readPlan struct {
	replay []mtypes.Position // read these entries (redeliveries) ...
	seq    bool              // ... or entries from readPos on
	from   mtypes.Position
	max    int
	gen    uint64
}

// plan decides the next read: redeliveries first, then sequential entries, bounded by maxEntries
// and the eligible permits. ok is false when there is nothing to do until an event arrives.
// lastConfirmed is the topic's last entry; caughtUp tells that a sequential read from readPos
// already found nothing at this lastConfirmed.
// replayStalled tells that the last replay pass delivered nothing (Key_Shared: the keys' consumers
// have no permits); then sequential reading goes on while the replay set is below maxReplay.
func (d *dispatchState) plan(maxEntries int, lastConfirmed mtypes.Position, caughtUp, replayStalled bool) (readPlan, bool) {
	if d.subscriptionBlocked() {
		return readPlan{}, false
	}
	permits := d.totalPermits()
	if permits <= 0 {
		return readPlan{}, false
	}
	want := permits
	if d.avgBatch > 1 {
		want = max(int64(float64(permits)/d.avgBatch), 1)
	}
	n := int(min(int64(maxEntries), want))
	if len(d.replay) > 0 && !replayStalled {
		k := min(n, len(d.replay))
		return readPlan{replay: slices.Clone(d.replay[:k]), gen: d.gen}, true
	}
	if len(d.replay) > 0 && (d.subType != mtypes.SubKeyShared || len(d.replay) >= maxReplay) {
		return readPlan{}, false
	}
	if caughtUp || d.readPos.Compare(lastConfirmed) > 0 {
		return readPlan{}, false
	}
	return readPlan{seq: true, from: d.readPos, max: n, gen: d.gen}, true
}

// replayInsert adds p to the replay set.
func (d *dispatchState) replayInsert(p mtypes.Position) {
	i, found := slices.BinarySearchFunc(d.replay, p, mtypes.Position.Compare)
	if !found {
		d.replay = slices.Insert(d.replay, i, p)
	}
}

func (d *dispatchState) replayRemove(p mtypes.Position) {
	if i, found := slices.BinarySearchFunc(d.replay, p, mtypes.Position.Compare); found {
		d.replay = slices.Delete(d.replay, i, i+1)
	}
}

// selectConsumer picks the consumer for one entry, or nil if none can take it now.
func (d *dispatchState) selectConsumer(e *entryInfo) *dconsumer {
	if d.singleActive() {
		if d.active != nil && d.active.permits > 0 {
			return d.active
		}
		return nil
	}
	if len(d.consumers) == 0 {
		return nil
	}
	if d.subType == mtypes.SubKeyShared {
		c := d.keyOwner(e.keyHash)
		if c != nil && d.canTake(c) && d.joinAllows(c, e.pos) {
			return c
		}
		return nil
	}
	// Shared: the rest of a chunked message goes where its first chunk went.
	if e.chunkUUID != "" {
		if r := d.chunkOwner[e.chunkUUID]; r != nil {
			if c := r.to; slices.Contains(d.consumers, c) {
				if d.canTake(c) {
					return c
				}
				return nil
			}
			d.endChunkRoute(e.chunkUUID) // its consumer left: the client restarts the message
		}
	}
	// Shared: round robin among the consumers with permits at the best (lowest) priority level.
	best := int32(0)
	found := false
	for _, c := range d.consumers {
		if d.canTake(c) && (!found || c.priority < best) {
			best, found = c.priority, true
		}
	}
	if !found {
		return nil
	}
	n := len(d.consumers)
	for k := 0; k < n; k++ {
		i := (d.rr + k) % n
		c := d.consumers[i]
		if d.canTake(c) && c.priority == best {
			d.rr = (i + 1) % n
			return c
		}
	}
	return nil
}

// joinAllows applies the recently-joined restriction of Key_Shared consumers.
func (d *dispatchState) joinAllows(c *dconsumer, p mtypes.Position) bool {
	if c.joinedAt == nil {
		return true
	}
	if d.markDelete.Compare(*c.joinedAt) >= 0 || next(d.markDelete) == *c.joinedAt {
		c.joinedAt = nil // everything before the join point is acknowledged
		return true
	}
	return p.Compare(*c.joinedAt) < 0
}

// keyOwner maps a key hash to a Key_Shared consumer: a consumer whose sticky ranges contain it,
// else the auto-split owner (keyshared.go: a join splits the largest range, a leave merges the
// leaver's range into a neighbour's, so surviving consumers keep their keys).
func (d *dispatchState) keyOwner(h uint32) *dconsumer {
	for _, c := range d.consumers {
		for _, r := range c.sticky {
			if int32(h) >= r.Start && int32(h) <= r.End {
				return c
			}
		}
	}
	return d.autoSplit.owner(h)
}

// assignResult is the outcome of assigning read entries.
type assignResult struct {
	deliveries []delivery
	// markers are marker entries to acknowledge on the cursor (never dispatched).
	markers []mtypes.Position
	// acked lists positions that turned out to be acknowledged already (skipped).
	skipped int
}

// assign hands read entries to consumers. For a sequential read, entries are taken in order and
// readPos advances past every entry handled; the first entry no consumer can take stops the pass
// (it is read again later), except on Key_Shared, where such an entry joins the replay set so that
// other keys keep flowing. For a replay read, handled positions leave the replay set.
// isAcked reports entries acknowledged since they were read. now is the clock in unix ms
// (delayed delivery).
func (d *dispatchState) assign(p readPlan, entries []entryInfo, isAcked func(mtypes.Position) bool, now int64) assignResult {
	var res assignResult
	if p.gen != d.gen {
		return res
	}
	for i := range entries {
		e := &entries[i]
		if p.seq && e.pos.Compare(d.readPos) < 0 {
			continue // already handled (a concurrent seek cannot happen: gen would differ)
		}
		if e.marker {
			res.markers = append(res.markers, e.pos)
			d.handled(p, e.pos)
			continue
		}
		if isAcked != nil && isAcked(e.pos) {
			res.skipped++
			d.handled(p, e.pos)
			continue
		}
		if _, own := d.owner[e.pos]; own {
			// Already pending at a consumer (e.g. replay raced with a new delivery): skip.
			d.handled(p, e.pos)
			continue
		}
		if e.deliverAt > now && !d.singleActive() {
			d.delayed[e.pos] = e.deliverAt
			heap.Push(&d.delayQueue, delayItem{at: e.deliverAt, pos: e.pos})
			d.handled(p, e.pos)
			continue
		}
		c := d.selectConsumer(e)
		if c != nil && e.chunkUUID != "" && d.subType == mtypes.SubShared {
			d.routeChunk(e, c)
		}
		if c == nil {
			if d.subType == mtypes.SubKeyShared && len(d.consumers) > 0 {
				// Its key's consumer has no permits: keep it for later, let other keys flow.
				if p.seq {
					d.replayInsert(e.pos)
					d.handled(p, e.pos)
				}
				continue
			}
			break
		}
		if d.avgBatch == 0 {
			d.avgBatch = float64(e.numMessages)
		} else {
			d.avgBatch = 0.9*d.avgBatch + 0.1*float64(e.numMessages)
		}
		msgs := e.numMessages
		var ackSet []int64
		if len(e.acked) > 0 {
			ackSet, msgs = unackedSet(e.acked, e.numMessages)
		}
		c.permits -= int64(msgs)
		c.pending[e.pos] = pendingEntry{left: msgs, total: e.numMessages}
		c.unacked += int64(msgs)
		d.owner[e.pos] = c
		res.deliveries = append(res.deliveries, delivery{to: c, d: Delivery{
			Position:        e.pos,
			Partition:       d.partition,
			NumMessages:     msgs,
			AckSet:          ackSet,
			RedeliveryCount: d.redeliveries[e.pos],
			Data:            e.data,
		}})
		d.handled(p, e.pos)
	}
	return res
}

// handled records that the entry at pos needs no more reading in this pass.
func (d *dispatchState) handled(p readPlan, pos mtypes.Position) {
	if p.seq {
		if pos.Compare(d.readPos) >= 0 {
			d.readPos = next(pos)
		}
		return
	}
	d.replayRemove(pos)
}

// unackedSet turns the cursor's acked bitset of a batch of n messages into the MESSAGE ack_set
// (bit set = still to deliver) and counts the messages left. n comes from the entry's metadata, so
// it is bounded to maxBatchMessages before it sizes anything.
func unackedSet(acked []uint64, n int) ([]int64, int) {
	n = batchMessages(n)
	words := (n + 63) / 64
	out := make([]int64, words)
	left := 0
	for i := 0; i < n; i++ {
		w, b := i/64, uint(i%64)
		isAcked := w < len(acked) && acked[w]&(1<<b) != 0
		if !isAcked {
			out[w] |= 1 << b
			left++
		}
	}
	return out, left
}

// acked records that the entries at ps are acknowledged (individually or because the cursor moved).
func (d *dispatchState) acked(ps ...mtypes.Position) {
	for _, p := range ps {
		if c := d.owner[p]; c != nil {
			d.chunkLeft(p, c)
			c.unacked -= int64(c.pending[p].left)
			delete(c.pending, p)
			delete(d.owner, p)
		}
		d.forgetRedeliveries(p)
		delete(d.delayed, p)
		d.replayRemove(p)
	}
}

// forgetRedeliveries drops the redelivery count of an acknowledged entry.
func (d *dispatchState) forgetRedeliveries(p mtypes.Position) {
	if _, ok := d.redeliveries[p]; ok {
		delete(d.redeliveries, p)
		d.redeliveriesChanged = true
	}
}

// batchSize returns the number of messages of a pending entry, 0 if it is not pending.
func (d *dispatchState) batchSize(p mtypes.Position) int {
	if c := d.owner[p]; c != nil {
		return c.pending[p].total
	}
	return 0
}

// partiallyAcked updates the pending message count of a batch entry after a batch-index ack.
func (d *dispatchState) partiallyAcked(p mtypes.Position, left int) {
	if c := d.owner[p]; c != nil {
		pe := c.pending[p]
		c.unacked -= int64(pe.left - left)
		pe.left = left
		c.pending[p] = pe
	}
}

// ackedUpTo records a cumulative acknowledgement: every pending entry <= p is done.
func (d *dispatchState) ackedUpTo(p mtypes.Position) {
	var done []mtypes.Position
	for q := range d.owner {
		if q.Compare(p) <= 0 {
			done = append(done, q)
		}
	}
	for q := range d.redeliveries {
		if q.Compare(p) <= 0 {
			done = append(done, q)
		}
	}
	for q := range d.delayed {
		if q.Compare(p) <= 0 {
			done = append(done, q)
		}
	}
	d.acked(done...)
	for len(d.replay) > 0 && d.replay[0].Compare(p) <= 0 {
		d.replay = d.replay[1:]
	}
	if d.readPos.Compare(p) <= 0 {
		d.readPos = next(p)
	}
}

// redeliverPending puts c's pending entries (only those in ps, or all when ps is nil) back for
// redelivery, counting a redelivery for each.
func (d *dispatchState) redeliverPending(c *dconsumer, ps []mtypes.Position) int {
	var list []mtypes.Position
	if ps == nil {
		for p := range c.pending {
			list = append(list, p)
		}
	} else {
		for _, p := range ps {
			if _, ok := c.pending[p]; ok {
				list = append(list, p)
			}
		}
	}
	n := 0
	for _, p := range list {
		d.chunkLeft(p, c)
		n += c.pending[p].left
		c.unacked -= int64(c.pending[p].left)
		delete(c.pending, p)
		delete(d.owner, p)
		d.redeliveries[p]++
		d.redeliveriesChanged = true
		d.replayInsert(p)
	}
	return n
}

// rewind restarts sequential reading after the mark-delete position (Exclusive/Failover
// redelivery): every pending entry counts a redelivery and is read again; acknowledged ones are
// skipped when read.
func (d *dispatchState) rewind(markDelete mtypes.Position) int {
	n := 0
	for p, c := range d.owner {
		n += c.pending[p].left
		d.redeliveries[p]++
		d.redeliveriesChanged = true
	}
	for _, c := range d.consumers {
		clear(c.pending)
		c.unacked = 0
	}
	clear(d.owner)
	d.clearChunkRoutes()
	d.replay = nil
	d.readPos = next(markDelete)
	d.gen++
	return n
}

// reset moves the subscription to a new position (seek): pending, replay, delayed and redelivery
// state are dropped.
func (d *dispatchState) reset(readPos mtypes.Position) {
	for _, c := range d.consumers {
		clear(c.pending)
		c.unacked = 0
	}
	clear(d.owner)
	if len(d.redeliveries) > 0 {
		clear(d.redeliveries)
		d.redeliveriesChanged = true
	}
	clear(d.delayed)
	d.clearChunkRoutes()
	d.delayQueue = nil
	d.replay = nil
	d.readPos = readPos
	d.gen++
}

// releaseDelayed moves delayed entries due at or before now to the replay set; it returns the next
// due time (0 if none).
func (d *dispatchState) releaseDelayed(now int64) int64 {
	for len(d.delayQueue) > 0 {
		top := d.delayQueue[0]
		if at, ok := d.delayed[top.pos]; !ok || at != top.at {
			heap.Pop(&d.delayQueue) // stale: acknowledged, reset or re-scheduled
			continue
		}
		if top.at > now {
			return top.at
		}
		heap.Pop(&d.delayQueue)
		delete(d.delayed, top.pos)
		d.replayInsert(top.pos)
	}
	return 0
}

// delayItem is one delayed entry in the delay queue.
type delayItem struct {
	at  int64
	pos mtypes.Position
}

// delayHeap is a min-heap of delayItems by due time (container/heap).
type delayHeap []delayItem

func (h delayHeap) Len() int { return len(h) }
func (h delayHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].pos.Compare(h[j].pos) < 0
}
func (h delayHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)   { *h = append(*h, x.(delayItem)) }
func (h *delayHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
