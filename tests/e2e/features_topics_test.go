package e2e

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// rawConn is a bare binary-protocol connection for commands pulsar-client-go never sends in the
// form other clients do (GET_TOPICS_OF_NAMESPACE with a pattern and a hash: the Java client).
type rawConn struct {
	t  *testing.T
	nc net.Conn
	r  *wire.Reader
	w  *wire.Writer
}

func dialRaw(t *testing.T, serviceURL string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(serviceURL, "pulsar://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &rawConn{t: t, nc: nc, r: wire.NewReader(nc, wire.MaxFrameSize(5<<20)), w: wire.NewWriter(nc)}
	c.roundTrip(&pulsarpb.CommandConnect{ClientVersion: proto.String("meridian-e2e"), ProtocolVersion: proto.Int32(20)})
	return c
}

// roundTrip sends one command and returns the next frame's command.
func (c *rawConn) roundTrip(body proto.Message) *pulsarpb.BaseCommand {
	c.t.Helper()
	_ = c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.w.WriteCommand(wire.Command(body)); err != nil {
		c.t.Fatal(err)
	}
	if err := c.w.Flush(); err != nil {
		c.t.Fatal(err)
	}
	f, err := c.r.ReadFrame()
	if err != nil {
		c.t.Fatal(err)
	}
	return f.Cmd
}

func (c *rawConn) topicsOf(req *pulsarpb.CommandGetTopicsOfNamespace) *pulsarpb.CommandGetTopicsOfNamespaceResponse {
	c.t.Helper()
	cmd := c.roundTrip(req)
	resp := cmd.GetGetTopicsOfNamespaceResponse()
	if resp == nil {
		c.t.Fatalf("GET_TOPICS_OF_NAMESPACE answered %v", cmd.GetType())
	}
	return resp
}

// TestTopicsOfNamespaceModesPatternAndHash: the namespace listing regex consumers rely on — modes
// (persistent, non-persistent, all), partitions listed individually, Pulsar's pattern filter and the
// unchanged-hash shortcut the Java client uses.
func TestTopicsOfNamespaceModesPatternAndHash(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	admin := harness.NewAdmin(t, b)
	base := harness.Topic(t)
	local := strings.TrimPrefix(base, "persistent://public/default/")
	persistent := base + "-p"
	partitioned := base + "-parts"
	nonPersistent := "non-persistent://public/default/" + local + "-np"
	if err := admin.Topics().Create(*mustTopicName(t, partitioned), 2); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{persistent, nonPersistent} {
		newProducer(t, client, pulsar.ProducerOptions{Topic: tp})
	}

	raw := dialRaw(t, b.ServiceURL())
	ns := proto.String("public/default")
	mode := func(m pulsarpb.CommandGetTopicsOfNamespace_Mode) *pulsarpb.CommandGetTopicsOfNamespace_Mode {
		return &m
	}
	mine := func(names []string) []string {
		var out []string
		for _, n := range names {
			if strings.Contains(n, local) {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out
	}
	wantP := []string{partitioned + "-partition-0", partitioned + "-partition-1", persistent}
	slices.Sort(wantP)
	if got := mine(raw.topicsOf(&pulsarpb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(1), Namespace: ns,
		Mode: mode(pulsarpb.CommandGetTopicsOfNamespace_PERSISTENT)}).GetTopics()); !slices.Equal(got, wantP) {
		t.Errorf("PERSISTENT: %v, want %v", got, wantP)
	}
	if got := mine(raw.topicsOf(&pulsarpb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(2), Namespace: ns,
		Mode: mode(pulsarpb.CommandGetTopicsOfNamespace_NON_PERSISTENT)}).GetTopics()); !slices.Equal(got, []string{nonPersistent}) {
		t.Errorf("NON_PERSISTENT: %v", got)
	}
	if got := mine(raw.topicsOf(&pulsarpb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(3), Namespace: ns,
		Mode: mode(pulsarpb.CommandGetTopicsOfNamespace_ALL)}).GetTopics()); len(got) != 4 {
		t.Errorf("ALL: %v", got)
	}

	// Pattern: the partitioned topic's base name matches, so both partitions are listed.
	req := &pulsarpb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(4), Namespace: ns,
		Mode: mode(pulsarpb.CommandGetTopicsOfNamespace_PERSISTENT), TopicsPattern: proto.String(partitioned)}
	resp := raw.topicsOf(req)
	if !resp.GetFiltered() || !resp.GetChanged() || len(resp.GetTopics()) != 2 || resp.GetTopicsHash() == "" {
		t.Fatalf("pattern: %v", resp)
	}
	// Same hash back: nothing changed, no list.
	req.RequestId, req.TopicsHash = proto.Uint64(5), proto.String(resp.GetTopicsHash())
	if again := raw.topicsOf(req); again.GetChanged() || len(again.GetTopics()) != 0 {
		t.Fatalf("unchanged hash: %v", again)
	}
	// A new matching topic changes the hash.
	if err := admin.Topics().Update(*mustTopicName(t, partitioned), 3); err != nil {
		t.Fatal(err)
	}
	req.RequestId = proto.Uint64(6)
	if changed := raw.topicsOf(req); !changed.GetChanged() || len(changed.GetTopics()) != 3 {
		t.Fatalf("after adding a partition: %v", changed)
	}
	// A namespace that does not exist: an empty list, not an error.
	if empty := raw.topicsOf(&pulsarpb.CommandGetTopicsOfNamespace{RequestId: proto.Uint64(7), Namespace: proto.String("public/nope")}); len(empty.GetTopics()) != 0 {
		t.Fatalf("missing namespace: %v", empty)
	}
}
