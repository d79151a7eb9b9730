package brokertest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartRestartKeepsPortsAndData(t *testing.T) {
	b := Start(t, WithMaxMessageSize(1048576))
	url := b.ServiceURL
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(client.Options{ServiceURL: b.ServiceURL})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("before restart")}); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	b.Restart()
	if b.ServiceURL != url {
		t.Fatalf("restarted on %s, was %s", b.ServiceURL, url)
	}
	c, err = client.New(client.Options{ServiceURL: b.ServiceURL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: "kept", Subscription: "s", InitialPosition: pulsarpb.CommandSubscribe_Earliest})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload) != "before restart" {
		t.Fatalf("after restart: %v %q", err, m.Payload)
	}
}

func TestStartClustersReplicatesFullMesh(t *testing.T) {
	cs := StartClusters(t, []string{"east", "west"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src, err := client.New(client.Options{ServiceURL: cs[0].ServiceURL})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := client.New(client.Options{ServiceURL: cs[1].ServiceURL})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	cons, err := dst.Subscribe(ctx, client.ConsumerOptions{Topic: "mesh", Subscription: "s", InitialPosition: pulsarpb.CommandSubscribe_Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := src.CreateProducer(ctx, client.ProducerOptions{Topic: "mesh"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("east to west")}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload) != "east to west" || m.ReplicatedFrom != "east" {
		t.Fatalf("got %v %q from %q", err, m.Payload, m.ReplicatedFrom)
	}
}
