package node

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/client"
)

// TestMeasureHandOver measures how long a bundle whose topic holds a backlog is unavailable while
// it moves (docs/cluster.md, "What it carries"). It runs by hand:
//
//	MERIDIAN_MEASURE_HANDOVER=1 go test -run TestMeasureHandOver -v ./internal/node/
func TestMeasureHandOver(t *testing.T) {
	if testing.Short() || os.Getenv("MERIDIAN_MEASURE_HANDOVER") == "" {
		t.Skip("a measurement: set MERIDIAN_MEASURE_HANDOVER=1")
	}
	for _, mib := range []int{1, 16, 128} {
		t.Run(fmt.Sprintf("%dMiB", mib), func(t *testing.T) {
			n1, _ := startPair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			topic, bundle := topicServedBy(t, n1, "measure")
			c, err := client.New(client.Options{ServiceURL: n1.ServiceURL()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cons, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic.String(), Subscription: "backlog"})
			if err != nil {
				t.Fatal(err)
			}
			cons.Close(ctx)
			p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic.String(), BatchingMaxMessages: 100})
			if err != nil {
				t.Fatal(err)
			}
			payload := make([]byte, 1024)
			for i := range mib * 1024 {
				if err := p.SendAsync(ctx, client.ProducerMessage{Payload: payload}, func(_ client.MessageID, err error) {
					if err != nil {
						t.Errorf("send %d: %v", i, err)
					}
				}); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			target, _ := n1.components.member.coord.HandOverTarget(bundle)
			began := time.Now()
			if err := n1.handOver(ctx, bundle, target); err != nil {
				t.Fatal(err)
			}
			took := time.Since(began)
			t.Logf("%d MiB backlog (%d messages of 1 KiB in batches of 100): moved in %v, %.0f MiB/s", mib, mib*1024, took.Round(time.Millisecond), float64(mib)/took.Seconds())
		})
	}
}
