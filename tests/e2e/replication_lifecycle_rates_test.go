package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/node"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestReplLifecycleDispatchRate: replicatorDispatchRate set through pulsaradmin at namespace level
// (messages/s and bytes/s in one policy) and at topic level (messages/s only, bytes/s only, each
// replacing the namespace's; and on a partitioned topic, where it holds for each partition) keeps
// six replicators, catching up concurrently from earliest, within ±20% of their limits. The rate is measured as the lcSlope of msgOutCounter (bytesOutCounter) from
// the end of the first second's burst until the replicator is done.
func TestReplLifecycleDispatchRate(t *testing.T) {
	steady := 3.0 // seconds of steady state after the one-second burst
	if !testing.Short() {
		steady = 6
	}
	cs := lcIndependent(t, node.ReplicationStartEarliest, "east", "west")
	east := cs[0]
	ns, _ := utils.GetNamespaceName(lcNamespace)
	const nsMsg, nsByte = 200, 150 * 1024
	if err := east.Admin.Namespaces().SetReplicatorDispatchRate(*ns, utils.DispatchRate{
		DispatchThrottlingRateInMsg: nsMsg, DispatchThrottlingRateInByte: nsByte, RatePeriodInSecond: 1}); err != nil {
		t.Fatalf("namespace replicatorDispatchRate: %v", err)
	}
	if got, err := east.Admin.Namespaces().GetReplicatorDispatchRate(*ns); err != nil || got.DispatchThrottlingRateInMsg != nsMsg || got.DispatchThrottlingRateInByte != nsByte {
		t.Fatalf("namespace replicatorDispatchRate reads back as %+v, %v", got, err)
	}
	cases := []*lcRateCase{
		{name: "namespace-msgs", size: 100, limit: nsMsg},
		{name: "namespace-bytes", size: 1024, bytes: true, limit: nsByte},
		{name: "topic-msgs", size: 100, limit: 100, topicMsg: 100, topicB: -1},
		{name: "topic-bytes", size: 1024, bytes: true, limit: 80 * 1024, topicMsg: -1, topicB: 80 * 1024},
	}
	// A partitioned topic with a topic-level limit: the limit holds for each partition's replicator.
	parent := harness.Topic(t) + "-partitioned"
	if err := east.Admin.Topics().Create(lcTopicName(t, parent), 2); err != nil {
		t.Fatalf("create partitioned %s: %v", parent, err)
	}
	for i := 0; i < 2; i++ {
		cases = append(cases, &lcRateCase{name: fmt.Sprintf("partition-%d", i), size: 100, limit: 120, topicMsg: 120, topicB: -1,
			topic: fmt.Sprintf("%s-partition-%d", parent, i), policyTopic: parent})
	}
	chk := checker.New()
	cl := east.Client(t)
	for _, c := range cases {
		if c.topic == "" {
			c.topic = harness.Topic(t) + "-" + c.name
		}
		if c.policyTopic == "" {
			c.policyTopic = c.topic
		}
		perMsg := float64(c.size)
		if !c.bytes {
			perMsg = 1
		}
		c.n = int64((1 + steady) * c.limit / perMsg)
		sendAsync(t, chk, lcProducer(t, cl, c.topic, c.name), c.name, 0, c.n, c.size)
		if c.topicMsg != 0 || c.topicB != 0 {
			tn := lcTopicName(t, c.policyTopic)
			rate := utils.DispatchRateData{DispatchThrottlingRateInMsg: c.topicMsg, DispatchThrottlingRateInByte: c.topicB, RatePeriodInSecond: 1}
			if err := east.Admin.Topics().SetReplicatorDispatchRate(tn, rate); err != nil {
				t.Fatalf("%s: topic replicatorDispatchRate: %v", c.name, err)
			}
			if got, err := east.Admin.Topics().GetReplicatorDispatchRate(tn); err != nil || got == nil || got.DispatchThrottlingRateInMsg != c.topicMsg || got.DispatchThrottlingRateInByte != c.topicB {
				t.Fatalf("%s: topic replicatorDispatchRate reads back as %+v, %v", c.name, got, err)
			}
		}
	}

	start := time.Now()
	east.replicate(t, "east", "west")
	ctx := testCtx(t, time.Duration(steady+30)*time.Second)
	// One poller per replicator, so that each is sampled often however many there are and however
	// slow the machine is.
	errs := make(chan error, len(cases))
	for _, c := range cases {
		go func() {
			errs <- harness.WaitFor(ctx, func(ctx context.Context) error {
				before := time.Now()
				r, err := east.repl(ctx, c.topic, "west")
				if err != nil {
					return err
				}
				at := before.Sub(start) + time.Since(before)/2
				v := r.MsgOutCounter
				if c.bytes {
					v = r.BytesOutCounter
				}
				c.limited = c.limited || r.RateLimited
				if r.MsgOutCounter >= c.n {
					c.done = time.Now()
					return nil
				}
				if float64(v) >= 1.1*c.limit {
					c.samples = append(c.samples, lcRateSample{at, v})
				}
				return fmt.Errorf("%s: %d of %d sent", c.name, r.MsgOutCounter, c.n)
			})
		}()
	}
	var failed []error
	for range cases {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("replicators under replicatorDispatchRate did not finish: %v", failed)
	}
	t.Logf("all caught up %v after the policy change", time.Since(start).Round(time.Millisecond))
	for _, c := range cases {
		unit := "msg/s"
		if c.bytes {
			unit = "B/s"
		}
		if len(c.samples) < 5 {
			t.Errorf("%s: only %d samples of the steady phase", c.name, len(c.samples))
			continue
		}
		measured := lcSlope(c.samples)
		first, last := c.samples[0], c.samples[len(c.samples)-1]
		t.Logf("%s: %d messages of %d B, limit %.0f %s: measured %.0f %s (%.0f%% of the limit) from %d samples over %v (%d at %v .. %d at %v), done %v after the change, rateLimited seen %v",
			c.name, c.n, c.size, c.limit, unit, measured, unit, 100*measured/c.limit, len(c.samples), (last.at - first.at).Round(time.Millisecond),
			first.v, first.at.Round(time.Millisecond), last.v, last.at.Round(time.Millisecond), c.done.Sub(start).Round(time.Millisecond), c.limited)
		if measured < 0.8*c.limit || measured > 1.2*c.limit {
			t.Errorf("%s: replicated at %.0f %s, want %.0f ±20%%", c.name, measured, unit, c.limit)
		}
		if !c.limited {
			t.Errorf("%s: stats never showed rateLimited while held back", c.name)
		}
	}
}

// TestReplLifecycleDispatchRateChange: a change of the namespace's replicatorDispatchRate reaches a
// running replicator within a second. A replicator catching up at 100 msg/s has about 600 messages
// left (6 s at that rate) when the limit is raised to 1000 msg/s; it must be done within 1.5 s of
// the admin call.
func TestReplLifecycleDispatchRateChange(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartEarliest, "east", "west")
	east := cs[0]
	ns, _ := utils.GetNamespaceName(lcNamespace)
	setRate := func(msgs int) {
		t.Helper()
		if err := east.Admin.Namespaces().SetReplicatorDispatchRate(*ns, utils.DispatchRate{
			DispatchThrottlingRateInMsg: msgs, DispatchThrottlingRateInByte: -1, RatePeriodInSecond: 1}); err != nil {
			t.Fatalf("namespace replicatorDispatchRate %d msg/s: %v", msgs, err)
		}
	}
	setRate(100)
	topic := harness.Topic(t)
	chk := checker.New()
	const n = 800
	sendAsync(t, chk, lcProducer(t, east.Client(t), topic, "p"), "p", 0, n, 100)
	east.replicate(t, "east", "west")
	slow := east.waitRepl(t, 10*time.Second, topic, "west", "past the burst at 100 msg/s", func(r adminapi.ReplicatorStats) error {
		if r.MsgOutCounter < 200 {
			return fmt.Errorf("msgOutCounter %d", r.MsgOutCounter)
		}
		return nil
	})
	if !slow.RateLimited {
		t.Errorf("at 100 msg/s with %d messages left the replicator is not rateLimited: %+v", n-slow.MsgOutCounter, slow)
	}
	setRate(1000)
	changed := time.Now()
	done := east.waitRepl(t, 10*time.Second, topic, "west", "caught up at the new rate", lcCaughtUp)
	took := time.Since(changed)
	t.Logf("%d messages left at 100 msg/s when the limit went to 1000 msg/s; caught up %v later (msgOutCounter %d)", n-slow.MsgOutCounter, took.Round(time.Millisecond), done.MsgOutCounter)
	if took > 1500*time.Millisecond {
		t.Errorf("raising replicatorDispatchRate took effect only after %v, want within a second", took)
	}
}

// TestReplLifecycleRatesAfterBurst: a burst that is replicated entirely within the replicator's
// first second (a new topic, 100 messages sent at once) still shows as a non-zero msgRateOut /
// msgThroughputOut on the source and msgRateIn / msgThroughputIn on the target afterwards: the
// rate window must start from the replicator's start, not from its first sample.
func TestReplLifecycleRatesAfterBurst(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartLatest, "east", "west")
	east, west := cs[0], cs[1]
	east.replicate(t, "east", "west")
	topic := harness.Topic(t)
	tn := lcTopicName(t, topic)
	chk := checker.New()
	sendSync(t, chk, lcProducer(t, east.Client(t), topic, "p"), "p", 0, 100, 1024)
	east.waitRepl(t, 10*time.Second, topic, "west", "caught up", lcCaughtUp)
	harness.Eventually(t, 5*time.Second, "rates of a burst on both sides", func() error {
		est, err := east.Admin.Topics().GetStats(tn)
		if err != nil {
			return err
		}
		wst, err := west.rawStats(testCtx(t, 5*time.Second), topic)
		if err != nil {
			return err
		}
		out, in := est.Replication["west"], wst.InboundReplication["east"]
		if out.MsgRateOut <= 0 || out.MsgThroughputOut <= 0 || in.MsgRateIn <= 0 || in.MsgThroughputIn <= 0 {
			return fmt.Errorf("east replication.west %+v; west inboundReplication.east %+v", out, in)
		}
		return nil
	})
}

// TestReplLifecycleDispatchRateLargeEntries: entries larger than one second's byte budget still
// replicate (the budget goes negative and the next entry waits), so a byte limit never stalls a
// replicator; and the limit is still honoured on average. 3 entries of 128 KiB under 64 KiB/s: the
// first goes at once (budget 64 KiB -> -64 KiB), the second after 1 s, the third 2 s later.
func TestReplLifecycleDispatchRateLargeEntries(t *testing.T) {
	cs := lcIndependent(t, node.ReplicationStartEarliest, "east", "west")
	east, west := cs[0], cs[1]
	ns, _ := utils.GetNamespaceName(lcNamespace)
	const limit, size, n = 64 * 1024, 128 * 1024, 3
	if err := east.Admin.Namespaces().SetReplicatorDispatchRate(*ns, utils.DispatchRate{
		DispatchThrottlingRateInMsg: -1, DispatchThrottlingRateInByte: limit, RatePeriodInSecond: 1}); err != nil {
		t.Fatal(err)
	}
	topic := harness.Topic(t)
	chk := checker.New()
	sendSync(t, chk, lcProducer(t, east.Client(t), topic, "big"), "big", 0, n, size)
	start := time.Now()
	east.replicate(t, "east", "west")
	rs := east.waitRepl(t, 15*time.Second, topic, "west", "every large entry replicated", lcCaughtUp)
	took := time.Since(start)
	t.Logf("%d entries of %d KiB under %d KiB/s: replicated in %v (%.0f KiB/s), bytesOutCounter %d", n, size/1024, limit/1024, took.Round(time.Millisecond),
		float64(rs.BytesOutCounter)/1024/took.Seconds(), rs.BytesOutCounter)
	expected := time.Duration(float64(size-limit+(n-2)*size) / limit * float64(time.Second))
	if took < expected*8/10 || took > expected+5*time.Second {
		t.Errorf("replicated in %v, want about %v (the limit honoured, no stall)", took, expected)
	}
	lcDrain(t, chk, "west", west, topic, "east")
	verify(t, chk, "west", checker.Expect{})
}
