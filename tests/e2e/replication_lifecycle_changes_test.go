package e2e

import (
	"context"
	"fmt"
	"slices"
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

// TestReplLifecycleReplicateTo: per-message replicate_to as pulsar-client-go sets it, with three
// independent clusters and east's namespace replicating to west and north.
// ProducerMessage.DisableReplication (sent as replicate_to ["__local__"]) and
// ReplicationClusters ["__local__"] keep a message on east; ReplicationClusters ["west"] sends it
// to west only; a message without either goes everywhere. Order is kept, so once the last message
// (an unrestricted one) has arrived, nothing restricted can still come. The skipped entries are
// counted per remote in the stats (skipped.replicate_to) and the cursors still move past them.
func TestReplLifecycleReplicateTo(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west", "north")
	east, west, north := cs[0], cs[1], cs[2]
	east.replicate(t, "east", "west", "north")
	topic := harness.Topic(t)
	chk := checker.New()
	p := lcProducer(t, east.Client(t), topic, "mixed")
	const rounds = 10
	for i := int64(0); i < rounds; i++ {
		lcSendMarked(t, chk, p, "everywhere", i, nil, false)
		lcSendMarked(t, chk, p, "disabled", i, nil, true)
		lcSendMarked(t, chk, p, "westonly", i, []string{"west"}, false)
		lcSendMarked(t, chk, p, "local", i, []string{"__local__"}, false)
	}
	lcSendMarked(t, chk, p, "everywhere", rounds, nil, false)

	for _, remote := range []*lcCluster{west, north} {
		rs := east.waitRepl(t, 10*time.Second, topic, remote.Name, "caught up", lcCaughtUp)
		wantSkipped := int64(2 * rounds) // disabled + local
		if remote == north {
			wantSkipped += rounds // westonly
		}
		t.Logf("east -> %s: msgOutCounter %d, skipped %v", remote.Name, rs.MsgOutCounter, rs.Skipped)
		if rs.Skipped["replicate_to"] != wantSkipped {
			t.Errorf("east -> %s: skipped %v, want replicate_to=%d", remote.Name, rs.Skipped, wantSkipped)
		}
		lcDrain(t, chk, remote.Name, remote, topic, "east")
	}
	verify(t, chk, "west", checker.Expect{Producers: func(p string) bool { return p == "everywhere" || p == "westonly" }})
	verify(t, chk, "north", checker.Expect{Producers: func(p string) bool { return p == "everywhere" }})
}

// TestReplLifecycleTopicOverride: topic-level replication clusters replace the namespace's. East's
// namespace public/ovr lists east and west; a topic of it set (pulsaradmin
// Topics().SetReplicationClusters) to east and north replicates to north — not listed by the
// namespace — and not to west (no replicator, no cursor, nothing on west). Removing the override
// brings the namespace's list back: the west replicator starts (at latest: only what comes after),
// north's stops and its cursor goes.
func TestReplLifecycleTopicOverride(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west", "north")
	east, west, north := cs[0], cs[1], cs[2]
	const ns = "public/ovr"
	for _, c := range cs {
		if err := c.Admin.Namespaces().CreateNamespace(ns); err != nil {
			t.Fatalf("create %s on %s: %v", ns, c.Name, err)
		}
	}
	if err := east.Admin.Namespaces().SetNamespaceReplicationClusters(ns, []string{"east", "west"}); err != nil {
		t.Fatal(err)
	}
	topic := harness.TopicIn(t, ns)
	tn := lcTopicName(t, topic)
	if err := east.Admin.Topics().Create(tn, 0); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	if err := east.Admin.Topics().SetReplicationClusters(tn, []string{"east", "north"}); err != nil {
		t.Fatalf("topic-level replication clusters: %v", err)
	}
	if got, err := east.Admin.Topics().GetReplicationClusters(tn); err != nil || !slices.Equal(slices.Sorted(slices.Values(got)), []string{"east", "north"}) {
		t.Errorf("topic-level replication clusters read back as %v, %v", got, err)
	}
	chk := checker.New()
	p := lcProducer(t, east.Client(t), topic, "p")
	sendSync(t, chk, p, "override", 0, 10, 64)
	east.waitRepl(t, 10*time.Second, topic, "north", "caught up", lcCaughtUp)
	st, err := east.rawStats(testCtx(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Replication["west"]; ok {
		t.Errorf("east replicates the overridden topic to west: %+v", st.Replication["west"])
	}
	cursors, err := east.cursorsOf(t, topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cursors["pulsar.repl.west"]; ok {
		t.Errorf("cursor pulsar.repl.west exists on the overridden topic: %v", lcKeys(cursors))
	}
	if _, ok := cursors["pulsar.repl.north"]; !ok {
		t.Errorf("no cursor pulsar.repl.north on the overridden topic: %v", lcKeys(cursors))
	}
	lcDrain(t, chk, "north", north, topic, "east")
	verify(t, chk, "north", checker.Expect{})
	if got := lcDrain(t, chk, "west-override", west, topic, ""); len(got) != 0 {
		t.Errorf("west received %d messages of a topic whose clusters are east and north", len(got))
	}

	// Back to the namespace's list.
	if err := east.Admin.Topics().RemoveReplicationClusters(tn); err != nil {
		t.Fatalf("remove topic-level replication clusters: %v", err)
	}
	sendSync(t, chk, p, "namespace", 0, 10, 64)
	rs := east.waitRepl(t, 10*time.Second, topic, "west", "caught up after the override is removed", lcCaughtUp)
	if rs.StartMode != "latest" {
		t.Errorf("west's replicator, added when the override went away, startMode %q, want latest", rs.StartMode)
	}
	harness.Eventually(t, 5*time.Second, "north's replicator and cursor gone", func() error {
		st, err := east.rawStats(context.Background(), topic)
		if err != nil {
			return err
		}
		if _, ok := st.Replication["north"]; ok {
			return fmt.Errorf("replication.north still in the stats")
		}
		cursors, err := east.cursorsOf(t, topic)
		if err != nil {
			return err
		}
		if _, ok := cursors["pulsar.repl.north"]; ok {
			return fmt.Errorf("cursor pulsar.repl.north still there")
		}
		return nil
	})
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{Producers: func(p string) bool { return p == "namespace" }})
}

// TestReplLifecycleRemoveCluster: removing a cluster from the namespace's replication clusters
// while it is down and has a backlog stops its replicator and deletes its cursor before the admin
// call answers (stats, internal stats, meridian_replicators_running); the backlog that was never
// sent is logged ("replication removed with entries never sent") and counted in
// meridian_replication_abandoned_entries_total. When the target returns, it has exactly what was
// replicated before, and nothing written afterwards follows.
func TestReplLifecycleRemoveCluster(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west")
	east, west := cs[0], cs[1]
	east.replicate(t, "east", "west")
	topic := harness.Topic(t)
	chk := checker.New()
	p := lcProducer(t, east.Client(t), topic, "p")
	sendSync(t, chk, p, "replicated", 0, 10, 128)
	east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)

	if err := west.InProcess.Close(); err != nil {
		t.Fatalf("stop west: %v", err)
	}
	const neverSent = 25
	sendSync(t, chk, p, "abandoned", 0, neverSent, 128)
	east.waitRepl(t, 10*time.Second, topic, "west", "backlog while west is down", func(r adminapi.ReplicatorStats) error {
		if r.ReplicationBacklog != neverSent || r.Connected {
			return fmt.Errorf("backlog %d connected %v", r.ReplicationBacklog, r.Connected)
		}
		return nil
	})
	abandonedLabels := map[string]string{"cluster": "east", "remote_cluster": "west"}
	before, _ := scrapePromMetrics(testCtx(t, 10*time.Second), east.WebURL())
	var abandonedBefore float64
	if v, err := before.value("meridian_replication_abandoned_entries_total", abandonedLabels); err == nil {
		abandonedBefore = v
	}

	east.replicate(t, "east")
	// The admin call answers once replicators are in step: nothing to wait for.
	st, err := east.rawStats(testCtx(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := st.Replication["west"]; ok {
		t.Errorf("right after removing west: replication.west still in the stats: %+v", r)
	}
	cursors, err := east.cursorsOf(t, topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cursors["pulsar.repl.west"]; ok {
		t.Errorf("right after removing west: cursor pulsar.repl.west still there: %v", lcKeys(cursors))
	}
	east.lcWaitMetrics(t, 5*time.Second, "abandoned entries counted, no replicator running", lcAllOf(
		lcMetricIs("meridian_replication_abandoned_entries_total", abandonedLabels, abandonedBefore+neverSent),
		lcMetricIs("meridian_replicators_running", map[string]string{"cluster": "east"}, 0),
		func(p promScrape) error {
			if s := p.find("pulsar_replication_backlog", east.replLabels(topic, "west")); len(s) != 0 {
				return fmt.Errorf("pulsar_replication_backlog still exported for west: %v", s)
			}
			return nil
		}))
	logs := east.InProcess.Logs()
	found := false
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "replication removed with entries never sent") && strings.Contains(line, topic) &&
			strings.Contains(line, fmt.Sprintf("neverReplicated=%d", neverSent)) {
			found = true
			t.Logf("east logged: %s", line)
		}
	}
	if !found {
		t.Errorf("east did not log the %d entries never sent to west", neverSent)
	}

	sendSync(t, chk, p, "after", 0, 5, 128)
	west.InProcess.Start()
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{Producers: func(p string) bool { return p == "replicated" }})
}

// TestReplLifecycleReaddCluster: a remote removed while it was down (its backlog abandoned) and
// added again later, with --replication-start-at earliest, gets a new cursor at the beginning of
// the topic: the abandoned entries are sent after all, and what the remote already had is
// dropped there by source position (duplicatesDropped), so the remote holds every message
// exactly once, in order. A second remote (north) replicates throughout, untouched by the
// removal and re-adding of west.
func TestReplLifecycleReaddCluster(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartEarliest, "east", "west", "north")
	east, west, north := cs[0], cs[1], cs[2]
	east.replicate(t, "east", "west", "north")
	topic := harness.Topic(t)
	chk := checker.New()
	p := lcProducer(t, east.Client(t), topic, "p")
	sendSync(t, chk, p, "p", 0, 10, 128)
	east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)

	if err := west.InProcess.Close(); err != nil {
		t.Fatalf("stop west: %v", err)
	}
	sendSync(t, chk, p, "p", 10, 35, 128)
	east.replicate(t, "east", "north")
	sendSync(t, chk, p, "p", 35, 40, 128)
	west.InProcess.Start()
	east.replicate(t, "east", "west", "north")
	sendSync(t, chk, p, "p", 40, 45, 128)

	rs := east.waitRepl(t, 10*time.Second, topic, "west", "caught up after re-adding", lcCaughtUp)
	if rs.StartMode != "earliest" || rs.MsgOutCounter != 45 {
		t.Errorf("re-added west: startMode %q msgOutCounter %d, want earliest and all 45 sent again", rs.StartMode, rs.MsgOutCounter)
	}
	in := west.waitInbound(t, 5*time.Second, topic, "east", "duplicates dropped by source position", func(r adminapi.InboundReplicationStats) error {
		if r.DuplicatesDropped != 10 {
			return fmt.Errorf("duplicatesDropped %d, want the 10 west had before", r.DuplicatesDropped)
		}
		return nil
	})
	t.Logf("west after re-adding: msgInCounter %d, duplicatesDropped %d", in.MsgInCounter, in.DuplicatesDropped)
	if in.MsgInCounter != 35 {
		t.Errorf("west after re-adding: msgInCounter %d, want the 35 entries it did not have (duplicatesDropped %d)", in.MsgInCounter, in.DuplicatesDropped)
	}
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{})

	nr := east.waitRepl(t, 10*time.Second, topic, "north", "caught up", lcCaughtUp)
	if nr.MsgOutCounter != 45 || nr.Reconnects != 0 {
		t.Errorf("north, replicating throughout: msgOutCounter %d (want 45), reconnects %d (want 0)", nr.MsgOutCounter, nr.Reconnects)
	}
	lcDrain(t, chk, "north", north, topic, "east")
	verify(t, chk, "north", checker.Expect{})
}

// TestReplLifecycleChangeWhileSourceDown: with a shared configuration store, the namespace's
// replication clusters change (through west) while east, which owns an idle topic with data, is
// stopped. When east starts again, its start pass applies what it missed, without any client
// touching the topic: adding west replicates the topic (observed on west only), and removing west
// again while east is down deletes the cursor after the next start.
func TestReplLifecycleChangeWhileSourceDown(t *testing.T) {
	cs := lcShared(t, "east", "west")
	east, west := cs[0], cs[1]
	topic := harness.Topic(t)
	chk := checker.New()
	const n = 15
	lcProduceAndLeave(t, chk, east, topic, "idle", 0, n)

	if err := east.InProcess.Close(); err != nil {
		t.Fatalf("stop east: %v", err)
	}
	west.replicate(t, "east", "west")
	r := newReader(t, west.Client(t), pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	east.InProcess.Start()
	started := time.Now()
	ctx := testCtx(t, 30*time.Second)
	for i := 0; i < n; i++ {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("reader on west: %d of %d messages %v after east restarted: %v", i, n, time.Since(started), err)
		}
		chk.Received("west", m.Payload(), m.ID().String())
	}
	took := time.Since(started)
	t.Logf("west added while east was down: all %d messages on west %v after east was ready again", n, took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("east replicated its idle topic only %v after it started", took)
	}
	east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)
	lcDrain(t, chk, "west-all", west, topic, "east")
	verify(t, chk, "west", checker.Expect{})
	verify(t, chk, "west-all", checker.Expect{})

	if err := east.InProcess.Close(); err != nil {
		t.Fatalf("stop east: %v", err)
	}
	west.replicate(t, "east")
	east.InProcess.Start()
	harness.Eventually(t, 2*time.Second, "cursor pulsar.repl.west deleted after east's restart", func() error {
		cursors, err := east.cursorsOf(t, topic)
		if err != nil {
			return err
		}
		if _, ok := cursors["pulsar.repl.west"]; ok {
			return fmt.Errorf("cursor pulsar.repl.west still there: %v", lcKeys(cursors))
		}
		return nil
	})
}

// TestReplLifecycleDeleteAndRecreateTopic: deleting a replicated topic on the source stops its
// replicator (meridian_replicators_running) and the topic is gone from the namespace; a topic
// created again under the same name — new data, new positions — replicates its messages to the
// remote, which still holds the old topic's copies: none of the new messages may be taken for a
// duplicate of an old one (the remote deduplicates by source position), also when the source
// restarted between the deletion and the new topic.
func TestReplLifecycleDeleteAndRecreateTopic(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west")
	east, west := cs[0], cs[1]
	east.replicate(t, "east", "west")
	topic := harness.Topic(t)
	tn := lcTopicName(t, topic)
	chk := checker.New()
	lcProduceAndLeave(t, chk, east, topic, "first-life", 0, 10)
	east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)

	if err := east.Admin.Topics().Delete(tn, false, true); err != nil {
		t.Fatalf("delete %s on east: %v", topic, err)
	}
	// Within a second on a quiet machine; 5 s leaves room for CI load. (A deletion racing a reload
	// used to stall /metrics for ~10 s: fixed in the broker, TestDeleteTopicRacingLoads.)
	east.lcWaitMetrics(t, 5*time.Second, "replicator stopped with the deleted topic",
		lcMetricIs("meridian_replicators_running", map[string]string{"cluster": "east"}, 0))
	ns, _ := utils.GetNamespaceName(lcNamespace)
	if _, nonPartitioned, err := east.Admin.Topics().List(*ns); err != nil || slices.Contains(nonPartitioned, topic) {
		t.Errorf("east's topics after deleting %s: %v, %v", topic, nonPartitioned, err)
	}

	ids := lcProduceAndLeave(t, chk, east, topic, "second-life", 0, 10)
	t.Logf("re-created topic: first new message at %v", ids[0])
	rs := east.waitRepl(t, 10*time.Second, topic, "west", "caught up (re-created topic)", lcCaughtUp)
	if rs.StartMode != "earliest" {
		t.Errorf("re-created topic: startMode %q, want earliest (a new topic's cursor exists before its first entry)", rs.StartMode)
	}

	// Once more, with a restart of east between the deletion and the new topic: positions of the
	// third topic must not repeat the earlier ones either.
	if err := east.Admin.Topics().Delete(tn, false, true); err != nil {
		t.Fatalf("delete %s on east again: %v", topic, err)
	}
	if err := east.InProcess.Close(); err != nil {
		t.Fatalf("stop east: %v", err)
	}
	east.InProcess.Start()
	ids = lcProduceAndLeave(t, chk, east, topic, "third-life", 0, 10)
	t.Logf("re-created after a restart: first new message at %v", ids[0])
	east.waitRepl(t, 10*time.Second, topic, "west", "caught up (re-created after a restart)", lcCaughtUp)

	in, err := west.inbound(testCtx(t, 10*time.Second), topic, "east")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("west: msgInCounter %d, duplicatesDropped %d", in.MsgInCounter, in.DuplicatesDropped)
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{})
}

// TestReplLifecycleResendAfterTargetRestarts: the receiving side's deduplication by source
// position survives restarts of the target. West is restarted twice while east replicates to it
// (entries stored before, between and after the restarts); then east's cursor is dropped and
// re-created at earliest (west removed from the namespace's list and added again), so east sends
// every entry again: west must take every one of them for a duplicate and still hold each message
// exactly once.
func TestReplLifecycleResendAfterTargetRestarts(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartEarliest, "east", "west")
	east, west := cs[0], cs[1]
	east.replicate(t, "east", "west")
	topic := harness.Topic(t)
	chk := checker.New()
	p := lcProducer(t, east.Client(t), topic, "p")
	const batch = 10
	for round := int64(0); round < 3; round++ {
		if round > 0 {
			if err := west.InProcess.Close(); err != nil {
				t.Fatalf("stop west: %v", err)
			}
			west.InProcess.Start()
		}
		sendSync(t, chk, p, "p", round*batch, (round+1)*batch, 128)
		east.waitRepl(t, 10*time.Second, topic, "west", fmt.Sprintf("caught up, round %d", round), lcCaughtUp)
	}
	east.replicate(t, "east")
	east.replicate(t, "east", "west")
	rs := east.waitRepl(t, 10*time.Second, topic, "west", "caught up after re-adding (everything sent again)", lcCaughtUp)
	if rs.MsgOutCounter != 3*batch {
		t.Errorf("re-added replicator sent %d, want all %d again", rs.MsgOutCounter, 3*batch)
	}
	in := west.waitInbound(t, 5*time.Second, topic, "east", "every resend dropped", func(r adminapi.InboundReplicationStats) error {
		if r.DuplicatesDropped != 3*batch {
			return fmt.Errorf("duplicatesDropped %d, want %d", r.DuplicatesDropped, 3*batch)
		}
		return nil
	})
	t.Logf("west: msgInCounter %d (since its last restart), duplicatesDropped %d", in.MsgInCounter, in.DuplicatesDropped)
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{})
}

// TestReplLifecycleTopicPoliciesByWatch: with a shared configuration store, topic-level policies
// set through another cluster's admin API (on that cluster's copy of the topic, which replication
// created there) reach the topic's broker by watch: a topic-level replication-clusters override
// set through west (east, north instead of the namespace's east, west) moves the
// replicator from west to north within a second (north, added to a topic with data under
// --replication-start-at earliest, gets everything), and a topic-level replicatorDispatchRate set
// through north replaces a slow namespace limit within a second.
func TestReplLifecycleTopicPoliciesByWatch(t *testing.T) {
	cs := lcShared(t, "east", "west", "north")
	east, west, north := cs[0], cs[1], cs[2]
	east.replicate(t, "east", "west")
	topic := harness.Topic(t)
	tn := lcTopicName(t, topic)
	chk := checker.New()
	p := lcProducer(t, east.Client(t), topic, "p")
	sendSync(t, chk, p, "before", 0, 5, 64)
	east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)

	if err := west.Admin.Topics().SetReplicationClusters(tn, []string{"east", "north"}); err != nil {
		t.Fatalf("topic-level replication clusters through west: %v", err)
	}
	changed := time.Now()
	harness.Eventually(t, time.Second, "east replicating the topic to north instead of west", func() error {
		st, err := east.rawStats(context.Background(), topic)
		if err != nil {
			return err
		}
		if r, ok := st.Replication["north"]; !ok || !r.Connected {
			return fmt.Errorf("replication.north %+v (present %v)", r, ok)
		}
		if r, ok := st.Replication["west"]; ok && (r.StartMode != "" || r.OutboundConnection != "") {
			return fmt.Errorf("replicator to west still there: %+v", r)
		}
		return nil
	})
	t.Logf("topic-level clusters set through west: east switched from west to north %v after the admin call answered", time.Since(changed).Round(time.Millisecond))

	// A slow namespace limit (set through east) holds a backlog back; a faster topic-level limit
	// set through west must reach east's replicator within a second.
	ns, _ := utils.GetNamespaceName(lcNamespace)
	if err := east.Admin.Namespaces().SetReplicatorDispatchRate(*ns, utils.DispatchRate{
		DispatchThrottlingRateInMsg: 20, DispatchThrottlingRateInByte: -1, RatePeriodInSecond: 1}); err != nil {
		t.Fatalf("namespace replicatorDispatchRate: %v", err)
	}
	const n = 400
	sendAsync(t, chk, p, "limited", 0, n, 64)
	slow := east.waitRepl(t, 10*time.Second, topic, "north", "held back at 20 msg/s", func(r adminapi.ReplicatorStats) error {
		if !r.RateLimited || r.MsgOutCounter < 30 {
			return fmt.Errorf("rateLimited %v msgOutCounter %d", r.RateLimited, r.MsgOutCounter)
		}
		return nil
	})
	if err := north.Admin.Topics().SetReplicatorDispatchRate(tn, utils.DispatchRateData{
		DispatchThrottlingRateInMsg: 1000, DispatchThrottlingRateInByte: -1, RatePeriodInSecond: 1}); err != nil {
		t.Fatalf("topic-level replicatorDispatchRate through north: %v", err)
	}
	raised := time.Now()
	east.waitRepl(t, 10*time.Second, topic, "north", "caught up at the topic-level rate", lcCaughtUp)
	took := time.Since(raised)
	t.Logf("%d messages left at 20 msg/s when a topic-level 1000 msg/s was set through north: caught up %v later", int64(n+5)-slow.MsgOutCounter, took.Round(time.Millisecond))
	if took > 1500*time.Millisecond {
		t.Errorf("the topic-level rate set through north took effect on east only after %v, want within a second", took)
	}
	lcDrain(t, chk, "north", north, topic, "east")
	verify(t, chk, "north", checker.Expect{})
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{Producers: func(p string) bool { return p == "before" }})
}

// TestReplLifecycleUnloadWhileReplicating: unloading the source topic (admin unload, as a bundle
// move or a restart would) while its replicator is busy stops the replicator with the topic; the
// next load restarts it from its cursor. Five unloads, each right after 200 messages were
// written (the replicator still sending them), leave west with every message exactly once, in
// order. The stats must not claim "caught up" for the reloaded topic before it is: right after
// east's stats say connected with backlog 0, west must have everything.
// (Each round's producer is closed before the unload: pulsar-client-go v0.19.0 has a data race
// between a producer's reconnect and the resend of its pending messages, which the race detector
// reports when a producer with messages in flight is disconnected.)
func TestReplLifecycleUnloadWhileReplicating(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west")
	east, west := cs[0], cs[1]
	east.replicate(t, "east", "west")
	topic := harness.Topic(t)
	tn := lcTopicName(t, topic)
	chk := checker.New()
	cl := east.Client(t)
	const rounds, per = 5, 200
	for r := int64(0); r < rounds; r++ {
		p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "p", DisableBatching: true})
		if err != nil {
			t.Fatalf("producer (round %d): %v", r, err)
		}
		sendAsync(t, chk, p, "p", r*per, (r+1)*per, 256)
		p.Close()
		if err := east.Admin.Topics().Unload(tn); err != nil {
			t.Fatalf("unload %s (round %d): %v", topic, r, err)
		}
	}
	lcProduceAndLeave(t, chk, east, topic, "last", 0, 1) // loads the topic again
	rs := east.waitRepl(t, 15*time.Second, topic, "west", "caught up after the unloads", lcCaughtUp)
	if n := lcDrain(t, chk, "west-at-caught-up", west, topic, "east"); len(n) != rounds*per+1 {
		t.Errorf("east's stats said connected with backlog 0 (msgOutCounter %d) while west had %d of %d messages", rs.MsgOutCounter, len(n), rounds*per+1)
	}
	west.waitInbound(t, 10*time.Second, topic, "east", "every message received", func(r adminapi.InboundReplicationStats) error {
		if r.MsgInCounter != rounds*per+1 {
			return fmt.Errorf("msgInCounter %d, want %d", r.MsgInCounter, rounds*per+1)
		}
		return nil
	})
	rs = east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)
	t.Logf("after %d unloads: east msgOutCounter %d (since the last load), reconnects %d", rounds, rs.MsgOutCounter, rs.Reconnects)
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{})
}

// TestReplLifecycleRemoteNamespaceLater: east replicates a namespace that does not exist on west
// yet. West refuses (a named error), east shows it as lastError with the backlog growing and keeps
// retrying; once the namespace is created on west, replication proceeds within the backoff bound
// (10 s) with every message exactly once.
func TestReplLifecycleRemoteNamespaceLater(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west")
	east, west := cs[0], cs[1]
	const ns = "public/late"
	if err := east.Admin.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	if err := east.Admin.Namespaces().SetNamespaceReplicationClusters(ns, []string{"east", "west"}); err != nil {
		t.Fatal(err)
	}
	topic := harness.TopicIn(t, ns)
	chk := checker.New()
	p := lcProducer(t, east.Client(t), topic, "p")
	sendSync(t, chk, p, "p", 0, 10, 64)
	refused := east.waitRepl(t, 10*time.Second, topic, "west", "refusal shown", func(r adminapi.ReplicatorStats) error {
		if r.Connected || r.LastError == "" || r.ReplicationBacklog != 10 {
			return fmt.Errorf("connected=%v lastError=%q backlog=%d", r.Connected, r.LastError, r.ReplicationBacklog)
		}
		return nil
	})
	t.Logf("west without the namespace: lastError %q", refused.LastError)
	if !strings.Contains(strings.ToLower(refused.LastError), "namespace") && !strings.Contains(refused.LastError, ns) {
		t.Errorf("lastError %q does not say that the namespace is missing on west", refused.LastError)
	}
	sendSync(t, chk, p, "p", 10, 20, 64)
	east.waitRepl(t, 5*time.Second, topic, "west", "backlog grows while refused", func(r adminapi.ReplicatorStats) error {
		if r.ReplicationBacklog != 20 || r.Connected {
			return fmt.Errorf("backlog %d connected %v", r.ReplicationBacklog, r.Connected)
		}
		return nil
	})
	if err := west.Admin.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	resumed := east.waitRepl(t, 10*time.Second, topic, "west", "replicating once the namespace exists on west", lcCaughtUp)
	t.Logf("namespace created on west: caught up %v later (lastError now %q)", time.Since(created).Round(time.Millisecond), resumed.LastError)
	if resumed.LastError != "" {
		t.Errorf("lastError %q still set after replication resumed", resumed.LastError)
	}
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{})
}

// TestReplLifecycleBacklogKeptAcrossLedgers: entries a replicator still needs are kept, also when
// the topic has no subscription and its log moves on to new ledgers (every load opens a new
// one). West is down while east writes three ledgers' worth (an unload between each); none of it
// may be trimmed: when west returns it receives all of it, once, in order.
func TestReplLifecycleBacklogKeptAcrossLedgers(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west")
	east, west := cs[0], cs[1]
	east.replicate(t, "east", "west")
	topic := harness.Topic(t)
	tn := lcTopicName(t, topic)
	chk := checker.New()
	lcProduceAndLeave(t, chk, east, topic, "p", 0, 10)
	east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)
	if err := west.InProcess.Close(); err != nil {
		t.Fatalf("stop west: %v", err)
	}
	const rounds, per = 3, 50
	var ledgers []int64
	for r := int64(0); r < rounds; r++ {
		ids := lcProduceAndLeave(t, chk, east, topic, "p", 10+r*per, 10+(r+1)*per)
		ledgers = append(ledgers, ids[0].LedgerID())
		if err := east.Admin.Topics().Unload(tn); err != nil {
			t.Fatalf("unload: %v", err)
		}
	}
	is, err := east.Admin.Topics().GetInternalStats(tn)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("while west is down: ledgers of the three rounds %v; internal stats: %d entries, cursors %v", ledgers, is.NumberOfEntries, lcKeys(is.Cursors))
	if is.NumberOfEntries < rounds*per {
		t.Errorf("east keeps %d entries while %d wait for west", is.NumberOfEntries, rounds*per)
	}
	west.InProcess.Start()
	east.waitRepl(t, 15*time.Second, topic, "west", "caught up after west returned", lcCaughtUp)
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{})
}
