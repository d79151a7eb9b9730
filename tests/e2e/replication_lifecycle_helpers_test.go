package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/node"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// Helpers of the replication lifecycle tests, driven as a user drives them: the admin API through
// pulsaradmin, data through pulsar-client-go, stats through topic stats, internal stats and
// /metrics. Every cluster is an in-process broker (harness.StartInProcess: real TCP, real storage);
// replication between them crosses TCP through the broker's own client. The helpers are prefixed lc
// (lifecycle) to stay out of the way of the other replication tests of this package.

const lcNamespace = "public/default"

// lcCluster is one in-process cluster of harness's multi-cluster helpers, with this file's
// stats and metrics readers.
type lcCluster struct{ *harness.Cluster }

func lcWrap(cs []*harness.Cluster) []*lcCluster {
	out := make([]*lcCluster, 0, len(cs))
	for _, c := range cs {
		out = append(out, &lcCluster{c})
	}
	return out
}

// lcIndependent starts one cluster per name, each with its own metadata (no shared configuration
// store), registers every cluster on every other and allows all of them for tenant public. No
// namespace lists a remote yet. startAt is every broker's --replication-start-at.
func lcIndependent(t *testing.T, startAt node.ReplicationStartAt, names ...string) []*lcCluster {
	t.Helper()
	cs := harness.StartClusters(t, harness.ClustersOptions{Node: func(_ string, o *node.Options) { o.ReplicationStartAt = startAt }}, names...)
	harness.RegisterEachOther(t, cs...)
	for _, c := range cs {
		c.SetTenant(t, "public", names...)
	}
	return lcWrap(cs)
}

// lcShared starts one cluster per name on one etcd configuration store (--config-store,
// --replication-start-at earliest): clusters register themselves there; tenant public allows all
// of them, configured once, and every cluster has seen that before this returns.
func lcShared(t *testing.T, names ...string) []*lcCluster {
	t.Helper()
	url := harness.StartEtcd(t).ConfigStoreURL("meridian-lifecycle")
	cs := harness.StartClusters(t, harness.ClustersOptions{ConfigStore: url,
		Node: func(_ string, o *node.Options) { o.ReplicationStartAt = node.ReplicationStartEarliest }}, names...)
	for _, c := range cs {
		c.WaitClustersKnown(t, 10*time.Second, names...)
	}
	cs[0].SetTenant(t, "public", names...)
	for _, c := range cs {
		harness.Eventually(t, 5*time.Second, c.Name+" sees the tenant's allowed clusters", func() error {
			td, err := c.Admin.Tenants().Get("public")
			if err != nil {
				return err
			}
			for _, n := range names {
				if !slices.Contains(td.AllowedClusters, n) {
					return fmt.Errorf("allowed clusters %v", td.AllowedClusters)
				}
			}
			return nil
		})
	}
	return lcWrap(cs)
}

// replicate sets the namespace's replication clusters through c's admin API.
func (c *lcCluster) replicate(t *testing.T, clusters ...string) {
	t.Helper()
	if err := c.Admin.Namespaces().SetNamespaceReplicationClusters(lcNamespace, clusters); err != nil {
		t.Fatalf("%s: set replication clusters of %s to %v: %v", c.Name, lcNamespace, clusters, err)
	}
}

func lcTopicName(t *testing.T, topic string) utils.TopicName {
	t.Helper()
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatalf("topic name %s: %v", topic, err)
	}
	return *tn
}

// lcTopicStats is the part of the topic stats these tests read, decoded from the raw JSON so that
// Meridian's additions to replication.<remote> (lastError, startMode, ...) are visible; pulsaradmin's
// ReplicatorStats has only Pulsar's fields.
type lcTopicStats struct {
	Publishers []struct {
		ProducerName string `json:"producerName"`
	} `json:"publishers"`
	Subscriptions map[string]json.RawMessage          `json:"subscriptions"`
	Replication   map[string]adminapi.ReplicatorStats `json:"replication"`
	// Inbound links (Meridian's addition): the clusters replicating into the topic.
	InboundReplication map[string]adminapi.InboundReplicationStats `json:"inboundReplication"`
}

func (c *lcCluster) rawStats(ctx context.Context, topic string) (lcTopicStats, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return lcTopicStats{}, err
	}
	url := fmt.Sprintf("%s/admin/v2/%s/stats", c.WebURL(), tn.GetRestPath())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return lcTopicStats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return lcTopicStats{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return lcTopicStats{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return lcTopicStats{}, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	var st lcTopicStats
	if err := json.Unmarshal(body, &st); err != nil {
		return lcTopicStats{}, fmt.Errorf("GET %s: %w", url, err)
	}
	return st, nil
}

// repl returns c's replication.<remote> section of topic's stats, an error if there is none.
func (c *lcCluster) repl(ctx context.Context, topic, remote string) (adminapi.ReplicatorStats, error) {
	st, err := c.rawStats(ctx, topic)
	if err != nil {
		return adminapi.ReplicatorStats{}, err
	}
	r, ok := st.Replication[remote]
	if !ok {
		return adminapi.ReplicatorStats{}, fmt.Errorf("%s: no replication.%s in the stats of %s (have %v)", c.Name, remote, topic, lcKeys(st.Replication))
	}
	return r, nil
}

// inbound returns c's inboundReplication.<source> stats of topic.
func (c *lcCluster) inbound(ctx context.Context, topic, source string) (adminapi.InboundReplicationStats, error) {
	st, err := c.rawStats(ctx, topic)
	if err != nil {
		return adminapi.InboundReplicationStats{}, err
	}
	in, ok := st.InboundReplication[source]
	if !ok {
		return adminapi.InboundReplicationStats{}, fmt.Errorf("%s: no inboundReplication.%s in the stats of %s (have %v)", c.Name, source, topic, lcKeys(st.InboundReplication))
	}
	return in, nil
}

// waitInbound polls c's inboundReplication.<source> stats of topic until ok accepts them.
func (c *lcCluster) waitInbound(t *testing.T, timeout time.Duration, topic, source, what string, ok func(adminapi.InboundReplicationStats) error) adminapi.InboundReplicationStats {
	t.Helper()
	var got adminapi.InboundReplicationStats
	harness.Eventually(t, timeout, fmt.Sprintf("%s <- %s, %s: %s", c.Name, source, topic, what), func() error {
		in, err := c.inbound(testCtx(t, timeout), topic, source)
		if err != nil {
			return err
		}
		if err := ok(in); err != nil {
			return fmt.Errorf("%w (stats %+v)", err, in)
		}
		got = in
		return nil
	})
	return got
}

func lcKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// waitRepl polls c's replication.<remote> stats of topic until ok accepts them (nil error) or
// timeout passes, and returns the accepted stats.
func (c *lcCluster) waitRepl(t *testing.T, timeout time.Duration, topic, remote, what string, ok func(adminapi.ReplicatorStats) error) adminapi.ReplicatorStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got adminapi.ReplicatorStats
	var last error // the last answer that was not cut short by the deadline
	if err := harness.WaitFor(ctx, func(ctx context.Context) error {
		r, err := c.repl(ctx, topic, remote)
		if err != nil {
			if ctx.Err() == nil {
				last = err
			}
			return err
		}
		if err := ok(r); err != nil {
			last = fmt.Errorf("%w (stats %+v)", err, r)
			return last
		}
		got = r
		return nil
	}); err != nil {
		t.Fatalf("%s -> %s, %s: %s within %v: %v (last answer: %v)", c.Name, remote, topic, what, timeout, err, last)
	}
	return got
}

// lcCaughtUp accepts a connected replicator with nothing left to send.
func lcCaughtUp(r adminapi.ReplicatorStats) error {
	if !r.Connected || r.ReplicationBacklog != 0 {
		return fmt.Errorf("connected=%v backlog=%d lastError=%q", r.Connected, r.ReplicationBacklog, r.LastError)
	}
	return nil
}

// cursorsOf returns the names of topic's cursors on c (internal stats, through pulsaradmin).
func (c *lcCluster) cursorsOf(t *testing.T, topic string) (map[string]utils.CursorStats, error) {
	t.Helper()
	is, err := c.Admin.Topics().GetInternalStats(lcTopicName(t, topic))
	if err != nil {
		return nil, err
	}
	return is.Cursors, nil
}

// lcProducer creates a producer without batching, so that one message is one entry and backlogs
// count messages.
func lcProducer(t *testing.T, cl pulsar.Client, topic, name string) pulsar.Producer {
	t.Helper()
	return newProducer(t, cl, pulsar.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
}

// lcProduceAndLeave connects to c, sends messages from..to-1 of producer name to topic and closes
// the producer and the client again, so that no client is connected afterwards. It returns the
// message ids.
func lcProduceAndLeave(t *testing.T, chk *checker.Checker, c *lcCluster, topic, name string, from, to int64) []pulsar.MessageID {
	t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.ServiceURL(), Logger: harness.ClientLogger(), OperationTimeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("client for %s: %v", c.Name, err)
	}
	defer cl.Close()
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
	if err != nil {
		t.Fatalf("producer on %s: %v", c.Name, err)
	}
	defer p.Close()
	return sendSync(t, chk, p, name, from, to, 128)
}

// lcDrain reads topic on c from the earliest message until the broker has nothing more, records
// every message in chk as stream, checks that each is marked replicated from origin, and returns
// the messages. Call it once the source's backlog is 0, so that "nothing more" means "everything".
func lcDrain(t *testing.T, chk *checker.Checker, stream string, c *lcCluster, topic, origin string) []pulsar.Message {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	r := newReader(t, c.Client(t), pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	var out []pulsar.Message
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("reader on %s after %d messages: %v", c.Name, len(out), err)
		}
		chk.Received(stream, m.Payload(), m.ID().String())
		if origin != "" && (!m.IsReplicated() || m.GetReplicatedFrom() != origin) {
			t.Errorf("message %v on %s: replicated=%v from %q, want from %q", m.ID(), c.Name, m.IsReplicated(), m.GetReplicatedFrom(), origin)
		}
		out = append(out, m)
	}
	return out
}

// lcParsePos parses "ledger:entry".
func lcParsePos(s string) (ledger, entry int64, err error) {
	l, e, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("position %q is not ledger:entry", s)
	}
	if ledger, err = strconv.ParseInt(l, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("position %q: %w", s, err)
	}
	if entry, err = strconv.ParseInt(e, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("position %q: %w", s, err)
	}
	return ledger, entry, nil
}

// replLabels are the Prometheus labels of topic's replication series towards remote on c.
func (c *lcCluster) replLabels(topic, remote string) map[string]string {
	return map[string]string{"cluster": c.Name, "namespace": lcNamespace, "topic": topic, "remote_cluster": remote}
}

// lcWaitMetrics polls c's /metrics until ok accepts a scrape, within timeout.
func (c *lcCluster) lcWaitMetrics(t *testing.T, timeout time.Duration, what string, ok func(promScrape) error) promScrape {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got promScrape
	if err := harness.WaitFor(ctx, func(ctx context.Context) error {
		p, err := scrapePromMetrics(ctx, c.WebURL())
		if err != nil {
			return err
		}
		if err := ok(p); err != nil {
			return err
		}
		got = p
		return nil
	}); err != nil {
		t.Fatalf("%s /metrics: %s within %v: %v", c.Name, what, timeout, err)
	}
	return got
}

// lcMetricIs returns a check that the one sample name{labels} equals want.
func lcMetricIs(name string, labels map[string]string, want float64) func(promScrape) error {
	return func(p promScrape) error {
		v, err := p.value(name, labels)
		if err != nil {
			return err
		}
		if v != want {
			return fmt.Errorf("%s = %v, want %v", name, v, want)
		}
		return nil
	}
}

// lcAllOf combines metric checks.
func lcAllOf(checks ...func(promScrape) error) func(promScrape) error {
	return func(p promScrape) error {
		for _, c := range checks {
			if err := c(p); err != nil {
				return err
			}
		}
		return nil
	}
}

// lcRateCase is one replicator under a replicatorDispatchRate.
type lcRateCase struct {
	name     string
	size     int     // payload bytes
	bytes    bool    // the byte limit binds (else the message limit)
	limit    float64 // messages/s or bytes/s
	topicMsg int64   // topic-level policy, -1 unlimited; 0 with topicByte 0: no topic policy
	topicB   int64
	n        int64 // messages stored before replication starts
	topic    string
	// policyTopic carries the topic-level policy: the topic itself, or a partition's partitioned
	// topic.
	policyTopic string

	// measured
	samples []lcRateSample // steady phase: past the burst, not yet done
	done    time.Time
	limited bool
}

// lcRateSample is a counter read at a time (the midpoint of the stats request).
type lcRateSample struct {
	at time.Duration // since the policy change
	v  int64
}

// lcSlope fits v = a + b*at by least squares and returns b per second.
func lcSlope(ss []lcRateSample) float64 {
	n := float64(len(ss))
	var sx, sy, sxx, sxy float64
	for _, s := range ss {
		x, y := s.at.Seconds(), float64(s.v)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// lcSendMarked sends message seq of logical producer name through p with the given per-message
// replication settings, recording it in chk.
func lcSendMarked(t *testing.T, chk *checker.Checker, p pulsar.Producer, name string, seq int64, clusters []string, disable bool) {
	t.Helper()
	const size = 64
	chk.Sent(name, seq, size)
	id, err := p.Send(testCtx(t, 20*time.Second), &pulsar.ProducerMessage{
		Payload: checker.Payload(name, seq, size), ReplicationClusters: clusters, DisableReplication: disable})
	if err != nil {
		chk.Failed(name, seq, err)
		t.Fatalf("send %s#%d: %v", name, seq, err)
	}
	chk.Acked(name, seq, id.String())
}
