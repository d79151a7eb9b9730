package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/client"
)

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	code, body := httpGet(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

// TestBrokerStatsOwnershipAndInternalInfo calls the endpoints pulsaradmin and dashboards use for a
// broker's view (broker-stats/metrics, broker-stats/topics, ownedNamespaces) and a topic's
// internal-info on a broker with traffic, and checks Pulsar's shapes and the values.
func TestBrokerStatsOwnershipAndInternalInfo(t *testing.T) {
	n := startNode(t, testOptions(t, t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "persistent://public/default/broker-stats"
	publishWithBacklog(t, ctx, n.ServiceURL(), topic, 3)
	base := n.WebURL() + "/admin/v2"

	var topics map[string]map[string]map[string]map[string]adminapi.TopicStats
	getJSON(t, base+"/broker-stats/topics", &topics)
	st, found := topics["public/default"]["0x00000000_0xffffffff"]["persistent"][topic]
	if !found || st.MsgInCounter != 3 || st.Subscriptions["s1"].MsgBacklog != 3 {
		t.Errorf("broker-stats/topics: %s: found %v, msgInCounter %d, s1 backlog %d; all: %v", topic, found, st.MsgInCounter, st.Subscriptions["s1"].MsgBacklog, topics)
	}

	var metrics []struct {
		Metrics    map[string]float64 `json:"metrics"`
		Dimensions map[string]string  `json:"dimensions"`
	}
	getJSON(t, base+"/broker-stats/metrics", &metrics)
	var brokers []string
	getJSON(t, base+"/brokers/standalone", &brokers)
	if len(brokers) != 1 {
		t.Fatalf("brokers of standalone: %v", brokers)
	}
	foundTopics, foundSub := false, false
	for _, m := range metrics {
		if m.Dimensions["broker"] != brokers[0] || m.Dimensions["cluster"] != "standalone" {
			t.Fatalf("broker-stats/metrics entry without this broker's dimensions: %v", m.Dimensions)
		}
		if v, ok := m.Metrics["pulsar_broker_topics_count"]; ok && v >= 1 {
			foundTopics = true
		}
		if m.Dimensions["topic"] == topic && m.Dimensions["subscription"] == "s1" && m.Metrics["pulsar_subscription_back_log"] == 3 {
			foundSub = true
		}
	}
	if !foundTopics || !foundSub {
		t.Errorf("broker-stats/metrics: pulsar_broker_topics_count found %v, s1's backlog of 3 found %v", foundTopics, foundSub)
	}

	var owned map[string]adminapi.NamespaceOwnershipStatus
	getJSON(t, base+"/brokers/standalone/"+brokers[0]+"/ownedNamespaces", &owned)
	if s, ok := owned["public/default/0x00000000_0xffffffff"]; !ok || !s.IsActive || s.BrokerAssignment != "shared" || s.IsControlled {
		t.Errorf("ownedNamespaces: %v", owned)
	}
	if code, body := httpGet(t, base+"/brokers/standalone/elsewhere:6650/ownedNamespaces"); code != http.StatusNotFound {
		t.Errorf("ownedNamespaces of another broker: %d %s, want 404", code, body)
	}
	if code, body := httpGet(t, base+"/brokers/nosuchcluster/"+brokers[0]+"/ownedNamespaces"); code != http.StatusNotFound {
		t.Errorf("ownedNamespaces of an unknown cluster: %d %s, want 404", code, body)
	}

	var info adminapi.ManagedLedgerInfo
	getJSON(t, base+"/persistent/public/default/broker-stats/internal-info", &info)
	var entries int64
	for _, l := range info.Ledgers {
		if l.Entries != nil {
			entries += *l.Entries
		}
	}
	cur, ok := info.Cursors["s1"]
	if entries != 3 || !ok || cur.MarkDelete == nil || info.CreationDate == "" {
		t.Errorf("internal-info: %d entries in %+v, cursor s1 %+v, creationDate %q", entries, info.Ledgers, cur, info.CreationDate)
	}
	if code, body := httpGet(t, base+"/persistent/public/default/never-created/internal-info"); code != http.StatusNotFound {
		t.Errorf("internal-info of a missing topic: %d %s, want 404", code, body)
	}
}

// publishWithBacklog subscribes s1 to topic (so the messages stay as its backlog) and publishes n
// messages through this module's client; the connection stays open until the test ends.
func publishWithBacklog(t *testing.T, ctx context.Context, serviceURL, topic string, n int) {
	t.Helper()
	c, err := client.New(client.Options{ServiceURL: serviceURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cons.Close(context.Background()) })
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := p.Send(ctx, client.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}
