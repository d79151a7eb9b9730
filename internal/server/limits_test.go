package server

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// nextCommand returns the next frame's command that is not a PING.
func (c *rawClient) nextCommand() *pulsarpb.BaseCommand {
	c.t.Helper()
	for {
		f, err := c.read()
		if err != nil {
			c.t.Fatalf("reading: %v", err)
		}
		if f.Type() != pulsarpb.BaseCommand_PING {
			return f.Cmd
		}
	}
}

// keyValuesOf builds n properties whose keys and values together take about bytes bytes.
func keyValuesOf(n, bytes int) []*pulsarpb.KeyValue {
	var out []*pulsarpb.KeyValue
	for i := range n {
		out = append(out, &pulsarpb.KeyValue{Key: proto.String(fmt.Sprintf("k%d", i)), Value: proto.String(strings.Repeat("v", bytes/n))})
	}
	return out
}

// TestProtocolRefusesOversizedNamesAndProperties: topic names above 1,024 bytes, producer,
// consumer and subscription names above 256 bytes, and more than 64 properties or 16 KiB of them
// are refused with an error naming the limit; at the limits they are accepted. A refused
// SUBSCRIBE creates nothing.
func TestProtocolRefusesOversizedNamesAndProperties(t *testing.T) {
	s := startServer(t, Options{})
	c := dialRaw(t, s.addr)
	c.connect()
	// "persistent://public/" + namespace + "/" + 512-byte local name.
	topicOf := func(total int) string {
		local := strings.Repeat("t", 512)
		ns := strings.Repeat("n", total-len("persistent://public/")-1-len(local))
		return "persistent://public/" + ns + "/" + local
	}
	reqID := uint64(0)
	producer := func(topic, name string, meta []*pulsarpb.KeyValue) *pulsarpb.BaseCommand {
		reqID++
		c.send(&pulsarpb.CommandProducer{
			Topic: proto.String(topic), ProducerId: proto.Uint64(reqID), RequestId: proto.Uint64(reqID),
			ProducerName: proto.String(name), Metadata: meta,
		})
		return c.nextCommand()
	}
	subscribe := func(topic, sub, consumer string, meta, subProps []*pulsarpb.KeyValue) *pulsarpb.BaseCommand {
		reqID++
		c.send(&pulsarpb.CommandSubscribe{
			Topic: proto.String(topic), Subscription: proto.String(sub), SubType: pulsarpb.CommandSubscribe_Shared.Enum(),
			ConsumerId: proto.Uint64(reqID), RequestId: proto.Uint64(reqID), ConsumerName: proto.String(consumer),
			Durable: proto.Bool(true), Metadata: meta, SubscriptionProperties: subProps,
		})
		return c.nextCommand()
	}
	refused := func(what string, cmd *pulsarpb.BaseCommand, code pulsarpb.ServerError, words string) {
		t.Helper()
		e := cmd.GetError()
		if cmd.GetType() != pulsarpb.BaseCommand_ERROR || e.GetError() != code || !strings.Contains(e.GetMessage(), words) {
			t.Errorf("%s: got %v, want ERROR %s mentioning %q", what, cmd, code, words)
		}
	}
	accepted := func(what string, cmd *pulsarpb.BaseCommand, want pulsarpb.BaseCommand_Type) {
		t.Helper()
		if cmd.GetType() != want {
			t.Errorf("%s: got %v, want %s", what, cmd, want)
		}
	}
	long, short := topicOf(naming.MaxTopicNameBytes+1), topicOf(naming.MaxTopicNameBytes)
	refused("topic of 1025 bytes", producer(long, "", nil), pulsarpb.ServerError_InvalidTopicName, "1024")
	accepted("topic of 1024 bytes", producer(short, "", nil), pulsarpb.BaseCommand_PRODUCER_SUCCESS)

	const topic = "persistent://public/default/limits"
	refused("producer name of 257 bytes", producer(topic, strings.Repeat("p", 257), nil), pulsarpb.ServerError_MetadataError, "256")
	accepted("producer name of 256 bytes", producer(topic, strings.Repeat("p", 256), nil), pulsarpb.BaseCommand_PRODUCER_SUCCESS)
	refused("65 producer properties", producer(topic, "", keyValuesOf(65, 65)), pulsarpb.ServerError_MetadataError, "64")
	refused("17 KiB of producer properties", producer(topic, "", keyValuesOf(4, 17<<10)), pulsarpb.ServerError_MetadataError, "16384")
	accepted("64 producer properties", producer(topic, "", keyValuesOf(64, 15<<10)), pulsarpb.BaseCommand_PRODUCER_SUCCESS)

	const fresh = "persistent://public/default/never-created"
	refused("subscription name of 257 bytes", subscribe(fresh, strings.Repeat("s", 257), "c", nil, nil), pulsarpb.ServerError_MetadataError, "256")
	refused("consumer name of 257 bytes", subscribe(fresh, "s", strings.Repeat("c", 257), nil, nil), pulsarpb.ServerError_MetadataError, "256")
	refused("65 consumer properties", subscribe(fresh, "s", "c", keyValuesOf(65, 65), nil), pulsarpb.ServerError_MetadataError, "64")
	refused("17 KiB of subscription properties", subscribe(fresh, "s", "c", nil, keyValuesOf(2, 17<<10)), pulsarpb.ServerError_MetadataError, "16384")
	tn, _ := naming.ParseTopic(fresh)
	if ok, err := s.opts.Broker.TopicExists(t.Context(), tn); ok || err != nil {
		t.Errorf("refused subscriptions created the topic (exists=%v, err=%v)", ok, err)
	}
	accepted("names and properties at the limits",
		subscribe(topic, strings.Repeat("s", 256), strings.Repeat("c", 256), keyValuesOf(64, 15<<10), keyValuesOf(64, 15<<10)),
		pulsarpb.BaseCommand_SUCCESS)
}
