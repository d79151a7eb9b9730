package storetest

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/metadata"
)

// Bench runs the store benchmarks: Put (unconditional), PutCAS (read-modify-write by version), Get,
// List of 100 keys, and WatchLatency (time from calling Put to the watch delivering the event;
// reported as p50/p99 metrics). newStore must return an empty store; Bench closes it.
func Bench(b *testing.B, newStore func(b *testing.B) metadata.Store) {
	value := make([]byte, 256)
	b.Run("Put", func(b *testing.B) {
		s := newStore(b)
		defer s.Close()
		ctx := context.Background()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := s.Put(ctx, fmt.Sprintf("/bench/put/k%d", i%1000), value, metadata.AnyVersion); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("PutCAS", func(b *testing.B) {
		s := newStore(b)
		defer s.Close()
		ctx := context.Background()
		kv, err := s.Put(ctx, "/bench/cas", value, 0)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if kv, err = s.Put(ctx, "/bench/cas", value, kv.Version); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Get", func(b *testing.B) {
		s := newStore(b)
		defer s.Close()
		ctx := context.Background()
		if _, err := s.Put(ctx, "/bench/get", value, 0); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Get(ctx, "/bench/get"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("List100", func(b *testing.B) {
		s := newStore(b)
		defer s.Close()
		ctx := context.Background()
		for i := range 100 {
			if _, err := s.Put(ctx, fmt.Sprintf("/bench/list/k%03d", i), value, 0); err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			if kvs, _, err := s.List(ctx, "/bench/list/"); err != nil || len(kvs) != 100 {
				b.Fatal(len(kvs), err)
			}
		}
	})
	b.Run("WatchLatency", func(b *testing.B) {
		s := newStore(b)
		defer s.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := s.Watch(ctx, "/bench/watch/", 0)
		if err != nil {
			b.Fatal(err)
		}
		var lat []time.Duration
		for i := 0; b.Loop(); i++ {
			written := time.Now()
			if _, err := s.Put(ctx, "/bench/watch/k", value, metadata.AnyVersion); err != nil {
				b.Fatal(err)
			}
			select {
			case ev := <-ch:
				if ev.Err != nil {
					b.Fatal(ev.Err)
				}
			case <-time.After(waitTimeout):
				b.Fatal("no event")
			}
			lat = append(lat, time.Since(written))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		if len(lat) > 0 {
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		}
	})
}
