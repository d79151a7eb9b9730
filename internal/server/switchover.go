package server

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Planned switchover (Pulsar's blue-green migration; docs/replication-design.md, "Planned
// switchover"). While a topic's cluster or namespace is marked migrated:
//
//   - LOOKUP answers Redirect to the target, so clients that look the topic up go there;
//   - its producers are fenced at once: SENDs that arrive from then on are dropped unanswered, which
//     the client resends after it reconnects (no send error reaches the application);
//   - once the fenced producers have nothing in flight and the replication backlog to the target is
//     zero, each gets TOPIC_MIGRATED (protocol v20 and later) and CLOSE_PRODUCER, and reconnects to
//     the target: everything it had acknowledged here is there before its next message;
//   - then each subscription's consumers get the same once the subscription's state has been synced
//     to the target (replicated subscriptions) or its backlog is zero (the others), and their
//     consumers have acknowledged what they were delivered (or unackedGrace passed).
//
// PRODUCER and SUBSCRIBE requests in flight are answered first (a handle is moved only once its
// request was answered). Turning migration off ends the fencing. The decisions are switchoverPlan's; this file
// observes and acts.

// Migration tells the server which topics are moving to another cluster. internal/node implements
// it over the catalog and the topic stats.
type Migration interface {
	// Active reports whether any topic may be migrating (this cluster has a target URL). While it
	// is false the sweeper does not look at connections at all. Cheap.
	Active() bool
	// Target returns where the topic's clients go; ok=false while it is not migrating. It is called
	// on every LOOKUP and must be cheap (a cache read).
	Target(topic naming.TopicName) (target MigrationTarget, ok bool)
	// Progress reports what decides how far the topic's switchover may go.
	Progress(ctx context.Context, topic naming.TopicName) (TopicProgress, error)
	// SyncSubscription asks for a replicated subscription's state to be written for the target
	// now. It does not block.
	SyncSubscription(topic naming.TopicName, sub string)
	// TargetPartitions returns the topic's partition count on the target (ok=false: it could not
	// tell; the answer then comes from here).
	TargetPartitions(ctx context.Context, topic naming.TopicName) (n int, ok bool)
}

// MigrationTarget is the target cluster's binary-protocol URLs (Pulsar's ClusterUrl).
type MigrationTarget struct {
	BrokerServiceURL    string
	BrokerServiceURLTLS string
}

// DefaultSwitchoverInterval is how often migrating topics are checked.
const DefaultSwitchoverInterval = 100 * time.Millisecond

// topicMigratedMinProtocol is the protocol version from which clients understand TOPIC_MIGRATED;
// older ones are only closed (they look the topic up again and are redirected).
const topicMigratedMinProtocol = 20

// producerFence is a producer's switchover state, shared by the read loop (handleSend) and the
// sweeper. The two atomics order like a Dekker lock: the reader counts a SEND in before it checks
// fenced, the sweeper sets fenced before it reads inFlight, so either the reader sees the fence and
// drops the SEND or the sweeper sees it in flight.
type producerFence struct {
	fenced   atomic.Bool
	inFlight atomic.Int64 // SENDs handed (or about to be handed) to the broker and not completed
	// answered: PRODUCER was answered; a switchover moves only answered producers, so that
	// PRODUCER_SUCCESS always precedes TOPIC_MIGRATED and CLOSE_PRODUCER.
	answered atomic.Bool
}

// admit counts a SEND in; false means the producer is fenced and the SEND must be dropped.
func (f *producerFence) admit() bool {
	f.inFlight.Add(1)
	if f.fenced.Load() {
		f.inFlight.Add(-1)
		return false
	}
	return true
}

// done counts a SEND out (its publish completed).
func (f *producerFence) done() { f.inFlight.Add(-1) }

// quiet reports whether the fenced producer has nothing in flight.
func (f *producerFence) quiet() bool { return f.fenced.Load() && f.inFlight.Load() == 0 }

// switchoverTopic is what one sweep saw of a migrating topic on this broker.
type switchoverTopic struct {
	target    MigrationTarget
	producers []connProducer
	consumers []connConsumer
}

type connProducer struct {
	c *conn
	h *producerHandle
}

type connConsumer struct {
	c   *conn
	h   *consumerHandle
	sub string
}

// switchoverLoop checks the migrating topics every interval until the server closes.
func (s *Server) switchoverLoop(interval time.Duration) {
	defer s.wg.Done()
	plans := map[naming.TopicName]*switchoverPlan{}
	t := time.NewTicker(interval)
	defer t.Stop()
	wasActive := false
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		active := s.opts.Migration.Active()
		if active || wasActive {
			// One more sweep after migration ends: it unfences the producers still fenced.
			s.switchoverSweep(plans, time.Now())
		}
		wasActive = active
	}
}

// switchoverSweep is one round: it fences new producers of migrating topics, unfences those of
// topics no longer migrating, and moves what the plans allow.
func (s *Server) switchoverSweep(plans map[naming.TopicName]*switchoverPlan, now time.Time) {
	topics := s.migratingHandles()
	for name := range plans {
		if _, ok := topics[name]; !ok {
			delete(plans, name)
		}
	}
	for name, st := range topics {
		quiet := true
		for _, p := range st.producers {
			if !p.h.fence.quiet() {
				quiet = false
			}
		}
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		progress, err := s.opts.Migration.Progress(ctx, name)
		cancel()
		if err != nil {
			s.log.Debug("switchover: topic progress unknown; retrying", "topic", name.String(), "err", err)
			continue
		}
		plan := plans[name]
		if plan == nil {
			plan = &switchoverPlan{}
			plans[name] = plan
			s.log.Info("switchover: topic migrating", "topic", name.String(), "target", st.target.BrokerServiceURL,
				"producers", len(st.producers), "consumers", len(st.consumers))
		}
		acts := plan.step(now, switchoverInput{ProducersQuiet: quiet, Progress: progress})
		for _, sub := range acts.SyncSubscriptions {
			s.opts.Migration.SyncSubscription(name, sub)
		}
		if acts.RedirectProducers {
			for _, p := range st.producers {
				p.c.redirectProducer(p.h, st.target)
			}
		}
		for _, sub := range acts.RedirectSubscriptions {
			for _, cc := range st.consumers {
				if cc.sub == sub {
					cc.c.redirectConsumer(cc.h, st.target)
				}
			}
		}
	}
}

// migratingHandles collects the ready producers (replicators excepted) and consumers of migrating
// topics, fencing each producer, and unfences the producers of topics no longer migrating.
func (s *Server) migratingHandles() map[naming.TopicName]*switchoverTopic {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	out := map[naming.TopicName]*switchoverTopic{}
	targets := map[naming.TopicName]*MigrationTarget{} // nil: not migrating
	targetOf := func(t naming.TopicName) *MigrationTarget {
		if v, seen := targets[t]; seen {
			return v
		}
		var v *MigrationTarget
		if tg, ok := s.opts.Migration.Target(t); ok {
			v = &tg
		}
		targets[t] = v
		return v
	}
	entry := func(t naming.TopicName, tg *MigrationTarget) *switchoverTopic {
		st := out[t]
		if st == nil {
			st = &switchoverTopic{target: *tg}
			out[t] = st
		}
		return st
	}
	for _, c := range conns {
		c.mu.Lock()
		for _, h := range c.producers {
			if h.prod == nil || !h.fence.answered.Load() || h.prod.IsReplicator() {
				continue
			}
			tg := targetOf(h.topic)
			if tg == nil {
				h.fence.fenced.Store(false)
				continue
			}
			h.fence.fenced.Store(true)
			st := entry(h.topic, tg)
			st.producers = append(st.producers, connProducer{c, h})
		}
		for _, h := range c.consumers {
			if h.cons == nil || !h.answered.Load() {
				continue
			}
			if tg := targetOf(h.topic); tg != nil {
				st := entry(h.topic, tg)
				st.consumers = append(st.consumers, connConsumer{c, h, h.cons.Subscription()})
			}
		}
		c.mu.Unlock()
	}
	return out
}

// topicMigrated is the TOPIC_MIGRATED command for one producer or consumer.
func topicMigrated(id uint64, kind pulsarpb.CommandTopicMigrated_ResourceType, target MigrationTarget) *pulsarpb.CommandTopicMigrated {
	cmd := &pulsarpb.CommandTopicMigrated{ResourceId: proto.Uint64(id), ResourceType: kind.Enum()}
	if target.BrokerServiceURL != "" {
		cmd.BrokerServiceUrl = proto.String(target.BrokerServiceURL)
	}
	if target.BrokerServiceURLTLS != "" {
		cmd.BrokerServiceUrlTls = proto.String(target.BrokerServiceURLTLS)
	}
	return cmd
}

// understandsTopicMigrated reports whether the client's protocol has TOPIC_MIGRATED.
func (c *conn) understandsTopicMigrated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.protocolVersion >= topicMigratedMinProtocol
}

// redirectProducer tells a fenced producer to go to target and detaches it here.
func (c *conn) redirectProducer(h *producerHandle, target MigrationTarget) {
	if !c.forgetProducer(h) {
		return // closed meanwhile, by either side
	}
	if c.understandsTopicMigrated() {
		c.sendCommand(topicMigrated(h.id, pulsarpb.CommandTopicMigrated_Producer, target))
	}
	c.sendCommand(&pulsarpb.CommandCloseProducer{ProducerId: proto.Uint64(h.id), RequestId: proto.Uint64(0)})
	c.log.Info("switchover: producer redirected", "topic", h.topic.String(), "producerId", h.id, "target", target.BrokerServiceURL)
	// Released here, not in a request goroutine: the connection may be finishing (its request
	// goroutines are waited for then). Nothing is in flight, so the close does not wait.
	ctx, cancel := context.WithTimeout(c.s.ctx, releaseTimeout)
	defer cancel()
	h.release(ctx)
}

// redirectConsumer tells a consumer to go to target and detaches it here.
func (c *conn) redirectConsumer(h *consumerHandle, target MigrationTarget) {
	h.sink.detach()
	if !c.forgetConsumer(h) {
		return
	}
	if c.understandsTopicMigrated() {
		c.sendCommand(topicMigrated(h.id, pulsarpb.CommandTopicMigrated_Consumer, target))
	}
	c.sendCommand(&pulsarpb.CommandCloseConsumer{ConsumerId: proto.Uint64(h.id), RequestId: proto.Uint64(0)})
	c.log.Info("switchover: consumer redirected", "topic", h.topic.String(), "consumerId", h.id, "target", target.BrokerServiceURL)
	h.cons.Close()
}

// migrationTarget returns where a migrating topic's clients go (ok=false: not migrating, or no
// Migration configured).
func (c *conn) migrationTarget(topic string) (MigrationTarget, bool) {
	if c.s.opts.Migration == nil {
		return MigrationTarget{}, false
	}
	name, err := parseTopic(topic)
	if err != nil {
		return MigrationTarget{}, false
	}
	return c.s.opts.Migration.Target(name)
}

// targetPartitions answers PARTITIONED_METADATA of a migrating topic unknown here with the
// target's partition count; local is the answer otherwise.
func (c *conn) targetPartitions(ctx context.Context, topic naming.TopicName, local int) int {
	if _, migrating := c.migrationTarget(topic.String()); !migrating {
		return local
	}
	if n, ok := c.s.opts.Migration.TargetPartitions(ctx, topic); ok {
		return n
	}
	return local
}
