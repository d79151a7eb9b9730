package wire

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// MarkerProducerName is the producer name of broker-written marker entries (Pulsar's convention).
const MarkerProducerName = "pulsar.marker"

// EncodeMarkerEntry builds the entry bytes of a marker: metadata with producer "pulsar.marker",
// marker_type t and the given replicate_to list (nil: default replication), body = the encoded
// marker message. Which body goes with which type: REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST ->
// ReplicatedSubscriptionsSnapshotRequest, ..._RESPONSE -> ReplicatedSubscriptionsSnapshotResponse,
// ..._SNAPSHOT -> ReplicatedSubscriptionsSnapshot, ..._UPDATE -> ReplicatedSubscriptionsUpdate.
func EncodeMarkerEntry(t pulsarpb.MarkerType, body proto.Message, publishTimeMillis uint64, replicateTo []string) ([]byte, error) {
	if want := markerBody(t); want == nil || want.ProtoReflect().Descriptor() != body.ProtoReflect().Descriptor() {
		return nil, fmt.Errorf("wire: marker %s cannot carry %T", t, body)
	}
	b, err := proto.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("wire: encode marker %s: %w", t, err)
	}
	md := &pulsarpb.MessageMetadata{
		ProducerName: proto.String(MarkerProducerName),
		SequenceId:   proto.Uint64(0),
		PublishTime:  proto.Uint64(publishTimeMillis),
		MarkerType:   proto.Int32(int32(t)),
		ReplicateTo:  replicateTo,
	}
	return EncodeEntry(md, b)
}

// DecodeMarker returns the type and decoded body of a marker entry. Markers of types this build
// does not know return their type and a nil body; entries that are not markers are an error.
func DecodeMarker(entry []byte) (pulsarpb.MarkerType, proto.Message, error) {
	p, err := ParseEntry(entry)
	if err != nil {
		return 0, nil, err
	}
	md := &pulsarpb.MessageMetadata{}
	if err := unmarshalPartial.Unmarshal(p.Metadata, md); err != nil {
		return 0, nil, fmt.Errorf("%w: metadata: %v", ErrMalformedPayload, err)
	}
	if md.MarkerType == nil {
		return 0, nil, fmt.Errorf("%w: not a marker entry", ErrMalformedPayload)
	}
	t := pulsarpb.MarkerType(md.GetMarkerType())
	body := markerBody(t)
	if body == nil {
		return t, nil, nil
	}
	if err := proto.Unmarshal(p.Body, body); err != nil {
		return t, nil, fmt.Errorf("%w: marker %s: %v", ErrMalformedPayload, t, err)
	}
	return t, body, nil
}

func markerBody(t pulsarpb.MarkerType) proto.Message {
	switch t {
	case pulsarpb.MarkerType_REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST:
		return &pulsarpb.ReplicatedSubscriptionsSnapshotRequest{}
	case pulsarpb.MarkerType_REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE:
		return &pulsarpb.ReplicatedSubscriptionsSnapshotResponse{}
	case pulsarpb.MarkerType_REPLICATED_SUBSCRIPTION_SNAPSHOT:
		return &pulsarpb.ReplicatedSubscriptionsSnapshot{}
	case pulsarpb.MarkerType_REPLICATED_SUBSCRIPTION_UPDATE:
		return &pulsarpb.ReplicatedSubscriptionsUpdate{}
	}
	return nil
}
