package replication_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/brokertest"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/node"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/schema"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// cluster is one in-process broker with its admin client.
type cluster struct {
	name  string
	b     *brokertest.Broker
	admin *adminapi.Client
}

func startCluster(t *testing.T, name string, opts ...brokertest.Option) *cluster {
	t.Helper()
	b := brokertest.Start(t, append([]brokertest.Option{brokertest.WithCluster(name)}, opts...)...)
	a, err := adminapi.NewClient(b.AdminURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{name: name, b: b, admin: a}
}

// knows registers other on c and allows both for tenant public (c then accepts other's traffic).
func (c *cluster) knows(t *testing.T, ctx context.Context, others ...*cluster) {
	t.Helper()
	allowed := []string{c.name}
	for _, o := range others {
		if err := c.admin.CreateCluster(ctx, o.name, adminapi.ClusterData{ServiceURL: o.b.AdminURL, BrokerServiceURL: o.b.ServiceURL}); err != nil {
			t.Fatalf("%s: register %s: %v", c.name, o.name, err)
		}
		allowed = append(allowed, o.name)
	}
	if err := c.admin.UpdateTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: allowed, AdminRoles: []string{}}); err != nil {
		t.Fatalf("%s: tenant: %v", c.name, err)
	}
}

func (c *cluster) replicateTo(t *testing.T, ctx context.Context, clusters ...string) {
	t.Helper()
	if err := c.admin.SetReplicationClusters(ctx, "public/default", clusters); err != nil {
		t.Fatalf("%s: set clusters: %v", c.name, err)
	}
}

func (c *cluster) client(t *testing.T) *client.Client {
	t.Helper()
	cl, err := client.New(client.Options{ServiceURL: c.b.ServiceURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func produce(t *testing.T, ctx context.Context, cl *client.Client, topic, prefix string, n int) {
	t.Helper()
	p, err := cl.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	for i := range n {
		if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte(fmt.Sprintf("%s-%d", prefix, i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// receiveAll reads exactly want messages from cs, a consumer of topic on cluster c, and returns
// payload -> replicated_from, checking per-origin order. Then it proves that no more was stored
// before: a barrier message published to topic on c (local only, so it is not replicated) must be
// the next message cs receives.
func receiveAll(t *testing.T, ctx context.Context, c *cluster, topic string, cs *client.Consumer, want int) map[string]string {
	t.Helper()
	got := map[string]string{}
	type seq struct {
		prefix string
		i      int
	}
	last := map[string]seq{} // per origin: the last message's producer prefix and index
	for len(got) < want {
		m, err := cs.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(got), want, err)
		}
		p := string(m.Payload)
		if _, dup := got[p]; dup {
			t.Fatalf("duplicate %q", p)
		}
		got[p] = m.ReplicatedFrom
		var s seq
		if prefix, idx, ok := strings.Cut(p, "-"); ok {
			s.prefix = prefix
			s.i, _ = strconv.Atoi(idx)
		}
		if prev, ok := last[m.ReplicatedFrom]; ok && prev.prefix == s.prefix && s.i <= prev.i {
			t.Fatalf("order: %q after index %d from %q", p, prev.i, m.ReplicatedFrom)
		}
		last[m.ReplicatedFrom] = s
		_ = cs.Ack(ctx, m.ID)
	}
	barrier := fmt.Sprintf("barrier-after-%d", want)
	p, err := c.client(t).CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte(barrier), ReplicateTo: []string{replication.LocalOnly}}); err != nil {
		t.Fatal(err)
	}
	m, err := cs.Receive(ctx)
	if err != nil {
		t.Fatalf("%s: the barrier after %d messages: %v", c.name, want, err)
	}
	if string(m.Payload) != barrier {
		t.Fatalf("%s: unexpected extra message %q from %q", c.name, m.Payload, m.ReplicatedFrom)
	}
	_ = cs.Ack(ctx, m.ID)
	return got
}

func waitStats(t *testing.T, ctx context.Context, c *cluster, topic, remote string, what string, ok func(adminapi.ReplicatorStats) bool) adminapi.ReplicatorStats {
	t.Helper()
	var last adminapi.ReplicatorStats
	poll.UntilNil(t, 30*time.Second, fmt.Sprintf("%s: %s -> %s: %s", c.name, topic, remote, what), func() error {
		st, err := c.admin.TopicStats(ctx, topic)
		if err != nil {
			return err
		}
		if last = st.Replication[remote]; !ok(last) {
			return fmt.Errorf("last stats %+v", last)
		}
		return nil
	})
	return last
}

// waitInbound polls topic's stats on c until its inbound link from source satisfies ok.
func waitInbound(t *testing.T, ctx context.Context, c *cluster, topic, source string, what string, ok func(adminapi.InboundReplicationStats) bool) adminapi.InboundReplicationStats {
	t.Helper()
	var last adminapi.TopicStats
	poll.UntilNil(t, 30*time.Second, fmt.Sprintf("%s: %s <- %s: %s", c.name, topic, source, what), func() error {
		st, err := c.admin.TopicStats(ctx, topic)
		if err != nil {
			return err
		}
		if last = st; !ok(st.InboundReplication[source]) {
			return fmt.Errorf("last stats: inbound %+v, replication %+v", last.InboundReplication, last.Replication)
		}
		return nil
	})
	return last.InboundReplication[source]
}

func TestEndToEndOneWayThenTwoWay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, b := startCluster(t, "a"), startCluster(t, "b")
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	a.replicateTo(t, ctx, "a", "b")
	const topic = "persistent://public/default/e2e"

	// One way: produce on a (the topic is created by its first producer in a replicated namespace).
	ca, cb := a.client(t), b.client(t)
	produce(t, ctx, ca, topic, "a", 200)
	consB, err := cb.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "check",
		InitialPosition: pulsarpb.CommandSubscribe_Earliest})
	if err != nil {
		t.Fatal(err)
	}
	got := receiveAll(t, ctx, b, topic, consB, 200)
	for p, from := range got {
		if from != "a" {
			t.Fatalf("%q replicated_from %q", p, from)
		}
	}
	st := waitStats(t, ctx, a, topic, "b", "caught up", func(s adminapi.ReplicatorStats) bool {
		return s.Connected && s.ReplicationBacklog == 0 && s.MsgOutCounter == 200
	})
	if st.LastError != "" || st.OutboundConnectedSince == "" || st.StartMode != "earliest" {
		t.Fatalf("stats %+v", st)
	}
	waitInbound(t, ctx, b, topic, "a", "inbound counted", func(s adminapi.InboundReplicationStats) bool { return s.MsgInCounter == 200 })
	if st, err := b.admin.TopicStats(ctx, topic); err != nil {
		t.Fatal(err)
	} else if _, ok := st.Replication["a"]; ok {
		t.Fatalf("b, which only receives from a, lists a replicator to a: %+v", st.Replication["a"])
	}

	// Two way: b replicates back; a's messages are not sent back to a.
	b.replicateTo(t, ctx, "a", "b")
	consA, err := ca.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "check-a", InitialPosition: pulsarpb.CommandSubscribe_Earliest})
	if err != nil {
		t.Fatal(err)
	}
	waitStats(t, ctx, b, topic, "a", "b's replicator running", func(s adminapi.ReplicatorStats) bool { return s.Connected })
	produce(t, ctx, cb, topic, "b", 100)
	gotA := receiveAll(t, ctx, a, topic, consA, 300) // a's own 200 + b's 100
	n := 0
	for p, from := range gotA {
		if from == "b" {
			n++
		} else if from != "" {
			t.Fatalf("%q on a replicated from %q", p, from)
		}
	}
	if n != 100 {
		t.Fatalf("a got %d messages from b", n)
	}
	gotB := receiveAll(t, ctx, b, topic, consB, 100) // only b's own new messages: nothing looped back
	for p, from := range gotB {
		if from != "" {
			t.Fatalf("%q on b replicated from %q (loop)", p, from)
		}
	}
	st = waitStats(t, ctx, b, topic, "a", "b caught up", func(s adminapi.ReplicatorStats) bool { return s.ReplicationBacklog == 0 })
	if st.StartMode != "latest" || st.MsgInCounter != 200 {
		t.Fatalf("b -> a: a replicator added to a topic with data starts at latest: %+v", st)
	}
}

// TestEndToEndTargetDownAndBack stops the target, checks that the source says so, restarts the target
// on the same ports and data, and checks that replication resumes within 10 s with nothing lost or
// duplicated.
func TestEndToEndTargetDownAndBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, b := startCluster(t, "a"), startCluster(t, "b")
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	a.replicateTo(t, ctx, "a", "b")
	const topic = "persistent://public/default/outage"
	ca := a.client(t)
	produce(t, ctx, ca, topic, "x", 50)
	waitStats(t, ctx, a, topic, "b", "caught up", func(s adminapi.ReplicatorStats) bool { return s.ReplicationBacklog == 0 && s.Connected })

	b.b.Stop()
	produce(t, ctx, ca, topic, "y", 50)
	waitStats(t, ctx, a, topic, "b", "outage visible", func(s adminapi.ReplicatorStats) bool {
		return !s.Connected && s.LastError != "" && s.ReplicationBacklog == 50
	})
	b.b.Restart()
	back := time.Now()
	waitStats(t, ctx, a, topic, "b", "resumed", func(s adminapi.ReplicatorStats) bool { return s.ReplicationBacklog == 0 && s.Connected })
	if d := time.Since(back); d > 10*time.Second {
		t.Fatalf("resumed %v after the target returned", d)
	}
	cb := b.client(t)
	consB, err := cb.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "check", InitialPosition: pulsarpb.CommandSubscribe_Earliest})
	if err != nil {
		t.Fatal(err)
	}
	receiveAll(t, ctx, b, topic, consB, 100)
}

// TestEndToEndManyTopicsCatchUpUnderMemoryBudget: the target is down while eight topics pile up a
// backlog; when it returns, every replicator catches up at once under a budget far smaller than
// their backlogs (so most reads wait for room), every message arrives once and in order, and
// /metrics shows the budget in use and all of it released once caught up.
func TestEndToEndManyTopicsCatchUpUnderMemoryBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const budget = 256 << 10
	small := brokertest.WithNodeOptions(func(o *node.Options) { o.ReplicationMemoryBytes = budget })
	a, b := startCluster(t, "a", small), startCluster(t, "b")
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	a.replicateTo(t, ctx, "a", "b")
	b.b.Stop()
	ca := a.client(t)
	payload := strings.Repeat("x", 4000)
	const topics, perTopic = 8, 300 // 8 x 1.2 MB of backlog against 256 KiB
	for i := range topics {
		topic := fmt.Sprintf("persistent://public/default/budget-%d", i)
		p, err := ca.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		for j := range perTopic {
			if err := p.SendAsync(ctx, client.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%d-%s", j, payload))}, func(client.MessageID, error) {}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		p.Close(ctx)
	}
	b.b.Restart()
	for i := range topics {
		topic := fmt.Sprintf("persistent://public/default/budget-%d", i)
		waitStats(t, ctx, a, topic, "b", "caught up", func(s adminapi.ReplicatorStats) bool { return s.ReplicationBacklog == 0 && s.Connected })
	}
	for _, line := range strings.Split(scrapeMetrics(t, a), "\n") {
		if strings.HasPrefix(line, "meridian_replication_memory_limit_bytes") && !strings.HasSuffix(line, fmt.Sprint(budget)) {
			t.Fatalf("limit gauge: %s", line)
		}
	}
	poll.Until(t, 10*time.Second, "the replicators' budget released after catching up", func() bool {
		return strings.Contains(scrapeMetrics(t, a), "meridian_replication_memory_bytes{cluster=\"a\"} 0\n")
	})
	cb := b.client(t)
	for i := range topics {
		topic := fmt.Sprintf("persistent://public/default/budget-%d", i)
		cons, err := cb.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "check", InitialPosition: pulsarpb.CommandSubscribe_Earliest})
		if err != nil {
			t.Fatal(err)
		}
		for j := range perTopic {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("m-%d-", j); !strings.HasPrefix(string(m.Payload), want) {
				t.Fatalf("%s: message %d is %.10q", topic, j, m.Payload)
			}
		}
		cons.Close(ctx)
	}
}

// TestEndToEndMeshSharedStore: three clusters sharing one configuration store, configured once;
// each receives exactly the union of all clusters' messages, in order per origin, once.
func TestEndToEndMeshSharedStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	store := memstore.New()
	defer store.Close()
	shared := brokertest.WithNodeOptions(func(o *node.Options) { o.SharedConfigStore = store })
	var cs []*cluster
	for i, name := range []string{"a", "b", "c"} {
		b := brokertest.Start(t, brokertest.WithCluster(name), shared)
		adm, err := adminapi.NewClient(b.AdminURL, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, &cluster{name: name, b: b, admin: adm})
		if i == 0 {
			// Configure once, on the shared store: the other clusters (registered now, their URLs
			// are updated when they start) are allowed for the tenant.
			for _, o := range []string{"b", "c"} {
				if err := adm.CreateCluster(ctx, o, adminapi.ClusterData{ServiceURL: "http://127.0.0.1:1", BrokerServiceURL: "pulsar://127.0.0.1:1"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := adm.UpdateTenant(ctx, "public", adminapi.TenantInfo{AllowedClusters: []string{"a", "b", "c"}, AdminRoles: []string{}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cs[0].replicateTo(t, ctx, "a", "b", "c")
	const topic = "persistent://public/default/mesh"
	consumers := map[string]*client.Consumer{}
	for _, c := range cs {
		cons, err := c.client(t).Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "check", InitialPosition: pulsarpb.CommandSubscribe_Earliest})
		if err != nil {
			t.Fatal(err)
		}
		consumers[c.name] = cons
	}
	for _, c := range cs {
		produce(t, ctx, c.client(t), topic, c.name, 100)
	}
	for _, c := range cs {
		got := receiveAll(t, ctx, c, topic, consumers[c.name], 300)
		for p, from := range got {
			origin, _, _ := strings.Cut(p, "-")
			want := origin
			if origin == c.name {
				want = ""
			}
			if from != want {
				t.Fatalf("%s: %q replicated_from %q, want %q", c.name, p, from, want)
			}
		}
	}
}

// TestEndToEndSourceRestartNoDuplicates restarts the source while it replicates: the replicator
// resumes from its cursor, and the target drops what it already stored by source position.
func TestEndToEndSourceRestartNoDuplicates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	a, b := startCluster(t, "a"), startCluster(t, "b")
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	a.replicateTo(t, ctx, "a", "b")
	const topic = "persistent://public/default/restart"
	produce(t, ctx, a.client(t), topic, "m", 1000)
	a.b.Restart() // very likely in the middle of replicating the 1000
	cons, err := b.client(t).Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "check", InitialPosition: pulsarpb.CommandSubscribe_Earliest})
	if err != nil {
		t.Fatal(err)
	}
	// Caught up first: every resend after the restart is behind b, so a duplicate b stored would
	// be before receiveAll's barrier.
	waitStats(t, ctx, a, topic, "b", "caught up after restart", func(s adminapi.ReplicatorStats) bool { return s.ReplicationBacklog == 0 && s.Connected })
	receiveAll(t, ctx, b, topic, cons, 1000)
}

// TestEndToEndRefusedThenAllowed: the target does not allow the source for the tenant; the source
// shows the refusal as lastError and keeps retrying; once allowed, replication proceeds.
func TestEndToEndRefusedThenAllowed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, b := startCluster(t, "a"), startCluster(t, "b")
	a.knows(t, ctx, b)
	a.replicateTo(t, ctx, "a", "b")
	const topic = "persistent://public/default/refused"
	produce(t, ctx, a.client(t), topic, "m", 10)
	st := waitStats(t, ctx, a, topic, "b", "refusal shown", func(s adminapi.ReplicatorStats) bool { return !s.Connected && s.LastError != "" })
	t.Logf("lastError while refused: %s", st.LastError)
	b.knows(t, ctx, a)
	waitStats(t, ctx, a, topic, "b", "replicated once allowed", func(s adminapi.ReplicatorStats) bool { return s.ReplicationBacklog == 0 && s.Connected })
}

// TestEndToEndRemoveCluster: removing the remote stops its replicator and deletes its cursor.
func TestEndToEndRemoveCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, b := startCluster(t, "a"), startCluster(t, "b")
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	a.replicateTo(t, ctx, "a", "b")
	const topic = "persistent://public/default/removed"
	produce(t, ctx, a.client(t), topic, "m", 10)
	waitStats(t, ctx, a, topic, "b", "caught up", func(s adminapi.ReplicatorStats) bool { return s.ReplicationBacklog == 0 && s.Connected })
	a.replicateTo(t, ctx, "a")
	poll.UntilNil(t, 15*time.Second, "the replicator and cursor of b removed", func() error {
		is, err := a.admin.InternalStats(ctx, topic)
		st, err2 := a.admin.TopicStats(ctx, topic)
		if err := errors.Join(err, err2); err != nil {
			return err
		}
		_, hasCursor := is.Cursors["pulsar.repl.b"]
		_, hasStats := st.Replication["b"]
		if hasCursor || hasStats {
			return fmt.Errorf("cursor %v, replicator %v", hasCursor, hasStats)
		}
		return nil
	})
}

// TestEndToEndDispatchRate: a replicator under replicatorDispatchRate runs within ±20% of the limit.
func TestEndToEndDispatchRate(t *testing.T) {
	if testing.Short() {
		t.Skip("takes several seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, b := startCluster(t, "a"), startCluster(t, "b")
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	if err := a.admin.SetNamespacePolicy(ctx, "POST", "public/default", "replicatorDispatchRate", nil,
		adminapi.DispatchRate{DispatchThrottlingRateInMsg: 200, DispatchThrottlingRateInByte: -1}); err != nil {
		t.Fatal(err)
	}
	const topic = "persistent://public/default/rate"
	produce(t, ctx, a.client(t), topic, "m", 1400) // stored before replication starts: a pure catch-up
	if err := a.admin.SetNamespacePolicy(ctx, "PUT", "public/default", "properties", nil, map[string]string{"replicationStartAt": "earliest"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a.replicateTo(t, ctx, "a", "b")
	st := waitStats(t, ctx, a, topic, "b", "caught up", func(s adminapi.ReplicatorStats) bool { return s.MsgOutCounter == 1400 })
	if st.StartMode != "earliest" {
		t.Fatalf("start mode %q, want earliest (namespace property)", st.StartMode)
	}
	// 200 msg/s with one second of burst: 1400 messages take about 6 s.
	el := time.Since(start).Seconds()
	rate := 1200 / (el - 0) // the first 200 go as the burst
	if rate < 160 || rate > 240 {
		t.Fatalf("1400 messages at 200 msg/s took %.1f s (%.0f msg/s after the burst)", el, rate)
	}
}

// TestReplicationCatchUpThroughput measures catch-up: N x 1 KiB stored on a, then replication to b
// enabled at earliest; the rate is N / time until b acknowledged everything. Both sides fsync before
// acknowledging. Run with MERIDIAN_BENCH_CATCHUP=N (e.g. 200000).
func TestReplicationCatchUpThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("MERIDIAN_BENCH_CATCHUP"))
	if n <= 0 {
		t.Skip("set MERIDIAN_BENCH_CATCHUP=N to measure")
	}
	// Both clusters run with the scheduler setting of a broker process (cmd/meridian).
	t.Cleanup(node.SpareDiskWaitProc(os.Getenv))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// MERIDIAN_BENCH_DIRECT_WRITE_BYTES sets both clusters' --direct-write-bytes (-1: off),
	// MERIDIAN_BENCH_FSYNC_PIPELINE their --fsync-pipeline.
	var opts []brokertest.Option
	if v, err := strconv.Atoi(os.Getenv("MERIDIAN_BENCH_DIRECT_WRITE_BYTES")); err == nil {
		opts = append(opts, brokertest.WithNodeOptions(func(o *node.Options) { o.DirectWriteBytes = v }))
	}
	if v, err := strconv.Atoi(os.Getenv("MERIDIAN_BENCH_FSYNC_PIPELINE")); err == nil {
		opts = append(opts, brokertest.WithNodeOptions(func(o *node.Options) { o.FsyncPipeline = v }))
	}
	a, b := startCluster(t, "a", opts...), startCluster(t, "b", opts...)
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	const topic = "persistent://public/default/catchup"
	p, err := a.client(t).CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1024)
	errs := make(chan error, 1)
	cb := func(_ client.MessageID, err error) {
		if err != nil {
			select {
			case errs <- err:
			default:
			}
		}
	}
	// MERIDIAN_BENCH_BATCH=k stores k messages per entry, as batching clients (pulsar-perf, the Go
	// client by default) do; the replicator forwards each entry as it is.
	batch, _ := strconv.Atoi(os.Getenv("MERIDIAN_BENCH_BATCH"))
	if batch <= 1 {
		for range n {
			if err := p.SendAsync(ctx, client.ProducerMessage{Payload: payload}, cb); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		var body []byte
		for range batch {
			if body, err = wire.AppendBatchRecord(body, &pulsarpb.SingleMessageMetadata{}, payload); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < n; i += batch {
			md := &pulsarpb.MessageMetadata{ProducerName: proto.String("bench"), SequenceId: proto.Uint64(uint64(i)),
				PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), NumMessagesInBatch: proto.Int32(int32(batch))}
			entry, err := wire.EncodeEntry(md, body)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.SendRawAsync(ctx, client.RawMessage{Entry: entry}, cb); err != nil {
				t.Fatal(err)
			}
		}
		n = (n + batch - 1) / batch * batch
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if err := a.admin.SetNamespacePolicy(ctx, "PUT", "public/default", "properties", nil, map[string]string{"replicationStartAt": "earliest"}); err != nil {
		t.Fatal(err)
	}
	// MERIDIAN_BENCH_CONSUMER=1 also measures the catch-up end to end: a consumer on b (in a
	// process of its own), subscribed before the catch-up starts, receives the whole backlog as it
	// arrives there.
	var received <-chan consumerDone
	if os.Getenv("MERIDIAN_BENCH_CONSUMER") == "1" {
		received = consumeCatchUp(t, ctx, b, topic, n)
	}
	// MERIDIAN_BENCH_PROFILE=prefix writes prefix.cpu.prof and prefix.trace.out covering only the
	// catch-up (not the staging of the backlog).
	stopProfile := profileWindow(t, os.Getenv("MERIDIAN_BENCH_PROFILE"))
	cpu0 := processCPU()
	user0, sys0 := processCPUSplit()
	steal := startHostSteal()
	start := time.Now()
	a.replicateTo(t, ctx, "a", "b")
	for {
		st, err := a.admin.TopicStats(ctx, topic)
		if err == nil && st.Replication["b"].MsgOutCounter >= int64(n) {
			if received == nil { // else the profile covers the consumer too
				stopProfile()
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
	el := time.Since(start)
	cpu := processCPU() - cpu0
	user1, sys1 := processCPUSplit()
	if received == nil {
		stopProfile()
	}
	// CPU time of the whole process (both clusters) per message: far less sensitive to other load
	// on the machine than the rate.
	t.Logf("catch-up of %d x 1 KiB (%d per entry): %v, %.0f msg/s, %.1f MB/s; process CPU %v (%.2f µs/msg, %.0f%% of one core)",
		n, max(batch, 1), el, float64(n)/el.Seconds(), float64(n)*1024/el.Seconds()/1e6,
		cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(n), 100*cpu.Seconds()/el.Seconds())
	// User and system time apart: the system time (page-cache copies of the segment writes, socket
	// copies) swings more between runs than the process's own work.
	t.Logf("catch-up CPU split: user %.2f µs/msg, system %.2f µs/msg",
		float64((user1-user0).Microseconds())/float64(n), float64((sys1-sys0).Microseconds())/float64(n))
	t.Logf("host: %s", steal)
	st := storageCounters(t, b)
	t.Logf("target storage: %.0f MB through the journal, %.0f MB written directly to segments (--direct-write-bytes); %.0f group commits, %.2f ms each on average (write and fsync)",
		st.journal/1e6, st.direct/1e6, st.commits, 1e3*st.commitSeconds/max(st.commits, 1))
	if received != nil {
		var done consumerDone
		select {
		case done = <-received:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		stopProfile()
		if done.err != nil {
			t.Fatalf("the consumer on b: %v", done.err)
		}
		el := done.at.Sub(start)
		cpu := done.cpu - cpu0
		t.Logf("catch-up end to end, %d x 1 KiB received by a consumer on b (a process of its own): %v, %.0f msg/s; process CPU %v (%.2f µs/msg), the consumer's %v (%.2f µs/msg)",
			n, el, float64(n)/el.Seconds(), cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(n),
			done.client.Round(time.Millisecond), float64(done.client.Microseconds())/float64(n))
	}
}

// consumerDone is when a catch-up's consumer received its last message, with the CPU time of
// this process then and the consumer process's own, or why it stopped before.
type consumerDone struct {
	at          time.Time
	cpu, client time.Duration
	err         error
}

// consumeCatchUp starts a consumer of topic on c, from the earliest message, in a process of its
// own, as the NATS peer's consumer runs in natsload: the figures of this process stay the two
// clusters' own, and the consumer shares the two cores as any consumer would. The consumer is
// MERIDIAN_BENCH_CONSUMER_CMD (tests/cmd/catchup-consumer: pulsar-client-go, what
// scripts/bench-replication.sh runs), else this test binary running TestCatchUpConsumerProcess
// (this repository's client). It returns once the consumer has subscribed; the channel gets the
// moment it received the n-th message.
func consumeCatchUp(t *testing.T, ctx context.Context, c *cluster, topic string, n int) <-chan consumerDone {
	t.Helper()
	// Not CommandContext: the test's context ends as the test returns, before the consumer has
	// written its profile; the cleanup below ends it.
	var cmd *exec.Cmd
	if path := os.Getenv("MERIDIAN_BENCH_CONSUMER_CMD"); path != "" {
		cmd = exec.Command(path, "-url", c.b.ServiceURL, "-topic", topic, "-n", strconv.Itoa(n))
		if prefix := os.Getenv("MERIDIAN_BENCH_PROFILE"); prefix != "" {
			cmd.Args = append(cmd.Args, "-cpuprofile", prefix+".consumer.cpu.prof")
		}
	} else {
		cmd = exec.Command(os.Args[0], "-test.run", "^TestCatchUpConsumerProcess$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "MERIDIAN_BENCH_CONSUMER_PROCESS="+c.b.ServiceURL+" "+topic+" "+strconv.Itoa(n))
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// One goroutine reads the consumer's output, line by line, to its end, then waits for the
	// process: whenever the test stops waiting for a line, the process is still reaped.
	lines := make(chan string, 16)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, out) // a line too long for the scanner: read on to the end
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		// It ends by itself once it has printed its figures and written its profile.
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			for range lines { // unblock the reader if the channel is full
			}
			<-exited
		}
	})
	// field waits for the line that starts with prefix and returns the number after it, if any.
	field := func(prefix string) (int64, error) {
		for {
			var line string
			var ok bool
			select {
			case line, ok = <-lines:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			if !ok {
				return 0, fmt.Errorf("the consumer process ended before %q", prefix)
			}
			if v, found := strings.CutPrefix(line, prefix); found {
				if v = strings.TrimSpace(v); v == "" {
					return 0, nil
				}
				return strconv.ParseInt(v, 10, 64)
			}
		}
	}
	if _, err := field("catch-up consumer subscribed"); err != nil {
		t.Fatal(err)
	}
	done := make(chan consumerDone, 1)
	go func() {
		at, err := field("catch-up consumer received all, unix ns:")
		if err != nil {
			done <- consumerDone{err: err}
			return
		}
		cpu := processCPU()
		client, err := field("catch-up consumer CPU ns:")
		done <- consumerDone{at: time.Unix(0, at), cpu: cpu, client: time.Duration(client), err: err}
	}()
	return done
}

// TestCatchUpConsumerProcess is the consumer process of consumeCatchUp without
// MERIDIAN_BENCH_CONSUMER_CMD, with this repository's client (tests/cmd/catchup-consumer does the
// same with pulsar-client-go, and prints the same lines): it subscribes to a topic
// (MERIDIAN_BENCH_CONSUMER_PROCESS="serviceURL topic n"), receives n messages, acknowledging
// cumulatively every 1,000 (a consumer that keeps its backlog small), and prints when it had
// them and the CPU it used.
func TestCatchUpConsumerProcess(t *testing.T) {
	args := strings.Fields(os.Getenv("MERIDIAN_BENCH_CONSUMER_PROCESS"))
	if len(args) != 3 {
		t.Skip("the consumer process of TestReplicationCatchUpThroughput (MERIDIAN_BENCH_CONSUMER=1)")
	}
	n, err := strconv.Atoi(args[2])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cl, err := client.New(client.Options{ServiceURL: args[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := cl.Subscribe(ctx, client.ConsumerOptions{Topic: args[1], Subscription: "catch-up",
		InitialPosition: pulsarpb.CommandSubscribe_Earliest})
	if err != nil {
		t.Fatal(err)
	}
	// With MERIDIAN_BENCH_PROFILE=prefix: prefix.consumer.cpu.prof.
	if prefix := os.Getenv("MERIDIAN_BENCH_PROFILE"); prefix != "" {
		f, err := os.Create(prefix + ".consumer.cpu.prof")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	cpu0 := processCPU()
	fmt.Println("catch-up consumer subscribed")
	for got := 1; got <= n; got++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d messages: %v", got-1, err)
		}
		if got%1000 == 0 || got == n {
			if err := cons.AckCumulative(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	fmt.Printf("catch-up consumer received all, unix ns: %d\n", time.Now().UnixNano())
	fmt.Printf("catch-up consumer CPU ns: %d\n", processCPU()-cpu0)
}

// targetStorage is what storageCounters reads from a cluster's /metrics.
type targetStorage struct{ journal, direct, commits, commitSeconds float64 }

// storageCounters reads a cluster's journal and direct-write byte counters and its group commits
// (count and time) from its /metrics.
func storageCounters(t *testing.T, c *cluster) targetStorage {
	t.Helper()
	var st targetStorage
	for _, line := range strings.Split(scrapeMetrics(t, c), "\n") {
		for name, v := range map[string]*float64{
			"meridian_storage_journal_bytes_total":  &st.journal,
			"meridian_storage_direct_bytes_total":   &st.direct,
			"meridian_storage_commit_seconds_count": &st.commits,
			"meridian_storage_commit_seconds_sum":   &st.commitSeconds,
		} {
			if _, err := fmt.Sscanf(line, name+" %g", v); err == nil {
				break
			}
		}
	}
	return st
}

// hostSteal measures the CPU time the hypervisor took from this virtual machine ("steal" in
// /proc/stat) over a benchmark: on a shared host the latency tail and the rates follow it, so each
// figure is printed with it (docs/performance.md compares runs by it).
type hostSteal struct{ steal0, total0 uint64 }

// startHostSteal reads the counters at the start of a measurement.
func startHostSteal() hostSteal {
	s, tot := readHostCPU()
	return hostSteal{steal0: s, total0: tot}
}

// String is the steal since the start, as a share of the machine's CPU time.
func (h hostSteal) String() string {
	s, tot := readHostCPU()
	if tot <= h.total0 {
		return "steal unknown (no /proc/stat)"
	}
	return fmt.Sprintf("steal %.1f%% of the machine's CPU time (%d ticks)", 100*float64(s-h.steal0)/float64(tot-h.total0), s-h.steal0)
}

// readHostCPU returns the steal and total ticks of the first line of /proc/stat (zeros elsewhere).
func readHostCPU() (steal, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	// user, nice, system, idle, iowait, irq, softirq, steal; guest time is already counted in user.
	for _, v := range f[1:9] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0
		}
		total, steal = total+n, n // the last of them is steal
	}
	return steal, total
}

// processCPU is the user+system CPU time the test process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPUSplit is processCPU's user and system time apart.
func processCPUSplit() (user, system time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// profileWindow starts a CPU profile written to prefix.cpu.prof and records the allocation
// profile at the start and the end (prefix.allocs0.prof, prefix.allocs1.prof: compare them with
// `go tool pprof -diff_base prefix.allocs0.prof prefix.allocs1.prof`); with MERIDIAN_BENCH_TRACE=1
// also an execution trace, prefix.trace.out (it costs CPU of its own). Nothing if prefix is empty;
// the returned stop function is idempotent.
func profileWindow(t *testing.T, prefix string) func() {
	t.Helper()
	if prefix == "" {
		return func() {}
	}
	writeAllocs := func(name string) {
		f, err := os.Create(prefix + name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
	}
	writeAllocs(".allocs0.prof")
	cpu, err := os.Create(prefix + ".cpu.prof")
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		t.Fatal(err)
	}
	var tr *os.File
	if os.Getenv("MERIDIAN_BENCH_TRACE") == "1" {
		if tr, err = os.Create(prefix + ".trace.out"); err != nil {
			t.Fatal(err)
		}
		if err := trace.Start(tr); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if tr != nil {
				trace.Stop()
				tr.Close()
			}
			pprof.StopCPUProfile()
			cpu.Close()
			writeAllocs(".allocs1.prof")
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestReplicationLatency measures producer-on-a to consumer-on-b latency at a fixed rate (1 KiB,
// publish time to receive time, same clock). Run with MERIDIAN_BENCH_LATENCY=msgPerSec (e.g. 5000);
// it runs 12 s and summarises the last 10 s, then prints a's receipt latency, the host's steal and
// each cluster's publish and storage latency histograms.
// LATDBG=ms also logs, grouped by 100 ms of send time, every message slower than that many
// milliseconds (50 if not a number), to line stalls up with the storage's debug log
// (MERIDIAN_TEST_LOG=debug: slow fsyncs, checkpoints; a 64 MiB journal fills in ~11 s at this rate),
// each group with the host's steal ticks while it was in flight (a 1 ms sampler of /proc/stat).
func TestReplicationLatency(t *testing.T) {
	rate, _ := strconv.Atoi(os.Getenv("MERIDIAN_BENCH_LATENCY"))
	if rate <= 0 {
		t.Skip("set MERIDIAN_BENCH_LATENCY=msgPerSec to measure")
	}
	t.Cleanup(node.SpareDiskWaitProc(os.Getenv)) // as a broker process runs (cmd/meridian)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, b := startCluster(t, "a"), startCluster(t, "b")
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	a.replicateTo(t, ctx, "a", "b")
	const topic = "persistent://public/default/latency"
	p, err := a.client(t).CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := b.client(t).Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "lat", InitialPosition: pulsarpb.CommandSubscribe_Earliest})
	if err != nil {
		t.Fatal(err)
	}
	waitStats(t, ctx, a, topic, "b", "connected", func(s adminapi.ReplicatorStats) bool { return s.Connected })
	// Messages sent in the first warmup are left out of the summary, as the NATS peer's latency
	// tool does (nats.sh: warmup_excluded=2s): a cold start (first reads, heap growth) is not the
	// steady state the budget is about. Both figures are printed.
	const dur, warmup = 12 * time.Second, 2 * time.Second
	total := rate * int(dur/time.Second)
	payload := make([]byte, 1024)
	// MERIDIAN_BENCH_PROFILE=prefix (and MERIDIAN_BENCH_TRACE=1) profile the measured run, as in
	// TestReplicationCatchUpThroughput.
	stopProfile := profileWindow(t, os.Getenv("MERIDIAN_BENCH_PROFILE"))
	defer stopProfile()
	steal := startHostSteal()
	start := time.Now()
	// The receipts from a say how much of the latency is a's own group commit and round trip.
	var receiptMu sync.Mutex
	receipts := make([]time.Duration, 0, total)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		sent := 0
		for sent < total {
			<-tick.C
			due := int(time.Since(start).Seconds() * float64(rate))
			for ; sent < due && sent < total; sent++ {
				at := time.Now()
				msg := client.ProducerMessage{Payload: payload, Properties: map[string]string{"t": strconv.FormatInt(at.UnixNano(), 10)}}
				if err := p.SendAsync(ctx, msg, func(client.MessageID, error) {
					if at.Sub(start) >= warmup {
						d := time.Since(at)
						receiptMu.Lock()
						receipts = append(receipts, d)
						receiptMu.Unlock()
					}
				}); err != nil {
					return
				}
			}
		}
	}()
	all := make([]time.Duration, 0, total)
	lat := make([]time.Duration, 0, total) // sent after the warm-up
	slow := slowLog{start: start}
	defer slow.print(t)
	slowAbove := time.Duration(-1)
	if v := os.Getenv("LATDBG"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			ms = 50
		}
		slowAbove = time.Duration(ms) * time.Millisecond
		// Each slow group is printed with the host's steal in its window: a burst of steal freezes
		// the whole chain on a 2-vCPU machine, and /proc/stat only says how much, not when.
		// slow.print (deferred above, so it runs on every exit) stops it.
		slow.steal = startStealSampler(time.Millisecond)
	}
	for len(all) < total {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d: %v", len(all), err)
		}
		ns, _ := strconv.ParseInt(m.Properties["t"], 10, 64)
		d := time.Since(time.Unix(0, ns))
		all = append(all, d)
		if slowAbove >= 0 && d > slowAbove {
			slow.add(time.Unix(0, ns), d)
		}
		if time.Unix(0, ns).Sub(start) >= warmup {
			lat = append(lat, d)
		}
		_ = cons.Ack(ctx, m.ID)
	}
	stopProfile()
	slices.Sort(lat)
	slices.Sort(all)
	t.Logf("latency a->b at %d msg/s x 1 KiB over %v (the first %v left out): p50 %v, p99 %v, p99.9 %v, max %v", rate, dur-warmup, warmup,
		lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)*999/1000], lat[len(lat)-1])
	t.Logf("  with the warm-up: p50 %v, p99 %v, max %v", all[len(all)/2], all[len(all)*99/100], all[len(all)-1])
	receiptMu.Lock()
	slices.Sort(receipts)
	if n := len(receipts); n > 0 {
		t.Logf("  the producer's receipts from a (send to receipt, after the warm-up): p50 %v, p99 %v, max %v", receipts[n/2], receipts[n*99/100], receipts[n-1])
	}
	receiptMu.Unlock()
	t.Logf("  host: %s", steal)
	// The broker's and the storage's shares: a message waits for one group commit on each cluster.
	for _, c := range []*cluster{a, b} {
		for _, h := range []string{"meridian_publish_latency_seconds", "meridian_storage_commit_seconds", "meridian_storage_sync_seconds"} {
			t.Logf("  %s %s: %s", c.name, h, histogramQuantiles(scrapeMetrics(t, c), h))
		}
	}
}

// slowLog groups slow messages by the 100 ms in which they were sent, with the wall clock (to line
// them up with the storage's debug log: MERIDIAN_TEST_LOG=debug shows slow fsyncs and checkpoints).
type slowLog struct {
	start   time.Time
	buckets []slowBucket
	steal   *stealSampler // nil: not sampled
}

type slowBucket struct {
	at  time.Time
	n   int
	max time.Duration
}

func (s *slowLog) add(sent time.Time, d time.Duration) {
	at := sent.Truncate(100 * time.Millisecond)
	if n := len(s.buckets); n > 0 && s.buckets[n-1].at.Equal(at) {
		b := &s.buckets[n-1]
		b.n++
		b.max = max(b.max, d)
		return
	}
	s.buckets = append(s.buckets, slowBucket{at: at, n: 1, max: d})
}

func (s *slowLog) print(t *testing.T) {
	if s.steal != nil {
		s.steal.stop()
	}
	withSteal := 0
	for _, b := range s.buckets {
		steal := ""
		if s.steal != nil {
			// The window in which these messages were in flight: sent in the bucket's 100 ms,
			// received at most b.max later.
			n := s.steal.ticksBetween(b.at, b.at.Add(100*time.Millisecond+b.max))
			if n > 0 {
				withSteal++
			}
			steal = fmt.Sprintf(", host steal in flight %d ticks (10 ms each)", n)
		}
		t.Logf("slow: %d sent in the 100 ms from %s (+%v), max latency %v%s", b.n, b.at.UTC().Format("15:04:05.000"), b.at.Sub(s.start).Round(time.Millisecond), b.max, steal)
	}
	if s.steal != nil && len(s.buckets) > 0 {
		t.Logf("slow groups with host steal while in flight: %d of %d (steal ticks over the whole run: %d)", withSteal, len(s.buckets), s.steal.ticksBetween(time.Time{}, time.Now()))
	}
}

// stealSampler records when the host's steal counter (/proc/stat, all CPUs) advanced, read every
// interval, so that slow messages can be lined up with the bursts in which the hypervisor took the
// machine's CPUs. The counter is in ticks of 10 ms, so a burst shows up when it completes a tick.
// jumps is read only after stop, which waits for the sampling goroutine to end.
type stealSampler struct {
	done    chan struct{}
	stopped chan struct{}
	jumps   []stealJump
}

type stealJump struct {
	at    time.Time
	ticks uint64
}

func startStealSampler(interval time.Duration) *stealSampler {
	s := &stealSampler{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		prev, _ := readHostCPU()
		for {
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
			cur, _ := readHostCPU()
			if cur > prev {
				s.jumps = append(s.jumps, stealJump{at: time.Now(), ticks: cur - prev})
			}
			prev = cur
		}
	}()
	return s
}

// stop ends the sampling; call it once.
func (s *stealSampler) stop() {
	close(s.done)
	<-s.stopped
}

// ticksBetween sums the steal ticks that appeared in [from, to] (after stop).
func (s *stealSampler) ticksBetween(from, to time.Time) uint64 {
	var n uint64
	for _, j := range s.jumps {
		if !j.at.Before(from) && !j.at.After(to) {
			n += j.ticks
		}
	}
	return n
}

// scrapeMetrics returns c's /metrics text.
func scrapeMetrics(t *testing.T, c *cluster) string {
	t.Helper()
	resp, err := http.Get(c.b.Node().WebURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// histogramQuantiles summarises Prometheus histogram name in metrics text as the upper bounds of the
// buckets holding its p50, p90, p99 and p99.9 ("p99 <= 0.002" s).
func histogramQuantiles(metrics, name string) string {
	type bucket struct {
		le  string
		cum float64
	}
	var buckets []bucket
	var count float64
	for _, line := range strings.Split(metrics, "\n") {
		var le string
		var v float64
		if rest, ok := strings.CutPrefix(line, name+`_bucket{le="`); ok {
			if i := strings.Index(rest, `"} `); i >= 0 {
				le = rest[:i]
				if _, err := fmt.Sscanf(rest[i+3:], "%g", &v); err == nil {
					buckets = append(buckets, bucket{le, v})
				}
			}
		} else if _, err := fmt.Sscanf(line, name+"_count %g", &v); err == nil {
			count = v
		}
	}
	out := fmt.Sprintf("n=%.0f", count)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		for _, b := range buckets {
			if b.cum >= q*count {
				out += fmt.Sprintf(" p%g<=%ss", q*100, b.le)
				break
			}
		}
	}
	return out
}

// TestEndToEndPartitionedTopic: a partitioned topic on independent clusters; the replicators create
// the remote partitioned topic with the same partition count and replicate partition by partition.
func TestEndToEndPartitionedTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, b := startCluster(t, "a"), startCluster(t, "b")
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	const base = "persistent://public/default/parts"
	if err := a.admin.CreateTopic(ctx, base, 3, nil); err != nil {
		t.Fatal(err)
	}
	a.replicateTo(t, ctx, "a", "b")
	// The partitions existed before replication was enabled, so their replicators start at "latest"
	// (--replication-start-at), i.e. where the topic is when the replication manager creates the
	// cursor. That happens asynchronously after the policy change (as in Pulsar): a message sent
	// before it would not be replicated, by design. Wait until every partition's replicator runs
	// (connected implies its cursor exists, and the remote partitioned topic was created).
	for i := range 3 {
		waitStats(t, ctx, a, fmt.Sprintf("%s-partition-%d", base, i), "b", "replicator running",
			func(s adminapi.ReplicatorStats) bool { return s.Connected })
	}
	ca := a.client(t)
	for i := range 3 {
		produce(t, ctx, ca, fmt.Sprintf("%s-partition-%d", base, i), fmt.Sprintf("p%d", i), 20)
	}
	poll.UntilNil(t, 20*time.Second, "the remote partitioned topic", func() error {
		md, err := b.admin.GetPartitionedMetadata(ctx, base)
		if err == nil && md.Partitions != 3 {
			err = fmt.Errorf("%+v", md)
		}
		return err
	})
	cb := b.client(t)
	for i := range 3 {
		part := fmt.Sprintf("%s-partition-%d", base, i)
		cons, err := cb.Subscribe(ctx, client.ConsumerOptions{Topic: part, Subscription: "check", InitialPosition: pulsarpb.CommandSubscribe_Earliest})
		if err != nil {
			t.Fatal(err)
		}
		got := receiveAll(t, ctx, b, part, cons, 20)
		for p := range got {
			if !strings.HasPrefix(p, fmt.Sprintf("p%d-", i)) {
				t.Fatalf("%s received %q", part, p)
			}
		}
	}
	// The partitioned topic's stats aggregate the partitions' replicators.
	poll.UntilNil(t, 10*time.Second, "the partitioned stats aggregating the partitions", func() error {
		st, err := a.admin.PartitionedTopicStats(ctx, base, false)
		if err == nil && (st.Replication["b"].MsgOutCounter != 60 || st.Replication["b"].ReplicationBacklog != 0) {
			err = fmt.Errorf("%+v", st.Replication)
		}
		return err
	})
}

// TestEndToEndPartitionMismatchReported: different partition counts are reported in lastError and
// nothing is sent until they agree.
func TestEndToEndPartitionMismatchReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := startCluster(t, "a"), startCluster(t, "b")
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	const base = "persistent://public/default/mismatch"
	if err := a.admin.CreateTopic(ctx, base, 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.admin.CreateTopic(ctx, base, 3, nil); err != nil {
		t.Fatal(err)
	}
	a.replicateTo(t, ctx, "a", "b")
	part := base + "-partition-0"
	mismatch := func(s adminapi.ReplicatorStats) bool {
		return !s.Connected && strings.Contains(s.LastError, "partition count mismatch")
	}
	// The partition existed before replication was enabled: its replicator starts at "latest" when
	// its cursor is created (asynchronously). Produce once it runs, so all 5 are its backlog.
	waitStats(t, ctx, a, part, "b", "mismatch reported", mismatch)
	produce(t, ctx, a.client(t), part, "m", 5)
	st := waitStats(t, ctx, a, part, "b", "backlog of 5", func(s adminapi.ReplicatorStats) bool {
		return mismatch(s) && s.ReplicationBacklog >= 5
	})
	if st.ReplicationBacklog != 5 {
		t.Fatalf("backlog %d, want 5 (nothing sent)", st.ReplicationBacklog)
	}
}

// TestEndToEndSchemaRegisteredBeforeData: an entry carrying a schema version of cluster a arrives at
// b with b's version of the same schema, registered on b before the entry.
func TestEndToEndSchemaRegisteredBeforeData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := startCluster(t, "a"), startCluster(t, "b")
	a.knows(t, ctx, b)
	b.knows(t, ctx, a)
	const topic = "persistent://public/default/schemas"
	// Give b an unrelated topic's schema history, and a two versions, so versions differ.
	jsonSchema := func(field string) string {
		return `{"type":"record","name":"R","fields":[{"name":"` + field + `","type":["null","string"],"default":null}]}`
	}
	if _, err := a.admin.UploadSchema(ctx, topic, adminapi.SchemaPayload{Type: "JSON", Schema: jsonSchema("x")}); err != nil {
		t.Fatal(err)
	}
	va, err := a.admin.UploadSchema(ctx, topic, adminapi.SchemaPayload{Type: "JSON", Schema: jsonSchema("y")})
	if err != nil {
		t.Fatal(err)
	}
	a.replicateTo(t, ctx, "a", "b")
	p, err := a.client(t).CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	md := &pulsarpb.MessageMetadata{
		ProducerName: proto.String("app"), SequenceId: proto.Uint64(0),
		PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), SchemaVersion: schema.VersionBytes(va),
	}
	entry, err := wire.EncodeEntry(md, []byte(`{"y":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendRaw(ctx, client.RawMessage{Entry: entry}); err != nil {
		t.Fatal(err)
	}
	cons, err := b.client(t).Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "check", InitialPosition: pulsarpb.CommandSubscribe_Earliest})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vb, ok, err := schema.ParseVersion(m.Metadata.GetSchemaVersion())
	if err != nil || !ok {
		t.Fatalf("schema version on b: %x %v", m.Metadata.GetSchemaVersion(), err)
	}
	sb, err := b.admin.GetSchema(ctx, topic, vb)
	if err != nil {
		t.Fatalf("b has no schema version %d: %v", vb, err)
	}
	if sb.Data != jsonSchema("y") {
		t.Fatalf("b's version %d is %q, want the schema the entry was written with", vb, sb.Data)
	}
	t.Logf("schema version %d on a arrived as version %d on b", va, vb)
}
