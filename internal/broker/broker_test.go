package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
)

func TestProduceConsumeExclusive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, Config{AutoTopicCreation: true})
		top := e.topic("t1")
		p := addProducer(t, top, ProducerOptions{})
		if p.Name() == "" || p.LastSequenceID() != -1 {
			t.Fatalf("producer name %q last seq %d", p.Name(), p.LastSequenceID())
		}
		c, s := subscribe(t, top, SubscribeOptions{Subscription: "sub", Type: mtypes.SubExclusive, Durable: true, InitialPosition: mtypes.InitialEarliest})

		// Receipts come back in order with increasing positions.
		results := make(chan PublishResult, 20)
		for i := 0; i < 20; i++ {
			p.Publish(PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, fmt.Sprint("m", i)), SequenceID: int64(i)},
				func(r PublishResult) { results <- r })
		}
		var last mtypes.Position
		for i := 0; i < 20; i++ {
			r := <-results
			if r.Err != nil || r.SequenceID != int64(i) {
				t.Fatalf("result %d: %+v", i, r)
			}
			if i > 0 && r.Position.Compare(last) <= 0 {
				t.Fatalf("positions not increasing: %v after %v", r.Position, last)
			}
			last = r.Position
		}
		c.Flow(15)
		s.waitMessages(t, 15)
		s.quiet(t, 15)
		c.Flow(100)
		got := s.waitMessages(t, 20)
		for i, d := range got {
			if payloadOf(t, d) != fmt.Sprint("m", i) || d.RedeliveryCount != 0 || d.NumMessages != 1 {
				t.Fatalf("delivery %d: %+v", i, d)
			}
		}
		if st := top.Stats(); st.Subscriptions["sub"].MsgBacklog != 20 || st.Subscriptions["sub"].UnackedMessages != 20 {
			t.Fatalf("stats before ack: %+v", st.Subscriptions["sub"])
		}
		if err := c.Ack(context.Background(), []Ack{{Position: got[19].Position}}, true); err != nil {
			t.Fatal(err)
		}
		if st := top.Stats(); st.Subscriptions["sub"].MsgBacklog != 0 || st.Subscriptions["sub"].UnackedMessages != 0 {
			t.Fatalf("stats after ack: %+v", st.Subscriptions["sub"])
		}
		// A second consumer on the exclusive subscription is refused.
		if _, err := top.Subscribe(context.Background(), SubscribeOptions{Subscription: "sub", Type: mtypes.SubExclusive, Durable: true}, newSink()); !errors.Is(err, ErrConsumerBusy) {
			t.Fatalf("second exclusive consumer: %v", err)
		}
		// And a different type while connected.
		if _, err := top.Subscribe(context.Background(), SubscribeOptions{Subscription: "sub", Type: mtypes.SubShared, Durable: true}, newSink()); !errors.Is(err, ErrConsumerBusy) {
			t.Fatalf("other type: %v", err)
		}
		lm, err := c.LastMessageID(context.Background())
		if err != nil || lm.Position != last || lm.BatchIndex != -1 || lm.MarkDelete != last {
			t.Fatalf("LastMessageID = %+v, %v (last %v)", lm, err, last)
		}
		c.Close()
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTopicCreationRules(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: false})
	tn, _ := naming.ParseTopic("missing")
	if _, err := e.b.GetTopic(context.Background(), tn, true); !errors.Is(err, ErrTopicNotFound) || wire.ServerErrorOf(err).String() != "TopicNotFound" {
		t.Fatalf("auto creation off: %v", err)
	}
	if err := e.b.CreateTopic(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	if err := e.b.CreateTopic(context.Background(), tn); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := e.b.GetTopic(context.Background(), tn, false); err != nil {
		t.Fatal(err)
	}
	list, err := e.b.ListTopics(context.Background(), naming.NamespaceName{Tenant: "public", Namespace: "default"})
	if err != nil || len(list) != 1 || list[0] != tn {
		t.Fatalf("ListTopics = %v, %v", list, err)
	}
	if err := e.b.DeleteTopic(context.Background(), tn, false); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.b.TopicExists(context.Background(), tn); ok {
		t.Fatal("topic exists after delete")
	}
}

// Loads racing a deletion never bring the topic back: the deletion holds the topic's slot from
// the unload until its ledger is gone, so a concurrent GetTopic(create=false) waits and then gets
// TopicNotFound (before the fix a load could slip in between and serve a deleted ledger).
func TestDeleteTopicRacingLoads(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: false})
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		tn, _ := naming.ParseTopic(fmt.Sprintf("delete-race-%d", i))
		if err := e.b.CreateTopic(ctx, tn); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := e.b.GetTopic(ctx, tn, false); err != nil && !errors.Is(err, ErrTopicNotFound) {
						t.Errorf("GetTopic during delete: %v", err)
						return
					}
				}
			}()
		}
		if err := e.b.DeleteTopic(ctx, tn, true); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		if top, err := e.b.GetTopic(ctx, tn, false); !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("iteration %d: after delete GetTopic = %v, %v; want TopicNotFound", i, top, err)
		}
		if ok, _ := e.b.TopicExists(ctx, tn); ok {
			t.Fatalf("iteration %d: topic exists after delete", i)
		}
	}
}

func TestDedupSurvivesRestartAndCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, Config{AutoTopicCreation: true, DedupDefault: true, DedupSnapshotInterval: 1000})
		top := e.topic("dedup")
		p := addProducer(t, top, ProducerOptions{Name: "prod"})
		for i := 0; i < 5; i++ {
			r := publishSync(t, p, PublishRequest{Entry: entry(t, "prod", uint64(i), 1, "x"), SequenceID: int64(i)})
			if r.Err != nil || r.Duplicate {
				t.Fatalf("publish %d: %+v", i, r)
			}
		}
		r := publishSync(t, p, PublishRequest{Entry: entry(t, "prod", 2, 1, "x"), SequenceID: 2})
		if !r.Duplicate || r.Position != (mtypes.Position{LedgerID: -1, EntryID: -1}) {
			t.Fatalf("duplicate: %+v", r)
		}
		if !top.DedupEnabled() || top.Stats().DeduplicationStatus != "Enabled" {
			t.Fatal("dedup not enabled")
		}

		// Clean restart: last_sequence_id comes back.
		e.restart()
		top = e.topic("dedup")
		p = addProducer(t, top, ProducerOptions{Name: "prod"})
		if p.LastSequenceID() != 4 {
			t.Fatalf("after restart LastSequenceID = %d, want 4", p.LastSequenceID())
		}
		// A batch: sequence 5 (first) .. 9.
		r = publishSync(t, p, PublishRequest{Entry: entry(t, "prod", 5, 5, "b"), SequenceID: 5, NumMessages: 5})
		if r.Err != nil || r.Duplicate {
			t.Fatalf("batch: %+v", r)
		}

		// Crash (no clean close, no final snapshot): the replay of the log rebuilds the state.
		e.crash()
		top = e.topic("dedup")
		p = addProducer(t, top, ProducerOptions{Name: "prod"})
		if p.LastSequenceID() != 9 {
			t.Fatalf("after crash LastSequenceID = %d, want 9 (the batch 5..9)", p.LastSequenceID())
		}
		for _, seq := range []int64{3, 5, 9} {
			if r := publishSync(t, p, PublishRequest{Entry: entry(t, "prod", uint64(seq), 1, "x"), SequenceID: seq}); !r.Duplicate {
				t.Fatalf("seq %d after crash not a duplicate: %+v", seq, r)
			}
		}
		if r := publishSync(t, p, PublishRequest{Entry: entry(t, "prod", 10, 1, "x"), SequenceID: 10}); r.Err != nil || r.Duplicate {
			t.Fatalf("seq 10: %+v", r)
		}
		// Everything stored once: 5 singles + 1 batch + 1.
		c, s := subscribe(t, top, SubscribeOptions{Subscription: "check", Type: mtypes.SubExclusive, Durable: true, InitialPosition: mtypes.InitialEarliest})
		c.Flow(1000)
		got := s.waitMessages(t, 7)
		s.quiet(t, 7)
		if got[5].NumMessages != 5 {
			t.Fatalf("batch delivery %+v", got[5])
		}
		c.Close()
	})
}

func TestDedupSnapshotsEveryInterval(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true, DedupDefault: true, DedupSnapshotInterval: 3})
	top := e.topic("snap")
	p := addProducer(t, top, ProducerOptions{Name: "a"})
	for i := 0; i < 10; i++ {
		publishSync(t, p, PublishRequest{Entry: entry(t, "a", uint64(i), 1, "x"), SequenceID: int64(i)})
	}
	cur := top.Ledger().Cursor(dedupCursorName)
	if cur == nil {
		t.Fatal("no dedup cursor")
	}
	// Snapshots run in the background and are skipped while one is running: at least one happened.
	poll.Until(t, 10*time.Second, "snapshot", func() bool { return cur.Properties()[dedupPropPrefix+"a"] != "" })
	if _, ok := top.InternalStats().Cursors[dedupCursorName]; !ok {
		t.Fatal("dedup cursor missing from internal stats")
	}
	if subs := top.Subscriptions(); len(subs) != 0 {
		t.Fatalf("internal cursor listed as subscription: %v", subs)
	}
}

func TestSharedRoundRobinAndRedeliveryOnClose(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("shared")
	p := addProducer(t, top, ProducerOptions{})
	opts := SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true, InitialPosition: mtypes.InitialEarliest}
	c1, s1 := subscribe(t, top, opts)
	c2, s2 := subscribe(t, top, opts)
	// Permits first: both consumers can take every entry, so round robin splits them.
	c1.Flow(100)
	c2.Flow(100)
	for i := 0; i < 10; i++ {
		publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, fmt.Sprint(i)), SequenceID: int64(i)})
	}
	poll.Until(t, 10*time.Second, "all delivered", func() bool { return s1.count()+s2.count() == 10 })
	if s1.count() == 0 || s2.count() == 0 {
		t.Fatalf("not shared: %d/%d", s1.count(), s2.count())
	}
	n1 := s1.count()
	// Cumulative ack is refused on Shared.
	if err := c1.Ack(context.Background(), []Ack{{Position: s1.waitMessages(t, 1)[0].Position}}, true); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("cumulative ack on shared: %v", err)
	}
	// c1 closes without acking: its messages go to c2 with redelivery count 1.
	c1.Close()
	got := s2.waitMessages(t, 10)
	redelivered := 0
	for _, d := range got {
		if d.RedeliveryCount == 1 {
			redelivered++
		}
	}
	if redelivered != n1 {
		t.Fatalf("redelivered %d, want %d", redelivered, n1)
	}
	// Negative ack of one id: delivered again with count incremented.
	if err := c2.Ack(context.Background(), positionsAcks(got[1:]), false); err != nil {
		t.Fatal(err)
	}
	c2.RedeliverUnacknowledged([]mtypes.Position{got[0].Position})
	again := s2.waitMessages(t, 11)[10]
	if again.Position != got[0].Position || again.RedeliveryCount != got[0].RedeliveryCount+1 {
		t.Fatalf("redelivery %+v of %+v", again, got[0])
	}
	if err := c2.Ack(context.Background(), []Ack{{Position: again.Position}}, false); err != nil {
		t.Fatal(err)
	}
	if b := top.Stats().Subscriptions["s"].MsgBacklog; b != 0 {
		t.Fatalf("backlog %d", b)
	}
	c2.Close()
}

func positionsAcks(ds []Delivery) []Ack {
	out := make([]Ack, len(ds))
	for i, d := range ds {
		out[i] = Ack{Position: d.Position}
	}
	return out
}

func TestFailoverNotifiesAndMovesToNextConsumer(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("fo")
	p := addProducer(t, top, ProducerOptions{})
	opts := SubscribeOptions{Subscription: "f", Type: mtypes.SubFailover, Durable: true, InitialPosition: mtypes.InitialEarliest}
	opts.ConsumerName = "b"
	cb, sb := subscribe(t, top, opts)
	sb.waitFor(t, "b active", func(s *sink) bool { return len(s.actives) == 1 && s.actives[0] })
	opts.ConsumerName = "a"
	ca, sa := subscribe(t, top, opts)
	// a sorts first: it becomes active, b inactive.
	sa.waitFor(t, "a active", func(s *sink) bool { return len(s.actives) > 0 && s.actives[len(s.actives)-1] })
	sb.waitFor(t, "b inactive", func(s *sink) bool { return !s.actives[len(s.actives)-1] })
	for i := 0; i < 5; i++ {
		publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "x"), SequenceID: int64(i)})
	}
	ca.Flow(100)
	cb.Flow(100)
	sa.waitMessages(t, 5)
	if sb.count() != 0 {
		t.Fatal("inactive consumer got messages")
	}
	ca.Close()
	sb.waitFor(t, "b active again", func(s *sink) bool { return s.actives[len(s.actives)-1] })
	got := sb.waitMessages(t, 5)
	if got[0].RedeliveryCount != 1 {
		t.Fatalf("redelivery count %d", got[0].RedeliveryCount)
	}
	if name := top.Stats().Subscriptions["f"].ActiveConsumerName; name != "b" {
		t.Fatalf("active consumer %q", name)
	}
	cb.Close()
}

func TestSeekDisconnectsAndRestarts(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("seek")
	p := addProducer(t, top, ProducerOptions{})
	var ps []mtypes.Position
	for i := 0; i < 6; i++ {
		r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, fmt.Sprint(i)), SequenceID: int64(i)})
		ps = append(ps, r.Position)
	}
	opts := SubscribeOptions{Subscription: "s", Type: mtypes.SubExclusive, Durable: true, InitialPosition: mtypes.InitialEarliest}
	c, s := subscribe(t, top, opts)
	c.Flow(100)
	got := s.waitMessages(t, 6)
	if err := c.Ack(context.Background(), []Ack{{Position: got[5].Position}}, true); err != nil {
		t.Fatal(err)
	}
	if err := c.Seek(context.Background(), ps[2]); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "closed", func(s *sink) bool { return s.closed })
	// Further calls on the closed consumer fail.
	if err := c.Ack(context.Background(), []Ack{{Position: ps[0]}}, false); !errors.Is(err, ErrConsumerNotFound) {
		t.Fatalf("ack after close: %v", err)
	}
	c, s = subscribe(t, top, opts)
	c.Flow(100)
	got = s.waitMessages(t, 4)
	if got[0].Position != ps[2] {
		t.Fatalf("after seek first = %v, want %v", got[0].Position, ps[2])
	}
	lm, _ := c.LastMessageID(context.Background())
	if lm.MarkDelete.Compare(ps[2]) >= 0 {
		t.Fatalf("mark delete %v after seek to %v", lm.MarkDelete, ps[2])
	}
	if err := c.SeekByTime(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "closed", func(s *sink) bool { return s.closed })
	c, s = subscribe(t, top, opts)
	c.Flow(100)
	if got = s.waitMessages(t, 6); got[0].Position != ps[0] {
		t.Fatalf("after seek by time first = %v", got[0].Position)
	}
	c.Close()
}

func TestReaderStartPositionAndCleanup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, Config{AutoTopicCreation: true})
		top := e.topic("reader")
		p := addProducer(t, top, ProducerOptions{})
		var ps []mtypes.Position
		for i := 0; i < 5; i++ {
			ps = append(ps, publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "x"), SequenceID: int64(i)}).Position)
		}
		for _, tt := range []struct {
			start mtypes.Position
			want  int
		}{{ps[3], 2}, {mtypes.Earliest, 5}, {mtypes.Latest, 0}} {
			start := tt.start
			c, s := subscribe(t, top, SubscribeOptions{Subscription: "reader-x", Type: mtypes.SubExclusive, Durable: false, StartPosition: &start})
			c.Flow(100)
			if tt.want > 0 {
				got := s.waitMessages(t, tt.want)
				if tt.start == ps[3] && got[0].Position != ps[3] {
					t.Fatalf("reader starts at %v", got[0].Position)
				}
			}
			s.quiet(t, tt.want)
			c.Close()
			if len(top.Subscriptions()) != 0 {
				t.Fatalf("non-durable subscription kept: %v", top.Subscriptions())
			}
		}
		// Latest reader gets new messages.
		start := mtypes.Latest
		c, s := subscribe(t, top, SubscribeOptions{Subscription: "reader-y", StartPosition: &start})
		c.Flow(10)
		r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 9, 1, "new"), SequenceID: 9})
		if got := s.waitMessages(t, 1); got[0].Position != r.Position {
			t.Fatalf("latest reader got %v", got[0].Position)
		}
		c.Close()
	})
}

func TestMarkersAreNeverDispatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, Config{AutoTopicCreation: true})
		top := e.topic("markers")
		p := addProducer(t, top, ProducerOptions{})
		marker := markerEntry(t)
		publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 1, "a"), SequenceID: 0})
		publishSync(t, p, PublishRequest{Entry: marker, SequenceID: 1, Marker: true})
		publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 2, 1, "b"), SequenceID: 2})
		c, s := subscribe(t, top, SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true, InitialPosition: mtypes.InitialEarliest})
		c.Flow(100)
		got := s.waitMessages(t, 2)
		s.quiet(t, 2)
		if payloadOf(t, got[0]) != "a" || payloadOf(t, got[1]) != "b" {
			t.Fatalf("got %q %q", payloadOf(t, got[0]), payloadOf(t, got[1]))
		}
		// The marker was acknowledged on the subscription.
		c.Ack(context.Background(), positionsAcks(got), false)
		poll.Until(t, 10*time.Second, "backlog 0", func() bool { return top.Stats().Subscriptions["s"].MsgBacklog == 0 })
		c.Close()
	})
}

func TestBatchIndexAckAndLastMessageID(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("batch")
	p := addProducer(t, top, ProducerOptions{})
	r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 3, "x"), SequenceID: 0, NumMessages: 3})
	opts := SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true, InitialPosition: mtypes.InitialEarliest}
	c, s := subscribe(t, top, opts)
	lm, err := c.LastMessageID(context.Background())
	if err != nil || lm.Position != r.Position || lm.BatchIndex != 2 {
		t.Fatalf("LastMessageID %+v %v", lm, err)
	}
	c.Flow(100)
	got := s.waitMessages(t, 1)
	if got[0].NumMessages != 3 || got[0].AckSet != nil {
		t.Fatalf("delivery %+v", got[0])
	}
	// Ack index 1 only (ack_set = still unacked = 0b101).
	if err := c.Ack(context.Background(), []Ack{{Position: r.Position, AckSet: []int64{0b101}}}, false); err != nil {
		t.Fatal(err)
	}
	if u := top.Stats().Subscriptions["s"].UnackedMessages; u != 2 {
		t.Fatalf("unacked %d", u)
	}
	// Redelivered: the ack_set says which indexes are still to deliver.
	c.RedeliverUnacknowledged(nil)
	again := s.waitMessages(t, 2)[1]
	if len(again.AckSet) != 1 || again.AckSet[0] != 0b101 || again.NumMessages != 2 || again.RedeliveryCount != 1 {
		t.Fatalf("redelivery %+v", again)
	}
	if err := c.Ack(context.Background(), []Ack{{Position: r.Position, AckSet: []int64{0}}}, false); err != nil {
		t.Fatal(err)
	}
	if st := top.Stats().Subscriptions["s"]; st.MsgBacklog != 0 || st.UnackedMessages != 0 {
		t.Fatalf("after full ack %+v", st)
	}
	c.Close()
}

func TestUnsubscribe(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("unsub")
	opts := SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true}
	c1, _ := subscribe(t, top, opts)
	_, s2 := subscribe(t, top, opts)
	if err := c1.Unsubscribe(context.Background(), false); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("non-forced unsubscribe with others: %v", err)
	}
	if err := c1.Unsubscribe(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	s2.waitFor(t, "other closed", func(s *sink) bool { return s.closed })
	if len(top.Subscriptions()) != 0 {
		t.Fatalf("subscriptions %v", top.Subscriptions())
	}
	if err := top.DeleteSubscription(context.Background(), "s", false); !errors.Is(err, ErrSubscriptionNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
}

func TestProducerAccessModes(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("access")
	ctx := context.Background()
	ex := addProducer(t, top, ProducerOptions{AccessMode: mtypes.AccessExclusive})
	if epoch, ok := ex.TopicEpoch(); !ok || epoch != 1 {
		t.Fatalf("topic epoch %d %v", epoch, ok)
	}
	if _, err := top.AddProducer(ctx, ProducerOptions{}); !errors.Is(err, ErrProducerBusy) {
		t.Fatalf("shared while exclusive: %v", err)
	}
	if _, err := top.AddProducer(ctx, ProducerOptions{AccessMode: mtypes.AccessExclusive}); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("exclusive while exclusive: %v", err)
	}
	queued := make(chan struct{})
	got := make(chan *Producer, 1)
	go func() {
		p, err := top.AddProducer(ctx, ProducerOptions{AccessMode: mtypes.AccessWaitForExclusive, OnQueued: func() { close(queued) }})
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	<-queued
	if err := ex.Close(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if epoch, _ := w.TopicEpoch(); epoch != 2 {
		t.Fatalf("waiter epoch %d", epoch)
	}
	// Fencing takes the topic and tells the current producer.
	closedCh := make(chan struct{})
	w.p.opts.OnClosed = func(Reassigned) { close(closedCh) }
	f := addProducer(t, top, ProducerOptions{AccessMode: mtypes.AccessExclusiveWithFencing})
	<-closedCh
	if r := publishSync(t, w, PublishRequest{Entry: entry(t, w.Name(), 0, 1, "x")}); !errors.Is(r.Err, ErrProducerClosed) {
		t.Fatalf("publish on fenced producer: %+v", r)
	}
	f.Close(ctx)
	// Same name twice: busy; a higher epoch (reconnection) replaces it.
	a := addProducer(t, top, ProducerOptions{Name: "same"})
	if _, err := top.AddProducer(ctx, ProducerOptions{Name: "same"}); !errors.Is(err, ErrProducerBusy) {
		t.Fatalf("duplicate name: %v", err)
	}
	b := addProducer(t, top, ProducerOptions{Name: "same", Epoch: 1})
	if r := publishSync(t, a, PublishRequest{Entry: entry(t, "same", 0, 1, "x")}); r.Err == nil {
		t.Fatal("old producer still publishes")
	}
	b.Close(ctx)
}

func TestUnloadDisconnectsAndReloads(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("unload")
	closed := make(chan struct{})
	p := addProducer(t, top, ProducerOptions{OnClosed: func(Reassigned) { close(closed) }})
	publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 1, "x")})
	c, s := subscribe(t, top, SubscribeOptions{Subscription: "s", Durable: true, InitialPosition: mtypes.InitialEarliest})
	c.Flow(10)
	s.waitMessages(t, 1)
	wait := top.WaitForEntries(mtypes.Position{LedgerID: 1 << 62}) // never written: only the unload releases it
	if err := e.b.UnloadTopic(context.Background(), top.Name()); err != nil {
		t.Fatal(err)
	}
	<-closed
	<-wait
	s.waitFor(t, "closed", func(s *sink) bool { return s.closed })
	if !top.Closed() {
		t.Fatal("topic not closed")
	}
	top2 := e.topic("unload")
	if top2 == top || top2.Subscriptions()[0] != "s" {
		t.Fatalf("reloaded topic %v subs %v", top2 == top, top2.Subscriptions())
	}
	// Positions keep increasing across loads.
	p2 := addProducer(t, top2, ProducerOptions{})
	r := publishSync(t, p2, PublishRequest{Entry: entry(t, p2.Name(), 1, 1, "y")})
	if r.Position.Compare(top2.LastPosition()) != 0 || r.Position.LedgerID <= 0 {
		t.Fatalf("position %v", r.Position)
	}
}

func TestPublishLimiterAccounting(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("limit")
	lim := NewMemoryLimiter(1<<20, 1000, e.b.PublishLimiter())
	p := addProducer(t, top, ProducerOptions{Limiter: lim})
	done := make(chan struct{}, 100)
	for i := 0; i < 100; i++ {
		p.Publish(PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "x"), SequenceID: int64(i)}, func(PublishResult) { done <- struct{}{} })
	}
	for i := 0; i < 100; i++ {
		<-done
	}
	if b, n := lim.InUse(); b != 0 || n != 0 {
		t.Fatalf("limiter in use %d/%d", b, n)
	}
	if b, _ := e.b.PublishLimiter().InUse(); b != 0 {
		t.Fatalf("broker limiter in use %d", b)
	}
}

// Publish slots are recycled once delivered: results stay in publish order, each completion runs
// once with its own request's result, while stored publishes and immediate ones (dedup duplicates,
// invalid requests) interleave and the queue empties and refills.
func TestPublishSlotReuseKeepsOrder(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true, DedupDefault: true})
	top := e.topic("slots")
	p := addProducer(t, top, ProducerOptions{Name: "slots"})
	const n = 3000
	type got struct {
		seq int64
		res PublishResult
	}
	results := make(chan got, n)
	wantDup := func(i int) bool { return i%5 == 4 }   // resends seq 0 (stored): a duplicate
	wantBad := func(i int) bool { return i%97 == 50 } // highest below lowest: refused at once
	for i := 0; i < n; i++ {
		seq := int64(i)
		req := PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "x"), SequenceID: seq}
		switch {
		case wantBad(i):
			req.HighestSequenceID = 1
			req.SequenceID = seq + 1_000_000
		case wantDup(i):
			req.SequenceID = 0
		}
		p.Publish(req, func(r PublishResult) { results <- got{seq, r} })
		if i == 0 || i%500 == 499 {
			poll.Until(t, 10*time.Second, "queue drained", func() bool { return len(results) == i+1 })
		}
	}
	for i := 0; i < n; i++ {
		var g got
		select {
		case g = <-results:
		case <-time.After(waitTimeout):
			t.Fatalf("result %d missing", i)
		}
		if g.seq != int64(i) {
			t.Fatalf("result %d arrived as %d", g.seq, i)
		}
		switch {
		case wantBad(i):
			if !errors.Is(g.res.Err, ErrInvalidRequest) || g.res.SequenceID != int64(i)+1_000_000 {
				t.Fatalf("%d: %+v", i, g.res)
			}
		case wantDup(i):
			if g.res.Err != nil || !g.res.Duplicate || g.res.SequenceID != 0 {
				t.Fatalf("%d: %+v", i, g.res)
			}
		default:
			if g.res.Err != nil || g.res.Duplicate || g.res.SequenceID != int64(i) || g.res.Position.EntryID < 0 {
				t.Fatalf("%d: %+v", i, g.res)
			}
		}
	}
	select {
	case g := <-results:
		t.Fatalf("extra result %+v", g)
	default:
	}
	p.p.qmu.Lock()
	queued := len(p.p.queue)
	p.p.qmu.Unlock()
	if queued != 0 {
		t.Fatalf("%d still queued", queued)
	}
}

// Every publish is in the broker's publish latency histogram once: one at a time, in a group, and
// one refused without an append.
func TestPublishLatencyCountsEveryPublish(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	p := addProducer(t, e.topic("lat"), ProducerOptions{})
	results := make(chan PublishResult, 16)
	done := func(r PublishResult) { results <- r }
	for i := 0; i < 10; i++ {
		p.Publish(PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "m"), SequenceID: int64(i)}, done)
	}
	group := make([]PublishRequest, 5)
	for i := range group {
		seq := uint64(10 + i)
		group[i] = PublishRequest{Entry: entry(t, p.Name(), seq, 1, "g"), SequenceID: int64(seq)}
	}
	p.PublishBatch(group, done)
	// Refused before any append: highest sequence id below the lowest.
	p.Publish(PublishRequest{Entry: entry(t, p.Name(), 20, 1, "bad"), SequenceID: 20, HighestSequenceID: 19}, done)
	failed := 0
	for range 16 {
		if r := <-results; r.Err != nil {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d publishes failed, want the refused one only", failed)
	}
	h := e.b.PublishLatency()
	if h.Count() != 16 || h.Sum <= 0 {
		t.Fatalf("publish latency histogram: %d observations, sum %v; want 16 and a positive sum", h.Count(), h.Sum)
	}
}
