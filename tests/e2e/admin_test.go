package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestAdminSmoke drives the admin REST API with pulsaradmin: the bootstrap state of a new standalone
// (cluster "standalone", tenant public, namespace public/default), then tenant, namespace and topic
// create/list/delete, and a produce/consume in the new namespace.
func TestAdminSmoke(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	admin := harness.NewAdmin(t, b)

	clusters, err := admin.Clusters().List()
	if err != nil || !slices.Contains(clusters, "standalone") {
		t.Fatalf("clusters = %v, %v; want standalone", clusters, err)
	}
	cd, err := admin.Clusters().Get("standalone")
	if err != nil {
		t.Fatalf("get cluster: %v", err)
	}
	if cd.ServiceURL != b.WebURL() || cd.BrokerServiceURL != b.ServiceURL() {
		t.Fatalf("cluster data %+v; want serviceUrl %s brokerServiceUrl %s", cd, b.WebURL(), b.ServiceURL())
	}
	tenants, err := admin.Tenants().List()
	if err != nil || !slices.Contains(tenants, "public") {
		t.Fatalf("tenants = %v, %v", tenants, err)
	}
	pub, err := admin.Tenants().Get("public")
	if err != nil || !slices.Contains(pub.AllowedClusters, "standalone") {
		t.Fatalf("tenant public = %+v, %v", pub, err)
	}
	nss, err := admin.Namespaces().GetNamespaces("public")
	if err != nil || !slices.Contains(nss, "public/default") {
		t.Fatalf("namespaces of public = %v, %v", nss, err)
	}

	// A new tenant and namespace.
	if err := admin.Tenants().Create(utils.TenantData{Name: "acme", AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	if err := admin.Tenants().Create(utils.TenantData{Name: "acme", AllowedClusters: []string{"standalone"}}); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("creating an existing tenant: %v, want a 409 error", err)
	}
	if err := admin.Namespaces().CreateNamespace("acme/orders"); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	repl, err := admin.Namespaces().GetNamespaceReplicationClusters("acme/orders")
	if err != nil || !slices.Equal(repl, []string{"standalone"}) {
		t.Fatalf("replication clusters of a new namespace = %v, %v; want [standalone]", repl, err)
	}
	nss, err = admin.Namespaces().GetNamespaces("acme")
	if err != nil || !slices.Contains(nss, "acme/orders") {
		t.Fatalf("namespaces of acme = %v, %v", nss, err)
	}

	// Topics: a non-partitioned and a partitioned one, listed, then produce/consume in the namespace.
	plain := harness.TopicIn(t, "acme/orders")
	parted := harness.TopicIn(t, "acme/orders")
	if err := admin.Topics().Create(*mustTopicName(t, plain), 0); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if err := admin.Topics().Create(*mustTopicName(t, parted), 3); err != nil {
		t.Fatalf("create partitioned topic: %v", err)
	}
	ns, _ := utils.GetNamespaceName("acme/orders")
	partitioned, nonPartitioned, err := admin.Topics().List(*ns)
	if err != nil || !slices.Contains(partitioned, parted) || !slices.Contains(nonPartitioned, plain) {
		t.Fatalf("topics of acme/orders: partitioned %v, non-partitioned %v, %v", partitioned, nonPartitioned, err)
	}
	client := harness.NewClient(t, b, nil)
	chk := checker.New()
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: parted, SubscriptionName: "s"})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: parted})
	sendAsync(t, chk, prod, "p", 0, 30, 64)
	receiveN(t, chk, "s", cons, 30, 30*time.Second, false)
	verify(t, chk, "s", checker.Expect{NoOrder: true})
	subs, err := admin.Subscriptions().List(*mustTopicName(t, parted+"-partition-0"))
	if err != nil || !slices.Contains(subs, "s") {
		t.Fatalf("subscriptions of partition 0 = %v, %v", subs, err)
	}
	stats, err := admin.Topics().GetStats(*mustTopicName(t, parted+"-partition-0"))
	if err != nil {
		t.Fatalf("topic stats: %v", err)
	}
	if _, ok := stats.Subscriptions["s"]; !ok {
		t.Fatalf("stats of partition 0 have no subscription s: %+v", stats)
	}
	// pulsaradmin reads the fields whose names and types follow Pulsar's (lastPublishTimeStamp,
	// producerId as a signed number, availablePermits as an int). The producer may have put all 30
	// messages on some of the partitions: the ones that got messages have a last publish time.
	published := 0
	for i := range 3 {
		st, err := admin.Topics().GetStats(*mustTopicName(t, fmt.Sprintf("%s-partition-%d", parted, i)))
		if err != nil {
			t.Fatalf("stats of partition %d: %v", i, err)
		}
		if st.TopicCreationTimeStamp <= 0 || len(st.Publishers) != 1 || st.Publishers[0].ProducerName == "" ||
			len(st.Subscriptions["s"].Consumers) != 1 || (st.MsgCounterIn > 0) != (st.LastPublishTimestamp > 0) {
			t.Fatalf("stats of partition %d as pulsaradmin reads them: %+v", i, st)
		}
		published += int(st.MsgCounterIn)
	}
	if published != 30 {
		t.Fatalf("partitions counted %d messages in, want 30", published)
	}

	// Clean up: topics, then namespace, then tenant.
	prod.Close()
	cons.Close()
	if err := admin.Topics().Delete(*mustTopicName(t, plain), false, true); err != nil {
		t.Fatalf("delete topic: %v", err)
	}
	if err := admin.Topics().Delete(*mustTopicName(t, parted), true, false); err != nil {
		t.Fatalf("delete partitioned topic: %v", err)
	}
	harness.Eventually(t, 10*time.Second, "namespace deleted", func() error {
		return admin.Namespaces().DeleteNamespace("acme/orders")
	})
	if err := admin.Tenants().Delete("acme"); err != nil {
		t.Fatalf("delete tenant: %v", err)
	}
	tenants, err = admin.Tenants().List()
	if err != nil || slices.Contains(tenants, "acme") {
		t.Fatalf("tenants after delete = %v, %v", tenants, err)
	}
}

// TestAutoTopicCreationDisabled checks that with --auto-topic-creation=false a producer on a topic
// that does not exist is refused, and one on a topic created over REST works.
func TestAutoTopicCreationDisabled(t *testing.T) {
	b := harness.StartStandalone(t, harness.Options{NoAutoTopicCreate: true})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	if p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Second}); err == nil {
		p.Close()
		t.Fatal("producer on a missing topic accepted with auto topic creation off")
	}
	admin := harness.NewAdmin(t, b)
	if err := admin.Topics().Create(*mustTopicName(t, topic), 0); err != nil {
		t.Fatal(err)
	}
	newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
}
