package broker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// benchEnv is a broker on an in-memory filesystem (mem=true: measures the broker and storage CPU
// path, fsync is free) or on the real disk in a temporary directory (fsync before every receipt).
func benchEnv(b *testing.B, mem bool) *env {
	b.Helper()
	e := &env{t: b, cfg: Config{AutoTopicCreation: true}}
	if mem {
		e.fs = vfs.NewMem()
		e.open()
	} else {
		eng, err := storage.Open(context.Background(), storage.Options{Dir: b.TempDir(), Logger: testLogger()})
		if err != nil {
			b.Fatal(err)
		}
		br, err := New(e.cfg, Deps{Storage: eng, Logger: testLogger()})
		if err != nil {
			b.Fatal(err)
		}
		e.engine, e.b = eng, br
	}
	b.Cleanup(e.close)
	return e
}

// BenchmarkPublish publishes 1 KiB entries from one producer with up to `window` in flight (as a
// client with a pending-message queue does) and reports entries/s.
func BenchmarkPublish(b *testing.B) {
	for _, mem := range []bool{true, false} {
		for _, dedup := range []bool{false, true} {
			name := fmt.Sprintf("fs=%s/dedup=%v", map[bool]string{true: "mem", false: "disk"}[mem], dedup)
			b.Run(name, func(b *testing.B) {
				e := benchEnv(b, mem)
				e.b.b.cfg.DedupDefault = dedup
				top := e.topic("bench-publish")
				p := addProducer(b, top, ProducerOptions{Name: "bench"})
				data := entry(b, "bench", 0, 1, string(make([]byte, 1024)))
				const window = 1000
				sem := make(chan struct{}, window)
				var wg sync.WaitGroup
				b.SetBytes(int64(len(data)))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					sem <- struct{}{}
					wg.Add(1)
					p.Publish(PublishRequest{Entry: data, SequenceID: int64(i)}, func(r PublishResult) {
						if r.Err != nil {
							b.Error(r.Err)
						}
						<-sem
						wg.Done()
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
			})
		}
	}
}

// BenchmarkPublishBatch is BenchmarkPublish (in-memory filesystem, no dedup) handing the entries
// to the broker in groups of `group` (1: Publish; more: PublishBatch, as a server does with the
// SENDs it finds in its read buffer together). One op = one entry.
func BenchmarkPublishBatch(b *testing.B) {
	for _, group := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			e := benchEnv(b, true)
			top := e.topic("bench-publish-batch")
			p := addProducer(b, top, ProducerOptions{Name: "bench"})
			data := entry(b, "bench", 0, 1, string(make([]byte, 1024)))
			const window = 1024
			sem := make(chan struct{}, window)
			var wg sync.WaitGroup
			done := func(r PublishResult) {
				if r.Err != nil {
					b.Error(r.Err)
				}
				<-sem
				wg.Done()
			}
			reqs := make([]PublishRequest, 0, group)
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sem <- struct{}{}
				wg.Add(1)
				reqs = append(reqs, PublishRequest{Entry: data, SequenceID: int64(i)})
				if len(reqs) == group || i == b.N-1 {
					if len(reqs) == 1 {
						p.Publish(reqs[0], done)
					} else {
						p.PublishBatch(reqs, done)
					}
					reqs = reqs[:0]
				}
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// chanSink hands deliveries to a consuming goroutine, as a connection's write loop would.
type chanSink struct{ ch chan []Delivery }

func (s *chanSink) SendMessages(ms []Delivery) { s.ch <- ms }
func (s *chanSink) ActiveConsumerChanged(bool) {}
func (s *chanSink) Closed(Reassigned)          {}

// BenchmarkDispatch measures reading stored 1 KiB entries (from the tail cache) and handing them to
// a consumer that acknowledges each batch (cumulatively on Exclusive, individually on Shared) and
// returns permits, with a 1000-permit window; one op = one entry delivered and acknowledged.
func BenchmarkDispatch(b *testing.B) {
	for _, subType := range []mtypes.SubType{mtypes.SubExclusive, mtypes.SubShared} {
		b.Run(subType.String(), func(b *testing.B) {
			e := benchEnv(b, true)
			if v := os.Getenv("BENCH_DISPATCH_MAX_BYTES"); v != "" {
				e.b.b.cfg.DispatchMaxBytes, _ = strconv.ParseInt(v, 10, 64)
			}
			top := e.topic("bench-dispatch")
			p := addProducer(b, top, ProducerOptions{Name: "bench"})
			data := entry(b, "bench", 0, 1, string(make([]byte, 1024)))
			var wg sync.WaitGroup
			for i := 0; i < b.N; i++ {
				wg.Add(1)
				p.Publish(PublishRequest{Entry: data, SequenceID: int64(i)}, func(PublishResult) { wg.Done() })
			}
			wg.Wait()
			s := &chanSink{ch: make(chan []Delivery, 1000)}
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			c, err := top.Subscribe(context.Background(), SubscribeOptions{Subscription: "s", Type: subType, Durable: true, InitialPosition: mtypes.InitialEarliest}, s)
			if err != nil {
				b.Fatal(err)
			}
			c.Flow(1000)
			ctx := context.Background()
			for n := 0; n < b.N; {
				ms := <-s.ch
				n += len(ms)
				if subType == mtypes.SubExclusive {
					err = c.Ack(ctx, []Ack{{Position: ms[len(ms)-1].Position}}, true)
				} else {
					err = c.Ack(ctx, positionsAcks(ms), false)
				}
				if err != nil {
					b.Fatal(err)
				}
				c.Flow(uint32(len(ms)))
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
			c.Close()
		})
	}
}
