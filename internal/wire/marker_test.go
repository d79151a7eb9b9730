package wire

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func TestMarkerRoundTrip(t *testing.T) {
	upd := &pulsarpb.ReplicatedSubscriptionsUpdate{
		SubscriptionName: proto.String("sub"),
		Clusters: []*pulsarpb.ClusterMessageId{{
			Cluster:   proto.String("east"),
			MessageId: &pulsarpb.MarkersMessageIdData{LedgerId: proto.Uint64(3), EntryId: proto.Uint64(4)},
		}},
	}
	entry, err := EncodeMarkerEntry(pulsarpb.MarkerType_REPLICATED_SUBSCRIPTION_UPDATE, upd, 1700000000000, []string{"east"})
	if err != nil {
		t.Fatal(err)
	}
	md, err := DecodeMetadata(entry)
	if err != nil || !IsMarker(md) || md.GetProducerName() != MarkerProducerName || CheckMetadata(md) != nil {
		t.Fatalf("metadata %v %v", md, err)
	}
	typ, body, err := DecodeMarker(entry)
	if err != nil || typ != pulsarpb.MarkerType_REPLICATED_SUBSCRIPTION_UPDATE || !proto.Equal(body, upd) {
		t.Fatalf("decoded %s %v %v", typ, body, err)
	}
	if _, err := EncodeMarkerEntry(pulsarpb.MarkerType_REPLICATED_SUBSCRIPTION_SNAPSHOT, upd, 1, nil); err == nil {
		t.Fatal("mismatched marker body accepted")
	}
	plain, _ := EncodeEntry(testMetadata(), []byte("x"))
	if _, _, err := DecodeMarker(plain); !errors.Is(err, ErrMalformedPayload) {
		t.Fatalf("plain entry: %v", err)
	}
}

func FuzzDecodeMarker(f *testing.F) {
	req, _ := EncodeMarkerEntry(pulsarpb.MarkerType_REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST,
		&pulsarpb.ReplicatedSubscriptionsSnapshotRequest{SnapshotId: proto.String("s1"), SourceCluster: proto.String("a")}, 1, nil)
	f.Add(req)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _ = DecodeMarker(data)
	})
}
