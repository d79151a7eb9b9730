package schema

import (
	"context"
	"testing"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/naming"
)

// BenchmarkCompatibleFull is the cost of one FULL check of a small record against one version (a
// new producer with a new schema version pays it once).
func BenchmarkCompatibleFull(b *testing.B) {
	live := []Version{{Info: avroInfo(userV1)}}
	cand := avroInfo(userV2)
	b.ReportAllocs()
	for b.Loop() {
		if err := Compatible(StrategyFull, live, cand); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProducerSchemaExisting is what every PRODUCER with an already registered schema costs:
// list the history and find the identical version (10 versions stored).
func BenchmarkProducerSchemaExisting(b *testing.B) {
	ctx := context.Background()
	store := memstore.New()
	defer store.Close()
	r := New(store, Options{Strategy: nil})
	tp, err := naming.ParseTopic("bench")
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		info := Info{Type: TypeString, Data: []byte{byte(i)}}
		if _, err := r.Put(ctx, tp, info); err != nil {
			b.Fatal(err)
		}
	}
	info := &Info{Type: TypeString, Data: []byte{5}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ForProducer(ctx, tp, info, true); err != nil {
			b.Fatal(err)
		}
	}
}
