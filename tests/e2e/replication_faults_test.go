package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// Issue 6, "Faults, on real meridian standalone processes": two independent clusters (each with its
// own metadata, configured through its own admin API) replicate one way, east -> west, while one of
// them is killed with SIGKILL in the middle and restarted on the same ports and data dir. The
// producer (a separate process, see cmd/e2e-producer) uses deduplication; every message it was told
// is stored must reach west exactly once, in order, marked as replicated from east.

// replicationPair is two independent standalone clusters with public/default replicating east -> west.
type replicationPair struct {
	east, west *harness.Process
}

func startReplicationPair(t *testing.T) replicationPair {
	t.Helper()
	east := harness.StartStandalone(t, harness.Options{Cluster: "east", Dedup: true})
	west := harness.StartStandalone(t, harness.Options{Cluster: "west", Dedup: true})
	eastAdmin, westAdmin := harness.NewAdmin(t, east), harness.NewAdmin(t, west)
	// Each cluster registers the other (independent stores: nothing is shared).
	if err := eastAdmin.Clusters().Create(utils.ClusterData{Name: "west", ServiceURL: west.WebURL(), BrokerServiceURL: west.ServiceURL()}); err != nil {
		t.Fatalf("register west in east: %v", err)
	}
	if err := westAdmin.Clusters().Create(utils.ClusterData{Name: "east", ServiceURL: east.WebURL(), BrokerServiceURL: east.ServiceURL()}); err != nil {
		t.Fatalf("register east in west: %v", err)
	}
	for _, c := range []struct {
		name string
		upd  func(utils.TenantData) error
	}{{"east", eastAdmin.Tenants().Update}, {"west", westAdmin.Tenants().Update}} {
		if err := c.upd(utils.TenantData{Name: "public", AllowedClusters: []string{"east", "west"}}); err != nil {
			t.Fatalf("tenant public allowedClusters on %s: %v", c.name, err)
		}
	}
	if err := eastAdmin.Namespaces().SetNamespaceReplicationClusters("public/default", []string{"east", "west"}); err != nil {
		t.Fatalf("public/default replication clusters on east: %v", err)
	}
	return replicationPair{east: east, west: west}
}

// replicationBacklog returns east's replication backlog towards west for topic and whether the
// replicator is connected.
func replicationBacklog(t *testing.T, p *harness.Process, topic, remote string) (int64, bool, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatalf("topic name %s: %v", topic, err)
	}
	st, err := harness.NewAdmin(t, p).Topics().GetStats(*tn)
	if err != nil {
		return 0, false, err
	}
	r, ok := st.Replication[remote]
	if !ok {
		return 0, false, fmt.Errorf("no replication.%s in the stats of %s (have %v)", remote, topic, st.Replication)
	}
	return r.ReplicationBacklog, r.Connected, nil
}

func TestReplicationSurvivesTargetKill(t *testing.T) {
	runReplicationKill(t, "west")
}

func TestReplicationSurvivesSourceKill(t *testing.T) {
	runReplicationKill(t, "east")
}

// runReplicationKill produces on east through a separate producer process, SIGKILLs victim (east or
// west) once half of the messages are acknowledged, restarts it, and then proves that west stores
// every acknowledged message exactly once, in order, replicated from east.
func runReplicationKill(t *testing.T, victim string) {
	total := 50000
	if testing.Short() {
		total = 5000
	}
	pair := startReplicationPair(t)
	killed := pair.west
	if victim == "east" {
		killed = pair.east
	}
	runCtx, cancelRun := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelRun()
	// Waits end early if a broker crashes on its own.
	runCtx, cancelEast := pair.east.CrashContext(runCtx)
	defer cancelEast()
	runCtx, cancelWest := pair.west.CrashContext(runCtx)
	defer cancelWest()

	topic := harness.Topic(t)
	chk := checker.New()
	const name = "repl-producer"
	const size = 256
	for seq := int64(0); seq < int64(total); seq++ {
		chk.Sent(name, seq, size)
	}
	var acked atomic.Int64
	// The test sees receipts a little late (they come through the producer process's stdout pipe,
	// at most MaxPendingMessages plus a pipe buffer behind), so the kill point leaves a wide margin.
	killAt := int64(total * 2 / 5)
	type killResult struct {
		ackedAtKill int64
		downFor     time.Duration
		err         error
	}
	killDone := make(chan killResult, 1)
	go func() {
		for acked.Load() < killAt {
			select {
			case <-runCtx.Done():
				killDone <- killResult{err: fmt.Errorf("acked stuck at %d < %d: %v", acked.Load(), killAt, context.Cause(runCtx))}
				return
			case <-time.After(5 * time.Millisecond): // poll interval of a deadline-bounded wait
			}
		}
		at := acked.Load()
		start := time.Now()
		err := killed.RestartE() // SIGKILL, start on the same ports and data dir, wait for ready
		killDone <- killResult{ackedAtKill: at, downFor: time.Since(start), err: err}
	}()
	produceStart := time.Now()
	failed, firstErr := runProducerProcess(t, runCtx, chk, producerRun{
		url: pair.east.ServiceURL(), topic: topic, name: name, from: 0, n: int64(total), size: size,
	}, func() { acked.Add(1) })
	produced := time.Since(produceStart)
	kr := <-killDone
	if kr.err != nil {
		t.Fatalf("killing %s: %v", victim, kr.err)
	}
	ackedN, failedN, pendingN := chk.Counts()
	t.Logf("SIGKILL of %s with %d of %d acked (down and back ready in %v); producer done in %v: acked %d, failed %d, pending %d (first error: %v)",
		victim, kr.ackedAtKill, total, kr.downFor.Round(time.Millisecond), produced.Round(time.Millisecond), ackedN, failedN, pendingN, firstErr)
	if failed > 0 {
		t.Errorf("%d sends failed, first: %v", failed, firstErr)
	}

	// West catches up: a reader from the earliest position receives every acked message.
	westClient := harness.NewClient(t, pair.west, func(o *pulsar.ClientOptions) { o.OperationTimeout = 30 * time.Second })
	catchUpStart := time.Now()
	catchCtx, cancelCatch := context.WithTimeout(runCtx, 90*time.Second)
	defer cancelCatch()
	if err := harness.WaitFor(catchCtx, func(ctx context.Context) error {
		backlog, connected, err := replicationBacklog(t, pair.east, topic, "west")
		if err != nil {
			return err
		}
		if backlog != 0 || !connected {
			return fmt.Errorf("east -> west backlog %d, connected %v", backlog, connected)
		}
		return nil
	}); err != nil {
		t.Fatalf("replication east -> west did not catch up: %v (%v)", err, context.Cause(catchCtx))
	}
	caughtUp := time.Since(catchUpStart)

	r := newReader(t, westClient, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	wrongOrigin := 0
	var firstWrong string
	for r.HasNext() {
		m, err := r.Next(catchCtx)
		if err != nil {
			t.Fatalf("reader on west: %v (%v)", err, context.Cause(catchCtx))
		}
		chk.Received("west", m.Payload(), m.ID().String())
		if !m.IsReplicated() || m.GetReplicatedFrom() != "east" {
			if wrongOrigin == 0 {
				firstWrong = fmt.Sprintf("%v: replicated=%v from %q", m.ID(), m.IsReplicated(), m.GetReplicatedFrom())
			}
			wrongOrigin++
		}
	}
	t.Logf("west caught up %v after the producer finished (backlog 0 and connected); %d messages stored on west", caughtUp.Round(time.Millisecond), chk.ReceivedCount("west"))
	if wrongOrigin > 0 {
		t.Errorf("%d messages on west are not marked replicated from east, first %s", wrongOrigin, firstWrong)
	}
	verify(t, chk, "west", checker.Expect{})
}
