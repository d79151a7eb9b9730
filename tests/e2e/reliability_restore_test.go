package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// A source cluster whose data dir is restored from an older copy, or rebuilt empty under the same
// cluster name, reuses ledger ids (and so source positions) it had already used and replicated.
// Its peers' inbound index must not take the new messages for duplicates of the old ones: every
// message acknowledged on the source reaches the peer, none twice. Both clusters are real
// `meridian standalone` processes; a replicates to b.

// restorePair is a source cluster a (a process that is stopped, restored and started again) and a
// target cluster b, with public/default replicating a -> b.
type restorePair struct {
	a, b *harness.Process
}

func startRestorePair(t *testing.T) restorePair {
	t.Helper()
	p := restorePair{
		a: harness.StartStandalone(t, harness.Options{Cluster: "a"}),
		b: harness.StartStandalone(t, harness.Options{Cluster: "b"}),
	}
	bAdmin := harness.NewAdmin(t, p.b)
	if err := bAdmin.Clusters().Create(utils.ClusterData{Name: "a", ServiceURL: p.a.WebURL(), BrokerServiceURL: p.a.ServiceURL()}); err != nil {
		t.Fatalf("register a in b: %v", err)
	}
	if err := bAdmin.Tenants().Update(utils.TenantData{Name: "public", AllowedClusters: []string{"a", "b"}}); err != nil {
		t.Fatalf("tenant public on b: %v", err)
	}
	p.configureSource(t)
	return p
}

// configureSource tells cluster a about b and makes public/default replicate to b (again, after a's
// data dir was rebuilt empty).
func (p restorePair) configureSource(t *testing.T) {
	t.Helper()
	aAdmin := harness.NewAdmin(t, p.a)
	if err := aAdmin.Clusters().Create(utils.ClusterData{Name: "b", ServiceURL: p.b.WebURL(), BrokerServiceURL: p.b.ServiceURL()}); err != nil {
		t.Fatalf("register b in a: %v", err)
	}
	if err := aAdmin.Tenants().Update(utils.TenantData{Name: "public", AllowedClusters: []string{"a", "b"}}); err != nil {
		t.Fatalf("tenant public on a: %v", err)
	}
	if err := aAdmin.Namespaces().SetNamespaceReplicationClusters("public/default", []string{"a", "b"}); err != nil {
		t.Fatalf("public/default replication clusters on a: %v", err)
	}
}

// produceRange sends checker messages seq from..from+n-1 of producer name to topic on cluster a
// through a client of its own (a is restarted between phases), one synchronous send at a time, and
// records each acknowledgement.
func produceRange(t *testing.T, chk *checker.Checker, a *harness.Process, topic, name string, from, n int64) {
	t.Helper()
	client := harness.NewClient(t, a, nil)
	defer client.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("producer on a: %v", err)
	}
	defer prod.Close()
	const size = 120
	for seq := from; seq < from+n; seq++ {
		chk.Sent(name, seq, size)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		id, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: checker.Payload(name, seq, size)})
		cancel()
		if err != nil {
			chk.Failed(name, seq, err)
			t.Fatalf("send #%d on a: %v", seq, err)
		}
		chk.Acked(name, seq, id.String())
	}
}

// copyDir copies the directory tree src to dst (which must not exist).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

// subscribeOnB subscribes to topic on cluster b from the earliest message.
func subscribeOnB(t *testing.T, b *harness.Process, topic string) pulsar.Consumer {
	t.Helper()
	cons, err := harness.NewClient(t, b, nil).Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("subscribe on b: %v", err)
	}
	t.Cleanup(cons.Close)
	return cons
}

// verifyOnB waits briefly for anything more (a duplicate) and checks that b received every message
// a acknowledged, once, in order.
func verifyOnB(t *testing.T, chk *checker.Checker, cons pulsar.Consumer) {
	t.Helper()
	if extra := harness.DrainQuiet(t, chk, "b", cons, 2*time.Second); len(extra) > 0 {
		t.Errorf("b received %d messages more than a acknowledged", len(extra))
	}
	if rep := chk.Verify("b", checker.Expect{}); !rep.OK() {
		t.Fatalf("b:\n%s", rep)
	}
}

// TestRestoreSourceFromOlderCopy: a's data dir is copied while a is stopped; a then produces more,
// which reaches b; a is stopped and its data dir restored from the copy. The messages a produces
// after the restore reuse ledger ids the lost run had used (and replicated): b must store them.
func TestRestoreSourceFromOlderCopy(t *testing.T) {
	p := startRestorePair(t)
	topic := harness.Topic(t)
	chk := checker.New()
	const name, n = "app", 50
	cons := subscribeOnB(t, p.b, topic)
	drain := func(what string) {
		t.Helper()
		harness.Drain(t, chk, "b", cons, n, 60*time.Second)
		t.Logf("%s: %d messages reached b", what, n)
	}

	produceRange(t, chk, p.a, topic, name, 0, n)
	drain("before the copy")

	if err := p.a.Stop(); err != nil {
		t.Fatalf("stop a: %v", err)
	}
	backup := t.TempDir() + "/a-copy"
	copyDir(t, p.a.DataDir(), backup)
	p.a.Start()
	produceRange(t, chk, p.a, topic, name, n, n)
	drain("after the copy (to be lost)")

	if err := p.a.Stop(); err != nil {
		t.Fatalf("stop a: %v", err)
	}
	if err := os.RemoveAll(p.a.DataDir()); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, p.a.DataDir())
	p.a.Start()
	produceRange(t, chk, p.a, topic, name, 2*n, n)
	drain("after the restore")

	verifyOnB(t, chk, cons)
}

// TestRestoreSourceRebuiltEmpty: a's data dir is lost and a starts again empty under the same
// cluster name (configured again through its admin API); its new ledger ids start over, below the
// positions b already holds from a. Every new message must reach b.
func TestRestoreSourceRebuiltEmpty(t *testing.T) {
	p := startRestorePair(t)
	topic := harness.Topic(t)
	chk := checker.New()
	const name, n = "app", 50
	cons := subscribeOnB(t, p.b, topic)

	for round := range int64(2) {
		produceRange(t, chk, p.a, topic, name, round*n, n)
		harness.Drain(t, chk, "b", cons, n, 60*time.Second)
		t.Logf("round %d: %d messages reached b", round, n)
		if round == 0 {
			if err := p.a.Stop(); err != nil {
				t.Fatalf("stop a: %v", err)
			}
			if err := os.RemoveAll(p.a.DataDir()); err != nil {
				t.Fatal(err)
			}
			p.a.Start()
			p.configureSource(t)
		}
	}
	verifyOnB(t, chk, cons)
}
