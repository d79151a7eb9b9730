package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// fakeMigration migrates the namespaces it is told to, with the progress it is given.
type fakeMigration struct {
	mu       sync.Mutex
	target   MigrationTarget
	ns       map[string]bool // "tenant/ns" migrating
	progress TopicProgress
	synced   []string
}

func newFakeMigration() *fakeMigration {
	return &fakeMigration{target: MigrationTarget{BrokerServiceURL: "pulsar://green:6650"}, ns: map[string]bool{}}
}

func (f *fakeMigration) Active() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, on := range f.ns {
		if on {
			return true
		}
	}
	return false
}

func (f *fakeMigration) Target(t naming.TopicName) (MigrationTarget, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.target, f.ns[t.Tenant+"/"+t.Namespace]
}

func (f *fakeMigration) Progress(ctx context.Context, t naming.TopicName) (TopicProgress, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.progress, nil
}

func (f *fakeMigration) SyncSubscription(t naming.TopicName, sub string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced = append(f.synced, sub)
}

func (f *fakeMigration) TargetPartitions(ctx context.Context, t naming.TopicName) (int, bool) {
	return 4, true
}

func (f *fakeMigration) set(ns string, on bool, p TopicProgress) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ns[ns] = on
	f.progress = p
}

func startSwitchoverServer(t *testing.T) (*testServer, *fakeMigration) {
	m := newFakeMigration()
	return startServer(t, Options{Migration: m, SwitchoverInterval: 10 * time.Millisecond}), m
}

// producerFenced reports whether producer id is fenced on some connection of s.
func producerFenced(s *testServer, id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.mu.Lock()
		h := c.producers[id]
		fenced := h != nil && h.fence.fenced.Load()
		c.mu.Unlock()
		if fenced {
			return true
		}
	}
	return false
}

func (c *rawClient) expectTopicMigrated(id uint64, kind pulsarpb.CommandTopicMigrated_ResourceType) {
	c.t.Helper()
	tm := c.expect(pulsarpb.BaseCommand_TOPIC_MIGRATED).Cmd.GetTopicMigrated()
	if tm.GetResourceId() != id || tm.GetResourceType() != kind || tm.GetBrokerServiceUrl() != "pulsar://green:6650" {
		c.t.Fatalf("TOPIC_MIGRATED %v, want %s %d to pulsar://green:6650", tm, kind, id)
	}
}

func TestSwitchoverLookupRedirectsMigratedTopics(t *testing.T) {
	s, m := startSwitchoverServer(t)
	m.set("public/moving", true, TopicProgress{})
	c := dialRaw(t, s.addr)
	c.connect()
	lookup := func(topic string, reqID uint64) *pulsarpb.CommandLookupTopicResponse {
		c.send(&pulsarpb.CommandLookupTopic{Topic: proto.String(topic), RequestId: proto.Uint64(reqID)})
		return c.expect(pulsarpb.BaseCommand_LOOKUP_RESPONSE).Cmd.GetLookupTopicResponse()
	}
	r := lookup("persistent://public/moving/t", 1)
	if r.GetResponse() != pulsarpb.CommandLookupTopicResponse_Redirect || r.GetBrokerServiceUrl() != "pulsar://green:6650" || r.GetAuthoritative() {
		t.Fatalf("lookup of a migrated topic: %v", r)
	}
	r = lookup("persistent://public/staying/t", 2)
	if r.GetResponse() != pulsarpb.CommandLookupTopicResponse_Connect || r.GetBrokerServiceUrl() != "pulsar://127.0.0.1:6650" {
		t.Fatalf("lookup of another namespace's topic: %v", r)
	}
}

// A producer and a consumer on a topic that starts migrating: the producer is fenced at once (a
// SEND then gets no receipt, the client resends it on the target), moves only when the replication
// backlog to the target is zero, and the consumer after it.
func TestSwitchoverMovesProducerThenConsumer(t *testing.T) {
	s, m := startSwitchoverServer(t)
	const topic = "persistent://public/moving/t"
	c := dialRaw(t, s.addr)
	c.connect()
	name := c.createProducer(topic, 1, 1)
	c.subscribeRaw(topic, "sub", 2, 2)
	c.sendMessage(1, 0, entry(t, name, 0, []byte("before")))
	c.expect(pulsarpb.BaseCommand_SEND_RECEIPT)

	subs := map[string]SubscriptionProgress{"sub": {Replicated: true, HasState: true, SyncedToTarget: true, Backlog: 1}}
	m.set("public/moving", true, TopicProgress{ReplicatesToTarget: true, ReplicationBacklog: 1, Subscriptions: subs})
	poll.Until(t, 5*time.Second, "producer fenced", func() bool { return producerFenced(s, 1) })
	c.sendMessage(1, 1, entry(t, name, 1, []byte("during")))
	// The backlog drains: TOPIC_MIGRATED then CLOSE_PRODUCER, with no receipt for the fenced SEND;
	// then the consumer, whose replicated subscription is synced (its backlog does not matter).
	m.set("public/moving", true, TopicProgress{ReplicatesToTarget: true, Subscriptions: subs})
	c.expectTopicMigrated(1, pulsarpb.CommandTopicMigrated_Producer)
	if cp := c.expect(pulsarpb.BaseCommand_CLOSE_PRODUCER).Cmd.GetCloseProducer(); cp.GetProducerId() != 1 {
		t.Fatalf("CLOSE_PRODUCER %v", cp)
	}
	c.expectTopicMigrated(2, pulsarpb.CommandTopicMigrated_Consumer)
	if cc := c.expect(pulsarpb.BaseCommand_CLOSE_CONSUMER).Cmd.GetCloseConsumer(); cc.GetConsumerId() != 2 {
		t.Fatalf("CLOSE_CONSUMER %v", cc)
	}
	// Nothing the fenced SEND wrote: the topic holds only the first message.
	tp, err := s.opts.Broker.GetTopic(context.Background(), mustTopic(t, topic), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := tp.Stats().MsgInCounter; got != 1 {
		t.Fatalf("topic stored %d messages, want 1 (the fenced SEND must not be written)", got)
	}
}

// A PRODUCER and a SUBSCRIBE that arrive while the topic is migrating are answered first, then moved.
func TestSwitchoverAnswersCreatesBeforeRedirect(t *testing.T) {
	s, m := startSwitchoverServer(t)
	m.set("public/moving", true, TopicProgress{Subscriptions: map[string]SubscriptionProgress{"sub": {}}})
	c := dialRaw(t, s.addr)
	c.connect()
	c.createProducer("persistent://public/moving/t", 1, 1) // PRODUCER_SUCCESS first
	c.expectTopicMigrated(1, pulsarpb.CommandTopicMigrated_Producer)
	c.expect(pulsarpb.BaseCommand_CLOSE_PRODUCER)
	c.subscribeRaw("persistent://public/moving/t", "sub", 2, 2) // SUCCESS first
	c.expectTopicMigrated(2, pulsarpb.CommandTopicMigrated_Consumer)
	c.expect(pulsarpb.BaseCommand_CLOSE_CONSUMER)
}

// A client older than protocol v20 does not know TOPIC_MIGRATED: it is only closed (and its next
// lookup is redirected).
func TestSwitchoverOldClientIsOnlyClosed(t *testing.T) {
	s, m := startSwitchoverServer(t)
	c := dialRaw(t, s.addr)
	c.send(&pulsarpb.CommandConnect{ClientVersion: proto.String("old"), ProtocolVersion: proto.Int32(19)})
	c.expect(pulsarpb.BaseCommand_CONNECTED)
	c.createProducer("persistent://public/moving/t", 1, 1)
	m.set("public/moving", true, TopicProgress{})
	c.expect(pulsarpb.BaseCommand_CLOSE_PRODUCER) // fails on a TOPIC_MIGRATED
}

// Turning migration off before the backlog drained ends the fence: the producer publishes again.
func TestSwitchoverCancelledUnfences(t *testing.T) {
	s, m := startSwitchoverServer(t)
	c := dialRaw(t, s.addr)
	c.connect()
	name := c.createProducer("persistent://public/moving/t", 1, 1)
	m.set("public/moving", true, TopicProgress{ReplicatesToTarget: true, ReplicationBacklog: 1})
	poll.Until(t, 5*time.Second, "producer fenced", func() bool { return producerFenced(s, 1) })
	// The backlog stays: a sweep that read the topic as migrating just before this must not find it
	// drained (the fake sets both at once; a real cancellation does not empty the backlog).
	m.set("public/moving", false, TopicProgress{ReplicatesToTarget: true, ReplicationBacklog: 1})
	poll.Until(t, 5*time.Second, "producer unfenced", func() bool { return !producerFenced(s, 1) })
	c.sendMessage(1, 0, entry(t, name, 0, []byte("after")))
	c.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
}

func mustTopic(t *testing.T, s string) naming.TopicName {
	t.Helper()
	n, err := naming.ParseTopic(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// localPartitions is a Catalog that knows one partitioned topic.
type localPartitions struct{}

func (localPartitions) PartitionCount(ctx context.Context, t naming.TopicName) (int, error) {
	if t.Local == "known-here" {
		return 2, nil
	}
	return 0, nil
}

func (localPartitions) PartitionedTopics(ctx context.Context, ns naming.NamespaceName) ([]PartitionedTopic, error) {
	return nil, nil
}

// PARTITIONED_METADATA of a migrating topic this cluster does not know as partitioned is answered
// with the target's count (the fake target says 4); one known here keeps its count.
func TestSwitchoverPartitionedMetadataFromTarget(t *testing.T) {
	m := newFakeMigration()
	s := startServer(t, Options{Migration: m, Catalog: localPartitions{}, SwitchoverInterval: 10 * time.Millisecond})
	c := dialRaw(t, s.addr)
	c.connect()
	meta := func(topic string, reqID uint64) uint32 {
		c.send(&pulsarpb.CommandPartitionedTopicMetadata{Topic: proto.String(topic), RequestId: proto.Uint64(reqID)})
		r := c.expect(pulsarpb.BaseCommand_PARTITIONED_METADATA_RESPONSE).Cmd.GetPartitionMetadataResponse()
		if r.GetResponse() != pulsarpb.CommandPartitionedTopicMetadataResponse_Success {
			t.Fatalf("PARTITIONED_METADATA %s: %v", topic, r)
		}
		return r.GetPartitions()
	}
	if n := meta("persistent://public/moving/new-on-target", 1); n != 0 {
		t.Fatalf("not migrating: %d partitions, want 0", n)
	}
	m.set("public/moving", true, TopicProgress{})
	if n := meta("persistent://public/moving/new-on-target", 2); n != 4 {
		t.Fatalf("migrating, unknown here: %d partitions, want the target's 4", n)
	}
	if n := meta("persistent://public/moving/known-here", 3); n != 2 {
		t.Fatalf("migrating, known here: %d partitions, want 2", n)
	}
}
