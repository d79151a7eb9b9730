package schema

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/naming"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	userV1 = `{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}`
	// v2 adds a field with a default: readable both ways.
	userV2 = `{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int","default":0}]}`
	// v3 adds a field without a default: new readers cannot read old data (not backward).
	userV3 = `{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"email","type":"string"}]}`
	// v4 drops "name", which has no default: old readers cannot read new data (not forward).
	userV4 = `{"type":"record","name":"User","fields":[{"name":"age","type":"int","default":0}]}`
)

func avroInfo(def string) Info { return Info{Type: TypeAvro, Data: []byte(def)} }

func TestCompatibleTable(t *testing.T) {
	live := []Version{{Info: avroInfo(userV1), Version: 0}}
	for _, tc := range []struct {
		name string
		s    Strategy
		live []Version
		cand Info
		ok   bool
	}{
		{"empty history", StrategyFull, nil, avroInfo(userV3), true},
		{"full, field with default", StrategyFull, live, avroInfo(userV2), true},
		{"full, field without default", StrategyFull, live, avroInfo(userV3), false},
		{"backward, field without default", StrategyBackward, live, avroInfo(userV3), false},
		{"forward, field without default", StrategyForward, live, avroInfo(userV3), true},
		{"backward, dropped field", StrategyBackward, live, avroInfo(userV4), true},
		{"forward, dropped field", StrategyForward, live, avroInfo(userV4), false},
		{"undefined means full", StrategyUndefined, live, avroInfo(userV3), false},
		{"always compatible", StrategyAlwaysCompatible, live, avroInfo(userV3), true},
		{"always compatible, type change", StrategyAlwaysCompatible, live, Info{Type: TypeString}, true},
		{"always incompatible", StrategyAlwaysIncompatible, live, avroInfo(userV2), false},
		{"type change", StrategyFull, live, Info{Type: TypeJSON, Data: []byte(userV1)}, false},
		{"string to string", StrategyFull, []Version{{Info: Info{Type: TypeString}}}, Info{Type: TypeString, Data: []byte("x")}, true},
		{"json not avro is accepted", StrategyFull, []Version{{Info: Info{Type: TypeJSON, Data: []byte(`{"$schema":"x"}`)}}}, Info{Type: TypeJSON, Data: []byte(`{"type":"object"}`)}, true},
		{"broken avro", StrategyFull, live, avroInfo(`{"type":"record"`), false},
		// Transitive: v1 -> v2 (ok) then a candidate compatible with v2 but not with v1.
		{"full transitive checks every version", StrategyFullTransitive,
			[]Version{{Info: avroInfo(userV1)}, {Info: avroInfo(userV2), Version: 1}},
			avroInfo(`{"type":"record","name":"User","fields":[{"name":"name","type":"string","default":""},{"name":"age","type":"int"}]}`), false},
		{"full checks only the latest", StrategyFull,
			[]Version{{Info: avroInfo(userV1)}, {Info: avroInfo(userV2), Version: 1}},
			avroInfo(`{"type":"record","name":"User","fields":[{"name":"name","type":"string","default":""},{"name":"age","type":"int"}]}`), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Compatible(tc.s, tc.live, tc.cand)
			if (err == nil) != tc.ok {
				t.Fatalf("Compatible = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrIncompatible) && !errors.Is(err, ErrInvalidSchema) {
				t.Fatalf("error %v wraps neither ErrIncompatible nor ErrInvalidSchema", err)
			}
		})
	}
}

func TestParseNames(t *testing.T) {
	for _, s := range []string{"FULL", "full", "Backward_Transitive", "BackwardTransitive", "ALWAYS_COMPATIBLE"} {
		if _, err := ParseStrategy(s); err != nil {
			t.Errorf("ParseStrategy(%q): %v", s, err)
		}
	}
	if s, _ := ParseStrategy("AutoUpdateDisabled"); s != StrategyAlwaysIncompatible {
		t.Errorf("AutoUpdateDisabled = %v", s)
	}
	if _, err := ParseStrategy("sometimes"); err == nil {
		t.Error("bad strategy accepted")
	}
	for ty := range typeNames {
		got, err := ParseType(ty.String())
		if err != nil || got != ty {
			t.Errorf("ParseType(%q) = %v, %v", ty.String(), got, err)
		}
	}
	if got, _ := ParseType("none"); got != TypeNone {
		t.Errorf("NONE = %v", got)
	}
	v, ok, err := ParseVersion(VersionBytes(258))
	if v != 258 || !ok || err != nil {
		t.Fatalf("version round trip: %d %v %v", v, ok, err)
	}
	if _, ok, err := ParseVersion(nil); ok || err != nil {
		t.Fatal("empty version is latest")
	}
	if _, _, err := ParseVersion([]byte{1, 2}); err == nil {
		t.Fatal("short version accepted")
	}
}

func topic(t *testing.T, s string) naming.TopicName {
	t.Helper()
	tn, err := naming.ParseTopic(s)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

func TestRegistryLifecycle(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	defer store.Close()
	clock := int64(1000)
	r := New(store, Options{Now: func() int64 { clock++; return clock }})
	p0 := topic(t, "persistent://public/default/users-partition-0")
	p1 := topic(t, "persistent://public/default/users-partition-1")

	if _, err := r.Latest(ctx, p0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty: %v", err)
	}
	v, err := r.Put(ctx, p0, avroInfo(userV1))
	if err != nil || v != 0 {
		t.Fatalf("first put: %d %v", v, err)
	}
	// Partitions share the history; the same schema gets the same version.
	if v, err := r.Put(ctx, p1, avroInfo(userV1)); err != nil || v != 0 {
		t.Fatalf("same schema on another partition: %d %v", v, err)
	}
	if v, err := r.Put(ctx, p1, avroInfo(userV2)); err != nil || v != 1 {
		t.Fatalf("compatible update: %d %v", v, err)
	}
	if _, err := r.Put(ctx, p0, avroInfo(userV3)); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("incompatible update: %v", err)
	}
	// An older identical schema is found again without a new version.
	if v, err := r.Put(ctx, p0, avroInfo(userV1)); err != nil || v != 0 {
		t.Fatalf("old schema again: %d %v", v, err)
	}
	latest, err := r.Latest(ctx, p0)
	if err != nil || latest.Version != 1 || string(latest.Data) != userV2 || latest.Timestamp == 0 {
		t.Fatalf("latest: %+v %v", latest, err)
	}
	if got, err := r.Get(ctx, p0, 0); err != nil || string(got.Data) != userV1 {
		t.Fatalf("get 0: %+v %v", got, err)
	}
	if _, err := r.Get(ctx, p0, 7); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get 7: %v", err)
	}

	// Soft delete: a tombstone; the next schema starts a new lineage (no compatibility with the old).
	if v, err := r.Delete(ctx, p0, false); err != nil || v != 2 {
		t.Fatalf("delete: %d %v", v, err)
	}
	if _, err := r.Latest(ctx, p0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if _, err := r.Delete(ctx, p0, false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if v, err := r.Put(ctx, p0, Info{Type: TypeString}); err != nil || v != 3 {
		t.Fatalf("new lineage: %d %v", v, err)
	}
	h, _ := r.History(ctx, p0)
	if len(h) != 4 || !h[2].Deleted {
		t.Fatalf("history %+v", h)
	}
	// Force delete removes everything; numbering restarts.
	if _, err := r.Delete(ctx, p0, true); err != nil {
		t.Fatal(err)
	}
	if h, _ := r.History(ctx, p0); len(h) != 0 {
		t.Fatalf("history after force delete: %+v", h)
	}
	if v, err := r.Put(ctx, p0, avroInfo(userV3)); err != nil || v != 0 {
		t.Fatalf("after force delete: %d %v", v, err)
	}
	// Another topic is untouched by all this.
	if _, err := r.Latest(ctx, topic(t, "users2")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other topic: %v", err)
	}
}

func TestProducerAndConsumerRules(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	defer store.Close()
	strategy := StrategyFull
	r := New(store, Options{Strategy: func(context.Context, naming.TopicName) Strategy { return strategy }})
	tp := topic(t, "t")
	if v, err := r.ForProducer(ctx, tp, nil, true); v != nil || err != nil {
		t.Fatalf("producer without schema: %v %v", v, err)
	}
	// A BYTES producer on a topic without schema registers BYTES (as Pulsar), so its messages
	// carry a version; on a typed topic it gets none.
	other := topic(t, "bytes-then-typed")
	if v, err := r.ForProducer(ctx, other, &Info{Type: TypeNone}, true); len(v) != 8 || err != nil {
		t.Fatalf("bytes producer: %v %v", v, err)
	}
	if err := r.ForConsumer(ctx, other, &Info{Type: TypeNone}, false); err != nil {
		t.Fatalf("bytes consumer: %v", err)
	}
	typed := topic(t, "typed")
	if _, err := r.Put(ctx, typed, avroInfo(userV1)); err != nil {
		t.Fatal(err)
	}
	if v, err := r.ForProducer(ctx, typed, &Info{Type: TypeNone}, true); v != nil || err != nil {
		t.Fatalf("bytes producer on a typed topic: %v %v", v, err)
	}
	if _, err := r.Delete(ctx, typed, false); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetLive(ctx, typed, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("version of a deleted lineage still live: %v", err)
	}
	if _, err := r.ForProducer(ctx, tp, &Info{Type: TypeString}, false); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("auto update off: %v", err)
	}
	// A consumer on a busy topic without schema registers nothing.
	if err := r.ForConsumer(ctx, tp, &Info{Type: TypeString}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Latest(ctx, tp); !errors.Is(err, ErrNotFound) {
		t.Fatalf("consumer registered on a busy topic: %v", err)
	}
	// On an idle topic it does.
	if err := r.ForConsumer(ctx, tp, &Info{Type: TypeString}, true); err != nil {
		t.Fatal(err)
	}
	v, err := r.ForProducer(ctx, tp, &Info{Type: TypeString}, false)
	if err != nil || len(v) != 8 {
		t.Fatalf("existing schema with auto update off: %v %v", v, err)
	}
	if err := r.ForConsumer(ctx, tp, &Info{Type: TypeAvro, Data: []byte(userV1)}, true); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("consumer of another type: %v", err)
	}
	strategy = StrategyAlwaysCompatible
	if err := r.ForConsumer(ctx, tp, &Info{Type: TypeAvro, Data: []byte(userV1)}, true); err != nil {
		t.Fatalf("always compatible: %v", err)
	}
	if s, err := r.Check(ctx, tp, avroInfo(userV1)); s != StrategyAlwaysCompatible || err != nil {
		t.Fatalf("check: %v %v", s, err)
	}
}

func TestConcurrentPutsAgree(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	defer store.Close()
	// Two registries on one store: like two brokers sharing a metadata store.
	a, b := New(store, Options{}), New(store, Options{})
	tp := topic(t, "race")
	var wg sync.WaitGroup
	got := make([]int64, 20)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := a
			if i%2 == 1 {
				r = b
			}
			v, err := r.Put(ctx, tp, avroInfo(userV1))
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		}()
	}
	wg.Wait()
	for i, v := range got {
		if v != 0 {
			t.Fatalf("put %d got version %d", i, v)
		}
	}
	if h, _ := a.History(ctx, tp); len(h) != 1 {
		t.Fatalf("history %+v", h)
	}
}
