package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/node"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// Replication's lifecycle (policy changes on idle and partitioned topics, start positions, topics
// auto-created by their first message) and its observability (stats and /metrics while the target is
// down), driven as a user drives them. The rate-limit tests are in replication_lifecycle_rates_test.go,
// the cluster and topic changes in replication_lifecycle_changes_test.go, the shared helpers in
// replication_lifecycle_helpers_test.go.

// TestReplLifecycleIdleTopicPolicyChange: a persistent topic with data and no client connected (and
// not even loaded: it is unloaded first) starts replicating when a remote is added to its
// namespace's replication clusters. With independent clusters the change is made on the topic's own
// cluster, whose admin call brings replicators in step before it answers; with a shared etcd
// configuration store the change is made through the other cluster's admin API and reaches the
// topic's broker only by watch. In both cases the first message must arrive on the remote within
// 1 s of the admin call's answer (observed on the remote only, so that nothing on the source loads
// the topic before the policy pass does), everything must arrive once and in order, and the
// source's stats must show the replicator, with no producer or consumer attached.
func TestReplLifecycleIdleTopicPolicyChange(t *testing.T) {
	for _, mode := range []string{"independent", "shared-store"} {
		t.Run(mode, func(t *testing.T) {
			var east, west, via *lcCluster
			if mode == "independent" {
				cs := lcIndependent(t, node.ReplicationStartEarliest, "east", "west")
				east, west, via = cs[0], cs[1], cs[0]
			} else {
				cs := lcShared(t, "east", "west")
				east, west, via = cs[0], cs[1], cs[1]
			}
			topic := harness.Topic(t)
			chk := checker.New()
			const n = 20
			lcProduceAndLeave(t, chk, east, topic, "idle", 0, n)
			if err := east.Admin.Topics().Unload(lcTopicName(t, topic)); err != nil {
				t.Fatalf("unload %s on east: %v", topic, err)
			}
			// The reader on west exists before the change, so that the measurement is the
			// replicator's, not the reader's connect time.
			r := newReader(t, west.Client(t), pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})

			via.replicate(t, "east", "west")
			changed := time.Now()
			ctx := testCtx(t, 30*time.Second)
			var firstAfter time.Duration
			for i := 0; i < n; i++ {
				m, err := r.Next(ctx)
				if err != nil {
					t.Fatalf("reader on west: %d of %d messages after %v: %v", i, n, time.Since(changed), err)
				}
				if i == 0 {
					firstAfter = time.Since(changed)
				}
				chk.Received("west", m.Payload(), m.ID().String())
				if m.GetReplicatedFrom() != "east" {
					t.Errorf("message %v on west replicated from %q, want east", m.ID(), m.GetReplicatedFrom())
				}
			}
			allAfter := time.Since(changed)
			t.Logf("%s: change made through %s; first replicated message on west %v after the admin call answered, all %d after %v",
				mode, via.Name, firstAfter.Round(time.Millisecond), n, allAfter.Round(time.Millisecond))
			if firstAfter > time.Second {
				t.Errorf("replication of an idle topic started %v after the policy change, want within 1 s", firstAfter)
			}

			rs := east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)
			if rs.StartMode != "earliest" || rs.MsgOutCounter != n || rs.LastError != "" {
				t.Errorf("east's replication.west after catching up: startMode %q (want earliest), msgOutCounter %d (want %d), lastError %q",
					rs.StartMode, rs.MsgOutCounter, n, rs.LastError)
			}
			st, err := east.rawStats(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			// In the shared store west replicates back (its copy of the topic lists east too): its
			// replicator's producer is attached here; no client's is.
			for _, p := range st.Publishers {
				if !strings.HasPrefix(p.ProducerName, "pulsar.repl.") {
					t.Errorf("east's topic should have no client, has producer %q", p.ProducerName)
				}
			}
			if len(st.Subscriptions) != 0 {
				t.Errorf("east's topic should have no client, has subscriptions %v", lcKeys(st.Subscriptions))
			}
			cursors, err := east.cursorsOf(t, topic)
			if err != nil {
				t.Fatalf("internal stats of %s on east: %v", topic, err)
			}
			if _, ok := cursors["pulsar.repl.west"]; !ok {
				t.Errorf("east's internal stats have no cursor pulsar.repl.west: %v", lcKeys(cursors))
			}
			// Nothing more arrives (no duplicates from the loaded/unloaded topic or the watch).
			for r.HasNext() {
				m, err := r.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				chk.Received("west", m.Payload(), m.ID().String())
			}
			verify(t, chk, "west", checker.Expect{})

			// And back: removing west (through the same cluster as before) stops the idle topic's
			// replicator and deletes its cursor within 1 s. (West's replicator producer, while
			// attached, shows under inboundReplication, never as a replicator.)
			via.replicate(t, "east")
			removed := time.Now()
			noReplicator := func(c *lcCluster, remote string) func() error {
				return func() error {
					st, err := c.rawStats(context.Background(), topic)
					if err != nil {
						return err
					}
					if r, ok := st.Replication[remote]; ok && (r.StartMode != "" || r.OutboundConnection != "" || r.Connected) {
						return fmt.Errorf("%s: replicator to %s still in the stats: %+v", c.Name, remote, r)
					}
					cursors, err := c.cursorsOf(t, topic)
					if err != nil {
						return err
					}
					if _, ok := cursors["pulsar.repl."+remote]; ok {
						return fmt.Errorf("%s: cursor pulsar.repl.%s still there", c.Name, remote)
					}
					return nil
				}
			}
			harness.Eventually(t, time.Second, "east's replicator to west stopped and its cursor deleted", noReplicator(east, "west"))
			if mode == "shared-store" {
				// West's copy of the topic replicated back to east while both were listed; west
				// is no longer listed, so it replicates nothing either.
				harness.Eventually(t, time.Second, "west's replicator to east stopped (west is not listed any more)", noReplicator(west, "east"))
			}
			t.Logf("%s: west removed through %s; east's replicator and cursor gone %v after the admin call answered", mode, via.Name, time.Since(removed).Round(time.Millisecond))
		})
	}
}

// TestReplLifecycleIdlePartitionedTopic: the idle-topic case for a partitioned topic (3
// partitions, created through the admin API, data written, every client gone, every partition
// unloaded): adding a remote starts a replicator per partition, which creates the partitioned
// topic on the remote with the same count and copies every partition. Observed on the remote
// only (west's partitioned metadata and the inbound counters of its partitions), so that nothing
// on the source loads a partition before the policy pass does.
func TestReplLifecycleIdlePartitionedTopic(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartEarliest, "east", "west")
	east, west := cs[0], cs[1]
	const partitions, n = 3, 30
	topic := harness.Topic(t)
	tn := lcTopicName(t, topic)
	if err := east.Admin.Topics().Create(tn, partitions); err != nil {
		t.Fatalf("create partitioned %s: %v", topic, err)
	}
	chk := checker.New()
	lcProduceAndLeave(t, chk, east, topic, "idle", 0, n)
	for i := 0; i < partitions; i++ {
		if err := east.Admin.Topics().Unload(lcTopicName(t, fmt.Sprintf("%s-partition-%d", topic, i))); err != nil {
			t.Fatalf("unload partition %d: %v", i, err)
		}
	}
	east.replicate(t, "east", "west")
	changed := time.Now()
	harness.Eventually(t, time.Second, "west's partitioned metadata", func() error {
		meta, err := west.Admin.Topics().GetMetadata(tn)
		if err != nil {
			return err
		}
		if meta.Partitions != partitions {
			return fmt.Errorf("west's %s has %d partitions", topic, meta.Partitions)
		}
		return nil
	})
	created := time.Since(changed)
	harness.Eventually(t, 10*time.Second, "every partition's messages on west", func() error {
		total := int64(0)
		for i := 0; i < partitions; i++ {
			st, err := west.rawStats(context.Background(), fmt.Sprintf("%s-partition-%d", topic, i))
			if err != nil {
				return err
			}
			total += st.InboundReplication["east"].MsgInCounter
		}
		if total != n {
			return fmt.Errorf("west received %d of %d messages", total, n)
		}
		return nil
	})
	t.Logf("partitioned metadata on west %v after the admin call answered, all %d messages after %v", created.Round(time.Millisecond), n, time.Since(changed).Round(time.Millisecond))
	for i := 0; i < partitions; i++ {
		part := fmt.Sprintf("%s-partition-%d", topic, i)
		east.waitRepl(t, 10*time.Second, part, "west", "caught up", lcCaughtUp)
	}
	cons := newConsumer(t, west.Client(t), pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	msgs := receiveN(t, chk, "west", cons, n, 20*time.Second, false)
	for _, m := range msgs {
		if m.GetReplicatedFrom() != "east" {
			t.Errorf("message %v on west replicated from %q", m.ID(), m.GetReplicatedFrom())
		}
	}
	var parts []string
	for i := 0; i < partitions; i++ {
		parts = append(parts, fmt.Sprintf("%s-partition-%d", topic, i))
	}
	expectNothingBefore(t, west.Client(t), cons, parts...)
	verify(t, chk, "west", checker.Expect{NoOrder: true})
}

// TestReplLifecycleStartPosition: where a replicator added to a topic that already has data
// starts, by the broker option (--replication-start-at, node.Options.ReplicationStartAt) and by the
// namespace property replicationStartAt, which overrides it. earliest replicates everything
// stored; latest only what is written after the policy change. The stats say which
// (startMode) and where (startPosition, a real position of the topic). A topic that exists but is
// empty when the remote is added loses nothing either way.
func TestReplLifecycleStartPosition(t *testing.T) {
	cases := []struct {
		name   string
		broker node.ReplicationStartAt
		nsProp string // namespace property replicationStartAt; "" leaves it unset
		want   string
	}{
		{"broker-earliest", node.ReplicationStartEarliest, "", "earliest"},
		{"broker-latest", node.ReplicationStartLatest, "", "latest"},
		{"namespace-earliest-over-broker-latest", node.ReplicationStartLatest, "earliest", "earliest"},
		{"namespace-latest-over-broker-earliest", node.ReplicationStartEarliest, "latest", "latest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := lcIndependent(t, tc.broker, "east", "west")
			east, west := cs[0], cs[1]
			if tc.nsProp != "" {
				ns, _ := utils.GetNamespaceName(lcNamespace)
				if err := east.Admin.Namespaces().UpdateProperties(*ns, map[string]string{"replicationStartAt": tc.nsProp}); err != nil {
					t.Fatalf("namespace property replicationStartAt=%s: %v", tc.nsProp, err)
				}
			}
			topic := harness.Topic(t)
			chk := checker.New()
			cl := east.Client(t)
			before := lcProducer(t, cl, topic, "before")
			ids := sendSync(t, chk, before, "before", 0, 10, 128)
			east.replicate(t, "east", "west")
			after := lcProducer(t, cl, topic, "after")
			sendSync(t, chk, after, "after", 0, 10, 128)

			rs := east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)
			lcDrain(t, chk, "west", west, topic, "east")
			exp := checker.Expect{}
			if tc.want == "latest" {
				exp.Producers = func(p string) bool { return p == "after" }
			}
			verify(t, chk, "west", exp)

			if rs.StartMode != tc.want {
				t.Errorf("startMode %q, want %q", rs.StartMode, tc.want)
			}
			ledger, entry, err := lcParsePos(rs.StartPosition)
			if err != nil {
				t.Fatalf("startPosition: %v", err)
			}
			first, last := ids[0], ids[len(ids)-1]
			switch tc.want {
			case "latest": // the last entry stored before the change: the cursor acknowledged it
				if ledger != last.LedgerID() || entry != last.EntryID() {
					t.Errorf("latest startPosition %s, want the last entry before the change %d:%d", rs.StartPosition, last.LedgerID(), last.EntryID())
				}
			case "earliest": // before the first entry
				if ledger != first.LedgerID() || entry != first.EntryID()-1 {
					t.Errorf("earliest startPosition %s, want just before the first entry %d:%d", rs.StartPosition, first.LedgerID(), first.EntryID())
				}
			}
			t.Logf("startMode %s startPosition %s (first entry %d:%d, last before the change %d:%d)", rs.StartMode, rs.StartPosition,
				first.LedgerID(), first.EntryID(), last.LedgerID(), last.EntryID())

			// Where it started is recorded with the cursor: a restart of the source does not
			// change it (and does not replicate anything again).
			if err := east.InProcess.Close(); err != nil {
				t.Fatalf("stop east: %v", err)
			}
			east.InProcess.Start()
			again := east.waitRepl(t, 10*time.Second, topic, "west", "caught up after a restart of east", lcCaughtUp)
			if again.StartMode != rs.StartMode || again.StartPosition != rs.StartPosition {
				t.Errorf("after a restart of east: startMode %q startPosition %q, want %q %q as before", again.StartMode, again.StartPosition, rs.StartMode, rs.StartPosition)
			}
			lcDrain(t, chk, "west-after-restart", west, topic, "east")
			verify(t, chk, "west-after-restart", exp)
		})
	}

	// An existing, empty topic: a remote added under latest starts at a real position of the
	// topic (not 0:0 or another made-up one) and every message written afterwards replicates.
	t.Run("empty-topic-latest", func(t *testing.T) {
		cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west")
		east, west := cs[0], cs[1]
		topic := harness.Topic(t)
		if err := east.Admin.Topics().Create(lcTopicName(t, topic), 0); err != nil {
			t.Fatalf("create %s on east: %v", topic, err)
		}
		is, err := east.Admin.Topics().GetInternalStats(lcTopicName(t, topic))
		if err != nil {
			t.Fatal(err)
		}
		emptyAt := is.LastConfirmedEntry
		east.replicate(t, "east", "west")
		chk := checker.New()
		ids := sendSync(t, chk, lcProducer(t, east.Client(t), topic, "p"), "p", 0, 5, 128)
		rs := east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)
		lcDrain(t, chk, "west", west, topic, "east")
		verify(t, chk, "west", checker.Expect{})
		t.Logf("empty topic (last confirmed entry %s): startMode %s startPosition %s; first message %v", emptyAt, rs.StartMode, rs.StartPosition, ids[0])
		ledger, entry, err := lcParsePos(rs.StartPosition)
		if err != nil {
			t.Fatalf("startPosition: %v", err)
		}
		if rs.StartPosition != emptyAt || ledger != ids[0].LedgerID() || entry != ids[0].EntryID()-1 {
			t.Errorf("startPosition %s of a replicator added to an empty topic: want the topic's last confirmed entry %s, just before its first entry %d:%d",
				rs.StartPosition, emptyAt, ids[0].LedgerID(), ids[0].EntryID())
		}
	})
}

// TestReplLifecycleAutoCreatedTopicFirstMessage: in a namespace that already replicates, a topic
// created by its first producer gets its replication cursor before its first entry, so its very
// first message replicates (several topics, one message each, then a second message), whatever
// --replication-start-at says (latest here). The same for a topic created by a subscription, for a
// first entry that is a batch of 50 messages, and for every partition of a partitioned topic
// created through the admin API.
func TestReplLifecycleAutoCreatedTopicFirstMessage(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west")
	east, west := cs[0], cs[1]
	east.replicate(t, "east", "west")
	chk := checker.New()
	cl := east.Client(t)
	const topics = 5
	var names []string
	for i := 0; i < topics; i++ {
		topic := harness.Topic(t)
		names = append(names, topic)
		p := lcProducer(t, cl, topic, fmt.Sprintf("p%d", i))
		sendSync(t, chk, p, fmt.Sprintf("p%d", i), 0, 1, 64) // the topic's first message, right after creation
		sendSync(t, chk, p, fmt.Sprintf("p%d", i), 1, 2, 64)
	}
	for i, topic := range names {
		rs := east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)
		if rs.StartMode != "earliest" || rs.MsgOutCounter != 2 {
			t.Errorf("topic %d: replication.west startMode %q (a new topic's cursor exists before its first entry: want earliest), msgOutCounter %d (want 2)", i, rs.StartMode, rs.MsgOutCounter)
		}
		stream := fmt.Sprintf("west-%d", i)
		lcDrain(t, chk, stream, west, topic, "east")
		p := fmt.Sprintf("p%d", i)
		verify(t, chk, stream, checker.Expect{Producers: func(name string) bool { return name == p }})
	}

	// A topic created by a subscription (no producer yet), then written to: its first message
	// replicates too.
	subTopic := harness.Topic(t)
	newConsumer(t, cl, pulsar.ConsumerOptions{Topic: subTopic, SubscriptionName: "creates-the-topic"})
	sendSync(t, chk, lcProducer(t, cl, subTopic, "after-subscribe"), "after-subscribe", 0, 3, 64)
	// A topic whose first entry is a batch of 50 messages (one entry: its first entry replicates
	// whole).
	batchTopic := harness.Topic(t)
	bp := newProducer(t, cl, pulsar.ProducerOptions{Topic: batchTopic, Name: "batch", BatchingMaxMessages: 50,
		BatchingMaxPublishDelay: time.Minute, BatchingMaxSize: 1 << 20})
	sendAsync(t, chk, bp, "batch", 0, 50, 64)
	// A partitioned topic created through the admin API, each partition written to at once: every
	// partition's first entry replicates.
	partTopic := harness.Topic(t)
	if err := east.Admin.Topics().Create(lcTopicName(t, partTopic), 3); err != nil {
		t.Fatalf("create partitioned %s: %v", partTopic, err)
	}
	for i := 0; i < 3; i++ {
		part := fmt.Sprintf("%s-partition-%d", partTopic, i)
		name := fmt.Sprintf("part%d", i)
		sendSync(t, chk, lcProducer(t, cl, part, name), name, 0, 2, 64)
	}
	for i := 0; i < 3; i++ {
		part := fmt.Sprintf("%s-partition-%d", partTopic, i)
		name := fmt.Sprintf("part%d", i)
		rs := east.waitRepl(t, 10*time.Second, part, "west", "caught up", lcCaughtUp)
		if rs.StartMode != "earliest" {
			t.Errorf("partition %d: startMode %q, want earliest", i, rs.StartMode)
		}
		lcDrain(t, chk, "west-"+name, west, part, "east")
		verify(t, chk, "west-"+name, checker.Expect{Producers: func(p string) bool { return p == name }})
	}
	if meta, err := west.Admin.Topics().GetMetadata(lcTopicName(t, partTopic)); err != nil || meta.Partitions != 3 {
		t.Errorf("west's partitioned metadata of %s: %+v, %v; want 3 partitions", partTopic, meta, err)
	}
	for _, tc := range []struct{ topic, producer string }{{subTopic, "after-subscribe"}, {batchTopic, "batch"}} {
		rs := east.waitRepl(t, 10*time.Second, tc.topic, "west", "caught up", lcCaughtUp)
		if rs.StartMode != "earliest" {
			t.Errorf("%s: startMode %q, want earliest", tc.producer, rs.StartMode)
		}
		lcDrain(t, chk, "west-"+tc.producer, west, tc.topic, "east")
		verify(t, chk, "west-"+tc.producer, checker.Expect{Producers: func(name string) bool { return name == tc.producer }})
	}
}

// TestReplLifecycleStatsTargetDown: the replication stats are real. While messages flow east ->
// west, msgRateOut/msgThroughputOut (east) and msgRateIn/msgThroughputIn (west) are non-zero and
// consistent with the message size, the delay is 0 once caught up and internal stats show the
// cursor pulsar.repl.west at the last entry. The target is then stopped (graceful shutdown; same
// ports and data when it returns): east shows connected=false, lastError set, a backlog that grows
// with every message and a delay that grows with time — through pulsaradmin's topic stats, the raw
// JSON and /metrics (pulsar_replication_backlog, pulsar_replication_connected_count,
// meridian_replication_error with cluster/namespace/topic/remote_cluster labels). After the target
// restarts, replication resumes within 10 s, the backlog returns to 0 everywhere, and the checker
// finds every message on west exactly once, in order.
func TestReplLifecycleStatsTargetDown(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west")
	east, west := cs[0], cs[1]
	east.replicate(t, "east", "west")
	topic := harness.Topic(t)
	tn := lcTopicName(t, topic)
	chk := checker.New()
	p := lcProducer(t, east.Client(t), topic, "p")
	const size = 1024
	const outage = 30

	// Flowing: messages go out at about 200/s until both sides' rates show (the rate window is
	// sampled once a second), at most 8 s.
	var out utils.ReplicatorStats
	var in adminapi.InboundReplicationStats
	var lastID pulsar.MessageID
	flowing := int64(0)
	flowDeadline := time.Now().Add(8 * time.Second)
	for {
		ids := sendSync(t, chk, p, "p", flowing, flowing+5, size)
		lastID = ids[len(ids)-1]
		flowing += 5
		if flowing%25 == 0 {
			est, err := east.Admin.Topics().GetStats(tn)
			if err != nil {
				t.Fatalf("east stats: %v", err)
			}
			wst, werr := west.rawStats(testCtx(t, 5*time.Second), topic)
			out, in = est.Replication["west"], wst.InboundReplication["east"]
			if werr == nil && out.MsgRateOut > 0 && out.MsgThroughputOut > 0 && in.MsgRateIn > 0 && in.MsgThroughputIn > 0 {
				break
			}
			if time.Now().After(flowDeadline) {
				t.Fatalf("after %d messages flowing for 8 s: east replication.west %+v, west inboundReplication.east %+v (%v): want non-zero rates on both sides", flowing, out, in, werr)
			}
		}
		time.Sleep(25 * time.Millisecond) // paces the load; not a wait for a condition
	}
	east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)
	if per := out.MsgThroughputOut / out.MsgRateOut; per < size || per > 2*size {
		t.Errorf("east: msgThroughputOut/msgRateOut = %.0f bytes per message, want about %d", per, size)
	}
	if out.MsgRateOut > 1000 || !out.Connected || out.OutboundConnection == "" || out.OutboundConnectedSince == "" {
		t.Errorf("east: replication.west %+v: want connected with an outbound connection and a plausible rate", out)
	}
	t.Logf("flowing (%d messages): east msgRateOut %.1f msg/s, msgThroughputOut %.0f B/s; west msgRateIn %.1f msg/s, msgThroughputIn %.0f B/s, inbound %q",
		flowing, out.MsgRateOut, out.MsgThroughputOut, in.MsgRateIn, in.MsgThroughputIn, in.Connection)
	if per := in.MsgThroughputIn / in.MsgRateIn; per < size || per > 2*size {
		t.Errorf("west: msgThroughputIn/msgRateIn = %.0f bytes per message, want about %d", per, size)
	}
	rs, err := east.repl(testCtx(t, 10*time.Second), topic, "west")
	if err != nil {
		t.Fatal(err)
	}
	if rs.ReplicationDelayInSeconds != 0 || rs.LastError != "" || rs.MsgOutCounter != flowing {
		t.Errorf("caught up: delay %d s (want 0), lastError %q, msgOutCounter %d (want %d)", rs.ReplicationDelayInSeconds, rs.LastError, rs.MsgOutCounter, flowing)
	}
	cursors, err := east.cursorsOf(t, topic)
	if err != nil {
		t.Fatalf("internal stats: %v", err)
	}
	cur, ok := cursors["pulsar.repl.west"]
	wantMD := fmt.Sprintf("%d:%d", lastID.LedgerID(), lastID.EntryID())
	if !ok || cur.MarkDeletePosition != wantMD {
		t.Errorf("internal stats: cursor pulsar.repl.west %+v (present %v), want mark-delete at the last entry %s; cursors %v", cur, ok, wantMD, lcKeys(cursors))
	}
	labels := east.replLabels(topic, "west")
	east.lcWaitMetrics(t, 5*time.Second, "healthy replication series", lcAllOf(
		lcMetricIs("pulsar_replication_backlog", labels, 0),
		lcMetricIs("pulsar_replication_connected_count", labels, 1),
		lcMetricIs("meridian_replication_error", labels, 0),
		func(p promScrape) error {
			if v, err := p.value("pulsar_replication_rate_out", labels); err != nil || v <= 0 {
				return fmt.Errorf("pulsar_replication_rate_out = %v, %v", v, err)
			}
			if v, err := p.value("pulsar_replication_throughput_out", labels); err != nil || v <= 0 {
				return fmt.Errorf("pulsar_replication_throughput_out = %v, %v", v, err)
			}
			return nil
		}))
	west.lcWaitMetrics(t, 5*time.Second, "inbound replication series", func(p promScrape) error {
		if v, err := p.value("pulsar_replication_rate_in", west.replLabels(topic, "east")); err != nil || v <= 0 {
			return fmt.Errorf("pulsar_replication_rate_in = %v, %v", v, err)
		}
		if v, err := p.value("pulsar_replication_throughput_in", west.replLabels(topic, "east")); err != nil || v <= 0 {
			return fmt.Errorf("pulsar_replication_throughput_in = %v, %v", v, err)
		}
		return nil
	})
	if age := time.Since(time.UnixMilli(rs.LastProgressTimestamp)); rs.LastProgressTimestamp == 0 || age < 0 || age > 30*time.Second {
		t.Errorf("caught up: lastProgressTimestamp %d (%v ago), want a recent time", rs.LastProgressTimestamp, age)
	}
	if rs.StartMode == "" || rs.StartPosition == "" || rs.MarkDeletePosition != wantMD {
		t.Errorf("caught up: startMode %q startPosition %q markDeletePosition %q, want a start and the mark-delete at %s", rs.StartMode, rs.StartPosition, rs.MarkDeletePosition, wantMD)
	}

	// The target goes away.
	if err := west.InProcess.Close(); err != nil {
		t.Fatalf("stop west: %v", err)
	}
	down := east.waitRepl(t, 10*time.Second, topic, "west", "outage shown", func(r adminapi.ReplicatorStats) error {
		if r.Connected || r.LastError == "" {
			return fmt.Errorf("connected=%v lastError=%q", r.Connected, r.LastError)
		}
		return nil
	})
	t.Logf("west down: lastError %q", down.LastError)
	if age := time.Since(time.UnixMilli(down.LastErrorTimestamp)); down.LastErrorTimestamp == 0 || age < 0 || age > 30*time.Second {
		t.Errorf("west down: lastErrorTimestamp %d (%v ago), want a recent time", down.LastErrorTimestamp, age)
	}
	outageStart := time.Now()
	sendSync(t, chk, p, "p", flowing, flowing+outage/2, size)
	east.waitRepl(t, 5*time.Second, topic, "west", "backlog of the first half", func(r adminapi.ReplicatorStats) error {
		if r.ReplicationBacklog != outage/2 || r.Connected {
			return fmt.Errorf("backlog %d connected %v, want %d disconnected", r.ReplicationBacklog, r.Connected, outage/2)
		}
		return nil
	})
	sendSync(t, chk, p, "p", flowing+outage/2, flowing+outage, size)
	east.waitRepl(t, 5*time.Second, topic, "west", "backlog grown by the second half", func(r adminapi.ReplicatorStats) error {
		if r.ReplicationBacklog != outage || r.Connected || r.LastError == "" {
			return fmt.Errorf("backlog %d connected %v lastError %q, want %d disconnected with an error", r.ReplicationBacklog, r.Connected, r.LastError, outage)
		}
		return nil
	})
	st, err := east.Admin.Topics().GetStats(tn)
	if err != nil {
		t.Fatal(err)
	}
	if pr := st.Replication["west"]; pr.Connected || pr.ReplicationBacklog != outage {
		t.Errorf("pulsaradmin during the outage: replication.west %+v, want connected=false backlog=%d", pr, outage)
	}
	// The delay is the age of the oldest unreplicated entry: it grows with time.
	delayed := east.waitRepl(t, 5*time.Second, topic, "west", "delay grows", func(r adminapi.ReplicatorStats) error {
		if r.ReplicationDelayInSeconds < 1 {
			return fmt.Errorf("replicationDelayInSeconds %d", r.ReplicationDelayInSeconds)
		}
		return nil
	})
	if max := int64(time.Since(outageStart).Seconds()) + 1; delayed.ReplicationDelayInSeconds > max {
		t.Errorf("replicationDelayInSeconds %d, but the oldest unreplicated entry is at most %d s old", delayed.ReplicationDelayInSeconds, max)
	}
	east.lcWaitMetrics(t, 5*time.Second, "outage series", lcAllOf(
		lcMetricIs("pulsar_replication_backlog", labels, outage),
		lcMetricIs("pulsar_replication_connected_count", labels, 0),
		lcMetricIs("meridian_replication_error", labels, 1),
		func(p promScrape) error {
			if v, err := p.value("pulsar_replication_delay_in_seconds", labels); err != nil || v < 1 {
				return fmt.Errorf("pulsar_replication_delay_in_seconds = %v, %v", v, err)
			}
			return nil
		}))

	// The target returns on the same ports and data.
	west.InProcess.Start()
	back := time.Now()
	resumed := east.waitRepl(t, 10*time.Second, topic, "west", "resumed after the target returned", lcCaughtUp)
	t.Logf("west back: caught up %v after its restart (reconnects %d)", time.Since(back).Round(time.Millisecond), resumed.Reconnects)
	if resumed.Reconnects < 1 {
		t.Errorf("after the target came back: reconnects %d, want at least 1", resumed.Reconnects)
	}
	if resumed.LastError != "" || resumed.MsgOutCounter != flowing+outage {
		t.Errorf("after resuming: lastError %q (want cleared), msgOutCounter %d (want %d)", resumed.LastError, resumed.MsgOutCounter, flowing+outage)
	}
	east.lcWaitMetrics(t, 5*time.Second, "series after resuming", lcAllOf(
		lcMetricIs("pulsar_replication_backlog", labels, 0),
		lcMetricIs("pulsar_replication_connected_count", labels, 1),
		lcMetricIs("meridian_replication_error", labels, 0),
		lcMetricIs("pulsar_replication_delay_in_seconds", labels, 0)))
	inb := west.waitInbound(t, 5*time.Second, topic, "east", "inbound counted after the restart", func(r adminapi.InboundReplicationStats) error {
		if r.MsgInCounter != outage {
			return fmt.Errorf("msgInCounter %d, want the %d messages received since west restarted", r.MsgInCounter, outage)
		}
		return nil
	})
	t.Logf("west after its restart: msgInCounter %d, duplicatesDropped %d ", inb.MsgInCounter, inb.DuplicatesDropped)
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{})
}
