package replication

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// memTopic is an in-memory LocalTopic for unit tests (the real one, over storage, is exercised by
// the end-to-end tests through internal/node).
type memTopic struct {
	name string
	mu   sync.Mutex
	// ledger is fixed: entries are (ledger, 0..n-1).
	ledger  int64
	entries []mtypes.Entry
	cursors map[string]*memCursor
	waiters []memWaiter
	readErr error
	openErr error // OpenCursor fails with it while set
	// propBytes counts the bytes of keys and values passed to SetProperties (what storage writes
	// for a cursor's properties), propWrites the calls.
	propBytes, propWrites int64
}

type memWaiter struct {
	from mtypes.Position
	ch   chan struct{}
}

func newMemTopic(name string, ledger int64) *memTopic {
	return &memTopic{name: name, ledger: ledger, cursors: map[string]*memCursor{}}
}

func (t *memTopic) Name() string { return t.name }

func (t *memTopic) append(data []byte, publishTime int64) mtypes.Position {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := mtypes.Position{LedgerID: t.ledger, EntryID: int64(len(t.entries))}
	t.entries = append(t.entries, mtypes.Entry{Position: p, PublishTime: publishTime, Data: data})
	keep := t.waiters[:0]
	for _, w := range t.waiters {
		if p.Compare(w.from) >= 0 {
			close(w.ch)
		} else {
			keep = append(keep, w)
		}
	}
	t.waiters = keep
	return p
}

func (t *memTopic) lastConfirmedLocked() mtypes.Position {
	return mtypes.Position{LedgerID: t.ledger, EntryID: int64(len(t.entries)) - 1}
}

func (t *memTopic) LastConfirmed() mtypes.Position {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastConfirmedLocked()
}

func (t *memTopic) OpenCursor(ctx context.Context, name string, initial mtypes.Position) (Cursor, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.openErr != nil {
		return nil, false, t.openErr
	}
	if c := t.cursors[name]; c != nil {
		return c, false, nil
	}
	c := &memCursor{t: t, props: map[string]string{}}
	switch initial {
	case mtypes.Earliest:
		c.md = mtypes.Position{LedgerID: t.ledger, EntryID: -1}
	case mtypes.Latest:
		c.md = t.lastConfirmedLocked()
	default:
		c.md = mtypes.Position{LedgerID: initial.LedgerID, EntryID: initial.EntryID - 1}
	}
	t.cursors[name] = c
	return c, true, nil
}

func (t *memTopic) DeleteCursor(ctx context.Context, name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.cursors, name)
	return nil
}

func (t *memTopic) CursorNames() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.cursors))
}

func (t *memTopic) Read(ctx context.Context, from mtypes.Position, maxEntries int, maxBytes int64) ([]mtypes.Entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.readErr != nil {
		return nil, t.readErr
	}
	// As storage does: up to maxEntries and maxBytes, but always at least one entry.
	var out []mtypes.Entry
	var bytes int64
	for _, e := range t.entries {
		if e.Position.Compare(from) < 0 || len(out) >= maxEntries {
			continue
		}
		if len(out) > 0 && bytes+int64(len(e.Data)) > maxBytes {
			break
		}
		out = append(out, e)
		bytes += int64(len(e.Data))
	}
	return out, nil
}

func (t *memTopic) WaitForEntries(from mtypes.Position) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := make(chan struct{})
	if t.lastConfirmedLocked().Compare(from) >= 0 {
		close(ch)
		return ch
	}
	t.waiters = append(t.waiters, memWaiter{from, ch})
	return ch
}

type memCursor struct {
	t     *memTopic
	md    mtypes.Position
	props map[string]string
	err   error
}

func (c *memCursor) MarkDeletePosition() mtypes.Position {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return c.md
}

func (c *memCursor) MarkDelete(ctx context.Context, p mtypes.Position) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if p.Compare(c.md) > 0 {
		c.md = p
	}
	return nil
}

func (c *memCursor) Backlog() int64 {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	n := int64(0)
	for _, e := range c.t.entries {
		if e.Position.Compare(c.md) > 0 {
			n++
		}
	}
	return n
}

func (c *memCursor) Flush(ctx context.Context) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return c.err
}

func (c *memCursor) Properties() map[string]string {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return maps.Clone(c.props)
}

func (c *memCursor) SetProperties(ctx context.Context, props map[string]string) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	c.props = maps.Clone(props)
	c.t.propWrites++
	for k, v := range props {
		c.t.propBytes += int64(len(k) + len(v))
	}
	return nil
}

// memRemote is a fake remote cluster: producers store into a memTopic through its Index, as the
// real broker does, so duplicates are dropped by source position.
type memRemote struct {
	mu       sync.Mutex
	topic    *memTopic
	index    *Index
	down     bool
	refuse   error
	lose     int // drop the connection on the next n sends
	produced []string
	// ackDelay holds every receipt this long (in order; the entries are stored at once), so that
	// entries stay in flight as behind a slow link.
	ackDelay time.Duration
}

var errRemoteDown = errors.New("connection refused")

func (r *memRemote) NewProducer(ctx context.Context, remote, topic, producerName string) (RemoteProducer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return nil, errRemoteDown
	}
	if r.refuse != nil {
		return nil, r.refuse
	}
	r.produced = append(r.produced, producerName)
	p := &memProducer{r: r}
	if r.ackDelay > 0 {
		p.acks = make(chan delayedAck, 1<<16)
		p.closing = make(chan struct{})
		p.acksDone = make(chan struct{})
		go p.deliverAcks(r.ackDelay)
	}
	return p, nil
}

type memProducer struct {
	r      *memRemote
	mu     sync.Mutex
	closed bool
	// With ackDelay: receipts queued for deliverAcks.
	acks     chan delayedAck
	closing  chan struct{} // closed by Close: the queued receipts are due at once
	acksDone chan struct{}
}

type delayedAck struct {
	due  time.Time
	done func(error)
}

// deliverAcks calls the queued receipts in order, each once it is due; on Close, the rest at once.
func (p *memProducer) deliverAcks(delay time.Duration) {
	defer close(p.acksDone)
	for a := range p.acks {
		if d := time.Until(a.due); d > 0 {
			select {
			case <-time.After(d):
			case <-p.closing:
			}
		}
		a.done(nil)
	}
}

func (p *memProducer) Send(out Outbound, done func(error)) {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed || p.r.down {
		done(errRemoteDown)
		return
	}
	if p.r.lose > 0 {
		// The connection breaks: this and every later send on the producer fail.
		p.r.lose--
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		done(errors.New("connection reset"))
		return
	}
	dup, _, _, commit, err := p.r.index.Admit(out.Bytes())
	if err != nil {
		done(err)
		return
	}
	if !dup {
		pos := p.r.topic.append(out.Bytes(), out.PublishTime)
		if commit != nil {
			commit(pos.LedgerID, pos.EntryID, nil)
		}
	}
	if p.acks != nil {
		p.acks <- delayedAck{due: time.Now().Add(p.r.ackDelay), done: done}
		return
	}
	done(nil)
}

func (p *memProducer) Close(ctx context.Context) error {
	p.r.mu.Lock() // as Send: no send between the check of closed and the queueing of its receipt
	defer p.r.mu.Unlock()
	p.mu.Lock()
	if !p.closed && p.acks != nil {
		close(p.closing)
		close(p.acks)
		<-p.acksDone
	}
	p.closed = true
	p.mu.Unlock()
	return nil
}
