package memstore_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/metadata/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) metadata.Store { return memstore.New() })
}

// A watch that starts before the retained history ends with ErrCompacted instead of skipping.
func TestWatchCompacted(t *testing.T) {
	s := memstore.NewWithOptions(memstore.Options{MaxHistoryEvents: 5})
	defer s.Close()
	ctx := context.Background()
	first, err := s.Put(ctx, "/k", []byte("0"), metadata.AnyVersion)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := s.Put(ctx, "/k", []byte("x"), metadata.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := s.Watch(ctx, "/", first.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	ev, ok := <-ch
	if !ok || !errors.Is(ev.Err, metadata.ErrCompacted) {
		t.Fatalf("got %+v, %v; want an ErrCompacted event", ev, ok)
	}
	if _, ok := <-ch; ok {
		t.Fatalf("channel not closed after the error event")
	}
	// From a retained revision it works.
	ch2, err := s.Watch(ctx, "/", s.Revision()-2)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ev := <-ch2; ev.Err != nil || ev.Type != metadata.EventPut {
			t.Fatalf("replay from retained history: %+v", ev)
		}
	}
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) metadata.Store { return memstore.New() })
}
