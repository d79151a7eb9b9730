package server

import (
	"hash/crc32"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

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
