package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// policies is a PolicySource for tests.
type policies struct {
	mu  sync.Mutex
	pol map[string]TopicPolicies // by namespace
}

func (p *policies) TopicPolicies(_ context.Context, t naming.TopicName) (TopicPolicies, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pol, ok := p.pol[t.NamespaceName().String()]
	if !ok {
		return TopicPolicies{}, fmt.Errorf("namespace %s: %w", t.NamespaceName(), ErrNamespaceNotFound)
	}
	return pol, nil
}

func (p *policies) set(ns string, pol TopicPolicies) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pol[ns] = pol
}

func TestPoliciesNamespaceDedupToggleAndPartitions(t *testing.T) {
	pol := &policies{pol: map[string]TopicPolicies{"public/default": {Partitions: 0}}}
	e := &env{t: t, cfg: Config{AutoTopicCreation: false}, pol: pol}
	e.fs = newMemFS()
	e.open()
	t.Cleanup(e.close)
	ctx := context.Background()

	tn, _ := naming.ParseTopic("persistent://nope/ns/t")
	if _, err := e.b.GetTopic(ctx, tn, true); !errors.Is(err, ErrNamespaceNotFound) || wire.ServerErrorOf(err) != pulsarpb.ServerError_TopicNotFound {
		t.Fatalf("missing namespace: %v", err)
	}
	// Partitions of a partitioned topic are created even with auto-creation off; others are not.
	pol.set("public/default", TopicPolicies{Partitions: 2})
	base, _ := naming.ParseTopic("pt")
	if _, err := e.b.GetTopic(ctx, base.Partition(1), true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.GetTopic(ctx, base.Partition(2), true); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("partition out of range: %v", err)
	}
	if _, err := e.b.GetTopic(ctx, base, true); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("partitioned base: %v", err)
	}

	// Dedup switched on by policy for a loaded topic.
	on := true
	pol.set("public/default", TopicPolicies{Partitions: 2, Deduplication: &on})
	top := e.topic("pt-partition-1")
	if top.DedupEnabled() {
		t.Fatal("dedup on before the policy change was applied")
	}
	e.b.PoliciesChanged(naming.NamespaceName{Tenant: "public", Namespace: "default"})
	poll.Until(t, 10*time.Second, "dedup on", top.DedupEnabled)
	p := addProducer(t, top, ProducerOptions{Name: "x"})
	publishSync(t, p, PublishRequest{Entry: entry(t, "x", 7, 1, "a"), SequenceID: 7})
	if r := publishSync(t, p, PublishRequest{Entry: entry(t, "x", 7, 1, "a"), SequenceID: 7}); !r.Duplicate {
		t.Fatalf("not deduplicated: %+v", r)
	}
	off := false
	pol.set("public/default", TopicPolicies{Partitions: 2, Deduplication: &off})
	e.b.PoliciesChanged(naming.NamespaceName{Tenant: "public", Namespace: "default"})
	poll.Until(t, 10*time.Second, "dedup off", func() bool { return !top.DedupEnabled() })
	if top.Ledger().Cursor(dedupCursorName) != nil {
		t.Fatal("dedup cursor kept after disabling")
	}
	if r := publishSync(t, p, PublishRequest{Entry: entry(t, "x", 7, 1, "a"), SequenceID: 7}); r.Duplicate || r.Err != nil {
		t.Fatalf("dedup still applied: %+v", r)
	}
}

func TestReplicationCursorsForNewTopics(t *testing.T) {
	pol := &policies{pol: map[string]TopicPolicies{"public/default": {ReplicationClusters: []string{"a", "b", "c"}}}}
	e := &env{t: t, cfg: Config{Cluster: "a", AutoTopicCreation: true}, pol: pol}
	e.fs = newMemFS()
	e.open()
	t.Cleanup(e.close)
	top := e.topic("replicated")
	cursors := top.InternalStats().Cursors
	if _, ok := cursors["pulsar.repl.b"]; !ok {
		t.Fatalf("cursors %v", cursors)
	}
	if _, ok := cursors["pulsar.repl.c"]; !ok {
		t.Fatalf("cursors %v", cursors)
	}
	if _, ok := cursors["pulsar.repl.a"]; ok {
		t.Fatal("cursor for the local cluster")
	}
	if subs := top.Subscriptions(); len(subs) != 0 {
		t.Fatalf("replication cursors listed as subscriptions: %v", subs)
	}
}

func TestSlowConsumerDoesNotBlockOthers(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("slow")
	p := addProducer(t, top, ProducerOptions{})
	// "slow" never sends permits; "fast" on another subscription and on the same one keep going.
	slow, slowSink := subscribe(t, top, SubscribeOptions{Subscription: "lagging", Durable: true, Type: mtypes.SubShared})
	_ = slow
	fast, fastSink := subscribe(t, top, SubscribeOptions{Subscription: "fast", Durable: true})
	peer, peerSink := subscribe(t, top, SubscribeOptions{Subscription: "lagging", Durable: true, Type: mtypes.SubShared})
	fast.Flow(10000)
	peer.Flow(10000)
	const n = 500
	for i := 0; i < n; i++ {
		if r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "x"), SequenceID: int64(i)}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	fastSink.waitMessages(t, n)
	peerSink.waitMessages(t, n)
	if slowSink.count() != 0 {
		t.Fatal("consumer without permits got messages")
	}
	if st := top.Stats().Subscriptions["lagging"]; st.MsgBacklog != n {
		t.Fatalf("backlog %d", st.MsgBacklog)
	}
}

func TestKeySharedKeepsKeysOnOneConsumer(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("ks")
	p := addProducer(t, top, ProducerOptions{})
	opts := SubscribeOptions{Subscription: "ks", Type: mtypes.SubKeyShared, Durable: true, InitialPosition: mtypes.InitialEarliest,
		KeyShared: &KeySharedOptions{Mode: mtypes.KeySharedAutoSplit}}
	c1, s1 := subscribe(t, top, opts)
	c2, s2 := subscribe(t, top, opts)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	for i := 0; i < 80; i++ {
		md := &pulsarpb.MessageMetadata{ProducerName: proto.String(p.Name()), SequenceId: proto.Uint64(uint64(i)),
			PublishTime: proto.Uint64(1), PartitionKey: proto.String(keys[i%len(keys)])}
		b, _ := wire.EncodeEntry(md, []byte(keys[i%len(keys)]))
		publishSync(t, p, PublishRequest{Entry: b, SequenceID: int64(i)})
	}
	c1.Flow(1000)
	c2.Flow(1000)
	poll.Until(t, 10*time.Second, "all delivered", func() bool { return s1.count()+s2.count() == 80 })
	owner := map[string]*sink{}
	for _, s := range []*sink{s1, s2} {
		for _, d := range s.waitMessages(t, 0) {
			k := payloadOf(t, d)
			if o, ok := owner[k]; ok && o != s {
				t.Fatalf("key %s on two consumers", k)
			}
			owner[k] = s
		}
	}
}

func TestDelayedDeliveryShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, Config{AutoTopicCreation: true})
		top := e.topic("delayed")
		p := addProducer(t, top, ProducerOptions{})
		c, s := subscribe(t, top, SubscribeOptions{Subscription: "d", Type: mtypes.SubShared, Durable: true})
		c.Flow(100)
		// In the synctest bubble the clock moves only when everything waits: "now" is delivered before
		// "late" is due however loaded the machine is, and the second passes in fake time.
		due := time.Now().Add(time.Second).Truncate(time.Millisecond) // deliver_at_time is in ms
		md := &pulsarpb.MessageMetadata{ProducerName: proto.String(p.Name()), SequenceId: proto.Uint64(0),
			PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), DeliverAtTime: proto.Int64(due.UnixMilli())}
		late, _ := wire.EncodeEntry(md, []byte("late"))
		publishSync(t, p, PublishRequest{Entry: late})
		publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 1, 1, "now"), SequenceID: 1})
		got := s.waitMessages(t, 1)
		if payloadOf(t, got[0]) != "now" {
			t.Fatalf("first delivered %q", payloadOf(t, got[0]))
		}
		if d := top.Stats().Subscriptions["d"].MsgDelayed; d != 1 {
			t.Fatalf("msgDelayed %d", d)
		}
		got = s.waitMessages(t, 2)
		if payloadOf(t, got[1]) != "late" || time.Now().Before(due) {
			t.Fatalf("delayed message %q at %v (due %v)", payloadOf(t, got[1]), time.Now(), due)
		}
	})
}

func TestWaitForExclusiveGivesUpWithContext(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("wfe")
	ex := addProducer(t, top, ProducerOptions{AccessMode: mtypes.AccessExclusive})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := top.AddProducer(ctx, ProducerOptions{AccessMode: mtypes.AccessWaitForExclusive, OnQueued: cancel})
		errc <- err
	}()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if n := top.Stats().WaitingPublishers; n != 0 {
		t.Fatalf("waiting publishers %d", n)
	}
	ex.Close(context.Background())
	// The topic is free again.
	addProducer(t, top, ProducerOptions{AccessMode: mtypes.AccessExclusive})
}

func TestStatsShape(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true, StatsInterval: 20 * time.Millisecond})
	top := e.topic("stats")
	p := addProducer(t, top, ProducerOptions{Properties: map[string]string{"k": "v"}, ClientVersion: "Pulsar-Go-version-0.19.0", Address: "127.0.0.1:1"})
	c, s := subscribe(t, top, SubscribeOptions{Subscription: "s", Durable: true, Metadata: map[string]string{"m": "1"}})
	st := top.Stats()
	sub := st.Subscriptions["s"]
	if sub.LastMarkDeleteAdvancedTimestamp != 0 || sub.MsgOutCounter != 0 || len(sub.Consumers) != 1 {
		t.Fatalf("fresh subscription %+v", sub)
	}
	c.Flow(10)
	for i := 0; i < 5; i++ {
		publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "x"), SequenceID: int64(i)})
	}
	got := s.waitMessages(t, 5)
	c.Ack(context.Background(), []Ack{{Position: got[4].Position}}, true)
	poll.Until(t, 10*time.Second, "rates", func() bool { return top.Stats().MsgRateIn > 0 || top.Stats().MsgInCounter == 5 })
	st = top.Stats()
	pub := st.Publishers[0]
	if pub.Metadata["k"] != "v" || pub.ClientVersion != "Pulsar-Go-version-0.19.0" || pub.AccessMode != "Shared" || pub.ConnectedSince == "" {
		t.Fatalf("publisher %+v", pub)
	}
	sub = st.Subscriptions["s"]
	cs := sub.Consumers[0]
	if cs.Metadata["m"] != "1" || cs.LastConsumedFlowTimestamp == 0 || cs.AvgMessagesPerEntry != 1 || cs.MsgOutCounter != 5 {
		t.Fatalf("consumer %+v", cs)
	}
	if sub.LastMarkDeleteAdvancedTimestamp == 0 || sub.Type != "Exclusive" || !sub.IsDurable || st.MsgInCounter != 5 || st.StorageSize == 0 {
		t.Fatalf("subscription %+v topic %+v", sub, st)
	}
	in := top.InternalStats()
	if in.NumberOfEntries != 5 || in.Cursors["s"].MarkDeletePosition != got[4].Position.String() {
		t.Fatalf("internal %+v", in)
	}
	var listed int64
	for _, l := range in.Ledgers {
		listed += l.Entries
	}
	if len(in.Ledgers) == 0 || listed != 5 || in.Ledgers[len(in.Ledgers)-1].LedgerID != got[4].Position.LedgerID {
		t.Fatalf("internal stats ledgers %+v, want the segments holding the 5 entries", in.Ledgers)
	}
}

// A reader (non-durable) that seeks keeps its subscription: the client re-subscribes and continues
// at the new position (the Go client's Latest+inclusive reader seeks before its first FLOW).
func TestReaderSeekKeepsSubscription(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("reader-seek")
	p := addProducer(t, top, ProducerOptions{})
	var last PublishResult
	for i := 0; i < 5; i++ {
		last = publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, fmt.Sprint(i)), SequenceID: int64(i)})
	}
	start := mtypes.Latest
	opts := SubscribeOptions{Subscription: "reader-1", Type: mtypes.SubExclusive, StartPosition: &start}
	c, s := subscribe(t, top, opts)
	lm, err := c.LastMessageID(context.Background())
	if err != nil || lm.Position != last.Position {
		t.Fatalf("LastMessageID %+v %v", lm, err)
	}
	if err := c.Seek(context.Background(), lm.Position); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "closed", func(s *sink) bool { return s.closed })
	if subs := top.Subscriptions(); len(subs) != 1 {
		t.Fatalf("subscriptions after seek %v", subs)
	}
	restart := lm.Position
	opts.StartPosition = &restart
	c, s = subscribe(t, top, opts)
	c.Flow(10)
	if got := s.waitMessages(t, 1); got[0].Position != last.Position {
		t.Fatalf("after seek got %v", got[0].Position)
	}
	c.Close()
	if subs := top.Subscriptions(); len(subs) != 0 {
		t.Fatalf("reader subscription kept after close: %v", subs)
	}
}

// Unloading and loading again concurrently never hands the new topic the old, closing ledger.
func TestConcurrentUnloadAndLoad(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	ctx := context.Background()
	tn, _ := naming.ParseTopic("churn")
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				top, err := e.b.GetTopic(ctx, tn, true)
				if err != nil {
					t.Error(err)
					return
				}
				p, err := top.AddProducer(ctx, ProducerOptions{})
				if err == nil {
					ch := make(chan PublishResult, 1)
					p.Publish(PublishRequest{Entry: entry(t, p.Name(), 0, 1, "x")}, func(r PublishResult) { ch <- r })
					if r := <-ch; r.Err != nil && !errors.Is(r.Err, ErrTopicFenced) && !errors.Is(r.Err, ErrProducerClosed) {
						t.Errorf("publish: %v", r.Err)
					}
					p.Close(ctx)
				} else if !errors.Is(err, ErrTopicFenced) {
					t.Error(err)
				}
				if err := e.b.UnloadTopic(ctx, tn); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	top := e.topic("churn")
	p := addProducer(t, top, ProducerOptions{})
	if r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 1, "x")}); r.Err != nil {
		t.Fatal(r.Err)
	}
}

func TestNonPersistentTopic(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("non-persistent://public/default/np")
	if top.Ledger() != nil {
		t.Fatal("non-persistent topic has a ledger")
	}
	p := addProducer(t, top, ProducerOptions{})
	// No subscription yet: published and dropped.
	if r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 1, "lost")}); r.Err != nil || r.Position != (mtypes.Position{}) {
		t.Fatalf("publish %+v", r)
	}
	fast, fs := subscribe(t, top, SubscribeOptions{Subscription: "fast", Type: mtypes.SubShared})
	_, slowSink := subscribe(t, top, SubscribeOptions{Subscription: "slow"}) // never sends permits
	fast.Flow(3)
	for i := 1; i <= 5; i++ {
		publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, fmt.Sprint(i)), SequenceID: int64(i)})
	}
	got := fs.waitMessages(t, 3)
	if payloadOf(t, got[0]) != "1" || payloadOf(t, got[2]) != "3" || fs.count() != 3 || slowSink.count() != 0 {
		t.Fatalf("got %d fast, %d slow", fs.count(), slowSink.count())
	}
	if err := fast.Ack(context.Background(), []Ack{{Position: got[0].Position}}, false); err != nil {
		t.Fatal(err)
	}
	if err := fast.Seek(context.Background(), mtypes.Position{}); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("seek: %v", err)
	}
	st := top.Stats()
	if st.MsgInCounter != 6 || st.StorageSize != 0 || st.Subscriptions["fast"].MsgOutCounter != 3 {
		t.Fatalf("stats %+v", st)
	}
	ns := naming.NamespaceName{Tenant: "public", Namespace: "default"}
	if list, _ := e.b.ListTopics(context.Background(), ns); len(list) != 0 {
		t.Fatalf("persistent list %v", list)
	}
	if list := e.b.ListNonPersistentTopics(ns); len(list) != 1 || list[0].String() != "non-persistent://public/default/np" {
		t.Fatalf("non-persistent list %v", list)
	}
	fast.Close()
	if err := e.b.DeleteTopic(context.Background(), top.Name(), true); err != nil {
		t.Fatal(err)
	}
}

// Acks of entries that do not exist yet are ignored, and seeking past the end waits for new entries.
func TestHostileAcksAndSeeks(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("hostile")
	p := addProducer(t, top, ProducerOptions{})
	r0 := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 1, "a")})
	opts := SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true, InitialPosition: mtypes.InitialEarliest}
	c, s := subscribe(t, top, opts)
	future := mtypes.Position{LedgerID: r0.Position.LedgerID, EntryID: r0.Position.EntryID + 1}
	if err := c.Ack(context.Background(), []Ack{{Position: future}}, false); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("ack of a future entry: %v", err)
	}
	if err := c.Ack(context.Background(), []Ack{{Position: mtypes.Position{LedgerID: 1 << 50, EntryID: 0}}}, false); err == nil {
		t.Fatal("ack far in the future accepted")
	}
	r1 := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 1, 1, "b")})
	if r1.Position != future {
		t.Fatalf("next entry at %v, want %v", r1.Position, future)
	}
	c.Flow(10)
	if got := s.waitMessages(t, 2); got[1].Position != future {
		t.Fatalf("future entry not delivered: %+v", got)
	}
	c.Close()
	// Seek far past the end: the next published entry is delivered.
	c, _ = subscribe(t, top, opts)
	if err := c.Seek(context.Background(), mtypes.Position{LedgerID: 1 << 50, EntryID: 7}); err != nil {
		t.Fatal(err)
	}
	c, s = subscribe(t, top, opts)
	c.Flow(10)
	r2 := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 2, 1, "c")})
	if got := s.waitMessages(t, 1); got[0].Position != r2.Position {
		t.Fatalf("after seek past the end got %v", got[0].Position)
	}
	c.Close()
	// A reader starting at an id that does not exist yet starts after the last entry.
	start := mtypes.Position{LedgerID: 1 << 50, EntryID: 0}
	rc, rs := subscribe(t, top, SubscribeOptions{Subscription: "reader", StartPosition: &start})
	rc.Flow(10)
	r3 := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 3, 1, "d")})
	if got := rs.waitMessages(t, 1); got[0].Position != r3.Position {
		t.Fatalf("reader got %v", got[0].Position)
	}
	rc.Close()
}

func TestLastMessageIDSkipsTrailingMarkers(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("last-marker")
	p := addProducer(t, top, ProducerOptions{})
	r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 2, "x"), SequenceID: 0, NumMessages: 2})
	for i := 0; i < 3; i++ {
		publishSync(t, p, PublishRequest{Entry: markerEntry(t), Marker: true})
	}
	c, _ := subscribe(t, top, SubscribeOptions{Subscription: "s", Durable: true})
	lm, err := c.LastMessageID(context.Background())
	if err != nil || lm.Position != r.Position || lm.BatchIndex != 1 {
		t.Fatalf("LastMessageID %+v %v, want %v batch 1", lm, err, r.Position)
	}
	c.Close()
}

// Exclusive redelivery rewinds to after the mark-delete position and skips what was acknowledged.
func TestExclusiveRewindSkipsAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, Config{AutoTopicCreation: true})
		top := e.topic("rewind")
		p := addProducer(t, top, ProducerOptions{})
		for i := 0; i < 5; i++ {
			publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, fmt.Sprint(i)), SequenceID: int64(i)})
		}
		c, s := subscribe(t, top, SubscribeOptions{Subscription: "x", Durable: true, InitialPosition: mtypes.InitialEarliest})
		c.Flow(100)
		got := s.waitMessages(t, 5)
		if err := c.Ack(context.Background(), []Ack{{Position: got[1].Position}, {Position: got[3].Position}}, false); err != nil {
			t.Fatal(err)
		}
		c.RedeliverUnacknowledged([]mtypes.Position{got[2].Position})
		again := s.waitMessages(t, 8)[5:]
		for i, want := range []string{"0", "2", "4"} {
			if payloadOf(t, again[i]) != want || again[i].RedeliveryCount != 1 {
				t.Fatalf("redelivery %d: %q count %d", i, payloadOf(t, again[i]), again[i].RedeliveryCount)
			}
		}
		s.quiet(t, 8)
		c.Close()
	})
}

func TestSubscriptionExpiration(t *testing.T) {
	pol := &policies{pol: map[string]TopicPolicies{"public/default": {SubscriptionExpiration: time.Hour}}}
	clock := &fakeClock{now: time.Now()}
	e := &env{t: t, cfg: Config{AutoTopicCreation: true}, pol: pol, clock: clock}
	e.fs = newMemFS()
	e.open()
	t.Cleanup(e.close)
	top := e.topic("expiring")
	c1, _ := subscribe(t, top, SubscribeOptions{Subscription: "idle", Durable: true})
	c1.Close()
	subscribe(t, top, SubscribeOptions{Subscription: "busy", Durable: true})
	c3, _ := subscribe(t, top, SubscribeOptions{Subscription: "replicated", Durable: true, ReplicateSubscriptionState: true})
	c3.Close()
	clock.advance(30 * time.Minute)
	top.t.expireAll(context.Background())
	if subs := top.Subscriptions(); len(subs) != 3 {
		t.Fatalf("expired too early: %v", subs)
	}
	clock.advance(31 * time.Minute)
	top.t.expireAll(context.Background())
	if subs := top.Subscriptions(); len(subs) != 2 || subs[0] != "busy" || subs[1] != "replicated" {
		t.Fatalf("after expiration: %v", subs)
	}
}

func TestKeySharedStickyRangesConflict(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("sticky")
	sticky := func(ranges ...HashRange) SubscribeOptions {
		return SubscribeOptions{Subscription: "s", Type: mtypes.SubKeyShared, Durable: true,
			KeyShared: &KeySharedOptions{Mode: mtypes.KeySharedSticky, Ranges: ranges}}
	}
	subscribe(t, top, sticky(HashRange{0, 100}))
	for _, bad := range []SubscribeOptions{
		sticky(HashRange{50, 200}),
		sticky(HashRange{300, 200}),
		sticky(HashRange{200, 70000}),
		sticky(HashRange{200, 300}, HashRange{250, 400}),
		sticky(),
	} {
		if _, err := top.Subscribe(context.Background(), bad, newSink()); !errors.Is(err, ErrConsumerAssign) {
			t.Fatalf("ranges %v: %v", bad.KeyShared.Ranges, err)
		}
	}
	subscribe(t, top, sticky(HashRange{101, 65535}))
}

// Entries whose metadata does not parse are stored and dispatched as single messages (the client
// validates them), skipped by the dedup replay, and never crash the broker.
func TestGarbageEntries(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true, DedupDefault: true})
	top := e.topic("garbage")
	p := addProducer(t, top, ProducerOptions{Name: "g"})
	garbage := [][]byte{
		{0x0e, 0x01, 0, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff}, // magic, checksum, metadata size 3, bad protobuf
		{0, 0, 0, 0}, // no magic, empty metadata
		{0x0e, 0x01, 1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff}, // metadata size larger than the entry
	}
	for i, g := range garbage {
		if r := publishSync(t, p, PublishRequest{Entry: g, SequenceID: int64(i)}); r.Err != nil {
			t.Fatalf("publish %d: %v", i, r.Err)
		}
	}
	c, s := subscribe(t, top, SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true, InitialPosition: mtypes.InitialEarliest})
	c.Flow(10)
	got := s.waitMessages(t, len(garbage))
	for _, d := range got {
		if d.NumMessages != 1 {
			t.Fatalf("delivery %+v", d)
		}
	}
	if _, err := c.LastMessageID(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Close()
	e.crash() // the dedup replay reads the garbage
	top = e.topic("garbage")
	p = addProducer(t, top, ProducerOptions{Name: "g"})
	if r := publishSync(t, p, PublishRequest{Entry: entry(t, "g", 5, 1, "ok"), SequenceID: 5}); r.Err != nil || r.Duplicate {
		t.Fatalf("after garbage: %+v", r)
	}
}

func TestBacklogQuotaPolicies(t *testing.T) {
	for _, tt := range []struct {
		policy string
		want   error
	}{
		{"", ErrProducerBlockedQuota},
		{"producer_request_hold", ErrProducerBlockedQuota},
		{"producer_exception", ErrProducerBlockedQuotaException},
		{"consumer_backlog_eviction", nil},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			pol := &policies{pol: map[string]TopicPolicies{"public/default": {BacklogQuotaLimitBytes: 10 << 10, BacklogQuotaPolicy: tt.policy}}}
			e := &env{t: t, cfg: Config{AutoTopicCreation: true}, pol: pol}
			e.fs = newMemFS()
			e.open()
			t.Cleanup(e.close)
			top := e.topic("quota")
			subscribe(t, top, SubscribeOptions{Subscription: "slow", Durable: true}) // never reads
			closed := make(chan struct{})
			p := addProducer(t, top, ProducerOptions{Name: "p", OnClosed: func(Reassigned) { close(closed) }})
			body := string(make([]byte, 1024))
			for i := 0; i < 20; i++ {
				publishSync(t, p, PublishRequest{Entry: entry(t, "p", uint64(i), 1, body), SequenceID: int64(i)})
			}
			top.t.enforceBacklogQuota(context.Background())
			_, err := top.AddProducer(context.Background(), ProducerOptions{Name: "p2"})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("producer refused under eviction: %v", err)
				}
				if b := top.Stats().Subscriptions["slow"].MsgBacklog; b > 10 {
					t.Fatalf("backlog %d entries after eviction", b)
				}
				return
			}
			<-closed // the connected producer was disconnected
			if !errors.Is(err, tt.want) {
				t.Fatalf("new producer: %v, want %v", err, tt.want)
			}
			if r := publishSync(t, p, PublishRequest{Entry: entry(t, "p", 99, 1, "x"), SequenceID: 99}); r.Err == nil {
				t.Fatal("disconnected producer still publishes")
			}
			// The backlog is consumed: producers are welcome again.
			if err := top.SkipAll(context.Background(), "slow"); err != nil {
				t.Fatal(err)
			}
			addProducer(t, top, ProducerOptions{Name: "p"})
		})
	}
}
