//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestDiskFullReplicationResumes: clusters a and b are real `meridian standalone` processes
// replicating public/default both ways; b's storage directory is a small tmpfs (withSmallDisk),
// and the test fills it. While b's disk is full, a's producer and consumer work as usual, a's
// replication stats towards b show a backlog and a lastError, b is not ready, and a producer on b
// gets send errors. Once the space is freed, with no restart and nothing touched but the ballast
// file, replication a -> b catches up by itself, and b's new messages replicate to a: b stores
// every message a acknowledged exactly once, in order, and a every message b acknowledged.
//
// The producer on b lives through the fault in a process of its own (producerProcess).
//
// It needs root (to mount). Without root it is skipped, except with CI=true, where it fails.
func TestDiskFullReplicationResumes(t *testing.T) {
	withSmallDisk(t, runDiskFullReplicationResumes)
}

func runDiskFullReplicationResumes(t *testing.T, bDataDir string) {
	a := harness.NewCluster(t, "a", harness.StartStandalone(t, harness.Options{Cluster: "a"}))
	b := harness.NewCluster(t, "b", harness.StartStandalone(t, harness.Options{Cluster: "b", DataDir: bDataDir}))
	harness.RegisterEachOther(t, a, b)
	for _, c := range []*harness.Cluster{a, b} {
		c.SetTenant(t, "public", "a", "b")
		c.SetReplicationClusters(t, "public/default", "a", "b")
	}
	ctx := testCtx(t, 4*time.Minute)
	ctx, cancelA := a.Process.CrashContext(ctx)
	defer cancelA()
	ctx, cancelB := b.Process.CrashContext(ctx)
	defer cancelB()
	topic := harness.Topic(t)
	chk := checker.New()
	const size = 1024
	aClient, bClient := a.Client(t), b.Client(t)

	// The subscription on b exists from the start and nothing moves it while the disk is full: after
	// recovery a consumer on it sees exactly what b stored. (A consumer connected through the fault
	// may be sent messages again after its topic was fenced and reloaded, which is at-least-once
	// delivery, not replication storing a message twice; this test is about the latter.)
	sub, err := bClient.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe on b: %v", err)
	}
	sub.Close()
	consA := newConsumer(t, aClient, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	prodA := newProducer(t, aClient, pulsar.ProducerOptions{Topic: topic, Name: "pa", DisableBatching: true})
	prodB := startProducerProcess(t, chk, b.ServiceURL(), topic, "pb", size, 3*time.Second)
	var nextA int64 // the next sequence number of pa

	// Healthy: both directions flow.
	sendSync(t, chk, prodA, "pa", nextA, nextA+20, size)
	nextA += 20
	if failed, err := prodB.Send(20); failed > 0 {
		t.Fatalf("%d sends on b failed while b was healthy, first: %v", failed, err)
	}
	a.WaitReplicationCaughtUp(t, 30*time.Second, topic, "b")
	b.WaitReplicationCaughtUp(t, 30*time.Second, topic, "a")

	// b's disk fills up. a keeps working: its producer's sends are acknowledged and its consumer gets
	// them, while a's replicator towards b reports a backlog and an error.
	ballast := filepath.Join(bDataDir, "storage", "ballast")
	var stuck adminapi.ReplicatorStats
	fillFileSystem(t, ballast)
	// a sends until b refuses some of it (b may take a few writes before its disk says no).
	harness.Eventually(t, 60*time.Second, "a: replication towards b with a backlog and a lastError while b's disk is full", func() error {
		r, err := replicatorStats(ctx, a, topic, "b")
		if err != nil {
			return err
		}
		if r.ReplicationBacklog > 0 && r.LastError != "" {
			stuck = r
			return nil
		}
		if r.ReplicationBacklog == 0 {
			sendSync(t, chk, prodA, "pa", nextA, nextA+20, size)
			nextA += 20
		}
		return fmt.Errorf("backlog %d, lastError %q", r.ReplicationBacklog, r.LastError)
	})
	t.Logf("a -> b while b's disk is full (%d messages sent on a): backlog %d, connected %v, lastError %q",
		nextA, stuck.ReplicationBacklog, stuck.Connected, stuck.LastError)
	// Everything a takes from now on waits for b (b's topic is fenced until its file is rewritten,
	// which needs space).
	const more = 100
	sendSync(t, chk, prodA, "pa", nextA, nextA+more, size)
	nextA += more
	harness.Eventually(t, 30*time.Second, fmt.Sprintf("a: a backlog towards b of at least the %d messages sent since", more), func() error {
		r, err := replicatorStats(ctx, a, topic, "b")
		if err != nil {
			return err
		}
		if r.ReplicationBacklog < more || r.LastError == "" {
			return fmt.Errorf("backlog %d, lastError %q", r.ReplicationBacklog, r.LastError)
		}
		stuck = r
		return nil
	})
	var body string
	waitStatus(t, b.WebURL()+"/admin/v2/brokers/ready", http.StatusServiceUnavailable, &body)
	t.Logf("b's readiness on a full disk: %s", strings.TrimSpace(body))
	if code, body := getURL(t, a.WebURL()+"/admin/v2/brokers/ready"); code != http.StatusOK {
		t.Errorf("a's readiness while b's disk is full: %d %s", code, body)
	}
	onA := receiveUntil(t, chk, "a", consA, checker.Expect{Producers: func(p string) bool { return p == "pa" }}, 30*time.Second)
	// The producer on b gets send errors.
	failedOnB, errOnB := prodB.Send(10)
	if failedOnB == 0 {
		t.Fatal("every send on b was acknowledged while its disk was full")
	}
	t.Logf("on b's full disk %d of 10 sends failed, first: %v", failedOnB, errOnB)

	// The space returns; nothing is restarted or reconfigured.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	var resumed adminapi.ReplicatorStats
	harness.Eventually(t, 60*time.Second, "a -> b caught up after the space returned", func() error {
		r, err := replicatorStats(ctx, a, topic, "b")
		if err != nil {
			return err
		}
		if !r.Connected || r.ReplicationBacklog != 0 || r.LastError != "" {
			return fmt.Errorf("connected %v, backlog %d, lastError %q", r.Connected, r.ReplicationBacklog, r.LastError)
		}
		resumed = r
		return nil
	})
	t.Logf("a -> b caught up (a backlog of %d) %v after the space was freed (reconnects %d)", stuck.ReplicationBacklog, time.Since(freed).Round(time.Millisecond), resumed.Reconnects)

	// b's producer works again by itself, and what b stores now reaches a.
	waitStatus(t, b.WebURL()+"/admin/v2/brokers/ready", http.StatusOK, nil)
	harness.Eventually(t, 60*time.Second, "a send on b acknowledged after the space returned", func() error {
		_, err := prodB.Send(1)
		return err
	})
	t.Logf("b's producer sends again %v after the space was freed", time.Since(freed).Round(time.Millisecond))
	if failed, err := prodB.Send(20); failed > 0 {
		t.Fatalf("%d sends on b failed after the space returned, first: %v", failed, err)
	}
	b.WaitReplicationCaughtUp(t, 60*time.Second, topic, "a")
	t.Logf("b -> a caught up %v after the space was freed", time.Since(freed).Round(time.Millisecond))

	// b holds every message a acknowledged, once, in order, marked as replicated from a; a holds
	// every message b acknowledged, marked as replicated from b.
	consB := newConsumer(t, bClient, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	checkOrigin(t, "b", receiveUntil(t, chk, "b", consB, checker.Expect{}, 60*time.Second), "pa", "a")
	checkOrigin(t, "a", append(onA, receiveUntil(t, chk, "a", consA, checker.Expect{}, 60*time.Second)...), "pb", "b")
	for _, s := range []struct {
		stream string
		cons   pulsar.Consumer
	}{{"a", consA}, {"b", consB}} {
		if extra := harness.DrainQuiet(t, chk, s.stream, s.cons, 2*time.Second); len(extra) > 0 {
			t.Logf("%s: %d more messages after every acknowledged one had arrived", s.stream, len(extra))
		}
		verify(t, chk, s.stream, checker.Expect{})
	}
	acked, failed, _ := chk.Counts()
	st, err := b.MeridianStats(ctx, topic)
	if err != nil {
		t.Fatalf("b's stats: %v", err)
	}
	t.Logf("%d sends acknowledged, %d failed; b's topic since it loaded again: %d messages in from a, %d duplicates dropped",
		acked, failed, st.InboundReplication["a"].MsgInCounter, st.InboundReplication["a"].DuplicatesDropped)
}

// checkOrigin fails the test unless each of msgs (received on cluster) sent by producer is marked
// as replicated from origin.
func checkOrigin(t *testing.T, cluster string, msgs []pulsar.Message, producer, origin string) {
	t.Helper()
	for _, m := range msgs {
		if k, _, err := checker.Parse(m.Payload()); err == nil && k.Producer == producer && m.GetReplicatedFrom() != origin {
			t.Errorf("%s on %s at %v: replicated from %q, want %s", k, cluster, m.ID(), m.GetReplicatedFrom(), origin)
		}
	}
}

// replicatorStats returns c's replication.<remote> stats of topic with Meridian's fields (lastError
// included).
func replicatorStats(ctx context.Context, c *harness.Cluster, topic, remote string) (adminapi.ReplicatorStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := c.MeridianStats(ctx, topic)
	if err != nil {
		return adminapi.ReplicatorStats{}, err
	}
	r, found := st.Replication[remote]
	if !found {
		return adminapi.ReplicatorStats{}, fmt.Errorf("%s: no replication.%s in the stats of %s", c.Name, remote, topic)
	}
	return r, nil
}
