package replication

import (
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/internal/crc32c"
	"github.com/meridian-mq/meridian/internal/mtypes"
)

// The replicator's decision logic is Machine: a deterministic state machine that takes events (a
// producer connected, entries read, a receipt, a failure, a timer, time passing) and returns actions
// (connect, read, send, mark-delete, arm a timer, close the producer). It performs no I/O and reads no
// clock: time arrives with the events. Runner executes the actions.
//
// There is no terminal failure state. Every failure (connect, send, receipt timeout, read,
// mark-delete) is recorded as LastError and answered with a retry: reconnects back off from
// MinBackoff doubling to MaxBackoff; a producer that stops answering is declared failed after
// ReceiptTimeout. Only Stop ends a replicator.

// MachineConfig configures one replicator.
type MachineConfig struct {
	Local, Remote string
	// MaxInflightEntries / MaxInflightBytes bound entries sent and not yet acknowledged by the remote
	// (at least one entry is always allowed). Defaults 4000 (4x Pulsar's replicationProducerQueueSize:
	// the window must cover the whole pipeline of reads, the link, the remote's group commit and its
	// receipts; at 1000 an unbatched catch-up ran 25% slower) and 32 MiB.
	MaxInflightEntries int
	MaxInflightBytes   int64
	// ReadBatchEntries / ReadBatchBytes bound one read of the local log. Defaults 400 and 5 MiB
	// (Pulsar's dispatcherMaxReadSizeBytes; its dispatcherMaxReadBatchSize is 100, but every read
	// costs a goroutine, a storage lookup, a pread and a round through the runner: reads of 400
	// unbatched 1 KiB entries cut the catch-up's CPU per message by ~2-3 % against 100). Up to two
	// batches are read ahead of the window (entries read and not yet sent; see pump).
	ReadBatchEntries int
	ReadBatchBytes   int64
	// MinBackoff / MaxBackoff bound retry delays. Defaults 100 ms and 5 s (docs/design.md, "Replication invariants").
	MinBackoff, MaxBackoff time.Duration
	// ReceiptTimeout declares the producer failed when the oldest entry in flight has had no receipt
	// for this long. Default 30 s.
	ReceiptTimeout time.Duration
	// Rate is the replicatorDispatchRate; zero fields mean unlimited.
	Rate Rate
	// Prepare turns a stored entry into what is sent (nil = PrepareEntry). Tests may substitute it.
	Prepare func(e mtypes.Entry, local, remote string) (Outbound, SkipReason, error)
}

// DefaultMaxInflightEntries is MachineConfig.MaxInflightEntries' default; the replication producer's
// own pending limit is the same, so the window, not the producer, bounds what is in flight.
const DefaultMaxInflightEntries = 4000

func (c *MachineConfig) withDefaults() {
	if c.MaxInflightEntries <= 0 {
		c.MaxInflightEntries = DefaultMaxInflightEntries
	}
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = 32 << 20
	}
	if c.ReadBatchEntries <= 0 {
		c.ReadBatchEntries = 400
	}
	if c.ReadBatchBytes <= 0 {
		c.ReadBatchBytes = 5 << 20
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Second
	}
	if c.ReceiptTimeout <= 0 {
		c.ReceiptTimeout = 30 * time.Second
	}
	if c.Prepare == nil {
		c.Prepare = PrepareEntry
	}
}

// Rate is a dispatch rate limit (Pulsar's replicatorDispatchRate): messages and bytes per second;
// zero or negative means unlimited.
type Rate struct {
	MessagesPerSecond float64
	BytesPerSecond    float64
}

// Unlimited reports whether neither limit is set.
func (r Rate) Unlimited() bool { return r.MessagesPerSecond <= 0 && r.BytesPerSecond <= 0 }

// Phase is the replicator's connection state.
type Phase int

const (
	PhaseIdle       Phase = iota // not started
	PhaseConnecting              // creating the producer on the remote cluster
	PhaseConnected               // producer up: reading and sending
	PhaseBackoff                 // waiting before the next connect attempt
	PhaseStopped                 // stopped for good (Stop)
)

func (p Phase) String() string {
	switch p {
	case PhaseIdle:
		return "idle"
	case PhaseConnecting:
		return "connecting"
	case PhaseConnected:
		return "connected"
	case PhaseBackoff:
		return "backoff"
	case PhaseStopped:
		return "stopped"
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

// TimerKind names the machine's timers.
type TimerKind int

const (
	TimerReconnect  TimerKind = iota + 1 // next connect attempt
	TimerRead                            // retry a failed read
	TimerRate                            // rate-limit tokens available again
	TimerMarkDelete                      // retry a failed mark-delete
)

// Events. Gen fields carry the producer generation of ActConnect; events of an older generation are
// ignored (late receipts of a closed producer).
type (
	// EvStart: the cursor is open; the first entry to send is after MarkDelete.
	EvStart struct {
		Now        time.Time
		MarkDelete mtypes.Position
	}
	EvConnected struct {
		Now time.Time
		Gen int64
	}
	EvConnectFailed struct {
		Now time.Time
		Gen int64
		Err error
	}
	// EvReadDone: result of ActRead (Epoch echoes the action's).
	EvReadDone struct {
		Now     time.Time
		Epoch   int64
		Entries []mtypes.Entry
		Err     error
	}
	// EvReceipt: the remote persisted the entry with source position Source.
	EvReceipt struct {
		Now    time.Time
		Gen    int64
		Source mtypes.Position
	}
	// EvReceipts: several receipts that arrived together, in arrival order (the runner batches
	// them: one pass over the window instead of one per entry).
	EvReceipts struct {
		Now     time.Time
		Gen     int64
		Sources []mtypes.Position
	}
	// EvSendFailed: the producer failed (send error, connection lost and not recovered).
	EvSendFailed struct {
		Now time.Time
		Gen int64
		Err error
	}
	// EvMarkDeleteDone: result of ActMarkDelete.
	EvMarkDeleteDone struct {
		Now time.Time
		Pos mtypes.Position
		Err error
	}
	// EvDataAvailable: entries at or after the position of ActWaitForData exist.
	EvDataAvailable struct{ Now time.Time }
	EvTimer         struct {
		Now  time.Time
		Kind TimerKind
	}
	// EvTick: time passes (once a second); used to detect a producer that stopped answering.
	EvTick struct{ Now time.Time }
	// EvSetRate: the replicatorDispatchRate policy changed.
	EvSetRate struct {
		Now  time.Time
		Rate Rate
	}
	EvStop struct{ Now time.Time }
)

// Event is one of the Ev* types.
type Event interface{ eventTime() time.Time }

func (e EvStart) eventTime() time.Time          { return e.Now }
func (e EvConnected) eventTime() time.Time      { return e.Now }
func (e EvConnectFailed) eventTime() time.Time  { return e.Now }
func (e EvReadDone) eventTime() time.Time       { return e.Now }
func (e EvReceipt) eventTime() time.Time        { return e.Now }
func (e EvReceipts) eventTime() time.Time       { return e.Now }
func (e EvSendFailed) eventTime() time.Time     { return e.Now }
func (e EvMarkDeleteDone) eventTime() time.Time { return e.Now }
func (e EvDataAvailable) eventTime() time.Time  { return e.Now }
func (e EvTimer) eventTime() time.Time          { return e.Now }
func (e EvTick) eventTime() time.Time           { return e.Now }
func (e EvSetRate) eventTime() time.Time        { return e.Now }
func (e EvStop) eventTime() time.Time           { return e.Now }

// Actions.
type (
	// ActConnect: create the producer (generation Gen) on the remote cluster.
	ActConnect struct{ Gen int64 }
	// ActCloseProducer: close the producer of generation Gen (its pending sends are abandoned).
	ActCloseProducer struct{ Gen int64 }
	// ActRead: read up to MaxEntries / MaxBytes entries at or after From.
	ActRead struct {
		Epoch      int64
		From       mtypes.Position
		MaxEntries int
		MaxBytes   int64
	}
	// ActSend: send Out through the producer of generation Gen.
	ActSend struct {
		Gen int64
		Out Outbound
	}
	// ActSends: send Outs, in order, through the producer of generation Gen. The machine emits
	// its sends as one ActSends per event (one action instead of one boxed ActSend per entry);
	// ActSend is kept for executors and tests that build single sends.
	ActSends struct {
		Gen  int64
		Outs []Outbound
	}
	// ActMarkDelete: move the replication cursor's mark-delete position to Pos.
	ActMarkDelete struct{ Pos mtypes.Position }
	// ActWaitForData: post EvDataAvailable once an entry at or after From is stored.
	ActWaitForData struct{ From mtypes.Position }
	// ActSetTimer: post EvTimer{Kind} after Delay (replacing a pending timer of that kind).
	ActSetTimer struct {
		Kind  TimerKind
		Delay time.Duration
	}
)

// Action is one of the Act* types.
type Action interface{ isAction() }

func (ActConnect) isAction()       {}
func (ActCloseProducer) isAction() {}
func (ActRead) isAction()          {}
func (ActSend) isAction()          {}
func (ActSends) isAction()         {}
func (ActMarkDelete) isAction()    {}
func (ActWaitForData) isAction()   {}
func (ActSetTimer) isAction()      {}

// item is an entry read and not yet covered by the mark-delete position.
type item struct {
	pos         mtypes.Position
	skip        bool // not sent (SkipReason); acknowledged as soon as everything before it is
	out         Outbound
	sent        bool
	acked       bool
	publishTime int64
}

// Counters are the machine's monotonic counters and state for stats.
type Counters struct {
	MsgOut, BytesOut, EntriesOut int64
	Skipped                      map[SkipReason]int64
	Phase                        Phase
	ConnectedSince               time.Time // zero while not connected
	LastError                    string
	LastErrorTime                time.Time
	LastProgress                 time.Time       // last receipt or cursor advance
	MarkDelete                   mtypes.Position // last mark-delete position acknowledged by the cursor
	ReadPosition                 mtypes.Position // next position to read
	Inflight                     int
	OldestPendingPublishTime     int64 // unix ms of the oldest entry read and not yet acknowledged; 0 if none
	Reconnects                   int64
	RateLimited                  bool
}

// Machine is the replicator state machine. It is not safe for concurrent use; Runner serialises it.
type Machine struct {
	cfg MachineConfig

	phase    Phase
	gen      int64 // generation of the current/last producer
	epoch    int64 // read epoch; bumped on every rewind so stale reads are dropped
	reading  bool
	waiting  bool
	readFrom mtypes.Position
	pending  []item
	// store is pending's backing array: acknowledged entries are dropped from pending's head by
	// reslicing, and new entries are appended after compacting pending to store's start when
	// the tail is full, so the window does not reallocate as it slides.
	store []item
	// headroom is where prepareFast carves the entries' new metadata heads from (one allocation
	// per ~32 KiB of heads instead of one per entry); nil when cfg.Prepare is not the default.
	headroom *[]byte
	// shifts keeps the CRC shift tables of recurring body lengths (prepareFast's checksum of a
	// re-headed entry); nil with headroom.
	shifts        *crc32c.ShiftCache
	sendIdx       int // pending[:sendIdx] are sent or skipped
	ackIdx        int // pending[:ackIdx] are acknowledged or skipped (where the next receipt's entry is searched from)
	inflight      int
	inflightBytes int64
	unsentBytes   int64 // sizes of the entries in pending[sendIdx:] that are to be sent (not skipped)
	// backlogged: the last read was a whole batch, so more is stored than read (a catch-up), and
	// the next batch may be read while one waits to be sent (see pump).
	backlogged bool

	markDeleted      mtypes.Position // acknowledged by the cursor
	markDeleteWanted mtypes.Position // last ActMarkDelete target
	markDeleteBusy   bool

	backoff     time.Duration
	readBackoff time.Duration
	progressed  bool // a receipt arrived since the last connect: the next failure starts from MinBackoff

	limiter    tokenBucket
	rateArmed  bool
	lastSendAt time.Time // when the oldest in-flight entry was sent (receipt timeout)
	c          Counters
}

// NewMachine returns a machine in PhaseIdle; EvStart begins replication.
func NewMachine(cfg MachineConfig) *Machine {
	defaultPrepare := cfg.Prepare == nil
	cfg.withDefaults()
	m := &Machine{cfg: cfg, backoff: cfg.MinBackoff, readBackoff: cfg.MinBackoff}
	if defaultPrepare {
		m.headroom = new([]byte)
		m.shifts = new(crc32c.ShiftCache)
	}
	m.c.Skipped = map[SkipReason]int64{}
	m.limiter.setRate(cfg.Rate, time.Time{})
	return m
}

// Phase returns the current phase.
func (m *Machine) Phase() Phase { return m.phase }

// Counters returns a copy of the counters and state for stats.
func (m *Machine) Counters() Counters {
	c := m.c
	c.Skipped = make(map[SkipReason]int64, len(m.c.Skipped))
	for k, v := range m.c.Skipped {
		c.Skipped[k] = v
	}
	c.Phase = m.phase
	c.MarkDelete = m.markDeleted
	c.ReadPosition = m.readFrom
	c.Inflight = m.inflight
	c.OldestPendingPublishTime = 0
	for _, it := range m.pending {
		if !it.skip {
			c.OldestPendingPublishTime = it.publishTime
			break
		}
	}
	c.RateLimited = m.rateArmed
	return c
}

// Handle applies one event and returns the actions to execute, in order.
func (m *Machine) Handle(ev Event) []Action {
	if m.phase == PhaseStopped {
		return nil
	}
	var acts []Action
	switch e := ev.(type) {
	case EvStart:
		if m.phase != PhaseIdle {
			return nil
		}
		m.markDeleted, m.markDeleteWanted = e.MarkDelete, e.MarkDelete
		m.readFrom = e.MarkDelete.Next()
		if e.MarkDelete == mtypes.Earliest {
			m.readFrom = mtypes.Position{LedgerID: 0, EntryID: 0}
		}
		acts = m.connect(acts)
	case EvConnected:
		if e.Gen != m.gen || m.phase != PhaseConnecting {
			return nil
		}
		m.phase = PhaseConnected
		m.c.ConnectedSince = e.Now
		m.progressed = false
		acts = m.pump(acts, e.Now)
	case EvConnectFailed:
		if e.Gen != m.gen || m.phase != PhaseConnecting {
			return nil
		}
		acts = m.fail(acts, e.Now, fmt.Errorf("connect to %s: %w", m.cfg.Remote, e.Err), false)
	case EvSendFailed:
		if e.Gen != m.gen || m.phase != PhaseConnected {
			return nil
		}
		acts = m.fail(acts, e.Now, fmt.Errorf("send to %s: %w", m.cfg.Remote, e.Err), true)
	case EvReceipt:
		if e.Gen != m.gen || m.phase != PhaseConnected {
			return nil
		}
		acts = m.receipt(acts, e)
	case EvReceipts:
		if e.Gen != m.gen || m.phase != PhaseConnected {
			return nil
		}
		for _, src := range e.Sources {
			var ok bool
			if acts, ok = m.ack(acts, e.Now, src); !ok {
				return acts // failed: rewound, the rest belongs to the abandoned producer
			}
		}
		acts = m.pump(acts, e.Now)
	case EvReadDone:
		if e.Epoch != m.epoch || !m.reading {
			return nil
		}
		m.reading = false
		if e.Err != nil {
			m.setError(e.Now, fmt.Errorf("read local topic at %s: %w", m.readFrom, e.Err))
			acts = append(acts, ActSetTimer{Kind: TimerRead, Delay: m.readBackoff})
			m.readBackoff = min(2*m.readBackoff, m.cfg.MaxBackoff)
			m.reading = true // blocks further reads until the timer fires
			return acts
		}
		m.readBackoff = m.cfg.MinBackoff
		m.backlogged = wholeBatch(e.Entries, m.cfg.ReadBatchEntries, m.cfg.ReadBatchBytes)
		acts = m.addEntries(acts, e.Now, e.Entries)
		if len(e.Entries) == 0 {
			m.waiting = true
			acts = append(acts, ActWaitForData{From: m.readFrom})
		}
		acts = m.pump(acts, e.Now)
	case EvDataAvailable:
		if !m.waiting {
			return nil
		}
		m.waiting = false
		acts = m.pump(acts, e.Now)
	case EvMarkDeleteDone:
		m.markDeleteBusy = false
		if e.Err != nil {
			m.setError(e.Now, fmt.Errorf("mark-delete replication cursor at %s: %w", e.Pos, e.Err))
			acts = append(acts, ActSetTimer{Kind: TimerMarkDelete, Delay: m.cfg.MinBackoff})
			m.markDeleteBusy = true // until the timer fires
			return acts
		}
		if e.Pos.Compare(m.markDeleted) > 0 {
			m.markDeleted = e.Pos
			m.c.LastProgress = e.Now
		}
		acts = m.flushMarkDelete(acts)
	case EvTimer:
		switch e.Kind {
		case TimerReconnect:
			if m.phase == PhaseBackoff {
				acts = m.connect(acts)
			}
		case TimerRead:
			if m.reading {
				m.reading = false
				acts = m.pump(acts, e.Now)
			}
		case TimerRate:
			m.rateArmed = false
			acts = m.pump(acts, e.Now)
		case TimerMarkDelete:
			m.markDeleteBusy = false
			acts = m.flushMarkDelete(acts)
		}
	case EvTick:
		if m.phase == PhaseConnected && m.inflight > 0 && e.Now.Sub(m.lastSendAt) >= m.cfg.ReceiptTimeout {
			acts = m.fail(acts, e.Now, fmt.Errorf("no receipt from %s for %s", m.cfg.Remote, m.cfg.ReceiptTimeout), true)
		}
	case EvSetRate:
		m.limiter.setRate(e.Rate, e.Now)
		m.cfg.Rate = e.Rate
		if m.rateArmed {
			m.rateArmed = false
		}
		acts = m.pump(acts, e.Now)
	case EvStop:
		m.phase = PhaseStopped
		m.c.ConnectedSince = time.Time{}
		acts = append(acts, ActCloseProducer{Gen: m.gen})
	}
	return acts
}

func (m *Machine) connect(acts []Action) []Action {
	m.gen++
	m.phase = PhaseConnecting
	return append(acts, ActConnect{Gen: m.gen})
}

// fail records err, abandons the producer, rewinds to the oldest unacknowledged entry and schedules
// a reconnect.
func (m *Machine) fail(acts []Action, now time.Time, err error, closeProducer bool) []Action {
	m.setError(now, err)
	if closeProducer {
		acts = append(acts, ActCloseProducer{Gen: m.gen})
	}
	m.rewind()
	if m.progressed {
		m.backoff = m.cfg.MinBackoff
	}
	m.progressed = false
	m.phase = PhaseBackoff
	m.c.ConnectedSince = time.Time{}
	m.c.Reconnects++
	acts = append(acts, ActSetTimer{Kind: TimerReconnect, Delay: m.backoff})
	m.backoff = min(2*m.backoff, m.cfg.MaxBackoff)
	return acts
}

// rewind forgets everything read and not acknowledged; it is read (and sent) again after reconnect.
// The receiving cluster drops what it already stored by source position.
func (m *Machine) rewind() {
	if len(m.pending) > 0 {
		m.readFrom = m.pending[0].pos
	}
	clear(m.store[:cap(m.store)])
	m.pending = m.store[:0]
	m.sendIdx, m.ackIdx = 0, 0
	m.inflight, m.inflightBytes = 0, 0
	m.unsentBytes = 0
	m.backlogged = false
	m.epoch++
	m.reading = false
	m.waiting = false
}

func (m *Machine) setError(now time.Time, err error) {
	m.c.LastError = err.Error()
	m.c.LastErrorTime = now
}

func (m *Machine) addEntries(acts []Action, now time.Time, entries []mtypes.Entry) []Action {
	m.reserve(len(entries))
	for _, e := range entries {
		if e.Position.Compare(m.readFrom) < 0 {
			continue // defensive: never go backwards
		}
		var (
			out    Outbound
			reason SkipReason
			err    error
		)
		if m.headroom != nil {
			out, reason, err = prepareEntry(e, m.cfg.Local, m.cfg.Remote, m.headroom, m.shifts)
		} else {
			out, reason, err = m.cfg.Prepare(e, m.cfg.Local, m.cfg.Remote)
		}
		it := item{pos: e.Position, publishTime: e.PublishTime}
		if reason != SkipNone {
			it.skip = true
			m.c.Skipped[reason]++
			if err != nil {
				// A corrupt entry cannot be sent to anyone; it is skipped loudly, never silently.
				m.setError(now, fmt.Errorf("skipped entry %s: %w", e.Position, err))
			}
		} else {
			it.out = out
			m.unsentBytes += int64(out.Size())
		}
		m.pending = append(m.pending, it)
		m.readFrom = e.Position.Next()
	}
	return acts
}

// reserve makes room for n more entries in pending without reallocating while the window only
// slides. pending always ends where store ends (entries leave its head by reslicing, arrive by
// appending within capacity); when the tail is full, pending moves to store's start, and store
// is replaced only when the window itself outgrows half of it, so a move happens at most once
// per half a store of entries (amortised: one item copied per entry).
func (m *Machine) reserve(n int) {
	if cap(m.pending)-len(m.pending) >= n {
		return
	}
	used := len(m.pending)
	store := m.store[:cap(m.store)]
	if used+n > len(store)/2 {
		bigger := make([]item, max(2*(used+n), 64))
		copy(bigger, m.pending)
		m.store, m.pending = bigger, bigger[:used]
		return
	}
	start := len(store) - cap(m.pending)        // pending's offset in store
	copy(store, m.pending)                      // overlapping copy is a memmove
	clear(store[max(start, used) : start+used]) // stale copies of the moved entries
	m.pending = store[:used]
}

// pump sends what may be sent, acknowledges skipped entries at the head and reads more.
func (m *Machine) pump(acts []Action, now time.Time) []Action {
	if m.phase != PhaseConnected {
		return acts
	}
	var outs []Outbound // one ActSends for the lot (not one boxed ActSend per entry)
	for m.sendIdx < len(m.pending) {
		it := &m.pending[m.sendIdx]
		if it.skip {
			m.sendIdx++
			continue
		}
		if m.inflight > 0 && (m.inflight >= m.cfg.MaxInflightEntries || m.inflightBytes+int64(it.out.Size()) > m.cfg.MaxInflightBytes) {
			break
		}
		if m.rateArmed {
			break
		}
		if wait := m.limiter.take(now, it.out.Messages, it.out.Size()); wait > 0 {
			m.rateArmed = true
			if len(outs) > 0 {
				acts = append(acts, ActSends{Gen: m.gen, Outs: outs})
				outs = nil
			}
			acts = append(acts, ActSetTimer{Kind: TimerRate, Delay: wait})
			break
		}
		if m.inflight == 0 {
			m.lastSendAt = now
		}
		it.sent = true
		m.inflight++
		m.inflightBytes += int64(it.out.Size())
		m.unsentBytes -= int64(it.out.Size())
		if outs == nil {
			outs = make([]Outbound, 0, m.unsent())
		}
		outs = append(outs, it.out)
		m.sendIdx++
	}
	if len(outs) > 0 {
		acts = append(acts, ActSends{Gen: m.gen, Outs: outs})
	}
	acts = m.advance(acts)
	// Read ahead: once every entry read is sent, the next full batch is read even while the
	// window is full, so that receipts find entries ready to send (no read round trip between a
	// receipt and the next send) and reads stay whole batches rather than the few slots a burst
	// of receipts frees (each read costs a storage lookup and, from disk, a pass from the nearest
	// index point). In a catch-up (the last read was a whole batch) the next batch is read as soon
	// as less than a batch waits to be sent, so that one batch is in hand while the next is read:
	// a read from disk (O_DIRECT, so no kernel read-ahead) takes a device round trip, which would
	// otherwise stall the sends after every batch. Near the end of the log reads are short, and
	// reading again while some wait would only make many small reads. One read at a time;
	// bounded: pending holds at most the window plus two read batches.
	unsent := len(m.pending) - m.sendIdx
	if !m.reading && !m.waiting && (unsent == 0 || m.backlogged && unsent < m.cfg.ReadBatchEntries && m.unsentBytes < m.cfg.ReadBatchBytes) {
		m.reading = true
		acts = append(acts, ActRead{Epoch: m.epoch, From: m.readFrom, MaxEntries: m.cfg.ReadBatchEntries, MaxBytes: m.cfg.ReadBatchBytes})
	}
	return acts
}

// wholeBatch reports whether a read returned all it was allowed to (MaxEntries entries, or close
// to MaxBytes: the next entry would not have fitted), so the log likely holds more.
func wholeBatch(es []mtypes.Entry, maxEntries int, maxBytes int64) bool {
	if len(es) >= maxEntries {
		return true
	}
	var n int64
	for _, e := range es {
		n += int64(len(e.Data))
	}
	return n >= maxBytes/2
}

// HeldBytes is the size of the entries the machine keeps to send: in flight and read ahead.
func (m *Machine) HeldBytes() int64 { return m.inflightBytes + m.unsentBytes }

// unsent bounds the sends the next pump can make (the size of its ActSends).
func (m *Machine) unsent() int {
	return max(1, min(len(m.pending)-m.sendIdx, m.cfg.MaxInflightEntries-m.inflight))
}

var errReceiptOrder = errors.New("receipt out of order")

func (m *Machine) receipt(acts []Action, e EvReceipt) []Action {
	acts, ok := m.ack(acts, e.Now, e.Source)
	if !ok {
		return acts
	}
	return m.pump(acts, e.Now)
}

// ack applies one receipt; ok is false if it failed the producer (receipt out of order).
func (m *Machine) ack(acts []Action, now time.Time, source mtypes.Position) ([]Action, bool) {
	// Receipts arrive in send order: it must be the first sent, unacknowledged entry.
	for i := m.ackIdx; i < m.sendIdx; i++ {
		it := &m.pending[i]
		if it.skip || it.acked {
			continue
		}
		m.ackIdx = i
		if it.pos != source {
			return m.fail(acts, now, fmt.Errorf("%w: got %s, expected %s", errReceiptOrder, source, it.pos), true), false
		}
		it.acked = true
		m.inflight--
		m.inflightBytes -= int64(it.out.Size())
		m.c.MsgOut += int64(it.out.Messages)
		m.c.BytesOut += int64(it.out.Size())
		m.c.EntriesOut++
		m.c.LastProgress = now
		m.c.LastError, m.c.LastErrorTime = "", time.Time{} // healthy again: progress clears the error
		m.progressed = true
		m.backoff = m.cfg.MinBackoff
		m.lastSendAt = now
		m.ackIdx = i + 1
		return acts, true
	}
	return acts, true // a receipt for nothing in flight (already rewound): ignore
}

// advance drops acknowledged and skipped entries from the head and mark-deletes up to the last one.
func (m *Machine) advance(acts []Action) []Action {
	n := 0
	for n < m.sendIdx && (m.pending[n].skip || m.pending[n].acked) {
		n++
	}
	if n == 0 {
		return acts
	}
	m.markDeleteWanted = m.pending[n-1].pos
	// Drop the head by reslicing (no copy per receipt); clearing releases the entries' bytes.
	clear(m.pending[:n])
	m.pending = m.pending[n:]
	m.sendIdx -= n
	m.ackIdx = max(0, m.ackIdx-n)
	return m.flushMarkDelete(acts)
}

// flushMarkDelete issues one mark-delete at a time, always for the newest wanted position.
func (m *Machine) flushMarkDelete(acts []Action) []Action {
	if m.markDeleteBusy || m.markDeleteWanted.Compare(m.markDeleted) <= 0 {
		return acts
	}
	m.markDeleteBusy = true
	return append(acts, ActMarkDelete{Pos: m.markDeleteWanted})
}

// tokenBucket limits messages and bytes per second with a one-second burst. A send may drive the
// balance negative (an entry larger than a second's budget still goes); the next send waits until it
// is positive again, so the long-run rate is the configured one.
type tokenBucket struct {
	rate       Rate
	msgs       float64
	bytes      float64
	last       time.Time
	configured bool
}

func (b *tokenBucket) setRate(r Rate, now time.Time) {
	b.rate = r
	b.msgs, b.bytes = r.MessagesPerSecond, r.BytesPerSecond
	b.last = now
	b.configured = !r.Unlimited()
}

// take reserves n messages and size bytes, or returns how long to wait before trying again.
func (b *tokenBucket) take(now time.Time, n, size int) time.Duration {
	if !b.configured {
		return 0
	}
	if b.last.IsZero() {
		b.last = now
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		if b.rate.MessagesPerSecond > 0 {
			b.msgs = min(b.msgs+dt*b.rate.MessagesPerSecond, b.rate.MessagesPerSecond)
		}
		if b.rate.BytesPerSecond > 0 {
			b.bytes = min(b.bytes+dt*b.rate.BytesPerSecond, b.rate.BytesPerSecond)
		}
		b.last = now
	}
	var wait float64
	// Wait until the balance is positive again (plus a millisecond so it is, after rounding).
	if b.rate.MessagesPerSecond > 0 && b.msgs <= 0 {
		wait = max(wait, -b.msgs/b.rate.MessagesPerSecond+0.001)
	}
	if b.rate.BytesPerSecond > 0 && b.bytes <= 0 {
		wait = max(wait, -b.bytes/b.rate.BytesPerSecond+0.001)
	}
	if wait > 0 {
		return max(time.Duration(wait*float64(time.Second)), time.Millisecond)
	}
	if b.rate.MessagesPerSecond > 0 {
		b.msgs -= float64(n)
	}
	if b.rate.BytesPerSecond > 0 {
		b.bytes -= float64(size)
	}
	return 0
}
