package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
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

// Issue 6, "Lifecycle", "Observability" and "Rate limits", driven as a user drives them: the admin
// API through pulsaradmin, data through pulsar-client-go, stats through topic stats, internal stats
// and /metrics. Every cluster is an in-process broker (harness.StartInProcess: real TCP, real
// storage); replication between them crosses TCP through the broker's own client. Helpers here are
// prefixed lc (lifecycle) to stay out of the way of the other replication tests of this package.

const lcNamespace = "public/default"

// lcCluster is one in-process cluster of harness's multi-cluster helpers, with this file's
// stats and metrics readers.
type lcCluster struct{ *harness.Cluster }

func lcWrap(cs []*harness.Cluster) []*lcCluster {
	out := make([]*lcCluster, 0, len(cs))
	for _, c := range cs {
		out = append(out, &lcCluster{c})
	}
	return out
}

// lcIndependent starts one cluster per name, each with its own metadata (no shared configuration
// store), registers every cluster on every other and allows all of them for tenant public. No
// namespace lists a remote yet. startAt is every broker's --replication-start-at.
func lcIndependent(t *testing.T, startAt node.ReplicationStartAt, names ...string) []*lcCluster {
	t.Helper()
	cs := harness.StartClusters(t, harness.ClustersOptions{Node: func(_ string, o *node.Options) { o.ReplicationStartAt = startAt }}, names...)
	harness.RegisterEachOther(t, cs...)
	for _, c := range cs {
		c.SetTenant(t, "public", names...)
	}
	return lcWrap(cs)
}

// lcShared starts one cluster per name on one embedded etcd configuration store (--config-store,
// --replication-start-at earliest): clusters register themselves there; tenant public allows all
// of them, configured once, and every cluster has seen that before this returns.
func lcShared(t *testing.T, names ...string) []*lcCluster {
	t.Helper()
	url := harness.StartEtcd(t).ConfigStoreURL("meridian-lifecycle")
	cs := harness.StartClusters(t, harness.ClustersOptions{ConfigStore: url,
		Node: func(_ string, o *node.Options) { o.ReplicationStartAt = node.ReplicationStartEarliest }}, names...)
	for _, c := range cs {
		c.WaitClustersKnown(t, 10*time.Second, names...)
	}
	cs[0].SetTenant(t, "public", names...)
	for _, c := range cs {
		harness.Eventually(t, 5*time.Second, c.Name+" sees the tenant's allowed clusters", func() error {
			td, err := c.Admin.Tenants().Get("public")
			if err != nil {
				return err
			}
			for _, n := range names {
				if !slices.Contains(td.AllowedClusters, n) {
					return fmt.Errorf("allowed clusters %v", td.AllowedClusters)
				}
			}
			return nil
		})
	}
	return lcWrap(cs)
}

// replicate sets the namespace's replication clusters through c's admin API.
func (c *lcCluster) replicate(t *testing.T, clusters ...string) {
	t.Helper()
	if err := c.Admin.Namespaces().SetNamespaceReplicationClusters(lcNamespace, clusters); err != nil {
		t.Fatalf("%s: set replication clusters of %s to %v: %v", c.Name, lcNamespace, clusters, err)
	}
}

func lcTopicName(t *testing.T, topic string) utils.TopicName {
	t.Helper()
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatalf("topic name %s: %v", topic, err)
	}
	return *tn
}

// lcTopicStats is the part of the topic stats these tests read, decoded from the raw JSON so that
// Meridian's additions to replication.<remote> (lastError, startMode, ...) are visible; pulsaradmin's
// ReplicatorStats has only Pulsar's fields.
type lcTopicStats struct {
	Publishers []struct {
		ProducerName string `json:"producerName"`
	} `json:"publishers"`
	Subscriptions map[string]json.RawMessage          `json:"subscriptions"`
	Replication   map[string]adminapi.ReplicatorStats `json:"replication"`
	// Inbound links (Meridian's addition): the clusters replicating into the topic.
	InboundReplication map[string]adminapi.InboundReplicationStats `json:"inboundReplication"`
}

func (c *lcCluster) rawStats(ctx context.Context, topic string) (lcTopicStats, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return lcTopicStats{}, err
	}
	url := fmt.Sprintf("%s/admin/v2/%s/stats", c.WebURL(), tn.GetRestPath())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return lcTopicStats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return lcTopicStats{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return lcTopicStats{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return lcTopicStats{}, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	var st lcTopicStats
	if err := json.Unmarshal(body, &st); err != nil {
		return lcTopicStats{}, fmt.Errorf("GET %s: %w", url, err)
	}
	return st, nil
}

// repl returns c's replication.<remote> section of topic's stats, an error if there is none.
func (c *lcCluster) repl(ctx context.Context, topic, remote string) (adminapi.ReplicatorStats, error) {
	st, err := c.rawStats(ctx, topic)
	if err != nil {
		return adminapi.ReplicatorStats{}, err
	}
	r, ok := st.Replication[remote]
	if !ok {
		return adminapi.ReplicatorStats{}, fmt.Errorf("%s: no replication.%s in the stats of %s (have %v)", c.Name, remote, topic, lcKeys(st.Replication))
	}
	return r, nil
}

// inbound returns c's inboundReplication.<source> stats of topic.
func (c *lcCluster) inbound(ctx context.Context, topic, source string) (adminapi.InboundReplicationStats, error) {
	st, err := c.rawStats(ctx, topic)
	if err != nil {
		return adminapi.InboundReplicationStats{}, err
	}
	in, ok := st.InboundReplication[source]
	if !ok {
		return adminapi.InboundReplicationStats{}, fmt.Errorf("%s: no inboundReplication.%s in the stats of %s (have %v)", c.Name, source, topic, lcKeys(st.InboundReplication))
	}
	return in, nil
}

// waitInbound polls c's inboundReplication.<source> stats of topic until ok accepts them.
func (c *lcCluster) waitInbound(t *testing.T, timeout time.Duration, topic, source, what string, ok func(adminapi.InboundReplicationStats) error) adminapi.InboundReplicationStats {
	t.Helper()
	var got adminapi.InboundReplicationStats
	harness.Eventually(t, timeout, fmt.Sprintf("%s <- %s, %s: %s", c.Name, source, topic, what), func() error {
		in, err := c.inbound(testCtx(t, timeout), topic, source)
		if err != nil {
			return err
		}
		if err := ok(in); err != nil {
			return fmt.Errorf("%w (stats %+v)", err, in)
		}
		got = in
		return nil
	})
	return got
}

func lcKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// waitRepl polls c's replication.<remote> stats of topic until ok accepts them (nil error) or
// timeout passes, and returns the accepted stats.
func (c *lcCluster) waitRepl(t *testing.T, timeout time.Duration, topic, remote, what string, ok func(adminapi.ReplicatorStats) error) adminapi.ReplicatorStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got adminapi.ReplicatorStats
	var last error // the last answer that was not cut short by the deadline
	if err := harness.WaitFor(ctx, func(ctx context.Context) error {
		r, err := c.repl(ctx, topic, remote)
		if err != nil {
			if ctx.Err() == nil {
				last = err
			}
			return err
		}
		if err := ok(r); err != nil {
			last = fmt.Errorf("%w (stats %+v)", err, r)
			return last
		}
		got = r
		return nil
	}); err != nil {
		t.Fatalf("%s -> %s, %s: %s within %v: %v (last answer: %v)", c.Name, remote, topic, what, timeout, err, last)
	}
	return got
}

// lcCaughtUp accepts a connected replicator with nothing left to send.
func lcCaughtUp(r adminapi.ReplicatorStats) error {
	if !r.Connected || r.ReplicationBacklog != 0 {
		return fmt.Errorf("connected=%v backlog=%d lastError=%q", r.Connected, r.ReplicationBacklog, r.LastError)
	}
	return nil
}

// cursorsOf returns the names of topic's cursors on c (internal stats, through pulsaradmin).
func (c *lcCluster) cursorsOf(t *testing.T, topic string) (map[string]utils.CursorStats, error) {
	t.Helper()
	is, err := c.Admin.Topics().GetInternalStats(lcTopicName(t, topic))
	if err != nil {
		return nil, err
	}
	return is.Cursors, nil
}

// lcProducer creates a producer without batching, so that one message is one entry and backlogs
// count messages.
func lcProducer(t *testing.T, cl pulsar.Client, topic, name string) pulsar.Producer {
	t.Helper()
	return newProducer(t, cl, pulsar.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
}

// lcProduceAndLeave connects to c, sends messages from..to-1 of producer name to topic and closes
// the producer and the client again, so that no client is connected afterwards. It returns the
// message ids.
func lcProduceAndLeave(t *testing.T, chk *checker.Checker, c *lcCluster, topic, name string, from, to int64) []pulsar.MessageID {
	t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.ServiceURL(), Logger: harness.ClientLogger(), OperationTimeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("client for %s: %v", c.Name, err)
	}
	defer cl.Close()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
	if err != nil {
		t.Fatalf("producer on %s: %v", c.Name, err)
	}
	defer p.Close()
	return sendSync(t, chk, p, name, from, to, 128)
}

// lcDrain reads topic on c from the earliest message until the broker has nothing more, records
// every message in chk as stream, checks that each is marked replicated from origin, and returns
// the messages. Call it once the source's backlog is 0, so that "nothing more" means "everything".
func lcDrain(t *testing.T, chk *checker.Checker, stream string, c *lcCluster, topic, origin string) []pulsar.Message {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	r := newReader(t, c.Client(t), pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	var out []pulsar.Message
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("reader on %s after %d messages: %v", c.Name, len(out), err)
		}
		chk.Received(stream, m.Payload(), m.ID().String())
		if origin != "" && (!m.IsReplicated() || m.GetReplicatedFrom() != origin) {
			t.Errorf("message %v on %s: replicated=%v from %q, want from %q", m.ID(), c.Name, m.IsReplicated(), m.GetReplicatedFrom(), origin)
		}
		out = append(out, m)
	}
	return out
}

// lcParsePos parses "ledger:entry".
func lcParsePos(s string) (ledger, entry int64, err error) {
	l, e, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("position %q is not ledger:entry", s)
	}
	if ledger, err = strconv.ParseInt(l, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("position %q: %w", s, err)
	}
	if entry, err = strconv.ParseInt(e, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("position %q: %w", s, err)
	}
	return ledger, entry, nil
}

// replLabels are the Prometheus labels of topic's replication series towards remote on c.
func (c *lcCluster) replLabels(topic, remote string) map[string]string {
	return map[string]string{"cluster": c.Name, "namespace": lcNamespace, "topic": topic, "remote_cluster": remote}
}

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
	expectNothing(t, cons, 300*time.Millisecond)
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

// lcWaitMetrics polls c's /metrics until ok accepts a scrape, within timeout.
func (c *lcCluster) lcWaitMetrics(t *testing.T, timeout time.Duration, what string, ok func(promScrape) error) promScrape {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got promScrape
	if err := harness.WaitFor(ctx, func(ctx context.Context) error {
		p, err := scrapePromMetrics(ctx, c.WebURL())
		if err != nil {
			return err
		}
		if err := ok(p); err != nil {
			return err
		}
		got = p
		return nil
	}); err != nil {
		t.Fatalf("%s /metrics: %s within %v: %v", c.Name, what, timeout, err)
	}
	return got
}

// lcMetricIs returns a check that the one sample name{labels} equals want.
func lcMetricIs(name string, labels map[string]string, want float64) func(promScrape) error {
	return func(p promScrape) error {
		v, err := p.value(name, labels)
		if err != nil {
			return err
		}
		if v != want {
			return fmt.Errorf("%s = %v, want %v", name, v, want)
		}
		return nil
	}
}

// lcAllOf combines metric checks.
func lcAllOf(checks ...func(promScrape) error) func(promScrape) error {
	return func(p promScrape) error {
		for _, c := range checks {
			if err := c(p); err != nil {
				return err
			}
		}
		return nil
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

// lcRateCase is one replicator under a replicatorDispatchRate.
type lcRateCase struct {
	name     string
	size     int     // payload bytes
	bytes    bool    // the byte limit binds (else the message limit)
	limit    float64 // messages/s or bytes/s
	topicMsg int64   // topic-level policy, -1 unlimited; 0 with topicByte 0: no topic policy
	topicB   int64
	n        int64 // messages stored before replication starts
	topic    string
	// policyTopic carries the topic-level policy: the topic itself, or a partition's partitioned
	// topic.
	policyTopic string

	// measured
	samples []lcRateSample // steady phase: past the burst, not yet done
	done    time.Time
	limited bool
}

// lcRateSample is a counter read at a time (the midpoint of the stats request).
type lcRateSample struct {
	at time.Duration // since the policy change
	v  int64
}

// lcSlope fits v = a + b*at by least squares and returns b per second.
func lcSlope(ss []lcRateSample) float64 {
	n := float64(len(ss))
	var sx, sy, sxx, sxy float64
	for _, s := range ss {
		x, y := s.at.Seconds(), float64(s.v)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// TestReplLifecycleDispatchRate: replicatorDispatchRate set through pulsaradmin at namespace level
// (messages/s and bytes/s in one policy) and at topic level (messages/s only, bytes/s only, each
// replacing the namespace's; and on a partitioned topic, where it holds for each partition) keeps
// six replicators, catching up concurrently from earliest, within ±20% of their limits. The rate is measured as the lcSlope of msgOutCounter (bytesOutCounter) from
// the end of the first second's burst until the replicator is done.
func TestReplLifecycleDispatchRate(t *testing.T) {
	steady := 3.0 // seconds of steady state after the one-second burst
	if !testing.Short() {
		steady = 6
	}
	cs := lcIndependent(t, node.ReplicationStartEarliest, "east", "west")
	east := cs[0]
	ns, _ := utils.GetNamespaceName(lcNamespace)
	const nsMsg, nsByte = 200, 150 * 1024
	if err := east.Admin.Namespaces().SetReplicatorDispatchRate(*ns, utils.DispatchRate{
		DispatchThrottlingRateInMsg: nsMsg, DispatchThrottlingRateInByte: nsByte, RatePeriodInSecond: 1}); err != nil {
		t.Fatalf("namespace replicatorDispatchRate: %v", err)
	}
	if got, err := east.Admin.Namespaces().GetReplicatorDispatchRate(*ns); err != nil || got.DispatchThrottlingRateInMsg != nsMsg || got.DispatchThrottlingRateInByte != nsByte {
		t.Fatalf("namespace replicatorDispatchRate reads back as %+v, %v", got, err)
	}
	cases := []*lcRateCase{
		{name: "namespace-msgs", size: 100, limit: nsMsg},
		{name: "namespace-bytes", size: 1024, bytes: true, limit: nsByte},
		{name: "topic-msgs", size: 100, limit: 100, topicMsg: 100, topicB: -1},
		{name: "topic-bytes", size: 1024, bytes: true, limit: 80 * 1024, topicMsg: -1, topicB: 80 * 1024},
	}
	// A partitioned topic with a topic-level limit: the limit holds for each partition's replicator.
	parent := harness.Topic(t) + "-partitioned"
	if err := east.Admin.Topics().Create(lcTopicName(t, parent), 2); err != nil {
		t.Fatalf("create partitioned %s: %v", parent, err)
	}
	for i := 0; i < 2; i++ {
		cases = append(cases, &lcRateCase{name: fmt.Sprintf("partition-%d", i), size: 100, limit: 120, topicMsg: 120, topicB: -1,
			topic: fmt.Sprintf("%s-partition-%d", parent, i), policyTopic: parent})
	}
	chk := checker.New()
	cl := east.Client(t)
	for _, c := range cases {
		if c.topic == "" {
			c.topic = harness.Topic(t) + "-" + c.name
		}
		if c.policyTopic == "" {
			c.policyTopic = c.topic
		}
		perMsg := float64(c.size)
		if !c.bytes {
			perMsg = 1
		}
		c.n = int64((1 + steady) * c.limit / perMsg)
		sendAsync(t, chk, lcProducer(t, cl, c.topic, c.name), c.name, 0, c.n, c.size)
		if c.topicMsg != 0 || c.topicB != 0 {
			tn := lcTopicName(t, c.policyTopic)
			rate := utils.DispatchRateData{DispatchThrottlingRateInMsg: c.topicMsg, DispatchThrottlingRateInByte: c.topicB, RatePeriodInSecond: 1}
			if err := east.Admin.Topics().SetReplicatorDispatchRate(tn, rate); err != nil {
				t.Fatalf("%s: topic replicatorDispatchRate: %v", c.name, err)
			}
			if got, err := east.Admin.Topics().GetReplicatorDispatchRate(tn); err != nil || got == nil || got.DispatchThrottlingRateInMsg != c.topicMsg || got.DispatchThrottlingRateInByte != c.topicB {
				t.Fatalf("%s: topic replicatorDispatchRate reads back as %+v, %v", c.name, got, err)
			}
		}
	}

	start := time.Now()
	east.replicate(t, "east", "west")
	ctx := testCtx(t, time.Duration(steady+30)*time.Second)
	// One poller per replicator, so that each is sampled often however many there are and however
	// slow the machine is.
	errs := make(chan error, len(cases))
	for _, c := range cases {
		go func() {
			errs <- harness.WaitFor(ctx, func(ctx context.Context) error {
				before := time.Now()
				r, err := east.repl(ctx, c.topic, "west")
				if err != nil {
					return err
				}
				at := before.Sub(start) + time.Since(before)/2
				v := r.MsgOutCounter
				if c.bytes {
					v = r.BytesOutCounter
				}
				c.limited = c.limited || r.RateLimited
				if r.MsgOutCounter >= c.n {
					c.done = time.Now()
					return nil
				}
				if float64(v) >= 1.1*c.limit {
					c.samples = append(c.samples, lcRateSample{at, v})
				}
				return fmt.Errorf("%s: %d of %d sent", c.name, r.MsgOutCounter, c.n)
			})
		}()
	}
	var failed []error
	for range cases {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("replicators under replicatorDispatchRate did not finish: %v", failed)
	}
	t.Logf("all caught up %v after the policy change", time.Since(start).Round(time.Millisecond))
	for _, c := range cases {
		unit := "msg/s"
		if c.bytes {
			unit = "B/s"
		}
		if len(c.samples) < 5 {
			t.Errorf("%s: only %d samples of the steady phase", c.name, len(c.samples))
			continue
		}
		measured := lcSlope(c.samples)
		first, last := c.samples[0], c.samples[len(c.samples)-1]
		t.Logf("%s: %d messages of %d B, limit %.0f %s: measured %.0f %s (%.0f%% of the limit) from %d samples over %v (%d at %v .. %d at %v), done %v after the change, rateLimited seen %v",
			c.name, c.n, c.size, c.limit, unit, measured, unit, 100*measured/c.limit, len(c.samples), (last.at - first.at).Round(time.Millisecond),
			first.v, first.at.Round(time.Millisecond), last.v, last.at.Round(time.Millisecond), c.done.Sub(start).Round(time.Millisecond), c.limited)
		if measured < 0.8*c.limit || measured > 1.2*c.limit {
			t.Errorf("%s: replicated at %.0f %s, want %.0f ±20%%", c.name, measured, unit, c.limit)
		}
		if !c.limited {
			t.Errorf("%s: stats never showed rateLimited while held back", c.name)
		}
	}
}

// TestReplLifecycleDispatchRateChange: a change of the namespace's replicatorDispatchRate reaches a
// running replicator within a second. A replicator catching up at 100 msg/s has about 600 messages
// left (6 s at that rate) when the limit is raised to 1000 msg/s; it must be done within 1.5 s of
// the admin call.
func TestReplLifecycleDispatchRateChange(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartEarliest, "east", "west")
	east := cs[0]
	ns, _ := utils.GetNamespaceName(lcNamespace)
	setRate := func(msgs int) {
		t.Helper()
		if err := east.Admin.Namespaces().SetReplicatorDispatchRate(*ns, utils.DispatchRate{
			DispatchThrottlingRateInMsg: msgs, DispatchThrottlingRateInByte: -1, RatePeriodInSecond: 1}); err != nil {
			t.Fatalf("namespace replicatorDispatchRate %d msg/s: %v", msgs, err)
		}
	}
	setRate(100)
	topic := harness.Topic(t)
	chk := checker.New()
	const n = 800
	sendAsync(t, chk, lcProducer(t, east.Client(t), topic, "p"), "p", 0, n, 100)
	east.replicate(t, "east", "west")
	slow := east.waitRepl(t, 10*time.Second, topic, "west", "past the burst at 100 msg/s", func(r adminapi.ReplicatorStats) error {
		if r.MsgOutCounter < 200 {
			return fmt.Errorf("msgOutCounter %d", r.MsgOutCounter)
		}
		return nil
	})
	if !slow.RateLimited {
		t.Errorf("at 100 msg/s with %d messages left the replicator is not rateLimited: %+v", n-slow.MsgOutCounter, slow)
	}
	setRate(1000)
	changed := time.Now()
	done := east.waitRepl(t, 10*time.Second, topic, "west", "caught up at the new rate", lcCaughtUp)
	took := time.Since(changed)
	t.Logf("%d messages left at 100 msg/s when the limit went to 1000 msg/s; caught up %v later (msgOutCounter %d)", n-slow.MsgOutCounter, took.Round(time.Millisecond), done.MsgOutCounter)
	if took > 1500*time.Millisecond {
		t.Errorf("raising replicatorDispatchRate took effect only after %v, want within a second", took)
	}
}

// lcSendMarked sends message seq of logical producer name through p with the given per-message
// replication settings, recording it in chk.
func lcSendMarked(t *testing.T, chk *checker.Checker, p pulsar.Producer, name string, seq int64, clusters []string, disable bool) {
	t.Helper()
	const size = 64
	chk.Sent(name, seq, size)
	id, err := p.Send(testCtx(t, 20*time.Second), &pulsar.ProducerMessage{
		Payload: checker.Payload(name, seq, size), ReplicationClusters: clusters, DisableReplication: disable})
	if err != nil {
		chk.Failed(name, seq, err)
		t.Fatalf("send %s#%d: %v", name, seq, err)
	}
	chk.Acked(name, seq, id.String())
}

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

// TestReplLifecycleRatesAfterBurst: a burst that is replicated entirely within the replicator's
// first second (a new topic, 100 messages sent at once) still shows as a non-zero msgRateOut /
// msgThroughputOut on the source and msgRateIn / msgThroughputIn on the target afterwards: the
// rate window must start from the replicator's start, not from its first sample.
func TestReplLifecycleRatesAfterBurst(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west")
	east, west := cs[0], cs[1]
	east.replicate(t, "east", "west")
	topic := harness.Topic(t)
	tn := lcTopicName(t, topic)
	chk := checker.New()
	sendSync(t, chk, lcProducer(t, east.Client(t), topic, "p"), "p", 0, 100, 1024)
	east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)
	harness.Eventually(t, 5*time.Second, "rates of a burst on both sides", func() error {
		est, err := east.Admin.Topics().GetStats(tn)
		if err != nil {
			return err
		}
		wst, err := west.rawStats(testCtx(t, 5*time.Second), topic)
		if err != nil {
			return err
		}
		out, in := est.Replication["west"], wst.InboundReplication["east"]
		if out.MsgRateOut <= 0 || out.MsgThroughputOut <= 0 || in.MsgRateIn <= 0 || in.MsgThroughputIn <= 0 {
			return fmt.Errorf("east replication.west %+v; west inboundReplication.east %+v", out, in)
		}
		return nil
	})
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

// TestReplLifecycleDispatchRateLargeEntries: entries larger than one second's byte budget still
// replicate (the budget goes negative and the next entry waits), so a byte limit never stalls a
// replicator; and the limit is still honoured on average. 3 entries of 128 KiB under 64 KiB/s: the
// first goes at once (budget 64 KiB -> -64 KiB), the second after 1 s, the third 2 s later.
func TestReplLifecycleDispatchRateLargeEntries(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartEarliest, "east", "west")
	east, west := cs[0], cs[1]
	ns, _ := utils.GetNamespaceName(lcNamespace)
	const limit, size, n = 64 * 1024, 128 * 1024, 3
	if err := east.Admin.Namespaces().SetReplicatorDispatchRate(*ns, utils.DispatchRate{
		DispatchThrottlingRateInMsg: -1, DispatchThrottlingRateInByte: limit, RatePeriodInSecond: 1}); err != nil {
		t.Fatal(err)
	}
	topic := harness.Topic(t)
	chk := checker.New()
	sendSync(t, chk, lcProducer(t, east.Client(t), topic, "big"), "big", 0, n, size)
	start := time.Now()
	east.replicate(t, "east", "west")
	rs := east.waitRepl(t, 15*time.Second, topic, "west", "every large entry replicated", lcCaughtUp)
	took := time.Since(start)
	t.Logf("%d entries of %d KiB under %d KiB/s: replicated in %v (%.0f KiB/s), bytesOutCounter %d", n, size/1024, limit/1024, took.Round(time.Millisecond),
		float64(rs.BytesOutCounter)/1024/took.Seconds(), rs.BytesOutCounter)
	expected := time.Duration(float64(size-limit+(n-2)*size) / limit * float64(time.Second))
	if took < expected*8/10 || took > expected+5*time.Second {
		t.Errorf("replicated in %v, want about %v (the limit honoured, no stall)", took, expected)
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
