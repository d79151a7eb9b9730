package server

import (
	"bytes"
	"context"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func TestTopicsHash(t *testing.T) {
	a := []string{"persistent://public/default/b", "persistent://public/default/a"}
	b := []string{"persistent://public/default/a", "persistent://public/default/b"}
	if topicsHash(a) != topicsHash(b) {
		t.Fatal("hash depends on order")
	}
	// CRC32C of the concatenation, bytes little-endian in hex (Guava's HashCode.toString).
	sum := crc32.Checksum([]byte("persistent://public/default/apersistent://public/default/b"), crc32.MakeTable(crc32.Castagnoli))
	want := []byte{byte(sum), byte(sum >> 8), byte(sum >> 16), byte(sum >> 24)}
	if got := topicsHash(a); got != string(hexOf(want)) {
		t.Fatalf("hash %s, want %s", got, hexOf(want))
	}
	if topicsHash(nil) != "00000000" {
		t.Fatalf("empty list hash %s", topicsHash(nil))
	}
}

func hexOf(b []byte) []byte {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return out
}

func TestFilterTopicsAndResponse(t *testing.T) {
	names := []string{
		"persistent://public/default/orders-partition-0",
		"persistent://public/default/orders-partition-1",
		"persistent://public/default/ordinary",
		"persistent://public/default/payments",
	}
	got, err := filterTopics(names, "persistent://public/default/orders")
	if err != nil || !slices.Equal(got, names[:2]) {
		t.Fatalf("exact base name: %v %v", got, err)
	}
	got, err = filterTopics(names, "persistent://public/default/ord.*")
	if err != nil || len(got) != 3 {
		t.Fatalf("prefix: %v %v", got, err)
	}
	if got, _ := filterTopics(names, "public/default/pay.*"); len(got) != 1 {
		t.Fatalf("pattern without domain: %v", got)
	}
	if _, err := filterTopics(names, "(["); err == nil {
		t.Fatal("bad pattern accepted")
	}

	cmd := &pulsarpb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(7), Namespace: proto.String("public/default"),
		TopicsPattern: proto.String("persistent://public/default/pay.*")}
	resp, err := topicsOfNamespaceResponse(cmd, names)
	if err != nil || !resp.GetFiltered() || !resp.GetChanged() || len(resp.GetTopics()) != 1 || resp.GetTopicsHash() == "" {
		t.Fatalf("filtered response %v %v", resp, err)
	}
	cmd.TopicsHash = proto.String(resp.GetTopicsHash())
	resp, err = topicsOfNamespaceResponse(cmd, names)
	if err != nil || resp.GetChanged() || len(resp.GetTopics()) != 0 {
		t.Fatalf("unchanged response %v %v", resp, err)
	}
	plain, _ := topicsOfNamespaceResponse(&pulsarpb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(8)}, names)
	if plain.GetFiltered() || !plain.GetChanged() || len(plain.GetTopics()) != 4 {
		t.Fatalf("plain response %v", plain)
	}
}

// BenchmarkTopicsOfNamespaceResponse: a Java pattern consumer polling a namespace of 1000 topics
// with an unchanged hash (filter + hash, no list sent).
func BenchmarkTopicsOfNamespaceResponse(b *testing.B) {
	names := make([]string, 1000)
	for i := range names {
		names[i] = "persistent://public/default/topic-" + string(rune('a'+i%26)) + "-" + strconv.Itoa(i)
	}
	cmd := &pulsarpb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(1), TopicsPattern: proto.String("persistent://public/default/topic-a-.*")}
	first, err := topicsOfNamespaceResponse(cmd, names)
	if err != nil {
		b.Fatal(err)
	}
	cmd.TopicsHash = proto.String(first.GetTopicsHash())
	b.ReportAllocs()
	for b.Loop() {
		if resp, _ := topicsOfNamespaceResponse(cmd, names); resp.GetChanged() {
			b.Fatal("changed")
		}
	}
}

// partitionedCatalog is a Catalog whose every namespace holds the given partitioned topics.
type partitionedCatalog []PartitionedTopic

func (partitionedCatalog) PartitionCount(context.Context, naming.TopicName) (int, error) {
	return 0, nil
}

func (p partitionedCatalog) PartitionedTopics(context.Context, naming.NamespaceName) ([]PartitionedTopic, error) {
	return p, nil
}

// A namespace whose listing does not fit in a frame the client reads (10,000 partitions of names
// near the length limit: about 9.4 MB, against the default max frame size of 5 MiB + 10 KiB) is
// answered with ERROR NotAllowedError for that request, readable by a client with the default
// limit, and the connection serves the next requests: a topics pattern that matches a small
// partitioned topic gets its filtered list, and a lookup succeeds.
func TestTopicsOfNamespaceTooLargeForAFrameIsAnError(t *testing.T) {
	ns := "public/" + strings.Repeat("n", 400)
	big, err := naming.ParseTopic("persistent://" + ns + "/" + strings.Repeat("t", 512-len("-partition-9999")))
	if err != nil {
		t.Fatal(err)
	}
	small, err := naming.ParseTopic("persistent://" + ns + "/small")
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Options{Catalog: partitionedCatalog{{Name: big, Partitions: 10000}, {Name: small, Partitions: 3}}})
	c := dialRaw(t, s.addr) // reads with wire.DefaultMaxFrameSize, as a client does
	if got := c.connect().GetMaxMessageSize(); got != wire.DefaultMaxMessageSize {
		t.Fatalf("CONNECTED max_message_size %d", got)
	}
	persistent := pulsarpb.CommandGetTopicsOfNamespace_PERSISTENT.Enum()

	c.send(&pulsarpb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(1), Namespace: proto.String(ns), Mode: persistent})
	e := c.expect(pulsarpb.BaseCommand_ERROR).Cmd.GetError()
	if e.GetRequestId() != 1 || e.GetError() != pulsarpb.ServerError_NotAllowedError ||
		!strings.Contains(e.GetMessage(), "topics of namespace "+ns) ||
		!strings.Contains(e.GetMessage(), "max frame size "+strconv.Itoa(wire.DefaultMaxFrameSize)) {
		t.Fatalf("oversize listing answered %v", e)
	}

	// The same namespace through a pattern: only the small topic's partitions, filtered.
	c.send(&pulsarpb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(2), Namespace: proto.String(ns), Mode: persistent,
		TopicsPattern: proto.String("persistent://" + ns + "/sm.*")})
	resp := c.expect(pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE).Cmd.GetGetTopicsOfNamespaceResponse()
	want := []string{small.Partition(0).String(), small.Partition(1).String(), small.Partition(2).String()}
	if resp.GetRequestId() != 2 || !resp.GetFiltered() || !slices.Equal(resp.GetTopics(), want) {
		t.Fatalf("filtered listing: request %d filtered %v topics %v", resp.GetRequestId(), resp.GetFiltered(), resp.GetTopics())
	}

	c.send(&pulsarpb.CommandLookupTopic{RequestId: proto.Uint64(3), Topic: proto.String(small.Partition(0).String())})
	if l := c.expect(pulsarpb.BaseCommand_LOOKUP_RESPONSE).Cmd.GetLookupTopicResponse(); l.GetRequestId() != 3 ||
		l.GetResponse() != pulsarpb.CommandLookupTopicResponse_Connect {
		t.Fatalf("lookup after the refused listing: %v", l)
	}
}

// sendCommand never queues a frame above the client's max frame size: an answer to a request
// becomes a short ERROR for that request (an oversize ERROR keeps its code), and a command that
// answers no request is dropped.
func TestSendCommandRefusesFramesAboveTheClientsLimit(t *testing.T) {
	c := &conn{s: &Server{opts: Options{MaxMessageSize: 1024}}, out: newOutbox(), log: testLogger()}
	limit := wire.MaxFrameSize(1024)
	long := strings.Repeat("x", limit)
	queued := func() []wire.Frame {
		t.Helper()
		bufs, _ := c.out.take(nil)
		c.out.wrote()
		r := wire.NewReader(bytes.NewReader(bytes.Join(bufs, nil)), limit)
		var frames []wire.Frame
		for {
			f, err := r.ReadFrame()
			if err != nil {
				return frames
			}
			frames = append(frames, f)
		}
	}

	c.sendCommand(&pulsarpb.CommandLookupTopicResponse{RequestId: proto.Uint64(9),
		Response: pulsarpb.CommandLookupTopicResponse_Failed.Enum(), Message: proto.String(long)})
	c.sendCommand(&pulsarpb.CommandError{RequestId: proto.Uint64(10), Error: pulsarpb.ServerError_MetadataError.Enum(), Message: proto.String(long)})
	if !c.sendCommand(&pulsarpb.CommandSuccess{RequestId: proto.Uint64(11)}) {
		t.Fatal("a small frame was refused")
	}
	if c.sendCommand(&pulsarpb.CommandSendError{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1),
		Error: pulsarpb.ServerError_UnknownError.Enum(), Message: proto.String(long)}) {
		t.Fatal("an oversize SEND_ERROR was queued")
	}
	frames := queued()
	if len(frames) != 3 {
		t.Fatalf("%d frames queued, want 3", len(frames))
	}
	for i, want := range []struct {
		id   uint64
		code pulsarpb.ServerError
	}{{9, pulsarpb.ServerError_NotAllowedError}, {10, pulsarpb.ServerError_MetadataError}} {
		e := frames[i].Cmd.GetError()
		if frames[i].Type() != pulsarpb.BaseCommand_ERROR || e.GetRequestId() != want.id || e.GetError() != want.code ||
			!strings.Contains(e.GetMessage(), "exceeds the max frame size") {
			t.Fatalf("frame %d: %s %v", i, frames[i].Type(), e)
		}
	}
	if frames[2].Type() != pulsarpb.BaseCommand_SUCCESS {
		t.Fatalf("frame 2: %s", frames[2].Type())
	}
}
