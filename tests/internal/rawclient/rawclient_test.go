package rawclient

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// TestFramesDecodeWithTheBrokersReader: what this package builds as a well-formed frame is what
// the broker's decoder (internal/wire) reads, checksum included.
func TestFramesDecodeWithTheBrokersReader(t *testing.T) {
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(7), PublishTime: proto.Uint64(1)}
	entry := Entry(md, []byte("hello"))
	var stream bytes.Buffer
	stream.Write(Frame(Cmd(&pulsarpb.CommandFlow{ConsumerId: proto.Uint64(3), MessagePermits: proto.Uint32(10)})))
	stream.Write(SendFrame(Cmd(&pulsarpb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(7)}), entry))
	r := wire.NewReader(&stream, 0)
	f, err := r.ReadFrame()
	if err != nil || f.Cmd.GetFlow().GetMessagePermits() != 10 {
		t.Fatalf("flow frame: %v %v", f.Cmd, err)
	}
	f, err = r.ReadFrame()
	if err != nil || f.Cmd.GetSend().GetSequenceId() != 7 {
		t.Fatalf("send frame: %v %v", f.Cmd, err)
	}
	want, err := wire.EncodeEntry(md, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Payload, want) {
		t.Fatalf("entry %x, the broker's encoder builds %x", f.Payload, want)
	}
}
