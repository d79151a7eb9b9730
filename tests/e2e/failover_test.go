package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestUnplannedFailoverAndFailback follows the runbook of docs/geo-replication.md §3.4 with real
// processes. East replicates to west, slowly (a replicator dispatch rate), so west lags; east is
// killed with SIGKILL. `failover promote --from east` on west reports exactly the messages east
// held that west never received (checked by reading west), and turns on replication back to east.
// West's producers go on; east comes back; both directions catch up, and `replication verify`
// finds the same messages of both origins on both clusters.
func TestUnplannedFailoverAndFailback(t *testing.T) {
	pair := startReplicationPair(t)
	east, west := harness.NewCluster(t, "east", pair.east), harness.NewCluster(t, "west", pair.west)
	ns, err := utils.GetNamespaceName("public/default")
	if err != nil {
		t.Fatal(err)
	}
	if err := east.Admin.Namespaces().SetReplicatorDispatchRate(*ns, utils.DispatchRate{DispatchThrottlingRateInMsg: 20, RatePeriodInSecond: 1, DispatchThrottlingRateInByte: -1}); err != nil {
		t.Fatalf("replicator dispatch rate on east: %v", err)
	}
	topic := harness.Topic(t)
	const onEast, onWest = 200, 50
	send := func(c *harness.Cluster, n int, prefix string) {
		t.Helper()
		p, err := c.Client(t).CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatalf("%s: producer: %v", c.Name, err)
		}
		defer p.Close()
		for i := range n {
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(prefix, i))}); err != nil {
				t.Fatalf("%s: send %d: %v", c.Name, i, err)
			}
		}
	}
	send(east, onEast, "east-")
	last, err := east.Meridian.LastMessageID(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	lastText := fmt.Sprintf("%d:%d", last.LedgerID, last.EntryID)
	harness.Eventually(t, 20*time.Second, "east's last position advertised to west", func() error {
		var states []adminapi.SourceTopicState
		if _, err := west.Meridian.Do(context.Background(), "GET", "/admin/v2/namespaces/public/default/replicationSources", nil, nil, &states); err != nil {
			return err
		}
		if len(states) != 1 || states[0].LastPosition != lastText {
			return fmt.Errorf("advertised %+v, want %s", states, lastText)
		}
		return nil
	})
	pair.east.Kill()

	ctl := harness.MeridianctlBinary(t)
	run := func(admin string, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(ctl, append([]string{"--admin-url", admin}, args...)...)
		out, err := cmd.Output()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("meridianctl %v: %v", args, err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	code, out := run(west.WebURL(), "-o", "json", "failover", "promote", "public/default", "--from", "east")
	var rep struct {
		FailbackReplication string `json:"failbackReplication"`
		Missing             int64  `json:"missing"`
		MissingExact        bool   `json:"missingExact"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("promote: exit %d, %v\n%s", code, err, out)
	}
	st, err := west.MeridianStats(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	arrived := st.InboundReplication["east"].MsgInCounter
	if !rep.MissingExact || rep.Missing != onEast-arrived || rep.Missing == 0 || rep.FailbackReplication != "turned on" {
		t.Fatalf("promote: %+v; west received %d of east's %d", rep, arrived, onEast)
	}
	t.Logf("east killed with %d of its %d messages on west; promote reports %d missing (exact)", arrived, onEast, rep.Missing)

	// West is the primary now; east comes back.
	send(west, onWest, "west-")
	pair.east.Start()
	if err := east.Meridian.RemoveNamespacePolicy(context.Background(), "public/default", "replicatorDispatchRate", nil); err != nil {
		t.Fatalf("remove the replicator dispatch rate on east: %v", err)
	}
	for _, step := range []struct {
		admin, remote string
	}{{west.WebURL(), "east"}, {east.WebURL(), "west"}} {
		if code, out := run(step.admin, "namespaces", "replication-status", "public/default", "--remote", step.remote, "--wait", "60s", "--interval", "200ms"); code != 0 {
			t.Fatalf("replication to %s not caught up: exit %d\n%s", step.remote, code, out)
		}
	}
	code, out = run(east.WebURL(), "replication", "verify", topic, "--clusters", "east,west")
	if code != 0 || !strings.Contains(out, "same messages on both") {
		t.Fatalf("verify after failback: exit %d\n%s", code, out)
	}
}
