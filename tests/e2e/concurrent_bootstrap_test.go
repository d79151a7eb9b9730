package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestConcurrentBootstrapOnSharedStore starts N `meridian standalone` processes (clusters c0..cN-1)
// at the same moment against one empty etcd configuration store, round after round (a fresh etcd
// prefix each round, so every round is a first start). Each process's first-start bootstrap
// (register its cluster, create tenant public and namespace public/default when absent) races the
// others': every process must become ready, tenant public must allow every cluster (each joins
// it by compare-and-swap, none drops another) and public/default must exist, seen the same from
// every cluster. In the last round every cluster also produces and consumes on public/default.
func TestConcurrentBootstrapOnSharedStore(t *testing.T) {
	const clusters = 3
	rounds := 20
	if testing.Short() {
		rounds = 10
	}
	etcd := harness.StartEtcd(t)
	failedRounds := 0
	for round := range rounds {
		if !bootstrapRound(t, etcd.ConfigStoreURL(fmt.Sprintf("bootstrap-race-%d", round)), round, clusters, round == rounds-1) {
			failedRounds++
		}
	}
	if failedRounds > 0 {
		t.Errorf("%d of %d rounds of %d clusters bootstrapping together failed", failedRounds, rounds, clusters)
	}
}

// bootstrapRound runs one round and reports whether it passed (failures are reported on t).
func bootstrapRound(t *testing.T, storeURL string, round, n int, useTopics bool) bool {
	t.Helper()
	names := make([]string, n)
	procs := make([]*harness.Process, n)
	for i := range n {
		names[i] = fmt.Sprintf("c%d", i)
		procs[i] = harness.NewStandalone(t, harness.Options{Cluster: names[i], ConfigStore: storeURL})
	}
	defer func() {
		for _, p := range procs {
			if err := p.Stop(); err != nil {
				t.Errorf("round %d: stop %s: %v", round, p.Cluster(), err)
			}
		}
	}()

	// Start every process at once: the goroutines wait on a closed channel so their exec calls
	// are as close together as the scheduler allows.
	startErrs := make([]error, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			startErrs[i] = p.StartE()
		}()
	}
	close(gate)
	wg.Wait()
	ok := true
	for i, err := range startErrs {
		if err != nil {
			t.Errorf("round %d: cluster %s did not start: %v", round, names[i], err)
			ok = false
		}
	}
	if !ok {
		return false
	}

	// Each cluster's own writes show in its own view at once; the others' within the watch latency.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range procs {
		admin := harness.NewAdmin(t, p)
		err := harness.WaitFor(ctx, func(context.Context) error {
			td, err := admin.Tenants().Get("public")
			if err != nil {
				return fmt.Errorf("get tenant public: %w", err)
			}
			for _, name := range names {
				if !slices.Contains(td.AllowedClusters, name) {
					return fmt.Errorf("tenant public allows %v, not %s", td.AllowedClusters, name)
				}
			}
			if _, err := admin.Namespaces().GetPolicies("public/default"); err != nil {
				return fmt.Errorf("get namespace public/default: %w", err)
			}
			return nil
		})
		if err != nil {
			t.Errorf("round %d: as seen from %s: %v", round, p.Cluster(), err)
			ok = false
		}
	}
	if ok && useTopics {
		for _, p := range procs {
			produceConsumeDefault(t, p)
		}
	}
	return ok
}

// produceConsumeDefault sends and receives a few messages on a public/default topic of b.
func produceConsumeDefault(t *testing.T, b *harness.Process) {
	t.Helper()
	chk := checker.New()
	c := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	cons := newConsumer(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	prod := newProducer(t, c, pulsar.ProducerOptions{Topic: topic})
	name := "p-" + b.Cluster()
	sendSync(t, chk, prod, name, 0, 10, 64)
	receiveN(t, chk, name, cons, 10, 10*time.Second, false)
	verify(t, chk, name, checker.Expect{})
	prod.Close()
	cons.Close()
}
