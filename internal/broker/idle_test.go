package broker

import (
	"testing"
	"time"
	"unsafe"
)

// TestDedupCursorCreatedBeforeFirstEntry: with deduplication on, an idle topic keeps no dedup
// cursor (README budget: 2 KiB per idle topic); the first producer creates it, so the state still
// survives a crash. A producer that was attached without it (deduplication switched on meanwhile)
// gets it at its first publish, before the entry is stored.
func TestDedupCursorCreatedBeforeFirstEntry(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true, DedupDefault: true, DedupSnapshotInterval: 1000})
	top := e.topic("lazy")
	if !top.DedupEnabled() {
		t.Fatal("dedup not enabled")
	}
	if top.Ledger().Cursor(dedupCursorName) != nil {
		t.Fatal("an idle topic has a dedup cursor")
	}
	e.restart()
	top = e.topic("lazy")
	if !top.DedupEnabled() || top.Ledger().Cursor(dedupCursorName) != nil {
		t.Fatalf("after restart: dedup %v, cursor %v", top.DedupEnabled(), top.Ledger().Cursor(dedupCursorName) != nil)
	}
	p := addProducer(t, top, ProducerOptions{Name: "prod"})
	if top.Ledger().Cursor(dedupCursorName) == nil {
		t.Fatal("no dedup cursor once a producer is attached")
	}
	for i := range 3 {
		if r := publishSync(t, p, PublishRequest{Entry: entry(t, "prod", uint64(i), 1, "x"), SequenceID: int64(i)}); r.Err != nil || r.Duplicate {
			t.Fatalf("publish %d: %+v", i, r)
		}
	}
	e.crash()
	top = e.topic("lazy")
	p = addProducer(t, top, ProducerOptions{Name: "prod"})
	if p.LastSequenceID() != 2 {
		t.Fatalf("after crash LastSequenceID = %d, want 2", p.LastSequenceID())
	}
	if r := publishSync(t, p, PublishRequest{Entry: entry(t, "prod", 1, 1, "x"), SequenceID: 1}); !r.Duplicate {
		t.Fatalf("seq 1 after crash not a duplicate: %+v", r)
	}

	// A producer attached without the cursor (what a policy change racing addProducer leaves).
	late := e.topic("late")
	ts := late.t
	ts.mu.Lock()
	ps := ts.attachProducerLocked(ProducerOptions{Name: "late"}, "late", false)
	ts.mu.Unlock()
	if late.Ledger().Cursor(dedupCursorName) != nil {
		t.Fatal("cursor before the first publish")
	}
	if r := publishSync(t, ps.public, PublishRequest{Entry: entry(t, "late", 0, 1, "x"), SequenceID: 0}); r.Err != nil || r.Duplicate {
		t.Fatalf("first publish: %+v", r)
	}
	if late.Ledger().Cursor(dedupCursorName) == nil {
		t.Fatal("no dedup cursor after the first publish")
	}
	e.crash()
	p = addProducer(t, e.topic("late"), ProducerOptions{Name: "late"})
	if p.LastSequenceID() != 0 {
		t.Fatalf("after crash LastSequenceID = %d, want 0", p.LastSequenceID())
	}
}

// TestIdleTopicAllocatesNoTrafficState: counters and rates appear with the first message, and
// rates computed from them match a topic that had them from the start.
func TestIdleTopicAllocatesNoTrafficState(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	e := &env{t: t, fs: newMemFS(), cfg: Config{AutoTopicCreation: true}, clock: clock}
	e.open()
	t.Cleanup(e.close)
	top := e.topic("quiet")
	clock.advance(time.Second)
	e.b.b.sampleRates()
	if top.t.traffic.Load() != nil || top.t.subs != nil || top.t.producers != nil || top.t.subList.Load() != nil {
		t.Fatal("an idle topic allocated traffic state, maps or a subscriber list")
	}
	if st := top.Stats(); st.MsgInCounter != 0 || st.MsgRateIn != 0 || st.TopicCreationTimeStamp != 1_800_000_000_000 {
		t.Fatalf("idle stats %+v", st)
	}
	p := addProducer(t, top, ProducerOptions{})
	for i := range 4 {
		publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), uint64(i), 1, "x"), SequenceID: int64(i)})
	}
	clock.advance(2 * time.Second)
	e.b.b.sampleRates()
	// 4 messages since the previous tick, 2 s ago: as if the counters had been sampled (at zero) then.
	if st := top.Stats(); st.MsgInCounter != 4 || st.MsgRateIn != 2 || st.LastPublishTimeStamp != 1_800_000_001_000 {
		t.Fatalf("stats after 4 messages %+v", st)
	}
}

// TestTopicStateStructSize guards the topic state's size class (416 B on 64-bit platforms): one
// per topic, README budget 2 KiB per idle topic for the whole broker.
func TestTopicStateStructSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	if got := unsafe.Sizeof(topicState{}); got > 416 {
		t.Errorf("topicState is %d B, over the 416 B size class", got)
	}
}
