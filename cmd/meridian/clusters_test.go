package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/freeport"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// freeBasePort finds a port p such that p, p+10 and p+20 are free on loopback (the --clusters
// layout for three clusters).
func freeBasePort(t *testing.T) int {
	t.Helper()
	return freeport.Base(t, 10, 20)
}

// TestProcessClustersModeReplicatesFullMesh runs `meridian standalone --clusters a,b,c` (the README's
// command) and checks that a message produced on one cluster arrives on another (replicated_from
// set), around the ring. Three clusters: the last one registers itself just before the mesh is
// configured through the first one's view of the store, which once refused to start when that view
// had not caught up yet.
func TestProcessClustersModeReplicatesFullMesh(t *testing.T) {
	brokerBase, webBase := freeBasePort(t), freeBasePort(t)
	p := startProcess(t, "--clusters", "a,b,c", "--data-dir", t.TempDir(),
		"--broker-addr", fmt.Sprintf("127.0.0.1:%d", brokerBase), "--web-addr", fmt.Sprintf("127.0.0.1:%d", webBase))
	p.waitReady(t, fmt.Sprintf("127.0.0.1:%d", webBase))
	p.waitReady(t, fmt.Sprintf("127.0.0.1:%d", webBase+10))
	p.waitReady(t, fmt.Sprintf("127.0.0.1:%d", webBase+20))

	urls := map[string]string{
		"a": fmt.Sprintf("pulsar://127.0.0.1:%d", brokerBase),
		"b": fmt.Sprintf("pulsar://127.0.0.1:%d", brokerBase+10),
		"c": fmt.Sprintf("pulsar://127.0.0.1:%d", brokerBase+20),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, dir := range [][2]string{{"a", "b"}, {"b", "c"}, {"c", "a"}} {
		from, to := dir[0], dir[1]
		topic := fmt.Sprintf("persistent://public/default/mesh-%s-to-%s", from, to)
		src, err := client.New(client.Options{ServiceURL: urls[from]})
		if err != nil {
			t.Fatal(err)
		}
		dst, err := client.New(client.Options{ServiceURL: urls[to]})
		if err != nil {
			t.Fatal(err)
		}
		cons, err := dst.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s",
			InitialPosition: pulsarpb.CommandSubscribe_Earliest})
		if err != nil {
			t.Fatalf("subscribe on %s: %v", to, err)
		}
		prod, err := src.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatalf("producer on %s: %v", from, err)
		}
		if _, err := prod.Send(ctx, client.ProducerMessage{Payload: []byte("hello from " + from)}); err != nil {
			t.Fatalf("send on %s: %v", from, err)
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive on %s: %v\n%s", to, err, p.out.String())
		}
		if string(m.Payload) != "hello from "+from || m.ReplicatedFrom != from {
			t.Fatalf("on %s got %q replicated from %q", to, m.Payload, m.ReplicatedFrom)
		}
		_ = src.Close()
		_ = dst.Close()
	}
}
