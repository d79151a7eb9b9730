package broker

import (
	"math"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// The dispatcher's wait for the next delayed entry never wraps: deliver_at_time is the
// producer's, and a time more than about 292 years ahead made the wait negative.
func TestDelayWaitSaturates(t *testing.T) {
	now := time.Now().UnixMilli()
	for _, c := range []struct {
		due  int64
		want time.Duration
	}{
		{now + 1500, 1500 * time.Millisecond},
		{now, 0},
		{now + int64(maxDelayWait/time.Millisecond) + 1, maxDelayWait},
		{math.MaxInt64, maxDelayWait},
	} {
		if got := delayWait(c.due, now); got != c.want {
			t.Errorf("delayWait(now+%d ms) = %v, want %v", c.due-now, got, c.want)
		}
	}
}

// A Shared subscription holding one entry whose deliver_at_time is as far ahead as it can be
// waits for it: its dispatcher does not spin (it used a whole core).
func TestFarFutureDeliverAtDoesNotSpin(t *testing.T) {
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("delayed-forever")
	p := addProducer(t, top, ProducerOptions{})
	c, _ := subscribe(t, top, SubscribeOptions{Subscription: "d", Type: mtypes.SubShared, Durable: true})
	c.Flow(100)
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String(p.Name()), SequenceId: proto.Uint64(0),
		PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), DeliverAtTime: proto.Int64(math.MaxInt64)}
	b, err := wire.EncodeEntry(md, []byte("never"))
	if err != nil {
		t.Fatal(err)
	}
	if r := publishSync(t, p, PublishRequest{Entry: b}); r.Err != nil {
		t.Fatal(r.Err)
	}
	before := processCPU(t)
	time.Sleep(time.Second)
	if used := processCPU(t) - before; used > 200*time.Millisecond {
		t.Fatalf("an idle subscription holding one delayed entry used %v of CPU in 1 s", used)
	}
}

func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
