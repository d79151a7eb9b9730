package broker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
	"github.com/meridian-mq/meridian/internal/wire"
)

// TestTopicAwaitingRepairIsServiceNotReady: a topic whose segment file waits to be rewritten after an
// I/O error (storage refuses to open it until then) is not ready, which clients retry; it is not an
// unknown error, which pulsar-client-go hands to the application.
func TestTopicAwaitingRepairIsServiceNotReady(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{AutoTopicCreation: true})
	top := e.topic("persistent://public/default/repair")
	p, err := top.AddProducer(ctx, ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 0, 1, "x")}); r.Err != nil {
		t.Fatal(r.Err)
	}
	// Every write to a segment fails from now on: the next entry is acknowledged from the journal,
	// its segment write fails, and the repair that would rewrite the file keeps failing.
	e.fs.SetInjector(func(op vfs.Op, name string) error {
		if op == vfs.OpWrite && strings.HasSuffix(name, ".seg") {
			return vfs.EIO
		}
		return nil
	})
	t.Cleanup(func() { e.fs.SetInjector(nil) })
	_ = publishSync(t, p, PublishRequest{Entry: entry(t, p.Name(), 1, 1, "y"), SequenceID: 1})
	name, err := naming.ParseTopic("persistent://public/default/repair")
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, waitTimeout, "the topic's segment a repair target", func() bool { return e.engine.Metrics().RepairsPending > 0 })
	_ = e.b.UnloadTopic(ctx, name)
	_, err = e.b.GetTopic(ctx, name, true)
	if err == nil {
		t.Fatal("the topic loaded while its segment awaits a repair")
	}
	if code := wire.ServerErrorOf(err); !errors.Is(err, wire.ErrServiceNotReady) {
		t.Fatalf("loading a topic that awaits a repair: %v (code %v), want ServiceNotReady", err, code)
	}
}
