package broker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
)

// TestSharedChaos: producers publish while Shared consumers come and go, acknowledge, negatively
// acknowledge and stall; every message must end up acknowledged (at-least-once), and the backlog
// must drain to zero.
func TestSharedChaos(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true, MaxUnackedMessagesPerConsumer: 50})
	top := e.topic("chaos")
	const producers, perProducer = 3, 300
	ctx := context.Background()

	var mu sync.Mutex
	acked := map[string]bool{}
	opts := SubscribeOptions{Subscription: "s", Type: mtypes.SubShared, Durable: true, InitialPosition: mtypes.InitialEarliest}

	stop := make(chan struct{})
	var cwg sync.WaitGroup
	consumer := func(id int) {
		defer cwg.Done()
		rng := rand.New(rand.NewPCG(uint64(id), 7))
		for {
			select {
			case <-stop:
				return
			default:
			}
			ch := make(chan []Delivery, 1000)
			c, err := top.Subscribe(ctx, opts, &chanSink{ch: ch})
			if err != nil {
				t.Error(err)
				return
			}
			c.Flow(uint32(10 + rng.IntN(50)))
			life := time.After(time.Duration(20+rng.IntN(80)) * time.Millisecond)
		loop:
			for {
				select {
				case <-stop:
					break loop
				case <-life:
					break loop
				case ms := <-ch:
					var acks []Ack
					var nacks []mtypes.Position
					for _, m := range ms {
						switch r := rng.IntN(10); {
						case r < 7:
							acks = append(acks, Ack{Position: m.Position})
							p, _ := wire.ParseEntry(m.Data)
							mu.Lock()
							acked[string(p.Body)] = true
							mu.Unlock()
						case r < 9:
							nacks = append(nacks, m.Position)
						default: // keep it unacknowledged until this consumer goes away
						}
					}
					if len(acks) > 0 {
						if err := c.Ack(ctx, acks, false); err != nil {
							t.Error(err)
						}
					}
					if len(nacks) > 0 {
						c.RedeliverUnacknowledged(nacks)
					}
					c.Flow(uint32(len(ms)))
				}
			}
			c.Close()
		}
	}
	for i := 0; i < 3; i++ {
		cwg.Add(1)
		go consumer(i)
	}

	var pwg sync.WaitGroup
	for i := 0; i < producers; i++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			p := addProducer(t, top, ProducerOptions{})
			for j := 0; j < perProducer; j++ {
				body := fmt.Sprintf("%d-%d", i, j)
				if r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(j), 1, body), SequenceID: int64(j)}); r.Err != nil {
					t.Error(r.Err)
					return
				}
			}
		}()
	}
	pwg.Wait()
	poll.Until(t, 10*time.Second, "everything acknowledged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) == producers*perProducer
	})
	close(stop)
	cwg.Wait()
	// Every entry was acknowledged at least once on the cursor: nothing is left in the backlog.
	poll.Until(t, 10*time.Second, "backlog 0", func() bool { return top.Stats().Subscriptions["s"].MsgBacklog == 0 })
}

// TestFailoverChaos: Failover consumers come and go and acknowledge cumulatively while a producer
// publishes; each consumer sees entries in log order within one activation, and the subscription
// ends fully acknowledged.
func TestFailoverChaos(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("fo-chaos")
	ctx := context.Background()
	const total = 600
	opts := SubscribeOptions{Subscription: "f", Type: mtypes.SubFailover, Durable: true, InitialPosition: mtypes.InitialEarliest}
	stop := make(chan struct{})
	var cwg sync.WaitGroup
	for id := 0; id < 3; id++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			rng := rand.New(rand.NewPCG(uint64(id), 3))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				ch := make(chan []Delivery, 1000)
				o := opts
				o.ConsumerName = fmt.Sprintf("c%d-%d", id, n)
				c, err := top.Subscribe(ctx, o, &chanSink{ch: ch})
				if err != nil {
					t.Error(err)
					return
				}
				c.Flow(100)
				var last mtypes.Position
				life := time.After(time.Duration(10+rng.IntN(60)) * time.Millisecond)
			loop:
				for {
					select {
					case <-stop:
						break loop
					case <-life:
						break loop
					case ms := <-ch:
						for _, m := range ms {
							if m.RedeliveryCount == 0 && last != (mtypes.Position{}) && m.Position.Compare(last) <= 0 {
								t.Errorf("%s: %v after %v without a redelivery", o.ConsumerName, m.Position, last)
							}
							last = m.Position
						}
						if err := c.Ack(ctx, []Ack{{Position: ms[len(ms)-1].Position}}, true); err != nil {
							t.Error(err)
						}
						c.Flow(uint32(len(ms)))
					}
				}
				c.Close()
			}
		}()
	}
	p := addProducer(t, top, ProducerOptions{})
	var last PublishResult
	for j := 0; j < total; j++ {
		last = publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(j), 1, "x"), SequenceID: int64(j)})
	}
	poll.Until(t, 10*time.Second, "fully acknowledged", func() bool {
		lm, err := top.t.lastEntryOrErr()
		return err == nil && lm == last.Position && top.Stats().Subscriptions["f"].MsgBacklog == 0
	})
	close(stop)
	cwg.Wait()
}
