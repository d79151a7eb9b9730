package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// fakeOwnership answers from a table of topic -> owner; a topic in held waits for release (or the
// hold deadline) as the coordinator's lookup does.
type fakeOwnership struct {
	mu      sync.Mutex
	owners  map[string]Owner
	held    map[string]chan struct{}
	hold    time.Duration
	lookups map[string]int
	// incoming topics are being handed over to this broker: AwaitServing waits for the channel to
	// close (the move ended) or the hold deadline.
	incoming map[string]chan struct{}
}

func (f *fakeOwnership) Incoming(topic naming.TopicName) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.incoming[topic.String()] != nil
}

func (f *fakeOwnership) AwaitServing(ctx context.Context, topic naming.TopicName) bool {
	f.mu.Lock()
	wait := f.incoming[topic.String()]
	f.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-time.After(f.hold):
		case <-ctx.Done():
		}
	}
	return f.Serves(topic)
}

func (f *fakeOwnership) Lookup(ctx context.Context, topic naming.TopicName) (Owner, error) {
	f.mu.Lock()
	f.lookups[topic.String()]++
	wait := f.held[topic.String()]
	f.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-time.After(f.hold):
			return Owner{}, fmt.Errorf("bundle of %s: %w", topic, wire.ErrServiceNotReady)
		case <-ctx.Done():
			return Owner{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owners[topic.String()], nil
}

func (f *fakeOwnership) Serves(topic naming.TopicName) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owners[topic.String()].Self
}

func (f *fakeOwnership) Topics(_ context.Context, ns naming.NamespaceName) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for t := range f.owners {
		if strings.HasPrefix(t, "persistent://"+ns.String()+"/") {
			out = append(out, t)
		}
	}
	return out, nil
}

// TestLookupAnswersInACluster is the LOOKUP table of a broker among several: Connect for its own
// topics, Redirect (authoritative, never proxied) to the owner for others, a held answer that
// returns as soon as the bundle gets an owner, and ServiceNotReady when none appears in time.
func TestLookupAnswersInACluster(t *testing.T) {
	own := &fakeOwnership{
		owners: map[string]Owner{
			"persistent://public/default/mine":   {Self: true},
			"persistent://public/default/theirs": {ServiceURL: "pulsar://127.0.0.2:6650", ServiceURLTLS: "pulsar+ssl://127.0.0.2:6651"},
			"persistent://public/default/later":  {ServiceURL: "pulsar://127.0.0.3:6650"},
		},
		held:    map[string]chan struct{}{"persistent://public/default/later": make(chan struct{}), "persistent://public/default/nobody": make(chan struct{})},
		hold:    300 * time.Millisecond,
		lookups: map[string]int{},
	}
	s := startServer(t, Options{Ownership: own, ServiceURL: "pulsar://127.0.0.1:6650"})
	c := dialRaw(t, s.addr)
	c.connect()
	lookup := func(topic string, reqID uint64) *pulsarpb.CommandLookupTopicResponse {
		c.send(&pulsarpb.CommandLookupTopic{Topic: proto.String(topic), RequestId: proto.Uint64(reqID)})
		r := c.expect(pulsarpb.BaseCommand_LOOKUP_RESPONSE).Cmd.GetLookupTopicResponse()
		if r.GetRequestId() != reqID {
			t.Fatalf("answer for request %d, want %d", r.GetRequestId(), reqID)
		}
		return r
	}
	for i, tc := range []struct {
		topic         string
		response      pulsarpb.CommandLookupTopicResponse_LookupType
		url, urlTLS   string
		authoritative bool
		errCode       pulsarpb.ServerError
	}{
		{"mine", pulsarpb.CommandLookupTopicResponse_Connect, "pulsar://127.0.0.1:6650", "", true, 0},
		{"persistent://public/default/theirs", pulsarpb.CommandLookupTopicResponse_Redirect, "pulsar://127.0.0.2:6650", "pulsar+ssl://127.0.0.2:6651", true, 0},
		{"nobody", pulsarpb.CommandLookupTopicResponse_Failed, "", "", false, pulsarpb.ServerError_ServiceNotReady},
		{"bad//name", pulsarpb.CommandLookupTopicResponse_Failed, "", "", false, pulsarpb.ServerError_InvalidTopicName},
	} {
		t.Run(tc.topic, func(t *testing.T) {
			r := lookup(tc.topic, uint64(i+1))
			if r.GetResponse() != tc.response || r.GetBrokerServiceUrl() != tc.url || r.GetBrokerServiceUrlTls() != tc.urlTLS ||
				r.GetAuthoritative() != tc.authoritative || r.GetProxyThroughServiceUrl() || (tc.errCode != 0 && r.GetError() != tc.errCode) {
				t.Fatalf("lookup %s: %v", tc.topic, r)
			}
		})
	}
	// A held lookup answers as soon as the bundle has an owner.
	go func() {
		poll := time.NewTicker(5 * time.Millisecond)
		defer poll.Stop()
		for range poll.C {
			own.mu.Lock()
			asked := own.lookups["persistent://public/default/later"] > 0
			own.mu.Unlock()
			if asked {
				close(own.held["persistent://public/default/later"])
				return
			}
		}
	}()
	r := lookup("later", 10)
	if r.GetResponse() != pulsarpb.CommandLookupTopicResponse_Redirect || r.GetBrokerServiceUrl() != "pulsar://127.0.0.3:6650" || !r.GetAuthoritative() {
		t.Fatalf("held lookup: %v", r)
	}
}

// TestNonOwnerRefusesProducersAndConsumers: PRODUCER and SUBSCRIBE for a topic another broker owns
// get ServiceNotReady with Pulsar's "redo the lookup" text; the owned topic works.
func TestNonOwnerRefusesProducersAndConsumers(t *testing.T) {
	own := &fakeOwnership{owners: map[string]Owner{
		"persistent://public/default/mine":   {Self: true},
		"persistent://public/default/theirs": {ServiceURL: "pulsar://127.0.0.2:6650"},
	}, lookups: map[string]int{}}
	s := startServer(t, Options{Ownership: own})
	c := dialRaw(t, s.addr)
	c.connect()
	c.send(&pulsarpb.CommandProducer{Topic: proto.String("persistent://public/default/theirs"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)})
	e := c.expect(pulsarpb.BaseCommand_ERROR).Cmd.GetError()
	if e.GetError() != pulsarpb.ServerError_ServiceNotReady || !strings.Contains(e.GetMessage(), "redo the lookup") {
		t.Fatalf("producer on a non-owner: %v", e)
	}
	c.send(&pulsarpb.CommandSubscribe{Topic: proto.String("persistent://public/default/theirs"), Subscription: proto.String("s"),
		SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(), ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(2)})
	e = c.expect(pulsarpb.BaseCommand_ERROR).Cmd.GetError()
	if e.GetError() != pulsarpb.ServerError_ServiceNotReady {
		t.Fatalf("subscribe on a non-owner: %v", e)
	}
	c.createProducer("persistent://public/default/mine", 2, 3)
}

// TestClientsSentToTheTargetWaitForTheMove: a bundle being handed over to this broker (its old
// owner sent the clients here with assignedBrokerServiceUrl) holds PRODUCER and SUBSCRIBE until
// the move ends: answered once this broker serves the topic, ServiceNotReady ("redo the lookup")
// when the move ended elsewhere.
func TestClientsSentToTheTargetWaitForTheMove(t *testing.T) {
	arriving, abandoned := make(chan struct{}), make(chan struct{})
	own := &fakeOwnership{owners: map[string]Owner{}, lookups: map[string]int{}, hold: 5 * time.Second,
		incoming: map[string]chan struct{}{"persistent://public/default/arriving": arriving, "persistent://public/default/abandoned": abandoned}}
	s := startServer(t, Options{Ownership: own})
	c := dialRaw(t, s.addr)
	c.connect()
	c.send(&pulsarpb.CommandProducer{Topic: proto.String("persistent://public/default/arriving"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)})
	c.send(&pulsarpb.CommandProducer{Topic: proto.String("persistent://public/default/abandoned"), ProducerId: proto.Uint64(2), RequestId: proto.Uint64(2)})
	// The move of "abandoned" ends with the old owner keeping it: refused.
	close(abandoned)
	e := c.expect(pulsarpb.BaseCommand_ERROR).Cmd.GetError()
	if e.GetRequestId() != 2 || e.GetError() != pulsarpb.ServerError_ServiceNotReady || !strings.Contains(e.GetMessage(), "redo the lookup") {
		t.Fatalf("producer of an abandoned move: %v", e)
	}
	// The move of "arriving" completes: the held producer is created.
	own.mu.Lock()
	own.owners["persistent://public/default/arriving"] = Owner{Self: true}
	delete(own.incoming, "persistent://public/default/arriving")
	own.mu.Unlock()
	close(arriving)
	if r := c.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS).Cmd.GetProducerSuccess(); r.GetRequestId() != 1 {
		t.Fatalf("producer success for request %d, want 1", r.GetRequestId())
	}
}
