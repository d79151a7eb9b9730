package node

// Replication wiring: replication never imports the broker or storage (docs/design.md, "Dependency
// rules"), so the node adapts them to replication's interfaces here.

import (
	"context"
	"fmt"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/storage"
)

// linkDefaults are the brokerClient* settings as replication's defaults for outgoing links.
func (o *Options) linkDefaults() replication.LinkDefaults {
	b := o.BrokerClient
	return replication.LinkDefaults{TLSEnabled: b.TLSEnabled, TrustCertsFile: b.TrustCertsFile, CertificateFile: b.CertificateFile,
		KeyFile: b.KeyFile, AuthenticationPlugin: b.AuthenticationPlugin, AuthenticationParameters: b.AuthenticationParameters}
}

// replTopics adapts the broker to replication.TopicSource. It reads the broker through a pointer so
// the Manager can be built before the broker (the broker's ReplicatedIndex hook needs the Manager).
// engine tells the incarnation of every entry a replicator reads.
type replTopics struct {
	broker **broker.Broker
	engine *storage.Engine
}

func (s replTopics) ListTopics(ctx context.Context, ns string) ([]string, error) {
	name, err := naming.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	b := *s.broker
	if b == nil {
		return nil, fmt.Errorf("broker not started")
	}
	ts, err := b.ListTopics(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.String())
	}
	return out, nil
}

func (s replTopics) OpenTopic(ctx context.Context, topic string) (replication.LocalTopic, error) {
	name, err := naming.ParseTopic(topic)
	if err != nil {
		return nil, err
	}
	if !name.IsPersistent() {
		// Non-persistent topics have no ledger to replicate from (not replicated in this release).
		return nil, fmt.Errorf("replicate %s: non-persistent topics are not replicated", topic)
	}
	b := *s.broker
	if b == nil {
		return nil, fmt.Errorf("broker not started")
	}
	t, err := b.GetTopic(ctx, name, false)
	if err != nil {
		return nil, err
	}
	return replTopic{name: topic, ledger: t.Ledger(), topic: t, engine: s.engine}, nil
}

// replTopic adapts a topic's ledger (and, for replicators, the broker topic) to
// replication.LocalTopic. topic is nil for the inbound index, which does not wait for entries;
// engine is nil there too (the index reads the incarnations its entries carry, not its own).
type replTopic struct {
	name   string
	ledger *storage.Ledger
	topic  *broker.Topic
	engine *storage.Engine
}

func toStoragePos(p replication.Position) storage.Position {
	return storage.Position{LedgerID: p.LedgerID, EntryID: p.EntryID}
}

func fromStoragePos(p storage.Position) replication.Position {
	return replication.Position{LedgerID: p.LedgerID, EntryID: p.EntryID}
}

func (r replTopic) Name() string { return r.name }

func (r replTopic) OpenCursor(ctx context.Context, name string, initial replication.Position) (replication.Cursor, bool, error) {
	existed := r.ledger.Cursor(name) != nil
	c, err := r.ledger.OpenCursor(ctx, name, storage.CursorOptions{Initial: toStoragePos(initial), Durable: true})
	if err != nil {
		return nil, false, err
	}
	return replCursor{c: c, ledger: r.ledger}, !existed, nil
}

func (r replTopic) DeleteCursor(ctx context.Context, name string) error {
	if r.ledger.Cursor(name) == nil {
		return nil
	}
	return r.ledger.DeleteCursor(ctx, name)
}

func (r replTopic) CursorNames() []string {
	cs := r.ledger.Cursors()
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name())
	}
	return out
}

func (r replTopic) Read(ctx context.Context, from replication.Position, maxEntries int, maxBytes int64) ([]replication.Entry, error) {
	es, err := r.ledger.Read(ctx, toStoragePos(from), maxEntries, maxBytes)
	if err != nil {
		return nil, err
	}
	out := make([]replication.Entry, len(es))
	var incLedger int64 = -1
	var inc uint64
	for i, e := range es {
		if r.engine != nil && e.Position.LedgerID != incLedger {
			incLedger, inc = e.Position.LedgerID, r.engine.IncarnationOf(e.Position.LedgerID)
		}
		out[i] = replication.Entry{Position: fromStoragePos(e.Position), PublishTime: e.PublishTime, Data: e.Data, Incarnation: inc}
	}
	return out, nil
}

func (r replTopic) WaitForEntries(from replication.Position) <-chan struct{} {
	if r.topic == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return r.topic.WaitForEntries(toStoragePos(from))
}

func (r replTopic) LastConfirmed() replication.Position {
	return fromStoragePos(r.ledger.LastConfirmed())
}

// Closed lets the replication Manager notice an unloaded topic and reopen it.
func (r replTopic) Closed() bool { return r.topic != nil && r.topic.Closed() }

type replCursor struct {
	c      *storage.Cursor
	ledger *storage.Ledger
}

// BacklogBytes estimates the bytes of the replication backlog from the topic's average entry size
// (as the broker estimates a subscription's backlogSize).
func (c replCursor) BacklogBytes() int64 {
	backlog := c.c.Backlog()
	if total := c.ledger.Entries(); total > 0 && backlog > 0 {
		return c.ledger.Bytes() * backlog / total
	}
	return 0
}

func (c replCursor) MarkDeletePosition() replication.Position {
	return fromStoragePos(c.c.MarkDeletePosition())
}
func (c replCursor) MarkDelete(ctx context.Context, p replication.Position) error {
	return c.c.MarkDelete(ctx, toStoragePos(p))
}
func (c replCursor) Backlog() int64                { return c.c.Backlog() }
func (c replCursor) Properties() map[string]string { return c.c.Properties() }
func (c replCursor) SetProperties(ctx context.Context, props map[string]string) error {
	return c.c.SetProperties(ctx, props)
}
func (c replCursor) Flush(ctx context.Context) error { return c.c.Flush(ctx) }

// replicatedIndexHook is broker.Deps.ReplicatedIndex: it opens the topic's inbound index through
// the Manager (kept for stats) and tells the Manager the topic is loaded, so its replicators start.
func replicatedIndexHook(m *replication.Manager) func(context.Context, naming.TopicName, *storage.Ledger) (broker.ReplicatedEntryIndex, error) {
	return func(ctx context.Context, name naming.TopicName, ledger *storage.Ledger) (broker.ReplicatedEntryIndex, error) {
		x, err := m.OpenIndex(ctx, replTopic{name: name.String(), ledger: ledger})
		if err != nil {
			return nil, err
		}
		m.TopicLoaded(name.String())
		return x, nil
	}
}
