package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestCrashLoop is produce / consume / replicate under kill -9 at random moments, cycle after
// cycle. Clusters a and b (real `meridian standalone --dedup` processes, independent stores) both
// list [a, b] for public/default. Each cycle a producer process (cmd/e2e-producer, so the client
// survives the kills) sends a block of messages to a, batched every other cycle, while a consumer
// on a and a consumer on b receive and acknowledge; when a random share of the block is
// acknowledged, a, b or both are killed with SIGKILL and restarted on the same data dirs. At the
// end b catches up and the checker counts:
//   - acknowledged messages lost: not stored on a, not replicated to b, or never delivered to a
//     consumer (must be 0);
//   - duplicated by replication: stored on b more than once (must be 0), and stored on a more than
//     once (deduplication, must be 0);
//   - redelivered to consumers (allowed: a cursor falls back to its last persisted position after
//     a crash), reported.
//
// The cycle count is MERIDIAN_CRASHLOOP_CYCLES (default 8 with -short, 20 without), the schedule
// comes from MERIDIAN_CRASHLOOP_SEED (printed in the log), the block size from
// MERIDIAN_CRASHLOOP_BLOCK (default 400).
func TestCrashLoop(t *testing.T) {
	cycles, block, seed := crashLoopSettings(t)
	t.Logf("crash loop: %d cycles of %d messages, seed %d (MERIDIAN_CRASHLOOP_SEED=%d reproduces the schedule)", cycles, block, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	a := harness.StartStandalone(t, harness.Options{Cluster: "a", Dedup: true})
	b := harness.StartStandalone(t, harness.Options{Cluster: "b", Dedup: true})
	replicateBothWays(t, a, b)
	runCtx, cancelRun := context.WithTimeout(context.Background(), time.Duration(cycles)*time.Minute+5*time.Minute)
	defer cancelRun()

	topic := harness.Topic(t)
	chk := checker.New()
	const producer = "crash-producer"
	const size = 200
	clientOpts := func(o *pulsar.ClientOptions) { o.OperationTimeout = 30 * time.Second }
	consumers := []*crashConsumer{
		startCrashConsumer(t, harness.NewClient(t, a, clientOpts), chk, topic, "consumer-a"),
		startCrashConsumer(t, harness.NewClient(t, b, clientOpts), chk, topic, "consumer-b"),
	}

	var acked atomic.Int64
	// A test that fails mid-cycle still waits for its killer, so no restart runs after the test.
	var killDone chan error
	defer func() {
		if killDone != nil {
			cancelRun()
			<-killDone
		}
	}()
	for cycle := range cycles {
		from := int64(cycle * block)
		for seq := from; seq < from+int64(block); seq++ {
			chk.Sent(producer, seq, size)
		}
		victim := []string{"a", "b", "both"}[rng.IntN(3)]
		killAt := from + int64(block)*int64(1+rng.IntN(9))/10 // 10% .. 90% of the block acknowledged
		done := make(chan error, 1)
		killDone = done
		go func() { // the killer of this cycle; ends once it has killed and restarted, or with runCtx
			for acked.Load() < killAt {
				select {
				case <-runCtx.Done():
					done <- fmt.Errorf("acknowledged stuck at %d < %d: %v", acked.Load(), killAt, context.Cause(runCtx))
					return
				case <-time.After(2 * time.Millisecond): // poll interval of a deadline-bounded wait
				}
			}
			start := time.Now()
			err := killAndRestart(victim, a, b)
			if err == nil {
				t.Logf("cycle %d: killed %s with %d acknowledged, back ready in %v", cycle, victim, acked.Load(), time.Since(start).Round(time.Millisecond))
			}
			done <- err
		}()
		failed, firstErr := runProducerProcess(t, runCtx, chk, producerRun{
			url: a.ServiceURL(), topic: topic, name: producer, from: from, n: int64(block), size: size, batching: cycle%2 == 1,
			rate: crashLoopRate,
		}, func() { acked.Add(1) })
		err := <-killDone
		killDone = nil
		if err != nil {
			t.Fatalf("cycle %d: kill %s: %v", cycle, victim, err)
		}
		if failed > 0 {
			t.Errorf("cycle %d: %d sends failed, first: %v", cycle, failed, firstErr)
		}
	}
	ackedN, failedN, pendingN := chk.Counts()

	// b catches up, the consumers receive everything acknowledged.
	catchCtx, cancelCatch := context.WithTimeout(runCtx, 2*time.Minute)
	defer cancelCatch()
	if err := harness.WaitFor(catchCtx, func(context.Context) error {
		backlog, connected, err := replicationBacklog(t, a, topic, "b")
		if err != nil {
			return err
		}
		if backlog != 0 || !connected {
			return fmt.Errorf("a -> b backlog %d, connected %v", backlog, connected)
		}
		for _, c := range consumers {
			if n := chk.DistinctReceived(c.stream, checker.Expect{}); n < ackedN {
				return fmt.Errorf("%s has %d of %d acknowledged messages", c.stream, n, ackedN)
			}
		}
		return nil
	}); err != nil {
		t.Errorf("catching up after the last cycle: %v", err)
	}
	for _, c := range consumers {
		c.stop()
	}

	// What each cluster stores, read from the start.
	readStored(t, catchCtx, harness.NewClient(t, a, clientOpts), chk, topic, "stored-a", "")
	readStored(t, catchCtx, harness.NewClient(t, b, clientOpts), chk, topic, "stored-b", "a")

	lost := func(stream string) int { return ackedN - chk.DistinctReceived(stream, checker.Expect{}) }
	extra := func(stream string) int {
		return chk.ReceivedCount(stream) - chk.DistinctReceived(stream, checker.Expect{})
	}
	t.Logf("crash loop figures: %d cycles, %d messages acknowledged (%d failed, %d pending); lost: stored on a %d, replicated to b %d, consumer on a %d, consumer on b %d; "+
		"stored twice on a %d; duplicated by replication (stored twice on b) %d; redelivered to consumers: a %d, b %d",
		cycles, ackedN, failedN, pendingN, lost("stored-a"), lost("stored-b"), lost("consumer-a"), lost("consumer-b"),
		extra("stored-a"), extra("stored-b"), extra("consumer-a"), extra("consumer-b"))
	verify(t, chk, "stored-a", checker.Expect{})
	verify(t, chk, "stored-b", checker.Expect{})
	verify(t, chk, "consumer-a", checker.Expect{AllowDuplicates: true})
	verify(t, chk, "consumer-b", checker.Expect{AllowDuplicates: true})
}

// crashLoopRate paces the producer so that a block takes a while (400 messages: 0.2 s) and each
// kill lands among messages in flight rather than after the block.
const crashLoopRate = 2000

func crashLoopSettings(t *testing.T) (cycles, block int, seed uint64) {
	t.Helper()
	cycles, block, seed = 20, 400, uint64(time.Now().UnixNano())
	if testing.Short() {
		cycles = 8
	}
	for _, v := range []struct {
		env string
		set func(string) error
	}{
		{"MERIDIAN_CRASHLOOP_CYCLES", func(s string) (err error) { cycles, err = strconv.Atoi(s); return }},
		{"MERIDIAN_CRASHLOOP_BLOCK", func(s string) (err error) { block, err = strconv.Atoi(s); return }},
		{"MERIDIAN_CRASHLOOP_SEED", func(s string) (err error) { seed, err = strconv.ParseUint(s, 10, 64); return }},
	} {
		if s := os.Getenv(v.env); s != "" {
			if err := v.set(s); err != nil {
				t.Fatalf("%s=%q: %v", v.env, s, err)
			}
		}
	}
	if cycles < 1 || block < 10 {
		t.Fatalf("crash loop: %d cycles of %d messages: need at least 1 cycle of 10", cycles, block)
	}
	return cycles, block, seed
}

// replicateBothWays registers a and b in each other's (independent) store, allows both for tenant
// public and makes public/default list both on both.
func replicateBothWays(t *testing.T, a, b *harness.Process) {
	t.Helper()
	procs := []*harness.Process{a, b}
	for i, p := range procs {
		other := procs[1-i]
		admin := harness.NewAdmin(t, p)
		if err := admin.Clusters().Create(utils.ClusterData{Name: other.Cluster(), ServiceURL: other.WebURL(), BrokerServiceURL: other.ServiceURL()}); err != nil {
			t.Fatalf("register %s in %s: %v", other.Cluster(), p.Cluster(), err)
		}
		if err := admin.Tenants().Update(utils.TenantData{Name: "public", AllowedClusters: []string{"a", "b"}}); err != nil {
			t.Fatalf("tenant public on %s: %v", p.Cluster(), err)
		}
		if err := admin.Namespaces().SetNamespaceReplicationClusters("public/default", []string{"a", "b"}); err != nil {
			t.Fatalf("public/default replication clusters on %s: %v", p.Cluster(), err)
		}
	}
}

// killAndRestart kills victim ("a", "b" or "both", at once) with SIGKILL and starts it again.
func killAndRestart(victim string, a, b *harness.Process) error {
	var procs []*harness.Process
	switch victim {
	case "a":
		procs = []*harness.Process{a}
	case "b":
		procs = []*harness.Process{b}
	default:
		procs = []*harness.Process{a, b}
	}
	for _, p := range procs {
		p.Kill()
	}
	for _, p := range procs {
		if err := p.StartE(); err != nil {
			return fmt.Errorf("restart %s: %w", p.Cluster(), err)
		}
	}
	return nil
}

// crashConsumer receives and acknowledges every message of a durable Exclusive subscription,
// through the kills (the client reconnects), recording deliveries as stream.
type crashConsumer struct {
	stream string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startCrashConsumer(t *testing.T, client pulsar.Client, chk *checker.Checker, topic, stream string) *crashConsumer {
	t.Helper()
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: stream,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	ctx, cancel := context.WithCancel(context.Background())
	c := &crashConsumer{stream: stream, cancel: cancel, done: make(chan struct{})}
	go func() { // ends with stop
		defer close(c.done)
		for {
			m, err := cons.Receive(ctx)
			if err != nil {
				return
			}
			chk.Received(stream, m.Payload(), m.ID().String())
			_ = cons.Ack(m) // an ack lost in a crash means a redelivery, which the checker allows
		}
	}()
	t.Cleanup(c.stop)
	return c
}

func (c *crashConsumer) stop() {
	c.once.Do(func() {
		c.cancel()
		<-c.done
	})
}

// readStored reads topic from the earliest position into stream; with origin set, every message
// must be marked replicated from it.
func readStored(t *testing.T, ctx context.Context, client pulsar.Client, chk *checker.Checker, topic, stream, origin string) {
	t.Helper()
	r := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	wrong := 0
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("%s: reader: %v", stream, err)
		}
		chk.Received(stream, m.Payload(), m.ID().String())
		if origin != "" && m.GetReplicatedFrom() != origin {
			if wrong == 0 {
				t.Errorf("%s: %v is replicated from %q, want %q", stream, m.ID(), m.GetReplicatedFrom(), origin)
			}
			wrong++
		}
	}
	if wrong > 1 {
		t.Errorf("%s: %d messages not replicated from %s", stream, wrong, origin)
	}
	r.Close()
}
