package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/metadata/etcdstore/etcdtest"
	"github.com/meridian-mq/meridian/internal/metadata/stores"
	"github.com/meridian-mq/meridian/internal/poll"
)

// TestCoordinatorsOnEtcd: three brokers, each with its own etcd client, agree on every bundle's
// owner; when one broker's registration ends its bundles are held, not moved.
func TestCoordinatorsOnEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	srv := etcdtest.Start(t)
	ctx := context.Background()
	var cs []*Coordinator
	for i := 1; i <= 3; i++ {
		store, err := stores.Open(ctx, srv.URL("/c1"), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		c, err := Start(ctx, Options{Store: store, SessionTTL: time.Second, HoldTimeout: 500 * time.Millisecond,
			Self: BrokerInfo{ID: fmt.Sprintf("b%d", i), ServiceURL: fmt.Sprintf("pulsar://127.0.0.%d:6650", i)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		cs = append(cs, c)
	}
	waitBrokers(t, cs, 3)
	owner := map[string]string{}
	for i := range 24 {
		topic := fmt.Sprintf("persistent://public/default/t-%d", i)
		for _, c := range cs {
			d, err := c.Lookup(ctx, "public/default", topic)
			if err != nil {
				t.Fatal(err)
			}
			if prev, ok := owner[topic]; ok && prev != d.Broker.ID {
				t.Fatalf("%s: %s says %s, earlier %s", topic, c.Self().ID, d.Broker.ID, prev)
			}
			owner[topic] = d.Broker.ID
		}
	}
	if total := len(cs[0].OwnedBundles()) + len(cs[1].OwnedBundles()) + len(cs[2].OwnedBundles()); total != DefaultBundleCount {
		t.Fatalf("%d bundles owned, want %d", total, DefaultBundleCount)
	}
	// b3 goes away: every other broker sees it leave, and its bundles stay recorded as its own.
	owned := cs[2].OwnedBundles()
	cs[2].Close(ctx)
	poll.Until(t, 5*time.Second, "b3 to leave", func() bool { return len(cs[0].Brokers()) == 2 })
	for _, b := range owned {
		if got := cs[0].view.owner(b); got != "b3" {
			t.Fatalf("bundle %s now owned by %q", b, got)
		}
	}
}
