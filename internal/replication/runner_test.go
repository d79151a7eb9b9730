package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type pair struct {
	local  *memTopic
	remote *memRemote
}

func newPair(t *testing.T) pair {
	rt := newMemTopic("persistent://public/default/t", 100)
	return pair{
		local:  newMemTopic("persistent://public/default/t", 7),
		remote: &memRemote{topic: rt, index: NewIndex(IndexOptions{Logger: quietLogger()})},
	}
}

func (p pair) produce(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		e := mkEntry(t, mtypes.Position{}, fmt.Sprintf("m%d", i), nil)
		p.local.append(e.Data, time.Now().UnixMilli())
	}
}

// start starts a runner from p.local to p.remote, stopped when t ends. The tests that wait for the
// runner's timers (reconnect backoff, receipt timeouts, the rate) run in a synctest bubble
// (synctest.Test): time passes there only when every goroutine of the test waits, so they take no
// wall-clock time and do not depend on the machine's load.
func (p pair) start(t *testing.T, startAt StartAt, mut func(*RunnerConfig)) *Runner {
	t.Helper()
	cfg := RunnerConfig{
		Machine: MachineConfig{Local: "a", Remote: "b", MaxBackoff: 200 * time.Millisecond},
		Topic:   p.local, Producers: p.remote, StartAt: startAt, Logger: quietLogger(),
		TickInterval: 50 * time.Millisecond,
	}
	if mut != nil {
		mut(&cfg)
	}
	r, err := StartRunner(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return r
}

func remoteCount(p pair) int {
	p.remote.topic.mu.Lock()
	defer p.remote.topic.mu.Unlock()
	return len(p.remote.topic.entries)
}

// checkRemote asserts the remote holds exactly the local payloads, in order, replicated from a.
func checkRemote(t *testing.T, p pair, wantPayloads []string) {
	t.Helper()
	p.remote.topic.mu.Lock()
	defer p.remote.topic.mu.Unlock()
	if len(p.remote.topic.entries) != len(wantPayloads) {
		t.Fatalf("remote has %d entries, want %d", len(p.remote.topic.entries), len(wantPayloads))
	}
	for i, e := range p.remote.topic.entries {
		pe, err := ParseEntry(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		if string(pe.Payload) != wantPayloads[i] || pe.Metadata.GetReplicatedFrom() != "a" {
			t.Fatalf("remote entry %d: payload %q from %q, want %q from a", i, pe.Payload, pe.Metadata.GetReplicatedFrom(), wantPayloads[i])
		}
	}
}

func payloads(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("m%d", i))
	}
	return out
}

func TestRunnerOneWayEarliestAndLive(t *testing.T) {
	p := newPair(t)
	p.produce(t, 50)
	r := p.start(t, StartEarliest, nil)
	poll.Until(t, 5*time.Second, "50 entries replicated", func() bool { return remoteCount(p) == 50 })
	// Live traffic after catch-up (the runner waits for data, then wakes).
	for i := 50; i < 80; i++ {
		p.local.append(mkEntry(t, mtypes.Position{}, fmt.Sprintf("m%d", i), nil).Data, time.Now().UnixMilli())
	}
	poll.Until(t, 5*time.Second, "80 entries replicated", func() bool { return remoteCount(p) == 80 })
	checkRemote(t, p, payloads(0, 80))
	poll.Until(t, 5*time.Second, "backlog 0", func() bool { return r.Stats().ReplicationBacklog == 0 })
	poll.Until(t, 5*time.Second, "rate sampled", func() bool { return r.Stats().MsgOutCount == 80 })
	s := r.Stats()
	if !s.Connected || s.StartMode != StartEarliest || s.LastError != "" || s.OutboundConnection != "pulsar.repl.a-->b" {
		t.Fatalf("stats %+v", s)
	}
	a := s.Admin()
	if !a.Connected || a.OutboundConnectedSince == "" || a.StartMode != "earliest" || a.MsgOutCounter != 80 {
		t.Fatalf("admin stats %+v", a)
	}
	if got := p.remote.produced[0]; got != "pulsar.repl.a-->b" {
		t.Fatalf("producer name %q", got)
	}
}

func TestRunnerLatestSkipsExistingData(t *testing.T) {
	p := newPair(t)
	p.produce(t, 10)
	r := p.start(t, StartLatest, nil)
	if s := r.Stats(); s.StartMode != StartLatest || s.StartPosition != (mtypes.Position{LedgerID: 7, EntryID: 9}) {
		t.Fatalf("start %v %v", s.StartMode, s.StartPosition)
	}
	p.local.append(mkEntry(t, mtypes.Position{}, "new", nil).Data, time.Now().UnixMilli())
	poll.Until(t, 5*time.Second, "1 entry replicated", func() bool { return remoteCount(p) == 1 })
	checkRemote(t, p, []string{"new"})
}

func TestRunnerRemoteDownThenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.remote.down = true
		r := p.start(t, StartEarliest, nil)
		p.produce(t, 20)
		poll.Until(t, 5*time.Second, "lastError while remote is down", func() bool {
			s := r.Stats()
			return !s.Connected && s.LastError != "" && s.ReplicationBacklog == 20 && s.ReplicationDelayInSeconds >= 0
		})
		p.remote.mu.Lock()
		p.remote.down = false
		p.remote.mu.Unlock()
		poll.Until(t, 5*time.Second, "catch-up after the remote returns", func() bool { return remoteCount(p) == 20 })
		poll.Until(t, 5*time.Second, "healthy stats", func() bool {
			s := r.Stats()
			return s.Connected && s.LastError == "" && s.ReplicationBacklog == 0 && s.Reconnects > 0
		})
		checkRemote(t, p, payloads(0, 20))
	})
}

// TestRunnerIdleAfterOutageClearsError: a replicator with nothing to send that connects after an
// outage shows no lastError (no receipt will ever clear it, and an alert on it would never end),
// while one with a backlog keeps it until the remote has everything.
func TestRunnerIdleAfterOutageClearsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.remote.down = true
		r := p.start(t, StartEarliest, nil) // an empty topic: nothing to replicate
		poll.Until(t, 5*time.Second, "outage visible", func() bool { s := r.Stats(); return !s.Connected && s.LastError != "" })
		p.remote.mu.Lock()
		p.remote.down = false
		p.remote.mu.Unlock()
		poll.Until(t, 5*time.Second, "healthy after the outage", func() bool {
			s := r.Stats()
			return s.Connected && s.ReplicationBacklog == 0 && s.LastError == ""
		})
	})
}

func TestRunnerConnectionLossesNeverDuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.produce(t, 200)
		p.remote.lose = 5
		r := p.start(t, StartEarliest, func(c *RunnerConfig) { c.Machine.MaxInflightEntries = 7 })
		poll.Until(t, 10*time.Second, "200 entries replicated", func() bool { return r.Stats().ReplicationBacklog == 0 })
		checkRemote(t, p, payloads(0, 200))
	})
}

func TestRunnerRefusalIsShownAndRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.remote.refuse = fmt.Errorf("namespace public/default does not exist (TopicNotFound)")
		r := p.start(t, StartEarliest, nil)
		poll.Until(t, 5*time.Second, "refusal in lastError", func() bool {
			s := r.Stats()
			return s.Reconnects >= 2 && s.LastError != "" && !s.Connected
		})
		if s := r.Stats(); !contains(s.LastError, "TopicNotFound") {
			t.Fatalf("lastError %q", s.LastError)
		}
		p.remote.mu.Lock()
		p.remote.refuse = nil
		p.remote.mu.Unlock()
		p.produce(t, 3)
		poll.Until(t, 5*time.Second, "replicated after the refusal ends", func() bool { return remoteCount(p) == 3 })
	})
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestRunnerReplicatedEntriesAreNotForwarded(t *testing.T) {
	p := newPair(t)
	p.local.append(mkEntry(t, mtypes.Position{}, "from-c", func(md *pulsarpb.MessageMetadata) { md.ReplicatedFrom = proto.String("c") }).Data, 1)
	p.local.append(mkEntry(t, mtypes.Position{}, "mine", nil).Data, 1)
	r := p.start(t, StartEarliest, nil)
	poll.Until(t, 5*time.Second, "caught up", func() bool { return r.Stats().ReplicationBacklog == 0 })
	checkRemote(t, p, []string{"mine"})
	if s := r.Stats(); s.Skipped[SkipReplicated] != 1 {
		t.Fatalf("skipped %v", s.Skipped)
	}
}

// TestRunnerRateLimit runs in a synctest bubble: the rate's two seconds pass in fake time, so the
// test takes no wall-clock time and the measured duration does not depend on the machine's load.
func TestRunnerRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.produce(t, 300)
		r := p.start(t, StartEarliest, func(c *RunnerConfig) { c.Machine.Rate = Rate{MessagesPerSecond: 100} })
		start := time.Now()
		// The first second's burst (100) goes at once, then 100/s.
		poll.Until(t, 10*time.Second, "300 replicated", func() bool { return remoteCount(p) == 300 })
		el := time.Since(start)
		if el < 1900*time.Millisecond || el > 2100*time.Millisecond {
			t.Fatalf("300 messages at 100 msg/s with a 100 burst took %v, want 2 s", el)
		}
		r.SetRate(Rate{})
		p.produce(t, 500)
		synctest.Wait()
		if n := remoteCount(p); n != 800 {
			t.Fatalf("%d replicated once the rate is removed and everything is idle, want 800", n)
		}
	})
}

// A replicator created on an empty topic shows the cursor's real start ("7:-1": before the first
// entry of ledger 7), not "0:0"; traffic replicated before the first rate sample still shows as a
// rate.
func TestRunnerEmptyTopicStartAndFirstSecondRate(t *testing.T) {
	for _, startAt := range []StartAt{StartEarliest, StartLatest} {
		p := newPair(t)
		r := p.start(t, startAt, func(c *RunnerConfig) { c.TickInterval = time.Hour })
		s := r.Stats()
		if s.StartPosition != (mtypes.Position{LedgerID: 7, EntryID: -1}) || s.Admin().StartPosition != "7:-1" {
			t.Fatalf("%s: start position %v (%q)", startAt, s.StartPosition, s.Admin().StartPosition)
		}
		p.produce(t, 5)
		poll.Until(t, 5*time.Second, "5 replicated", func() bool { return r.Stats().MsgOutCount == 5 })
		// One sample at start, one now: the burst is a rate, not the baseline.
		r.mu.Lock()
		c := r.m.Counters()
		r.mu.Unlock()
		r.window.add(time.Now(), c.MsgOut, c.BytesOut)
		if s := r.Stats(); s.MsgRateOut <= 0 || s.MsgThroughputOut <= 0 {
			t.Fatalf("%s: rates after a burst in the first second: %v msg/s %v B/s", startAt, s.MsgRateOut, s.MsgThroughputOut)
		}
	}
}

func TestParseMarkDelete(t *testing.T) {
	for s, want := range map[string]mtypes.Position{"1:-1": {LedgerID: 1, EntryID: -1}, "-1:-1": {LedgerID: -1, EntryID: -1}, "3:4": {LedgerID: 3, EntryID: 4}} {
		if got, err := mtypes.ParseMarkDelete(s); err != nil || got != want {
			t.Errorf("%q: %v %v", s, got, err)
		}
	}
	for _, s := range []string{"", "1", "1:-2", "x:1", "1:x"} {
		if _, err := mtypes.ParseMarkDelete(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	if _, err := mtypes.ParsePosition("1:-1"); err == nil {
		t.Error("ParsePosition accepts a negative entry id (source positions are never negative)")
	}
}

func TestParsePositionBytes(t *testing.T) {
	for _, s := range []string{"0:0", "12:345", "9223372036854775807:1", "1:9223372036854775807", "", ":", "1:", ":1", "1:2:3", "-1:2", "1:-2", "a:1", "99999999999999999999:1", "1:2x"} {
		want, werr := mtypes.ParsePosition(s)
		got, gerr := parsePositionBytes([]byte(s))
		if got != want || (werr == nil) != (gerr == nil) {
			t.Errorf("%q: bytes %v %v, string %v %v", s, got, gerr, want, werr)
		}
	}
}

// connState is a remote producer that reconnects by itself (as the client's does) and reports it.
type connState struct {
	RemoteProducer
	mu         sync.Mutex
	connected  bool
	since      time.Time
	reconnects int64
}

func (c *connState) Connected() bool  { c.mu.Lock(); defer c.mu.Unlock(); return c.connected }
func (c *connState) LastError() error { return errors.New("broker gone") }
func (c *connState) DisconnectedSince() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.since
}
func (c *connState) Reconnects() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.reconnects }

type connStateFactory struct {
	inner RemoteProducerFactory
	mu    sync.Mutex
	last  *connState
}

func (f *connStateFactory) NewProducer(ctx context.Context, remote, topic, name string) (RemoteProducer, error) {
	p, err := f.inner.NewProducer(ctx, remote, topic, name)
	if err != nil {
		return nil, err
	}
	cs := &connState{RemoteProducer: p, connected: true}
	f.mu.Lock()
	f.last = cs
	f.mu.Unlock()
	return cs, nil
}

// While the client reconnects by itself, stats show the reason with the time the connection was
// lost, and the client's reconnections count in reconnects.
func TestRunnerStatsWhileClientReconnects(t *testing.T) {
	p := newPair(t)
	f := &connStateFactory{inner: p.remote}
	r := p.start(t, StartEarliest, func(c *RunnerConfig) { c.Producers = f })
	poll.Until(t, 5*time.Second, "connected", func() bool { return r.Stats().Connected })
	f.mu.Lock()
	cs := f.last
	f.mu.Unlock()
	lost := time.Now().Add(-3 * time.Second).Truncate(time.Millisecond)
	cs.mu.Lock()
	cs.connected, cs.since = false, lost
	cs.mu.Unlock()
	s := r.Stats()
	if s.Connected || s.LastError == "" || !s.LastErrorTime.Equal(lost) || s.Admin().LastErrorTimestamp != lost.UnixMilli() {
		t.Fatalf("while reconnecting: connected %v, lastError %q at %v", s.Connected, s.LastError, s.LastErrorTime)
	}
	cs.mu.Lock()
	cs.connected, cs.since, cs.reconnects = true, time.Time{}, 2
	cs.mu.Unlock()
	if s := r.Stats(); !s.Connected || s.Reconnects != 2 {
		t.Fatalf("after the client reconnected: connected %v, reconnects %d", s.Connected, s.Reconnects)
	}
}

// TestRunnerRewindsOnIdleTopicKeepOneWaiter: failures while the replicator waits for new entries
// at the end of an idle log (receipts that time out, so it rewinds and resends) must not leave a
// new-entry waiter on the topic per failure: the topic would keep them all until its next entry.
func TestRunnerRewindsOnIdleTopicKeepOneWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.produce(t, 20)
		p.remote.ackDelay = 300 * time.Millisecond // every receipt misses the timeout below
		r := p.start(t, StartEarliest, func(c *RunnerConfig) {
			c.Machine.ReceiptTimeout = 100 * time.Millisecond
			c.Machine.MinBackoff = 10 * time.Millisecond
			c.Machine.MaxBackoff = 20 * time.Millisecond
		})
		poll.Until(t, 10*time.Second, "several receipt timeouts", func() bool { return r.Stats().Reconnects >= 4 })
		p.remote.mu.Lock()
		p.remote.ackDelay = 0
		p.remote.mu.Unlock()
		poll.Until(t, 10*time.Second, "caught up", func() bool { return r.Stats().ReplicationBacklog == 0 })
		waiters := func() int {
			p.local.mu.Lock()
			defer p.local.mu.Unlock()
			return len(p.local.waiters)
		}
		poll.Until(t, 5*time.Second, "waiting for new entries", func() bool { return waiters() > 0 })
		if n := waiters(); n != 1 {
			t.Fatalf("%d new-entry waiters on the idle topic, want 1", n)
		}
		checkRemote(t, p, payloads(0, 20))
	})
}
