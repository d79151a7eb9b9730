package node

// Replication wiring: replication never imports the broker or storage (docs/design.md, "Dependency
// rules"), so the node adapts them to replication's interfaces here. All three speak the value
// types of internal/mtypes, so positions and cursors pass through unconverted.

import (
	"context"
	"fmt"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/mtypes"
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

// replicationTopics is what the replication Manager reads the broker's topics through, given to
// its Start once the broker exists.
func replicationTopics(b *broker.Broker) replication.LocalTopics {
	return replication.LocalTopics{Topics: replTopics{broker: b}, Sync: syncTopics{broker: b}}
}

// replTopics adapts the broker to replication.TopicSource.
type replTopics struct{ broker *broker.Broker }

func (s replTopics) ListTopics(ctx context.Context, ns string) ([]string, error) {
	name, err := naming.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	ts, err := s.broker.ListTopics(ctx, name)
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
	t, err := s.broker.GetTopic(ctx, name, false)
	if err != nil {
		return nil, err
	}
	return replTopic{name: topic, ledger: t.Ledger(), topic: t}, nil
}

// replTopic adapts a topic's ledger (and, for replicators, the broker topic) to
// replication.LocalTopic. topic is nil for the inbound index, which does not wait for entries.
type replTopic struct {
	name   string
	ledger *storage.Ledger
	topic  *broker.Topic
}

func (r replTopic) Name() string { return r.name }

func (r replTopic) OpenCursor(ctx context.Context, name string, initial mtypes.Position) (replication.Cursor, bool, error) {
	existed := r.ledger.Cursor(name) != nil
	c, err := r.ledger.OpenCursor(ctx, name, storage.CursorOptions{Initial: initial, Durable: true})
	if err != nil {
		return nil, false, err
	}
	return replCursor{Cursor: c, ledger: r.ledger}, !existed, nil
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

func (r replTopic) Read(ctx context.Context, from mtypes.Position, maxEntries int, maxBytes int64) ([]mtypes.Entry, error) {
	es, err := r.ledger.Read(ctx, from, maxEntries, maxBytes)
	if err != nil {
		return nil, err // a partial read is not handed on
	}
	return es, nil
}

func (r replTopic) WaitForEntries(from mtypes.Position) <-chan struct{} {
	if r.topic == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return r.topic.WaitForEntries(from)
}

func (r replTopic) LastConfirmed() mtypes.Position { return r.ledger.LastConfirmed() }

// Closed lets the replication Manager notice an unloaded topic and reopen it.
func (r replTopic) Closed() bool { return r.topic != nil && r.topic.Closed() }

// replCursor is a storage cursor as a replication.Cursor (the methods match), plus the backlog's
// size.
type replCursor struct {
	*storage.Cursor
	ledger *storage.Ledger
}

// BacklogBytes estimates the bytes of the replication backlog from the topic's average entry size
// (as the broker estimates a subscription's backlogSize).
func (c replCursor) BacklogBytes() int64 {
	backlog := c.Backlog()
	if total := c.ledger.Entries(); total > 0 && backlog > 0 {
		return c.ledger.Bytes() * backlog / total
	}
	return 0
}

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
