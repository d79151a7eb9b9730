package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/cluster"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
)

// takeOver writes bundle b's record as a takeover by broker to from the broker named in it (as a
// lookup does once that broker's registration is gone; here the broker stays live, so the test
// decides when the hand-back runs).
func takeOver(t *testing.T, ctx context.Context, n *Node, b cluster.Bundle, to string) {
	t.Helper()
	store := n.components.localStore
	key := "/local/bundles/" + b.Namespace + "/" + b.Range.String() // docs/metadata.md
	kv, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var own cluster.Ownership
	if err := json.Unmarshal(kv.Value, &own); err != nil {
		t.Fatal(err)
	}
	floor, err := cluster.AllocateLedgerIDs(ctx, store, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	val, _ := json.Marshal(cluster.Ownership{Broker: to, Epoch: own.Epoch + 1, Stranded: []string{own.Broker}, IDFloor: floor})
	if _, err := store.Put(ctx, key, val, kv.Version); err != nil {
		t.Fatal(err)
	}
}

// TestStrandedDataMergesBack: b1 serves a topic and a subscription; its bundle is taken over by b2
// (b1 stranded), which serves new messages and the same subscription; then b2 hands the bundle
// back and b1 merges: the subscription gets exactly the messages neither side acknowledged, and
// the log holds every message once, in order. A bundle b1 is stranded on but holds nothing of is
// left with b2, and b1 takes itself off its record.
func TestStrandedDataMergesBack(t *testing.T) {
	// The test runs the passes itself. Restored after the brokers stop (cleanups run last first).
	was := strandedCheckInterval
	t.Cleanup(func() { strandedCheckInterval = was })
	strandedCheckInterval = time.Hour
	n1, n2 := startPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic, bundle := topicServedBy(t, n1, "stranded")
	ns := "public/default"

	c, err := client.New(client.Options{ServiceURL: n1.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic.String(), Subscription: "s", AckWithResponse: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic.String()})
	if err != nil {
		t.Fatal(err)
	}
	send := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			// A send refused by a topic that is closing (ServiceNotReady: nothing stored) is sent
			// again; this client does not resend by itself.
			poll.UntilNil(t, 10*time.Second, fmt.Sprintf("send m%02d", i), func() error {
				_, err := p.Send(ctx, client.ProducerMessage{Payload: fmt.Appendf(nil, "m%02d", i)})
				if err != nil && !errors.Is(err, wire.ErrServiceNotReady) && !strings.Contains(err.Error(), "ServiceNotReady") {
					t.Fatal(err)
				}
				return err
			})
		}
	}
	send(0, 10)
	if got := receiveN(t, ctx, cons, 4); got[3] != "m03" {
		t.Fatalf("received %v", got)
	}
	cons.Close(ctx)

	takeOver(t, ctx, n1, bundle, "b2")
	poll.Until(t, 10*time.Second, "b2 to serve the bundle", func() bool { return n2.components.member.coord.Owns(ns, topic.String()) })
	// b1 closes the topic when its view shows the bundle lost (OnLost, off the watch goroutine);
	// until then the producer's sends would still land there (and merge back later).
	poll.Until(t, 10*time.Second, "b1 to close the topic", func() bool {
		for _, l := range n1.components.broker.LoadedTopics() {
			if l.Name() == topic {
				return false
			}
		}
		return true
	})
	send(10, 20) // the producer reconnects to b2
	onB2, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic.String(), Subscription: "s", AckWithResponse: true})
	if err != nil {
		t.Fatal(err)
	}
	// b2 does not know s: it starts at b2's first message, not at the end (the bundle has a
	// stranded broker).
	if got := receiveN(t, ctx, onB2, 5); got[0] != "m10" || got[4] != "m14" {
		t.Fatalf("s on b2 received %v", got)
	}
	onB2.Close(ctx)

	// A second bundle, taken over from b1 while b1 held nothing of it (b1 serves it, so it is not
	// the first one, which b2 owns now).
	_, emptyBundle := topicServedBy(t, n1, "nothing")
	takeOver(t, ctx, n1, emptyBundle, "b2")
	poll.Until(t, 10*time.Second, "b1 to see itself stranded twice", func() bool { return len(n1.components.member.coord.StrandedHere()) == 2 })

	// b1 takes itself off the bundle it holds nothing of (which stays with b2), not off the other;
	// b2 hands that one back, and b1 merges.
	n1.strandedPass(ctx, map[cluster.Bundle]time.Time{})
	poll.Until(t, 10*time.Second, "b2 to see b1 unstranded", func() bool { return len(n2.components.member.coord.StrandedReturns()) == 1 })
	failed := map[cluster.Bundle]time.Time{}
	n2.strandedPass(ctx, failed)
	if len(failed) != 0 {
		t.Fatalf("handing the bundle back failed: %v", failed)
	}
	// b1 learns that the bundle is back from its own watch, after b2 has written the record.
	poll.Until(t, 10*time.Second, "b1 to serve the bundle again", func() bool { return n1.components.member.coord.Owns(ns, topic.String()) })
	own, _, err := n1.components.member.coord.StoredRecord(ctx, emptyBundle)
	if err != nil || own.Broker != "b2" || len(own.Stranded) != 0 {
		t.Fatalf("the empty bundle's record = %+v, %v; want b2's with none stranded", own, err)
	}
	own, _, _ = n1.components.member.coord.StoredRecord(ctx, bundle)
	if own.Broker != "b1" || len(own.Stranded) != 0 {
		t.Fatalf("the merged bundle's record = %+v", own)
	}

	send(20, 22)
	again, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic.String(), Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"m04", "m05", "m06", "m07", "m08", "m09", "m15", "m16", "m17", "m18", "m19", "m20", "m21"}
	if got := receiveN(t, ctx, again, len(want)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the merge s received %v, want %v", got, want)
	}
	all, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic.String(), Subscription: "all", InitialPosition: client.PositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, ctx, all, 22)
	for i, m := range got {
		if m != fmt.Sprintf("m%02d", i) {
			t.Fatalf("message %d of the merged log is %s (all: %v)", i, m, got)
		}
	}
}
