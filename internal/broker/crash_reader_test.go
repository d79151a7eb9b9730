package broker

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// TestReaderAcrossCrashRestarts: batches published over several crash-restarts (new ledger id
// each time, dedup on) are all read back by a reader from Earliest that refills permits like the
// Go client, ending at GET_LAST_MESSAGE_ID's position.
func TestReaderAcrossCrashRestarts(t *testing.T) {
	for iter := 0; iter < 6; iter++ {
		e := newEnv(t, Config{AutoTopicCreation: true, DedupDefault: true})
		rng := rand.New(rand.NewPCG(uint64(iter), 9))
		seq := int64(0)
		total := 0
		for round := 0; round < 3; round++ {
			top := e.topic("rc")
			p := addProducer(t, top, ProducerOptions{Name: "prod"})
			for i := 0; i < 5+rng.IntN(10); i++ {
				n := 1 + rng.IntN(300)
				r := publishSync(t, p, PublishRequest{Entry: entry(t, "prod", uint64(seq), n, "x"), SequenceID: seq, NumMessages: n})
				if r.Err != nil || r.Duplicate {
					t.Fatalf("%+v", r)
				}
				seq += int64(n)
				total += n
			}
			e.crash()
		}
		top := e.topic("rc")
		start := mtypes.Earliest
		ch := make(chan []Delivery, 10000)
		c, err := top.Subscribe(context.Background(), SubscribeOptions{Subscription: "reader", StartPosition: &start}, &chanSink{ch: ch})
		if err != nil {
			t.Fatal(err)
		}
		lm, _ := c.LastMessageID(context.Background())
		c.Flow(1000)
		got, consumed := 0, 0
		deadline := time.After(10 * time.Second)
		var last Delivery
		for got < total {
			select {
			case ms := <-ch:
				for _, m := range ms {
					got += m.NumMessages
					consumed += m.NumMessages
					last = m
				}
				if consumed >= 500 {
					c.Flow(uint32(consumed))
					consumed = 0
				}
			case <-deadline:
				t.Fatalf("iter %d: got %d of %d messages; last %v; last message id %+v; stats %+v", iter, got, total, last.Position, lm, top.InternalStats())
			}
		}
		if last.Position != lm.Position {
			t.Fatalf("last delivered %v, LastMessageID %+v", last.Position, lm)
		}
		c.Close()
		e.close()
	}
}
