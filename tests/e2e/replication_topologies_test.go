package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/metadata/etcdstore/etcdtest"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// Issue 6, "How it is checked": the replication topologies of docs/geo-replication.md §3, each set up
// the way a user does it (pulsaradmin against each cluster's admin API, or once against a shared
// etcd configuration store) and driven by pulsar-client-go producers and consumers. Every cluster is
// an in-process broker; replication between them crosses real TCP through internal/client.
//
// Every test runs the same scenario (runTopology): consumers on every cluster, several producers on
// the clusters that produce (batching off and on), then each cluster must receive exactly the
// messages of the origins the topology promises it: no loss, no duplicates, order kept per producer
// (the checker), IsReplicated()/GetReplicatedFrom() naming the origin cluster for remote messages
// and false/"" for local ones, producer name, key and properties unchanged. Messages a cluster must
// NOT receive (one-way back traffic, multi-hop forwarding through a hub) are caught after a barrier:
// every replicator of every cluster has reported backlog 0 to its remotes (so anything that would
// have been forwarded has been stored on its target already), then each consumer must stay silent.
// The stats must agree: each replicator sent exactly its own cluster's messages (msgOutCounter),
// each cluster received exactly each expected origin's messages once (msgInCounter, no duplicates
// dropped), and no cluster has an outbound replicator towards a cluster its namespace does not list.

// geoNamespace is the namespace every topology test replicates (tenant geo, created by the test).
const (
	geoTenant    = "geo"
	geoNamespace = "geo/events"
)

// topology is one scenario over clusters already configured by the test.
type topology struct {
	clusters []*harness.Cluster
	// producers is how many producers each cluster in producing runs; even ones send without
	// batching, odd ones with batching.
	producers int
	// producing lists the clusters that produce (nil: all).
	producing []string
	// receives maps each cluster to the origin clusters whose messages it must receive (its own
	// included); messages of any other origin are a failure.
	receives map[string][]string
	// subscribeLate subscribes the consumers only after every message was acknowledged by its own
	// cluster, so replication must create the topic on clusters that had no client (consumers read
	// from the earliest position).
	subscribeLate bool
	// partitions, when > 0, makes the topic a partitioned topic with that many partitions, created
	// through pulsaradmin on the clusters in createOn (nil: every cluster; with a shared store once
	// is enough, the partition count lives in the configuration store). Producer i of the test
	// routes every message to partition i mod partitions, so order per producer is still defined;
	// every partition replicates to the same partition of the remote, which replication creates
	// (with its partitioned metadata) where the test did not.
	partitions int
	createOn   []string
}

// createPartitioned creates topic with partitions partitions on c through pulsaradmin. A conflict is
// accepted when the topic exists with that count: a cluster that replicates the namespace to c
// creates its partitioned topics there as soon as it creates them itself.
func createPartitioned(t *testing.T, c *harness.Cluster, topic utils.TopicName, partitions int) {
	t.Helper()
	err := c.Admin.Topics().Create(topic, partitions)
	if err == nil {
		return
	}
	var apiErr rest.Error
	if !errors.As(err, &apiErr) || apiErr.Code != http.StatusConflict {
		t.Fatalf("%s: create %s with %d partitions: %v", c.Name, topic.String(), partitions, err)
	}
	// The conflicting create may be one a replicator is still running: its metadata becomes
	// visible to GetMetadata (the broker's catalog view, updated by watch) a moment after the
	// store refused this one, so poll rather than read once.
	harness.Eventually(t, 10*time.Second, fmt.Sprintf("%s: %s with %d partitions (its create answered %v)", c.Name, topic.String(), partitions, err), func() error {
		meta, merr := c.Admin.Topics().GetMetadata(topic)
		if merr == nil && meta.Partitions != partitions {
			merr = fmt.Errorf("it exists with %d partitions", meta.Partitions)
		}
		return merr
	})
	t.Logf("%s: %s exists already with %d partitions (%v)", c.Name, topic.String(), partitions, err)
}

// partitionNames returns the topics that hold topo's data: the topic itself, or its partitions.
func (topo topology) partitionNames(topic string) []string {
	if topo.partitions == 0 {
		return []string{topic}
	}
	out := make([]string, topo.partitions)
	for i := range out {
		out[i] = fmt.Sprintf("%s-partition-%d", topic, i)
	}
	return out
}

// perProducer is the number of messages each producer sends.
func perProducer() int {
	if testing.Short() {
		return 40
	}
	return 1500
}

// producerOrigin is the cluster a checker producer name ("<cluster>-p<i>") belongs to.
func producerOrigin(name string) string {
	origin, _, _ := strings.Cut(name, "-")
	return origin
}

// runTopology runs the scenario described on top of this file and returns the checker.
func runTopology(t *testing.T, topo topology) *checker.Checker {
	t.Helper()
	start := time.Now()
	n := perProducer()
	receiveTimeout := 30 * time.Second
	if !testing.Short() {
		receiveTimeout = 3 * time.Minute
	}
	topic := harness.TopicIn(t, geoNamespace)
	chk := checker.New()

	clients := make(map[string]pulsar.Client)
	for _, c := range topo.clusters {
		clients[c.Name] = c.Client(t)
	}
	if topo.partitions > 0 {
		tn, err := utils.GetTopicName(topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range topo.clusters {
			if topo.createOn == nil || slices.Contains(topo.createOn, c.Name) {
				createPartitioned(t, c, *tn, topo.partitions)
			}
		}
	}
	consumers := make(map[string]pulsar.Consumer)
	subscribe := func() {
		for _, c := range topo.clusters {
			consumers[c.Name] = newConsumer(t, clients[c.Name], pulsar.ConsumerOptions{
				Topic:                       topic,
				SubscriptionName:            "topology-check",
				Type:                        pulsar.Exclusive,
				SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
				ReceiverQueueSize:           500,
			})
		}
	}
	if !topo.subscribeLate {
		subscribe()
	}

	// Every producer of every producing cluster sends concurrently, so local and replicated entries
	// interleave on every cluster.
	producing := topo.producing
	if producing == nil {
		for _, c := range topo.clusters {
			producing = append(producing, c.Name)
		}
	}
	sentBy := make(map[string]int) // origin cluster -> messages acknowledged
	var wg sync.WaitGroup
	errs := make(chan error, len(producing)*topo.producers)
	producerIndex := 0
	for _, cname := range producing {
		for i := range topo.producers {
			name := fmt.Sprintf("%s-p%d", cname, i)
			opts := pulsar.ProducerOptions{
				Topic:                   topic,
				Name:                    name,
				DisableBatching:         i%2 == 0,
				BatchingMaxMessages:     25,
				BatchingMaxPublishDelay: 2 * time.Millisecond,
				MaxPendingMessages:      500,
			}
			if topo.partitions > 0 {
				partition := producerIndex % topo.partitions
				opts.MessageRouter = func(*pulsar.ProducerMessage, pulsar.TopicMetadata) int { return partition }
			}
			producerIndex++
			p := newProducer(t, clients[cname], opts)
			sentBy[cname] += n
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- produceAll(chk, p, cname, name, n, nil)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	produced := time.Since(start)
	if topo.subscribeLate {
		if topo.partitions > 0 {
			// A consumer looks up the partition count first; where replication has not created the
			// partitioned topic yet it would create a non-partitioned one. Wait until every cluster
			// knows the topic with the producing cluster's partition count (that is the assertion
			// that replication created it on demand).
			tn, err := utils.GetTopicName(topic)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range topo.clusters {
				harness.Eventually(t, 10*time.Second, fmt.Sprintf("%s: %s with %d partitions", c.Name, topic, topo.partitions), func() error {
					meta, err := c.Admin.Topics().GetMetadata(*tn)
					if err != nil {
						return err
					}
					if meta.Partitions != topo.partitions {
						return fmt.Errorf("partitions %d", meta.Partitions)
					}
					return nil
				})
			}
		}
		subscribe()
	}

	// Each cluster receives exactly what its origins produced.
	for _, c := range topo.clusters {
		want := 0
		for _, origin := range topo.receives[c.Name] {
			want += sentBy[origin]
		}
		msgs := harness.Drain(t, chk, c.Name, consumers[c.Name], want, receiveTimeout)
		checkOrigins(t, c.Name, msgs)
	}
	received := time.Since(start)

	// Barrier: every replicator has delivered everything its cluster stored (backlog 0, connected),
	// so any message that would travel where it must not has arrived by now.
	for _, c := range topo.clusters {
		if remotes := replicationRemotes(t, c); len(remotes) > 0 {
			for _, part := range topo.partitionNames(topic) {
				c.WaitReplicationCaughtUp(t, 30*time.Second, part, remotes...)
			}
		}
	}
	for _, c := range topo.clusters {
		if extra := harness.DrainQuiet(t, chk, c.Name, consumers[c.Name], 200*time.Millisecond); len(extra) > 0 {
			t.Errorf("%s: %d message(s) after the expected ones: %s", c.Name, len(extra), describe(extra))
		}
		origins := topo.receives[c.Name]
		verify(t, chk, c.Name, checker.Expect{Producers: func(p string) bool { return slices.Contains(origins, producerOrigin(p)) }})
	}
	checkReplicationCounters(t, topo, topic, sentBy)
	// A cluster has no outbound replication towards clusters its namespace does not list.
	for _, c := range topo.clusters {
		remotes := replicationRemotes(t, c)
		for _, o := range topo.clusters {
			if o != c && !slices.Contains(remotes, o.Name) {
				assertNoOutbound(t, c, topo.partitionNames(topic), o.Name)
			}
		}
	}
	t.Logf("%d clusters, %d producers x %d messages on %v: produced in %v, all received in %v, verified in %v",
		len(topo.clusters), topo.producers, n, producing, produced.Round(time.Millisecond),
		received.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	return chk
}

// checkReplicationCounters compares the replication counters in every cluster's topic stats
// (Meridian's msgOutCounter/msgInCounter per remote, counted in messages) with what was produced:
// each replicator sent exactly its own cluster's messages (nothing it received from elsewhere, which
// would be multi-hop forwarding or a loop), and each cluster received exactly the messages of every
// remote origin it expects, none of them twice (duplicatesDropped 0: nothing was resent).
func checkReplicationCounters(t *testing.T, topo topology, topic string, sentBy map[string]int) {
	t.Helper()
	for _, c := range topo.clusters {
		remotes := replicationRemotes(t, c)
		// The counters are read after the barrier; a short poll only absorbs a stats snapshot taken
		// between a receipt and its counter update.
		harness.Eventually(t, 5*time.Second, c.Name+"'s replication counters", func() error {
			// Sum over the partitions (each replicates on its own).
			sum := make(map[string]adminapi.ReplicatorStats)
			for _, part := range topo.partitionNames(topic) {
				st, err := c.MeridianStats(context.Background(), part)
				if err != nil {
					return fmt.Errorf("stats of %s: %w", part, err)
				}
				for remote, r := range st.Replication {
					acc := sum[remote]
					acc.MsgOutCounter += r.MsgOutCounter
					sum[remote] = acc
				}
				for origin, in := range st.InboundReplication {
					acc := sum[origin]
					acc.MsgInCounter += in.MsgInCounter
					acc.DuplicatesDropped += in.DuplicatesDropped
					sum[origin] = acc
				}
			}
			var wrong []string
			for _, remote := range remotes {
				if got := sum[remote].MsgOutCounter; got != int64(sentBy[c.Name]) {
					wrong = append(wrong, fmt.Sprintf("-> %s: msgOutCounter %d, want %d (the messages produced on %s)", remote, got, sentBy[c.Name], c.Name))
				}
			}
			for _, origin := range topo.receives[c.Name] {
				if origin == c.Name {
					continue
				}
				r := sum[origin]
				if r.MsgInCounter != int64(sentBy[origin]) || r.DuplicatesDropped != 0 {
					wrong = append(wrong, fmt.Sprintf("<- %s: msgInCounter %d, duplicatesDropped %d; want %d, 0", origin, r.MsgInCounter, r.DuplicatesDropped, sentBy[origin]))
				}
			}
			if len(wrong) > 0 {
				return fmt.Errorf("%s", strings.Join(wrong, "; "))
			}
			return nil
		})
	}
}

// produceAll sends n checker messages of producer name with SendAsync, flushes, and waits for every
// receipt. Each message carries key k<seq> and property origin=<cluster>, to check that replication
// keeps them; decorate, if not nil, edits each message before it is sent.
func produceAll(chk *checker.Checker, p pulsar.Producer, cluster, name string, n int, decorate func(*pulsar.ProducerMessage)) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const size = 100
	done := make(chan error, n)
	for seq := range int64(n) {
		chk.Sent(name, seq, size)
		msg := &pulsar.ProducerMessage{
			Payload:    checker.Payload(name, seq, size),
			Key:        fmt.Sprintf("k%d", seq),
			Properties: map[string]string{"origin": cluster},
		}
		if decorate != nil {
			decorate(msg)
		}
		p.SendAsync(ctx, msg, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				chk.Failed(name, seq, err)
				done <- fmt.Errorf("%s: send #%d: %w", name, seq, err)
				return
			}
			chk.Acked(name, seq, id.String())
			done <- nil
		})
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		return fmt.Errorf("%s: flush: %w", name, err)
	}
	for range n {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for receipts: %w", name, ctx.Err())
		}
	}
	return nil
}

// checkOrigins asserts what the consumers on cluster local see of each message's origin: a message
// produced on local is not replicated (IsReplicated false, GetReplicatedFrom ""); a message produced
// on another cluster is replicated from that cluster. Producer name, key and properties arrive as
// produced.
func checkOrigins(t *testing.T, local string, msgs []pulsar.Message) {
	t.Helper()
	var wrong []string
	for _, m := range msgs {
		k := keyOf(t, m)
		origin := producerOrigin(k.Producer)
		wantReplicated, wantFrom := origin != local, ""
		if wantReplicated {
			wantFrom = origin
		}
		var problems []string
		if m.IsReplicated() != wantReplicated || m.GetReplicatedFrom() != wantFrom {
			problems = append(problems, fmt.Sprintf("IsReplicated=%v GetReplicatedFrom=%q, want %v %q", m.IsReplicated(), m.GetReplicatedFrom(), wantReplicated, wantFrom))
		}
		if m.ProducerName() != k.Producer {
			problems = append(problems, fmt.Sprintf("producer name %q", m.ProducerName()))
		}
		if want := fmt.Sprintf("k%d", k.Seq); m.Key() != want {
			problems = append(problems, fmt.Sprintf("key %q, want %q", m.Key(), want))
		}
		if got := m.Properties()["origin"]; got != origin {
			problems = append(problems, fmt.Sprintf("property origin=%q", got))
		}
		if len(problems) > 0 {
			wrong = append(wrong, fmt.Sprintf("%s (%v): %s", k, m.ID(), strings.Join(problems, "; ")))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%s: %d of %d messages arrived with the wrong origin or metadata, first: %s", local, len(wrong), len(msgs), strings.Join(wrong[:min(len(wrong), 5)], " | "))
	}
}

// replicationRemotes returns the remote clusters c's namespace replicates to, as c's admin API says.
func replicationRemotes(t *testing.T, c *harness.Cluster) []string {
	t.Helper()
	list, err := c.Admin.Namespaces().GetNamespaceReplicationClusters(geoNamespace)
	if err != nil {
		t.Fatalf("%s: replication clusters of %s: %v", c.Name, geoNamespace, err)
	}
	return slices.DeleteFunc(list, func(s string) bool { return s == c.Name })
}

// TestTopologyOneWay: independent clusters a -> b. a registers b, allows it for the tenant and lists
// it in the namespace; b registers a and allows it for the tenant, but b's namespace lists only b.
// a's messages reach b marked replicated from a; b's own messages stay on b; a sees only its own.
// b has no subscription or producer on the topic until a's messages were acknowledged: replication
// creates the topic on b.
func TestTopologyOneWay(t *testing.T) {
	cs := harness.StartIndependentClusters(t, "a", "b")
	a, b := cs[0], cs[1]
	a.SetTenant(t, geoTenant, "a", "b")
	a.CreateNamespace(t, geoNamespace, "a", "b")
	b.SetTenant(t, geoTenant, "a", "b")
	b.CreateNamespace(t, geoNamespace, "b")

	runTopology(t, topology{
		clusters:      cs,
		producers:     2,
		receives:      map[string][]string{"a": {"a"}, "b": {"a", "b"}},
		subscribeLate: true,
	})
}

// assertNoOutbound asserts that c never sent anything to remote on any of topics (no replicator,
// or one that never connected nor delivered a message).
func assertNoOutbound(t *testing.T, c *harness.Cluster, topics []string, remote string) {
	t.Helper()
	for _, topic := range topics {
		st, err := c.MeridianStats(context.Background(), topic)
		if err != nil {
			t.Fatalf("%s: stats of %s: %v", c.Name, topic, err)
		}
		if r, ok := st.Replication[remote]; ok && (r.MsgOutCounter != 0 || r.Connected || r.OutboundConnection != "") {
			t.Errorf("%s: %s has an outbound replicator towards %s: %+v", c.Name, topic, remote, r)
		}
	}
}

// TestTopologyTwoWay: independent clusters a <-> b, each configured through its own admin API (each
// registers the other, allows both for the tenant and lists both in its namespace). Each cluster
// holds the union, in order per producer; replicated copies do not come back (no loop, no
// duplicates).
func TestTopologyTwoWay(t *testing.T) {
	cs := harness.StartIndependentClusters(t, "a", "b")
	for _, c := range cs {
		c.SetTenant(t, geoTenant, "a", "b")
		c.CreateNamespace(t, geoNamespace, "a", "b")
	}
	runTopology(t, topology{
		clusters:  cs,
		producers: 2,
		receives:  map[string][]string{"a": {"a", "b"}, "b": {"a", "b"}},
	})
}

// TestTopologyMesh: three clusters a, b, c in a full mesh, every cluster producing with several
// producers (batching off and on); each cluster receives exactly the union of all clusters'
// messages. With a shared etcd configuration store (etcd 3.7, the client's version, and Debian's etcd 3.4 binary
// where one is installed; in-process brokers, and real `meridian standalone` processes) everything
// is configured once, through a's admin API, and reaches b and c by watch; with independent stores
// every cluster is configured through its own API.
func TestTopologyMesh(t *testing.T) {
	names := []string{"a", "b", "c"}
	all := map[string][]string{"a": names, "b": names, "c": names}
	shared := func(t *testing.T, cs []*harness.Cluster) {
		cs[0].SetTenant(t, geoTenant, names...)
		cs[0].CreateNamespace(t, geoNamespace, names...)
		for _, c := range cs {
			c.WaitReplicationClusters(t, 5*time.Second, geoNamespace, names...)
		}
		producers := 2
		if !testing.Short() {
			producers = 3
		}
		runTopology(t, topology{clusters: cs, producers: producers, receives: all})
	}
	t.Run("shared-etcd-built", func(t *testing.T) {
		shared(t, harness.StartSharedClusters(t, harness.StartEtcd(t).ConfigStoreURL("meridian-mesh"), names...))
	})
	t.Run("shared-etcd-installed", func(t *testing.T) {
		srv := etcdtest.StartInstalled(t) // skips without an etcd binary on PATH
		t.Logf("etcd binary: %s", srv.Version())
		shared(t, harness.StartSharedClusters(t, srv.URL("/meridian-mesh"), names...))
	})
	// The same mesh with real `meridian standalone --config-store` processes (the flag path, as an
	// operator runs it), on Debian's etcd where installed, else on etcd 3.7.
	t.Run("shared-etcd-processes", func(t *testing.T) {
		var url string
		if etcdtest.InstalledPath() != "" {
			srv := etcdtest.StartInstalled(t)
			t.Logf("etcd binary: %s", srv.Version())
			url = srv.URL("/meridian-mesh")
		} else {
			url = harness.StartEtcd(t).ConfigStoreURL("meridian-mesh")
		}
		var cs []*harness.Cluster
		for _, name := range names {
			cs = append(cs, harness.NewCluster(t, name, harness.StartStandalone(t, harness.Options{Cluster: name, ConfigStore: url})))
		}
		for _, c := range cs {
			c.WaitClustersKnown(t, 10*time.Second, names...)
		}
		shared(t, cs)
	})
	t.Run("independent-stores", func(t *testing.T) {
		cs := harness.StartIndependentClusters(t, names...)
		for _, c := range cs {
			c.SetTenant(t, geoTenant, names...)
			c.CreateNamespace(t, geoNamespace, names...)
		}
		runTopology(t, topology{clusters: cs, producers: 2, receives: all})
	})
}

// TestTopologyHubAndSpoke: edge aggregation with independent stores. Spokes s1 and s2 know only the
// hub h and replicate into it (spoke namespaces list [spoke, h]); h knows both spokes and accepts
// them. h holds everything; a spoke never holds the other spoke's messages: replicated messages are
// not forwarded again (no multi-hop, docs/design.md, "Replication invariants").
//   - hub-fans-out: h's namespace lists h, s1, s2, so h's own messages reach both spokes;
//   - aggregation-only: h's namespace lists only h; the spokes keep only their own messages.
func TestTopologyHubAndSpoke(t *testing.T) {
	for _, fanOut := range []bool{true, false} {
		name := "aggregation-only"
		receives := map[string][]string{"h": {"h", "s1", "s2"}, "s1": {"s1"}, "s2": {"s2"}}
		if fanOut {
			name = "hub-fans-out"
			receives = map[string][]string{"h": {"h", "s1", "s2"}, "s1": {"s1", "h"}, "s2": {"s2", "h"}}
		}
		t.Run(name, func(t *testing.T) {
			cs := harness.StartClusters(t, harness.ClustersOptions{}, "s1", "s2", "h")
			s1, s2, h := cs[0], cs[1], cs[2]
			h.Register(t, s1, s2)
			h.SetTenant(t, geoTenant, "h", "s1", "s2")
			if fanOut {
				h.CreateNamespace(t, geoNamespace, "h", "s1", "s2")
			} else {
				h.CreateNamespace(t, geoNamespace, "h")
			}
			for _, s := range []*harness.Cluster{s1, s2} {
				s.Register(t, h)
				s.SetTenant(t, geoTenant, s.Name, "h")
				s.CreateNamespace(t, geoNamespace, s.Name, "h")
			}
			runTopology(t, topology{clusters: cs, producers: 2, receives: receives})
		})
	}
}

// TestTopologyFanOut: active-standby with two standbys, independent stores. a replicates to b and c
// (a's namespace lists a, b, c); b and c accept a but list only themselves. Local producers on the
// standbys stay local.
func TestTopologyFanOut(t *testing.T) {
	cs := harness.StartClusters(t, harness.ClustersOptions{}, "a", "b", "c")
	a := cs[0]
	a.Register(t, cs[1:]...)
	a.SetTenant(t, geoTenant, "a", "b", "c")
	a.CreateNamespace(t, geoNamespace, "a", "b", "c")
	for _, s := range cs[1:] {
		s.Register(t, a)
		s.SetTenant(t, geoTenant, s.Name, "a")
		s.CreateNamespace(t, geoNamespace, s.Name)
	}
	runTopology(t, topology{
		clusters:  cs,
		producers: 2,
		receives:  map[string][]string{"a": {"a"}, "b": {"a", "b"}, "c": {"a", "c"}},
	})
}

// TestTopologyPerMessageReplicateTo: fan-out a -> b, c (independent stores) where a's producers
// choose per message: "a-local" sends with DisableReplication (replicate_to ["__local__"]: stays on
// a), "a-tob" with ReplicationClusters ["b"] (only b gets a copy), "a-all" with neither (the
// namespace's clusters). The replicators skip what is not meant for their remote and still reach
// backlog 0.
func TestTopologyPerMessageReplicateTo(t *testing.T) {
	cs := harness.StartClusters(t, harness.ClustersOptions{}, "a", "b", "c")
	a := cs[0]
	a.Register(t, cs[1:]...)
	a.SetTenant(t, geoTenant, "a", "b", "c")
	a.CreateNamespace(t, geoNamespace, "a", "b", "c")
	for _, s := range cs[1:] {
		s.Register(t, a)
		s.SetTenant(t, geoTenant, s.Name, "a")
		s.CreateNamespace(t, geoNamespace, s.Name)
	}
	topic := harness.TopicIn(t, geoNamespace)
	chk := checker.New()
	consumers := make(map[string]pulsar.Consumer)
	for _, c := range cs {
		consumers[c.Name] = newConsumer(t, c.Client(t), pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "topology-check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
	}
	kinds := map[string]func(*pulsar.ProducerMessage){
		"a-local": func(m *pulsar.ProducerMessage) { m.DisableReplication = true },
		"a-tob":   func(m *pulsar.ProducerMessage) { m.ReplicationClusters = []string{"b"} },
		"a-all":   nil,
	}
	receives := map[string][]string{"a": {"a-local", "a-tob", "a-all"}, "b": {"a-tob", "a-all"}, "c": {"a-all"}}
	n := perProducer()
	client := a.Client(t)
	var wg sync.WaitGroup
	errs := make(chan error, len(kinds))
	for name, decorate := range kinds {
		// Batching stays on: the client sends messages with replicate_to outside batches itself.
		p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, Name: name, BatchingMaxPublishDelay: 2 * time.Millisecond})
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- produceAll(chk, p, "a", name, n, decorate)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cs {
		msgs := harness.Drain(t, chk, c.Name, consumers[c.Name], n*len(receives[c.Name]), 30*time.Second)
		checkOrigins(t, c.Name, msgs)
	}
	a.WaitReplicationCaughtUp(t, 30*time.Second, topic, "b", "c")
	for _, c := range cs {
		if extra := harness.DrainQuiet(t, chk, c.Name, consumers[c.Name], 200*time.Millisecond); len(extra) > 0 {
			t.Errorf("%s: %d message(s) after the expected ones: %s", c.Name, len(extra), describe(extra))
		}
		wanted := receives[c.Name]
		verify(t, chk, c.Name, checker.Expect{Producers: func(p string) bool { return slices.Contains(wanted, p) }})
	}
	// Counted in messages; replicate_to messages are never batched by the client, so the skipped
	// entries are as many as the messages meant for other clusters.
	st, err := a.MeridianStats(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for remote, want := range map[string]struct{ sent, skipped int64 }{"b": {int64(2 * n), int64(n)}, "c": {int64(n), int64(2 * n)}} {
		r := st.Replication[remote]
		t.Logf("a -> %s: sent %d, skipped %v", remote, r.MsgOutCounter, r.Skipped)
		if r.MsgOutCounter != want.sent || r.Skipped["replicate_to"] != want.skipped {
			t.Errorf("a -> %s: msgOutCounter %d, skipped %v; want %d sent and %d skipped for replicate_to", remote, r.MsgOutCounter, r.Skipped, want.sent, want.skipped)
		}
	}
}

// TestTopologyPartitioned runs topologies on a partitioned topic (3 partitions, created through
// pulsaradmin): every partition replicates to the same partition of the remote, in order per
// producer, with the same checks as the other topologies (counters summed over the partitions).
//   - one-way a -> b with the topic created only on a and nothing connected to b until a's messages
//     were acknowledged: replication creates the partitioned topic on b with the same count;
//   - two-way a <-> b, independent stores, the topic created on both;
//   - three-cluster mesh on one shared in-process configuration store (the --clusters mode), the
//     topic created once.
func TestTopologyPartitioned(t *testing.T) {
	const partitions = 3
	t.Run("one-way-created-on-demand", func(t *testing.T) {
		cs := harness.StartIndependentClusters(t, "a", "b")
		a, b := cs[0], cs[1]
		a.SetTenant(t, geoTenant, "a", "b")
		a.CreateNamespace(t, geoNamespace, "a", "b")
		b.SetTenant(t, geoTenant, "a", "b")
		b.CreateNamespace(t, geoNamespace, "b")
		runTopology(t, topology{
			clusters: cs, producers: 3, producing: []string{"a"},
			receives:      map[string][]string{"a": {"a"}, "b": {"a"}},
			subscribeLate: true, partitions: partitions, createOn: []string{"a"},
		})
	})
	t.Run("two-way", func(t *testing.T) {
		cs := harness.StartIndependentClusters(t, "a", "b")
		for _, c := range cs {
			c.SetTenant(t, geoTenant, "a", "b")
			c.CreateNamespace(t, geoNamespace, "a", "b")
		}
		runTopology(t, topology{
			clusters: cs, producers: 2,
			receives:   map[string][]string{"a": {"a", "b"}, "b": {"a", "b"}},
			partitions: partitions,
		})
	})
	t.Run("mesh-shared-store", func(t *testing.T) {
		store := memstore.New()
		t.Cleanup(func() { _ = store.Close() }) // registered before the clusters: runs after they stopped
		names := []string{"a", "b", "c"}
		cs := harness.StartClusters(t, harness.ClustersOptions{SharedStore: store}, names...)
		for _, c := range cs {
			c.WaitClustersKnown(t, 5*time.Second, names...)
		}
		cs[0].SetTenant(t, geoTenant, names...)
		cs[0].CreateNamespace(t, geoNamespace, names...)
		for _, c := range cs {
			c.WaitReplicationClusters(t, 5*time.Second, geoNamespace, names...)
		}
		runTopology(t, topology{
			clusters: cs, producers: 2,
			receives:   map[string][]string{"a": names, "b": names, "c": names},
			partitions: partitions, createOn: []string{"a"},
		})
	})
}

// produceConcurrently runs one producer per name on client (even ones without batching, odd ones
// with), sending n checker messages each through produceAll, and closes them when done.
func produceConcurrently(t *testing.T, chk *checker.Checker, client pulsar.Client, cluster, topic string, names []string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for i, name := range names {
		p, err := client.CreateProducer(pulsar.ProducerOptions{
			Topic: topic, Name: name, DisableBatching: i%2 == 0,
			BatchingMaxMessages: 25, BatchingMaxPublishDelay: 2 * time.Millisecond,
		})
		if err != nil {
			t.Fatalf("%s: CreateProducer(%s): %v", cluster, name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.Close()
			errs <- produceAll(chk, p, cluster, name, n, nil)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestTopologyActiveStandbyFailover: active-standby a -> b (independent stores, docs §3.4). Clients
// use a; a is lost (stopped) with everything replicated; clients move to b and produce there; a
// comes back. Fail-back: b's messages written during the failover must reach a, exactly once,
// marked replicated from b, while a's own messages (which b holds as replicated copies) are not
// sent back to a.
//   - standby-lists-both: b's namespace lists a and b from the start (b replicates nothing until
//     it has producers of its own; its replicator towards a waits for a to come back);
//   - failback-earliest: b lists only b; after a is back, the operator sets b's namespace property
//     replicationStartAt=earliest and then adds a to b's replication clusters, so the new
//     replicator on b's existing topic starts from its first entry. (With the default start,
//     latest, the new replicator starts after the failover messages and they never reach a:
//     backlog 0 at once. docs/geo-replication.md §3.4 must say so.)
func TestTopologyActiveStandbyFailover(t *testing.T) {
	for _, variant := range []string{"standby-lists-both", "failback-earliest"} {
		t.Run(variant, func(t *testing.T) {
			cs := harness.StartIndependentClusters(t, "a", "b")
			a, b := cs[0], cs[1]
			for _, c := range cs {
				c.SetTenant(t, geoTenant, "a", "b")
			}
			a.CreateNamespace(t, geoNamespace, "a", "b")
			if variant == "standby-lists-both" {
				b.CreateNamespace(t, geoNamespace, "a", "b")
			} else {
				b.CreateNamespace(t, geoNamespace, "b")
			}
			n := perProducer()
			topic := harness.TopicIn(t, geoNamespace)
			chk := checker.New()
			onB := newConsumer(t, b.Client(t), pulsar.ConsumerOptions{
				Topic: topic, SubscriptionName: "standby-check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
			})

			// Normal operation: everything produced on a reaches b.
			produceConcurrently(t, chk, a.Client(t), "a", topic, []string{"a-p0", "a-p1"}, n)
			a.WaitReplicationCaughtUp(t, 30*time.Second, topic, "b")
			checkOrigins(t, "b", harness.Drain(t, chk, "b", onB, 2*n, 30*time.Second))

			// a is lost; clients fail over to b.
			if err := a.InProcess.Close(); err != nil {
				t.Fatalf("stop a: %v", err)
			}
			produceConcurrently(t, chk, b.Client(t), "b", topic, []string{"b-p0", "b-p1"}, n)
			checkOrigins(t, "b", harness.Drain(t, chk, "b", onB, 2*n, 30*time.Second))

			// The failback check, as a runbook runs it: not yet (a is down, b holds its failover
			// messages) ...
			ctl := harness.MeridianctlBinary(t)
			failback := func(wait string) (int, string) {
				cmd := exec.Command(ctl, "--admin-url", b.WebURL(), "namespaces", "replication-status", geoNamespace,
					"--remote", "a", "--wait", wait, "--interval", "100ms")
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				if err != nil && !errors.As(err, &exit) {
					t.Fatalf("meridianctl: %v\n%s", err, out)
				}
				return cmd.ProcessState.ExitCode(), string(out)
			}
			if variant == "standby-lists-both" {
				if code, out := failback("0s"); code != 1 || !(strings.Contains(out, "disconnected") || strings.Contains(out, "behind")) {
					t.Fatalf("failback check while a is down: exit %d\n%s", code, out)
				}
			}

			// a is back; b's failover messages flow back to a.
			a.InProcess.Start()
			if variant == "failback-earliest" {
				ns, err := utils.GetNamespaceName(geoNamespace)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Admin.Namespaces().UpdateProperties(*ns, map[string]string{"replicationStartAt": "earliest"}); err != nil {
					t.Fatalf("b: namespace property replicationStartAt=earliest: %v", err)
				}
				b.SetReplicationClusters(t, geoNamespace, "a", "b")
			}
			// ... and once a is back, the tool says when a has everything b stored (exit 0).
			if code, out := failback("30s"); code != 0 || !strings.Contains(out, "caught-up") {
				t.Fatalf("failback check after a returned: exit %d\n%s", code, out)
			}
			b.WaitReplicationCaughtUp(t, 30*time.Second, topic, "a")
			onA := newConsumer(t, a.Client(t), pulsar.ConsumerOptions{
				Topic: topic, SubscriptionName: "standby-check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
			})
			checkOrigins(t, "a", harness.Drain(t, chk, "a", onA, 4*n, 30*time.Second))
			// a's replicator, restarted with a, must not resend what b has already.
			a.WaitReplicationCaughtUp(t, 30*time.Second, topic, "b")
			for stream, cons := range map[string]pulsar.Consumer{"a": onA, "b": onB} {
				if extra := harness.DrainQuiet(t, chk, stream, cons, 200*time.Millisecond); len(extra) > 0 {
					t.Errorf("%s: %d message(s) after the expected ones: %s", stream, len(extra), describe(extra))
				}
				verify(t, chk, stream, checker.Expect{})
			}
			// b sent a exactly b's own messages (a's copies on b are skipped, not sent back) and a
			// dropped no duplicates. (a's own counters restarted with a.)
			stB, err := b.MeridianStats(context.Background(), topic)
			if err != nil {
				t.Fatal(err)
			}
			stA, err := a.MeridianStats(context.Background(), topic)
			if err != nil {
				t.Fatal(err)
			}
			out, in := stB.Replication["a"], stA.InboundReplication["b"]
			t.Logf("b -> a: msgOutCounter %d, skipped %v, startMode %q; a <- b: msgInCounter %d, duplicatesDropped %d",
				out.MsgOutCounter, out.Skipped, out.StartMode, in.MsgInCounter, in.DuplicatesDropped)
			if out.MsgOutCounter != int64(2*n) || in.MsgInCounter != int64(2*n) || in.DuplicatesDropped != 0 || stB.InboundReplication["a"].DuplicatesDropped != 0 {
				t.Errorf("b -> a sent %d, a received %d from b with %d duplicates dropped (b dropped %d from a); want %d, %d, 0, 0",
					out.MsgOutCounter, in.MsgInCounter, in.DuplicatesDropped, stB.InboundReplication["a"].DuplicatesDropped, 2*n, 2*n)
			}
		})
	}
}

// TestTopologyMessageFidelity: two-way a <-> b (independent stores) with producers that exercise
// what replication must carry unchanged (issue 6, "Replicator"): LZ4-compressed batches, ZSTD
// single messages, chunked messages (20 KB split into 5 KB chunks, reassembled by the consumer on
// the other cluster), and a producer with a string schema (registered on the remote before its
// data) and zlib-compressed batches. Every message of every producer arrives on both clusters
// exactly once and in order, and the copy on the remote cluster has the same publish time, event
// time, key, properties and producer name as the original on its origin.
func TestTopologyMessageFidelity(t *testing.T) {
	cs := harness.StartIndependentClusters(t, "a", "b")
	for _, c := range cs {
		c.SetTenant(t, geoTenant, "a", "b")
		c.CreateNamespace(t, geoNamespace, "a", "b")
	}
	topic := harness.TopicIn(t, geoNamespace)
	chk := checker.New()
	n := perProducer()
	chunked := min(n, 20)
	consumers := make(map[string]pulsar.Consumer)
	clients := make(map[string]pulsar.Client)
	for _, c := range cs {
		clients[c.Name] = c.Client(t)
		consumers[c.Name] = newConsumer(t, clients[c.Name], pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "fidelity", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
	}
	type kind struct {
		suffix string
		count  int
		size   int
		opts   pulsar.ProducerOptions
	}
	kinds := []kind{
		{"lz4", n, 300, pulsar.ProducerOptions{CompressionType: pulsar.LZ4, BatchingMaxMessages: 20, BatchingMaxPublishDelay: 2 * time.Millisecond}},
		{"zstd", n, 300, pulsar.ProducerOptions{CompressionType: pulsar.ZSTD, DisableBatching: true}},
		{"chunk", chunked, 20_000, pulsar.ProducerOptions{EnableChunking: true, ChunkMaxMessageSize: 5_000, DisableBatching: true}},
		{"schema", n, 300, pulsar.ProducerOptions{Schema: pulsar.NewStringSchema(nil), CompressionType: pulsar.ZLib, BatchingMaxMessages: 20, BatchingMaxPublishDelay: 2 * time.Millisecond}},
	}
	total := 0
	var wg sync.WaitGroup
	errs := make(chan error, len(cs)*len(kinds))
	for _, c := range cs {
		for _, k := range kinds {
			opts := k.opts
			opts.Topic = topic
			opts.Name = c.Name + "-" + k.suffix
			p := newProducer(t, clients[c.Name], opts)
			total += k.count
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- produceSized(chk, p, c.Name, opts.Name, k.count, k.size)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := make(map[string]map[checker.Key]pulsar.Message)
	for _, c := range cs {
		msgs := harness.Drain(t, chk, c.Name, consumers[c.Name], total, 30*time.Second)
		checkOrigins(t, c.Name, msgs)
		got[c.Name] = make(map[checker.Key]pulsar.Message, len(msgs))
		for _, m := range msgs {
			got[c.Name][keyOf(t, m)] = m
		}
	}
	for _, c := range cs {
		c.WaitReplicationCaughtUp(t, 30*time.Second, topic, replicationRemotes(t, c)...)
	}
	for _, c := range cs {
		if extra := harness.DrainQuiet(t, chk, c.Name, consumers[c.Name], 200*time.Millisecond); len(extra) > 0 {
			t.Errorf("%s: %d message(s) after the expected ones: %s", c.Name, len(extra), describe(extra))
		}
		verify(t, chk, c.Name, checker.Expect{})
	}
	// Copies against originals.
	var diffs []string
	sourceProps := 0
	for k, copyOnB := range got["b"] {
		orig, ok := got["a"][k]
		if !ok {
			continue // verify reported it
		}
		if producerOrigin(k.Producer) == "b" {
			orig, copyOnB = copyOnB, orig // the original is on b, the copy on a
		}
		if d := compareCopy(orig, copyOnB); d != "" {
			diffs = append(diffs, k.String()+": "+d)
		}
		if _, ok := copyOnB.Properties()["__MSG_PROP_REPL_SOURCE_POSITION"]; ok {
			sourceProps++
		}
	}
	if len(diffs) > 0 {
		t.Errorf("%d replicated copies differ from their originals, first: %s", len(diffs), strings.Join(diffs[:min(5, len(diffs))], " | "))
	}
	// Pulsar puts the source position into the entry's metadata: consumers see it on messages that
	// were not batched, not on the messages of a batch (their own metadata is the batch's single-
	// message metadata).
	t.Logf("%d messages on each cluster compared with their copies; %d copies show __MSG_PROP_REPL_SOURCE_POSITION to consumers", total, sourceProps)
}

// produceSized is produceAll with bodies of size bytes and an event time derived from seq.
func produceSized(chk *checker.Checker, p pulsar.Producer, cluster, name string, n, size int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, n)
	for seq := range int64(n) {
		chk.Sent(name, seq, size)
		msg := &pulsar.ProducerMessage{
			Payload:    checker.Payload(name, seq, size),
			Key:        fmt.Sprintf("k%d", seq),
			Properties: map[string]string{"origin": cluster, "seq": fmt.Sprint(seq)},
			EventTime:  time.UnixMilli(1_700_000_000_000 + seq),
		}
		p.SendAsync(ctx, msg, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				chk.Failed(name, seq, err)
				done <- fmt.Errorf("%s: send #%d: %w", name, seq, err)
				return
			}
			chk.Acked(name, seq, id.String())
			done <- nil
		})
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		return fmt.Errorf("%s: flush: %w", name, err)
	}
	for range n {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for receipts: %w", name, ctx.Err())
		}
	}
	return nil
}

// compareCopy describes how a replicated copy differs from its original ("" if it does not) in
// what replication must keep: publish and event time, key, producer name and the producer's
// properties (the source-position property replication adds is not compared).
func compareCopy(orig, cp pulsar.Message) string {
	var d []string
	if !orig.PublishTime().Equal(cp.PublishTime()) {
		d = append(d, fmt.Sprintf("publish time %v vs %v", orig.PublishTime(), cp.PublishTime()))
	}
	if !orig.EventTime().Equal(cp.EventTime()) {
		d = append(d, fmt.Sprintf("event time %v vs %v", orig.EventTime(), cp.EventTime()))
	}
	if orig.Key() != cp.Key() {
		d = append(d, fmt.Sprintf("key %q vs %q", orig.Key(), cp.Key()))
	}
	if orig.ProducerName() != cp.ProducerName() {
		d = append(d, fmt.Sprintf("producer %q vs %q", orig.ProducerName(), cp.ProducerName()))
	}
	for k, v := range orig.Properties() {
		if cp.Properties()[k] != v {
			d = append(d, fmt.Sprintf("property %s=%q vs %q", k, v, cp.Properties()[k]))
		}
	}
	for k := range cp.Properties() {
		if _, ok := orig.Properties()[k]; !ok && !replicationProperties[k] {
			d = append(d, fmt.Sprintf("extra property %s=%q", k, cp.Properties()[k]))
		}
	}
	return strings.Join(d, "; ")
}

// replicationProperties are the message properties a replicator adds to a copy (docs/geo-replication.md,
// "Unchanged messages"): the source position, and the source's storage incarnation.
var replicationProperties = map[string]bool{
	"__MSG_PROP_REPL_SOURCE_POSITION":    true,
	"__MSG_PROP_REPL_SOURCE_INCARNATION": true,
}

// TestTopologyDedupLocalOnly: two-way a <-> b with producer deduplication enabled on both clusters'
// namespace (pulsaradmin SetDeduplicationStatus). A producer named "writer" on a and another one
// named "writer" on b send the same sequence ids 0..n-1; b's starts only after a's messages have
// been replicated to b. Deduplication applies to local producers only (issue 6, "Receiving side"):
// replicated entries are keyed by their origin position, never by the original producer's name,
// so neither cluster drops the other's messages as duplicates of its own, and b's producer is not
// told a last sequence id that a's producer wrote. A resend by b's producer of its own sequence id
// 0 is dropped (deduplication does work for local producers), so it reaches neither cluster.
func TestTopologyDedupLocalOnly(t *testing.T) {
	cs := harness.StartIndependentClusters(t, "a", "b")
	a, b := cs[0], cs[1]
	for _, c := range cs {
		c.SetTenant(t, geoTenant, "a", "b")
		c.CreateNamespace(t, geoNamespace, "a", "b")
		if err := c.Admin.Namespaces().SetDeduplicationStatus(geoNamespace, true); err != nil {
			t.Fatalf("%s: enable deduplication on %s: %v", c.Name, geoNamespace, err)
		}
	}
	n := perProducer()
	topic := harness.TopicIn(t, geoNamespace)
	chk := checker.New()
	consumers := make(map[string]pulsar.Consumer)
	for _, c := range cs {
		consumers[c.Name] = newConsumer(t, c.Client(t), pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "dedup-check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
	}
	// The checker tells the clusters' messages apart by payload ("a-writer", "b-writer"); the Pulsar
	// producer name is "writer" on both.
	send := func(c *harness.Cluster) {
		// Without batching: LastSequenceID() then follows every receipt.
		p := newProducer(t, c.Client(t), pulsar.ProducerOptions{Topic: topic, Name: "writer", DisableBatching: true})
		if err := produceAll(chk, p, c.Name, c.Name+"-writer", n, nil); err != nil {
			t.Fatal(err)
		}
		// pulsar-client-go continues after PRODUCER_SUCCESS.last_sequence_id; LastSequenceID()
		// reflects receipts. Starting at 0, n sends end at n-1, whatever the other cluster wrote.
		if last := p.LastSequenceID(); last != int64(n-1) {
			t.Errorf("%s: producer \"writer\" ended at sequence id %d, want %d: it was told the last sequence id of another cluster's producer", c.Name, last, n-1)
		}
		p.Close()
	}
	send(a)
	a.WaitReplicationCaughtUp(t, 30*time.Second, topic, "b")
	send(b)
	// Deduplication does work for b's local producer: a new "writer" on b resumes after b's own
	// last sequence id, and resending sequence id 0 stores nothing.
	again := newProducer(t, b.Client(t), pulsar.ProducerOptions{Topic: topic, Name: "writer", DisableBatching: true})
	chk.Sent("b-writer", int64(n), 100)
	id, err := again.Send(testCtx(t, 10*time.Second), &pulsar.ProducerMessage{Payload: checker.Payload("b-writer", int64(n), 100)})
	if err != nil {
		t.Fatalf("b: send after reconnect: %v", err)
	}
	chk.Acked("b-writer", int64(n), id.String())
	if last := again.LastSequenceID(); last != int64(n) {
		t.Errorf("b: producer \"writer\" continued at sequence id %d after reconnecting, want %d", last, n)
	}
	seq0 := int64(0)
	if _, err := again.Send(testCtx(t, 10*time.Second), &pulsar.ProducerMessage{Payload: checker.Payload("b-writer", 0, 100), SequenceID: &seq0}); err != nil {
		t.Fatalf("b: resend of sequence id 0: %v", err)
	}
	b.WaitReplicationCaughtUp(t, 30*time.Second, topic, "a")
	for _, c := range cs {
		// The policy did reach the topic: deduplication is on for local producers.
		if st, err := c.TopicStats(topic); err != nil || st.DeDuplicationStatus != "Enabled" {
			t.Errorf("%s: deduplicationStatus %q (%v), want Enabled", c.Name, st.DeDuplicationStatus, err)
		}
		msgs := harness.Drain(t, chk, c.Name, consumers[c.Name], 2*n+1, 30*time.Second)
		var wrong []string
		for _, m := range msgs {
			origin := producerOrigin(keyOf(t, m).Producer)
			replicated := origin != c.Name
			if m.ProducerName() != "writer" || m.IsReplicated() != replicated || (replicated && m.GetReplicatedFrom() != origin) {
				wrong = append(wrong, fmt.Sprintf("%s: producer %q replicated %v from %q", keyOf(t, m), m.ProducerName(), m.IsReplicated(), m.GetReplicatedFrom()))
			}
		}
		if len(wrong) > 0 {
			t.Errorf("%s: %d messages with the wrong producer name or origin, first: %s", c.Name, len(wrong), wrong[0])
		}
		if extra := harness.DrainQuiet(t, chk, c.Name, consumers[c.Name], 200*time.Millisecond); len(extra) > 0 {
			t.Errorf("%s: %d message(s) after the expected ones: %s", c.Name, len(extra), describe(extra))
		}
		verify(t, chk, c.Name, checker.Expect{})
	}
}
