package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// httpLookup asks broker b where topic (persistent://public/default/<local>) is served; a broker
// that does not own it answers 307 to the owner, which net/http follows.
func httpLookup(t *testing.T, b harness.Broker, local string) string {
	t.Helper()
	return ownerOfTopic(t, b, "persistent://public/default/"+local)
}

// TestClusterLookup: three broker processes on one etcd. A client that knows only broker 1
// produces to and consumes from a 12-partition topic and 12 plain topics; every broker owns some
// of them, every message arrives, a regex consumer sees the topics of every broker, and admin
// calls, HTTP lookups and schemas work through any broker.
func TestClusterLookup(t *testing.T) {
	cl := harness.StartBrokerCluster(t, 3, harness.Options{})
	b1 := cl.Brokers[0]
	client := harness.NewClient(t, b1, nil)
	adm := harness.NewAdmin(t, b1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	perTopic := 200
	if testing.Short() {
		perTopic = 50
	}
	run := time.Now().UnixNano() % 1_000_000
	partitioned := fmt.Sprintf("cl-part-%d", run)
	ptn, _ := utils.GetTopicName("persistent://public/default/" + partitioned)
	if err := adm.Topics().Create(*ptn, 12); err != nil {
		t.Fatal(err)
	}
	topics := []string{"persistent://public/default/" + partitioned}
	for i := range 12 {
		topics = append(topics, fmt.Sprintf("persistent://public/default/cl-t-%d-%d", run, i))
	}
	consumers := map[string]pulsar.Consumer{}
	for _, topic := range topics {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatalf("subscribe %s: %v", topic, err)
		}
		defer c.Close()
		consumers[topic] = c
	}
	for _, topic := range topics {
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatalf("producer %s: %v", topic, err)
		}
		for i := range perTopic {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint(i), Payload: fmt.Appendf(nil, "%s/%d", topic, i)}); err != nil {
				t.Fatalf("send %s #%d: %v", topic, i, err)
			}
		}
		p.Close()
	}
	for _, topic := range topics {
		want := perTopic
		seen := map[string]bool{}
		for len(seen) < want {
			m, err := consumers[topic].Receive(ctx)
			if err != nil {
				t.Fatalf("receive %s after %d: %v", topic, len(seen), err)
			}
			seen[string(m.Payload())] = true
			_ = consumers[topic].Ack(m)
		}
	}

	// Every broker owns some of the topics (HTTP lookup through broker 1 follows the 307s).
	owners := map[string]int{}
	for i := range 12 {
		owners[httpLookup(t, b1, fmt.Sprintf("cl-t-%d-%d", run, i))]++
	}
	for i := range 12 {
		owners[httpLookup(t, b1, fmt.Sprintf("%s-partition-%d", partitioned, i))]++
	}
	for _, b := range cl.Brokers {
		if owners[b.ServiceURL()] == 0 {
			t.Fatalf("broker %s owns none of the topics: %v", b.ServiceURL(), owners)
		}
	}
	t.Logf("topics per broker: %v", owners)

	// A regex consumer (it lists the namespace through broker 1) sees the topics of every broker.
	rc, err := client.Subscribe(pulsar.ConsumerOptions{
		TopicsPattern:               fmt.Sprintf("persistent://public/default/cl-t-%d-.*", run),
		SubscriptionName:            "regex",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	fromTopic := map[string]bool{}
	re := regexp.MustCompile(`cl-t-\d+-\d+`)
	for len(fromTopic) < 12 {
		m, err := rc.Receive(ctx)
		if err != nil {
			t.Fatalf("regex consumer after %d topics: %v", len(fromTopic), err)
		}
		fromTopic[re.FindString(m.Topic())] = true
		_ = rc.Ack(m)
	}

	// Admin stats of every plain topic through each broker (the non-owners redirect).
	for _, b := range cl.Brokers {
		a := harness.NewAdmin(t, b)
		for _, topic := range topics[1:] {
			tn, _ := utils.GetTopicName(topic)
			st, err := a.Topics().GetStats(*tn)
			if err != nil {
				t.Fatalf("stats of %s through %s: %v", topic, b.WebURL(), err)
			}
			if _, ok := st.Subscriptions["s"]; !ok || st.MsgCounterIn != int64(perTopic) {
				// Only the owner has the subscription and counted the messages.
				t.Fatalf("stats of %s through %s: msgInCounter %d, subscriptions %v", topic, b.WebURL(), st.MsgCounterIn, st.Subscriptions)
			}
		}
	}

	// A partitioned topic's stats through any broker sum every partition's, wherever it lives.
	for _, b := range cl.Brokers {
		st, err := harness.NewAdmin(t, b).Topics().GetPartitionedStats(*ptn, true)
		if err != nil {
			t.Fatalf("partitioned stats through %s: %v", b.WebURL(), err)
		}
		var in int64
		for _, p := range st.Partitions {
			in += p.MsgCounterIn
		}
		if in != int64(perTopic) || len(st.Partitions) != 12 {
			t.Fatalf("partitioned stats through %s: msgInCounter %d over %d partitions, want %d over 12",
				b.WebURL(), in, len(st.Partitions), perTopic)
		}
	}

	// A subscription created on the partitioned topic through broker 1 exists on every partition,
	// wherever it lives, and the admin topic list of any broker names every partition.
	if err := adm.Subscriptions().Create(*ptn, "via-admin", utils.Earliest); err != nil {
		t.Fatalf("create a subscription on the partitioned topic: %v", err)
	}
	st, err := harness.NewAdmin(t, cl.Brokers[1]).Topics().GetPartitionedStats(*ptn, true)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range st.Partitions {
		if _, ok := p.Subscriptions["via-admin"]; !ok {
			t.Fatalf("partition %s has no subscription via-admin: %v", name, p.Subscriptions)
		}
	}
	for _, b := range cl.Brokers {
		ns, _ := utils.GetNameSpaceName("public", "default")
		_, list, err := harness.NewAdmin(t, b).Topics().List(*ns)
		if err != nil {
			t.Fatal(err)
		}
		named := map[string]bool{}
		for _, x := range list {
			named[x] = true
		}
		for _, topic := range topics[1:] {
			if !named[topic] {
				t.Fatalf("the topic list of %s does not name %s", b.WebURL(), topic)
			}
		}
	}

	// Every broker lists the cluster's three brokers.
	for _, b := range cl.Brokers {
		brokers, err := harness.NewAdmin(t, b).Brokers().GetActiveBrokers("standalone")
		if err != nil || len(brokers) != 3 {
			t.Fatalf("active brokers through %s: %v, %v", b.WebURL(), brokers, err)
		}
	}

	// Deleting the partitioned topic through broker 3 deletes every partition on its owner.
	consumers[topics[0]].Close()
	if err := harness.NewAdmin(t, cl.Brokers[2]).Topics().Delete(*ptn, true, false); err != nil {
		t.Fatalf("delete the partitioned topic through broker 3: %v", err)
	}
	for i := range 12 {
		part, _ := utils.GetTopicName(fmt.Sprintf("%s-partition-%d", ptn.String(), i))
		if _, err := adm.Topics().GetStats(*part); err == nil {
			t.Fatalf("partition %d still exists after the delete", i)
		}
	}

	// A schema registered through the owner is read through every broker.
	type rec struct {
		ID int `json:"id"`
	}
	schemaTopic := fmt.Sprintf("persistent://public/default/cl-schema-%d", run)
	sp, err := client.CreateProducer(pulsar.ProducerOptions{Topic: schemaTopic,
		Schema: pulsar.NewJSONSchema(`{"type":"record","name":"Rec","fields":[{"name":"id","type":"int"}]}`, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Send(ctx, &pulsar.ProducerMessage{Value: rec{ID: 1}}); err != nil {
		t.Fatal(err)
	}
	sp.Close()
	for _, b := range cl.Brokers {
		tn, _ := utils.GetTopicName(schemaTopic)
		info, err := harness.NewAdmin(t, b).Schemas().GetSchemaInfo(tn.String())
		if err != nil || info.Type != "JSON" {
			t.Fatalf("schema through %s: %v, %v", b.WebURL(), info, err)
		}
	}
}

// topicOwnedBy finds a topic name (persistent://public/default/<prefix>-N) whose owner is broker b.
func topicOwnedBy(t *testing.T, via, b *harness.Process, prefix string) string {
	t.Helper()
	for i := range 200 {
		local := fmt.Sprintf("%s-%d", prefix, i)
		if httpLookup(t, via, local) == b.ServiceURL() {
			return "persistent://public/default/" + local
		}
	}
	t.Fatalf("no topic of %s is owned by %s", prefix, b.ServiceURL())
	return ""
}

// TestClusterOwnerKillAndUnload: a producer and a consumer, connected through broker 1, on a topic
// broker 2 owns. Broker 2 is killed (kill -9) and restarted with the same id and data dir, then the
// topic's bundle is unloaded through broker 1, which moves it with its messages and subscription to
// another broker: the producer never sees a send fail and the consumer receives every message that
// was acknowledged.
func TestClusterOwnerKillAndUnload(t *testing.T) {
	cl := harness.StartBrokerCluster(t, 3, harness.Options{})
	b1, b2 := cl.Brokers[0], cl.Brokers[1]
	topic := topicOwnedBy(t, b1, b2, fmt.Sprintf("cl-kill-%d", time.Now().UnixNano()%1_000_000))
	client := harness.NewClient(t, b1, nil)
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	acked := map[string]bool{}
	send := func(n int, tag string) {
		t.Helper()
		for i := range n {
			payload := fmt.Sprintf("%s-%d", tag, i)
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
				t.Fatalf("send %s: %v", payload, err)
			}
			acked[payload] = true
		}
	}
	send(100, "before")
	cl.Brokers[1].Restart() // SIGKILL, then start again on the same ports and data dir
	send(100, "after-restart")

	// Unload the topic's bundle through broker 1 (307 to its owner, broker 2).
	unloadBundle(t, b1, topic, "")
	send(100, "after-unload")

	got := map[string]bool{}
	for len(got) < len(acked) {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after %d of %d: %v", len(got), len(acked), err)
		}
		got[string(m.Payload())] = true
		_ = cons.Ack(m)
	}
	for p := range acked {
		if !got[p] {
			t.Fatalf("acknowledged message %s never arrived", p)
		}
	}
	// The unload handed the bundle over, with its messages and the subscription, to another broker.
	if owner := httpLookup(t, b1, topic[len("persistent://public/default/"):]); owner == b2.ServiceURL() {
		t.Fatalf("the unloaded bundle stayed on %s", owner)
	}
}

// twoBrokerClusterAndOne starts cluster a of two broker processes and cluster b of one, registered
// with each other, with namespace acme/geo replicated between them.
func twoBrokerClusterAndOne(t *testing.T) (*harness.BrokerCluster, *harness.Cluster, *harness.Cluster) {
	t.Helper()
	cl := harness.StartBrokerCluster(t, 2, harness.Options{Cluster: "a"})
	pb := harness.StartStandalone(t, harness.Options{Cluster: "b"})
	ca, cb := harness.NewCluster(t, "a", cl.Brokers[0]), harness.NewCluster(t, "b", pb)
	harness.RegisterEachOther(t, ca, cb)
	for _, c := range []*harness.Cluster{ca, cb} {
		c.SetTenant(t, "acme", "a", "b")
		c.CreateNamespace(t, "acme/geo", "a", "b")
	}
	return cl, ca, cb
}

// TestClusterReplicates: cluster a is two broker processes, cluster b one. Topics of a namespace
// replicated between them land on both brokers of a; each owner's replicators send its topics to b,
// and b's replicators, registered with broker 1's URL, reach each topic's owner in a by lookup.
func TestClusterReplicates(t *testing.T) {
	cl, ca, cb := twoBrokerClusterAndOne(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 30
	run := time.Now().UnixNano() % 1_000_000
	clientA, clientB := ca.Client(t), cb.Client(t)
	owners := map[string]bool{}
	for i := range 8 {
		local := fmt.Sprintf("geo-%d-%d", run, i)
		aTopic := "persistent://acme/geo/" + local
		resp, err := http.Get(cl.Brokers[0].WebURL() + "/lookup/v2/topic/persistent/acme/geo/" + local)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			BrokerURL string `json:"brokerUrl"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		owners[d.BrokerURL] = true
		// a -> b
		consB, err := clientB.Subscribe(pulsar.ConsumerOptions{Topic: aTopic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		prodA, err := clientA.CreateProducer(pulsar.ProducerOptions{Topic: aTopic})
		if err != nil {
			t.Fatal(err)
		}
		consA, err := clientA.Subscribe(pulsar.ConsumerOptions{Topic: aTopic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		prodB, err := clientB.CreateProducer(pulsar.ProducerOptions{Topic: aTopic})
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if _, err := prodA.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "from-a-%d", j)}); err != nil {
				t.Fatal(err)
			}
			if _, err := prodB.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "from-b-%d", j)}); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			cons pulsar.Consumer
			side string
		}{{consB, "b"}, {consA, "a"}} {
			seen := map[string]bool{}
			for len(seen) < 2*n {
				m, err := c.cons.Receive(ctx)
				if err != nil {
					t.Fatalf("%s on %s after %d of %d: %v", aTopic, c.side, len(seen), 2*n, err)
				}
				seen[string(m.Payload())] = true
				_ = c.cons.Ack(m)
			}
			c.cons.Close()
		}
		prodA.Close()
		prodB.Close()
	}
	if len(owners) != 2 {
		t.Fatalf("the topics are owned by %v, want both brokers of a", owners)
	}
}
