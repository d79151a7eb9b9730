package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/cluster"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/poll"
)

// startPair starts two brokers of one cluster sharing an in-process store, with no load shedding
// and no hand-over at stop (the tests move bundles themselves).
func startPair(t *testing.T) (*Node, *Node) {
	t.Helper()
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	var out []*Node
	for i := 1; i <= 2; i++ {
		o := testOptions(t, t.TempDir())
		o.SharedMetadataStore = store
		o.BrokerID = fmt.Sprintf("b%d", i)
		o.LoadSheddingInterval, o.HandOverTimeout = -1, -1
		out = append(out, startNode(t, o))
	}
	// Each sees the other live before a test picks a hand-over target (HandOverTarget is empty
	// until then).
	for _, n := range out {
		poll.Until(t, 10*time.Second, "both brokers live in "+n.opts.BrokerID+"'s view", func() bool {
			return len(n.components.member.coord.Brokers()) == 2
		})
	}
	return out[0], out[1]
}

// topicServedBy finds a topic of public/default whose bundle n serves.
func topicServedBy(t *testing.T, n *Node, prefix string) (naming.TopicName, cluster.Bundle) {
	t.Helper()
	coord := n.components.member.coord
	for i := range 200 {
		topic, _ := naming.ParseTopic(fmt.Sprintf("persistent://public/default/%s-%d", prefix, i))
		d, err := coord.Lookup(context.Background(), "public/default", topic.String())
		if err != nil {
			t.Fatal(err)
		}
		if d.Action == cluster.Connect {
			return topic, coord.BundleOf("public/default", topic.String())
		}
	}
	t.Fatalf("no topic served by %s", coord.Self().ID)
	return naming.TopicName{}, cluster.Bundle{}
}

// receiveN receives n messages and returns their payloads in order, acknowledging each.
func receiveN(t *testing.T, ctx context.Context, cons *client.Consumer, n int) []string {
	t.Helper()
	var out []string
	for range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after %d: %v", len(out), err)
		}
		out = append(out, string(m.Payload))
		if err := cons.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestHandOverMovesMessagesAndSubscriptions: a bundle handed over from b1 to b2 arrives with its
// messages at the same positions and its subscriptions where they were; b1 keeps no copy, and the
// topic goes on on b2.
func TestHandOverMovesMessagesAndSubscriptions(t *testing.T) {
	n1, n2 := startPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic, bundle := topicServedBy(t, n1, "move")

	c, err := client.New(client.Options{ServiceURL: n1.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	consumed, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic.String(), Subscription: "consumed", AckWithResponse: true})
	if err != nil {
		t.Fatal(err)
	}
	untouched, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic.String(), Subscription: "untouched"})
	if err != nil {
		t.Fatal(err)
	}
	untouched.Close(ctx)
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic.String()})
	if err != nil {
		t.Fatal(err)
	}
	var ids []client.MessageID
	for i := range 100 {
		id, err := p.Send(ctx, client.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if got := receiveN(t, ctx, consumed, 40); got[39] != "m39" {
		t.Fatalf("received %v", got)
	}
	consumed.Close(ctx)

	target, _ := n1.components.member.coord.HandOverTarget(bundle)
	if err := n1.handOver(ctx, bundle, target); err != nil {
		t.Fatal(err)
	}
	// Each broker learns the completed move from its own watch of the record.
	poll.Until(t, 10*time.Second, "the bundle to change owner in both brokers' views", func() bool {
		return !n1.components.member.coord.Owns("public/default", topic.String()) && n2.components.member.coord.Owns("public/default", topic.String())
	})
	if ok, err := n1.components.engine.LedgerExists(ctx, topic.StorageName()); err != nil || ok {
		t.Fatalf("b1 still has the ledger: %v %v", ok, err)
	}

	// The producer reconnects to b2 and goes on; message ids go on from above the moved ones.
	id, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("m100")})
	if err != nil {
		t.Fatal(err)
	}
	if last := ids[len(ids)-1]; id.LedgerID < last.LedgerID || id.LedgerID == last.LedgerID && id.EntryID <= last.EntryID {
		t.Fatalf("a message sent after the move got id %v, not above the moved %v", id, last)
	}
	again, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic.String(), Subscription: "consumed"})
	if err != nil {
		t.Fatal(err)
	}
	if got := receiveN(t, ctx, again, 61); got[0] != "m40" || got[60] != "m100" {
		t.Fatalf("the consumed subscription resumed at %s and ended at %s", got[0], got[60])
	}
	all, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic.String(), Subscription: "untouched"})
	if err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, ctx, all, 101)
	for i, m := range got {
		if m != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d on b2 is %s", i, m)
		}
	}
}

// TestFailedHandOverLeavesTheBundle: a hand-over whose copy fails (the target cannot be reached)
// ends with the bundle still served by its owner, with everything it had.
func TestFailedHandOverLeavesTheBundle(t *testing.T) {
	n1, _ := startPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic, bundle := topicServedBy(t, n1, "stay")
	c, err := client.New(client.Options{ServiceURL: n1.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic.String(), Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic.String()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := p.Send(ctx, client.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	target, _ := n1.components.member.coord.HandOverTarget(bundle)
	target.WebURL = "http://127.0.0.1:1" // nothing listens there: the stream cannot be sent
	if err := n1.handOver(ctx, bundle, target); err == nil {
		t.Fatal("a hand-over to an unreachable broker succeeded")
	}
	if !n1.components.member.coord.Owns("public/default", topic.String()) {
		t.Fatal("the owner does not serve the bundle after the failed hand-over")
	}
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("m20")}); err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, ctx, cons, 21)
	for i, m := range got {
		if m != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d is %s", i, m)
		}
	}
}

// TestAbandonedMoveLeavesNoCopyOnTheTarget: a topic the target stored during a move that is then
// aborted is deleted there (it is not the bundle's data: the owner goes on changing it), and a
// stream of that earlier move is refused once a later one began.
func TestAbandonedMoveLeavesNoCopyOnTheTarget(t *testing.T) {
	n1, n2 := startPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic, bundle := topicServedBy(t, n1, "abandoned")
	c, err := client.New(client.Options{ServiceURL: n1.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic.String()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, client.ProducerMessage{Payload: []byte("m0")}); err != nil {
		t.Fatal(err)
	}
	coord := n1.components.member.coord
	target, _ := coord.HandOverTarget(bundle)
	n1.components.member.startMove(bundle) // driven here, step by step: the orphan check leaves it
	defer n1.components.member.endMove(bundle)
	epoch, err := coord.BeginHandOver(ctx, bundle, target.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := n1.copyBundle(ctx, bundle, target, epoch); err != nil {
		t.Fatal(err)
	}
	if ok, _ := n2.components.engine.LedgerExists(ctx, topic.StorageName()); !ok {
		t.Fatal("the target did not store the topic")
	}
	if err := coord.AbortHandOver(ctx, bundle); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the target to delete the abandoned copy", func() bool {
		ok, err := n2.components.engine.LedgerExists(ctx, topic.StorageName())
		return err == nil && !ok
	})
	// A later move refuses what the earlier one would send.
	later, err := coord.BeginHandOver(ctx, bundle, target.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n1.sendLedger(ctx, bundle, topic, target, epoch); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("a stream of the earlier move = %v, want 409", err)
	}
	if _, err := n1.sendLedger(ctx, bundle, topic, target, later); err != nil {
		t.Fatalf("a stream of the current move: %v", err)
	}
	if err := coord.AbortHandOver(ctx, bundle); err != nil {
		t.Fatal(err)
	}
	if !coord.Owns("public/default", topic.String()) {
		t.Fatal("the owner does not serve the bundle after the aborted moves")
	}
}

// TestOrphanedMoveIsEnded: a move of this broker's bundle that nothing here drives (its begin
// was written but the caller never learned it) is ended, and the bundle is served again, without
// a restart.
func TestOrphanedMoveIsEnded(t *testing.T) {
	was := orphanCheckInterval
	orphanCheckInterval = 50 * time.Millisecond
	t.Cleanup(func() { orphanCheckInterval = was })
	n1, _ := startPair(t)
	topic, bundle := topicServedBy(t, n1, "orphan")
	coord := n1.components.member.coord
	target, _ := coord.HandOverTarget(bundle)
	if _, err := coord.BeginHandOver(context.Background(), bundle, target.ID); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the orphaned move to end", func() bool {
		return coord.Owns("public/default", topic.String())
	})
}
