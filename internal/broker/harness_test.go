package broker

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitTimeout = 10 * time.Second

func testLogger() *slog.Logger {
	if os.Getenv("BROKER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(discard{}, nil))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// env is a broker on a storage engine on an in-memory filesystem.
type env struct {
	t      testing.TB
	fs     *vfs.Mem
	engine *storage.Engine
	b      *Broker
	cfg    Config
	pol    PolicySource
	clock  Clock
	sync   SubscriptionSync
}

func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	e := &env{t: t, fs: vfs.NewMem(), cfg: cfg}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) open() {
	e.t.Helper()
	eng, err := storage.Open(context.Background(), storage.Options{Dir: "/data", FS: e.fs, Logger: testLogger()})
	if err != nil {
		e.t.Fatalf("storage.Open: %v", err)
	}
	b, err := New(e.cfg, Deps{Storage: eng, Logger: testLogger(), Policies: e.pol, Clock: e.clock, SubscriptionSync: e.sync})
	if err != nil {
		e.t.Fatalf("broker.New: %v", err)
	}
	e.engine, e.b = eng, b
}

func (e *env) close() {
	if e.b == nil {
		return
	}
	if err := e.b.Close(context.Background()); err != nil {
		e.t.Errorf("broker.Close: %v", err)
	}
	if err := e.engine.Close(); err != nil {
		e.t.Errorf("engine.Close: %v", err)
	}
	e.b, e.engine = nil, nil
}

// restart closes cleanly and reopens on the same files.
func (e *env) restart() {
	e.close()
	e.open()
}

// crash reopens on the files as a power loss would leave them, then closes the old instance.
func (e *env) crash() {
	e.t.Helper()
	crashed := e.fs.Crash(nil)
	oldB, oldEng := e.b, e.engine
	e.fs = crashed
	e.open()
	_ = oldB.Close(context.Background())
	_ = oldEng.Close()
}

func (e *env) topic(name string) *Topic {
	e.t.Helper()
	tn, err := naming.ParseTopic(name)
	if err != nil {
		e.t.Fatal(err)
	}
	top, err := e.b.GetTopic(context.Background(), tn, true)
	if err != nil {
		e.t.Fatalf("GetTopic(%s): %v", name, err)
	}
	return top
}

// entry builds stored entry bytes for one message (or a batch of n when n > 1).
func entry(t testing.TB, producer string, seq uint64, n int, payload string) []byte {
	t.Helper()
	md := &pulsarpb.MessageMetadata{
		ProducerName: proto.String(producer),
		SequenceId:   proto.Uint64(seq),
		PublishTime:  proto.Uint64(uint64(time.Now().UnixMilli())),
	}
	body := []byte(payload)
	if n > 1 {
		md.NumMessagesInBatch = proto.Int32(int32(n))
		body = nil
		for i := 0; i < n; i++ {
			var err error
			body, err = wire.AppendBatchRecord(body, &pulsarpb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(payload)))}, []byte(payload))
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := wire.EncodeEntry(md, body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// publishSync publishes and waits for the result.
func publishSync(t testing.TB, p *Producer, req PublishRequest) PublishResult {
	t.Helper()
	ch := make(chan PublishResult, 1)
	p.Publish(req, func(r PublishResult) { ch <- r })
	select {
	case r := <-ch:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("publish did not complete")
	}
	return PublishResult{}
}

func addProducer(t testing.TB, top *Topic, opts ProducerOptions) *Producer {
	t.Helper()
	p, err := top.AddProducer(context.Background(), opts)
	if err != nil {
		t.Fatalf("AddProducer: %v", err)
	}
	return p
}

// sink records what the broker sends to one consumer.
type sink struct {
	mu      sync.Mutex
	msgs    []Delivery
	actives []bool
	closed  bool
	changed chan struct{}
}

func newSink() *sink { return &sink{changed: make(chan struct{}, 1)} }

func (s *sink) SendMessages(ms []Delivery) {
	s.mu.Lock()
	s.msgs = append(s.msgs, ms...)
	s.mu.Unlock()
	s.poke()
}

func (s *sink) ActiveConsumerChanged(active bool) {
	s.mu.Lock()
	s.actives = append(s.actives, active)
	s.mu.Unlock()
	s.poke()
}

func (s *sink) Closed(Reassigned) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.poke()
}

func (s *sink) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// waitFor polls cond (under the sink's lock) until it holds or the deadline passes.
func (s *sink) waitFor(t testing.TB, what string, cond func(*sink) bool) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		s.mu.Lock()
		ok := cond(s)
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-s.changed:
		case <-deadline:
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Fatalf("timed out waiting for %s (have %d messages, closed=%v, actives=%v)", what, len(s.msgs), s.closed, s.actives)
		}
	}
}

func (s *sink) waitMessages(t testing.TB, n int) []Delivery {
	t.Helper()
	s.waitFor(t, "messages", func(s *sink) bool { return len(s.msgs) >= n })
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.msgs...)
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

// quiet asserts that the sink holds exactly n messages once the broker has nothing left to do. It
// is called inside a synctest bubble (inBubble): synctest.Wait returns when every goroutine of the
// test, the broker's and the storage engine's included, waits for something only the test can give,
// so a message still on its way would have arrived.
func (s *sink) quiet(t testing.TB, n int) {
	t.Helper()
	synctest.Wait()
	if got := s.count(); got != n {
		t.Fatalf("got %d messages, want %d", got, n)
	}
}

func subscribe(t testing.TB, top *Topic, opts SubscribeOptions) (*Consumer, *sink) {
	t.Helper()
	s := newSink()
	c, err := top.Subscribe(context.Background(), opts, s)
	if err != nil {
		t.Fatalf("Subscribe(%s): %v", opts.Subscription, err)
	}
	return c, s
}

func payloadOf(t testing.TB, d Delivery) string {
	t.Helper()
	p, err := wire.ParseEntry(d.Data)
	if err != nil {
		t.Fatal(err)
	}
	return string(p.Body)
}

// markerEntry builds a replicated-subscription snapshot marker entry.
func markerEntry(t testing.TB) []byte {
	t.Helper()
	md := &pulsarpb.MessageMetadata{
		ProducerName: proto.String("pulsar.marker"),
		SequenceId:   proto.Uint64(0),
		PublishTime:  proto.Uint64(uint64(time.Now().UnixMilli())),
		MarkerType:   proto.Int32(12),
	}
	b, err := wire.EncodeEntry(md, []byte("snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newMemFS() *vfs.Mem { return vfs.NewMem() }

// fakeClock is a settable Clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// lastEntryOrErr is the last stored entry's position (tests).
func (t *topicState) lastEntryOrErr() (mtypes.Position, error) {
	info, _, err := t.lastEntry(context.Background())
	return info.pos, err
}
