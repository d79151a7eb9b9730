package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/crc32c"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Names of the protocol conventions the replicator follows (Pulsar's, so its tools recognise them).
const (
	// SourcePositionProperty carries the source entry's position ("<ledgerId>:<entryId>") on every
	// replicated entry; the receiver deduplicates and maps positions by it.
	SourcePositionProperty = wire.ReplSourcePositionProperty
	// SourceIncarnationProperty carries the storage incarnation of the source entry's ledger (16
	// hexadecimal digits) on every replicated entry whose incarnation is known: with the source
	// position it names the source entry uniquely, also after the source's data dir was restored
	// from an older copy or rebuilt. The receiver keys its index by it (absent: incarnation 0).
	SourceIncarnationProperty = wire.ReplSourceIncarnationProperty
	// LocalOnly in replicate_to keeps a message in its cluster (the Go client's DisableReplication).
	LocalOnly = "__local__"
	// DefaultPrefix is Pulsar's replicatorPrefix: cursor "pulsar.repl.<remote>", producer
	// "pulsar.repl.<local>--><remote>".
	DefaultPrefix = "pulsar.repl"
)

// CursorName is the replication cursor of remote on a local topic.
func CursorName(remote string) string { return DefaultPrefix + "." + remote }

// ProducerName is the name of the producer that replicates from local to remote.
func ProducerName(local, remote string) string { return DefaultPrefix + "." + local + "-->" + remote }

// RemoteOfProducer returns the source cluster of a replicator producer name ("pulsar.repl.a-->b" or the
// older "pulsar.repl.a"), and false for any other producer name.
func RemoteOfProducer(producerName string) (string, bool) {
	rest, ok := strings.CutPrefix(producerName, DefaultPrefix+".")
	if !ok {
		return "", false
	}
	rest, _, _ = strings.Cut(rest, "-->")
	return rest, rest != ""
}

// ErrCorruptEntry: a stored entry whose framing, checksum or metadata cannot be decoded.
var ErrCorruptEntry = errors.New("replication: corrupt entry")

// ParsedEntry is a stored entry split into its parts.
type ParsedEntry struct {
	Metadata *pulsarpb.MessageMetadata
	Payload  []byte // the (possibly compressed, possibly batched) body after the metadata
}

// ParseEntry splits stored bytes [0x0e01 crc32c] [u32 metadata size] [metadata] [payload] and checks
// the checksum when present.
func ParseEntry(data []byte) (ParsedEntry, error) {
	parts, err := wire.ParseEntry(data)
	if err != nil {
		return ParsedEntry{}, fmt.Errorf("%w: %v", ErrCorruptEntry, err)
	}
	if parts.HasChecksum {
		if got := wire.Checksum(parts.Checked); got != parts.Checksum {
			return ParsedEntry{}, fmt.Errorf("%w: checksum %08x, stored %08x", ErrCorruptEntry, got, parts.Checksum)
		}
	}
	md := &pulsarpb.MessageMetadata{}
	if err := unmarshalPartial.Unmarshal(parts.Metadata, md); err != nil {
		return ParsedEntry{}, fmt.Errorf("%w: metadata: %v", ErrCorruptEntry, err)
	}
	return ParsedEntry{Metadata: md, Payload: parts.Body}, nil
}

// unmarshalPartial decodes metadata without requiring proto2 required fields: a decision about an
// entry must not depend on a producer's sloppiness (the broker stored it).
var unmarshalPartial = proto.UnmarshalOptions{AllowPartial: true, DiscardUnknown: false}

// EncodeEntry builds stored/sent bytes with a CRC32C checksum from metadata and payload.
func EncodeEntry(md *pulsarpb.MessageMetadata, payload []byte) ([]byte, error) {
	return wire.EncodeEntry(md, payload)
}

// marshalPartial encodes metadata whether or not its proto2 required fields are set: an entry the
// broker stored without them is forwarded as it is (what the fast path does), not dropped.
var marshalPartial = proto.MarshalOptions{AllowPartial: true}

// encodeStoredEntry is EncodeEntry for metadata read from a stored entry (required fields not
// enforced).
func encodeStoredEntry(md *pulsarpb.MessageMetadata, payload []byte) ([]byte, error) {
	mdBytes, err := marshalPartial.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("%w: encode metadata: %v", ErrCorruptEntry, err)
	}
	buf := make([]byte, 10, 10+len(mdBytes)+len(payload))
	buf = append(append(buf, mdBytes...), payload...)
	binary.BigEndian.PutUint16(buf, wire.MagicCRC32C)
	binary.BigEndian.PutUint32(buf[6:], uint32(len(mdBytes)))
	binary.BigEndian.PutUint32(buf[2:], wire.Checksum(buf[6:]))
	return buf, nil
}

// SkipReason says why an entry is not sent to a remote cluster ("" = it is sent).
type SkipReason string

const (
	SkipNone        SkipReason = ""
	SkipReplicated  SkipReason = "replicated"    // replicated_from is set: no multi-hop, no loops
	SkipReplicateTo SkipReason = "replicate_to"  // replicate_to excludes the remote (incl. "__local__")
	SkipMarker      SkipReason = "marker"        // a broker marker that is not meant for remotes
	SkipCorrupt     SkipReason = "corrupt_entry" // cannot be decoded; logged and counted
)

// Outbound is an entry ready to send to the remote cluster: Data, followed by Body when Body is set.
type Outbound struct {
	Source mtypes.Position
	Data   []byte // re-encoded entry: original metadata + replicated_from + source position
	// Body, when set, is the rest of the entry (its payload), left where it is stored (read-only):
	// large entries are not copied, the client sends both parts with one writev.
	Body        []byte
	Messages    int   // messages in the entry (batch size), for rates and the rate limiter
	PublishTime int64 // unix ms of the source entry
	Marker      bool  // SEND must carry marker=true
	ChunkID     int32 // chunk id for chunked messages (informational)
	// Info is what the SEND says about the entry, when the fast path read it from the metadata
	// already (Known); otherwise the client scans the metadata itself.
	Info client.RawInfo
}

// Size is the entry's size in bytes.
func (o Outbound) Size() int { return len(o.Data) + len(o.Body) }

// Bytes returns the entry as one slice (a copy when it has two parts).
func (o Outbound) Bytes() []byte {
	if len(o.Body) == 0 {
		return o.Data
	}
	return append(append(make([]byte, 0, o.Size()), o.Data...), o.Body...)
}

// forwardedMarkers are marker types that travel to remotes: Pulsar's replicated-subscription
// request, response and update (PIP-33) and Meridian's subscription state (SubscriptionStateMarker);
// snapshots (12), transaction markers and unknown markers stay local.
var forwardedMarkers = map[int32]bool{10: true, 11: true, 13: true, SubscriptionStateMarker: true}

// PrepareEntry decides whether the entry at e goes from cluster local to remote and, if so, returns
// the bytes to send: the original metadata and payload (batch, compression, producer name, sequence
// id, publish time and properties unchanged) with replicated_from = local, the source position in
// SourcePositionProperty, the source incarnation (when known) in SourceIncarnationProperty,
// transaction ids cleared and the checksum recomputed.
func PrepareEntry(e mtypes.Entry, local, remote string) (Outbound, SkipReason, error) {
	return prepareEntry(e, local, remote, nil, nil)
}

// prepareEntry is PrepareEntry carving the new metadata head from *headroom (nil: its own
// allocation).
func prepareEntry(e mtypes.Entry, local, remote string, headroom *[]byte, shifts *crc32c.ShiftCache) (Outbound, SkipReason, error) {
	if out, reason, ok := prepareFast(e, local, remote, headroom, shifts); ok {
		return out, reason, nil
	}
	return prepareGeneral(e, local, remote)
}

// prepareGeneral decodes the metadata, edits it and encodes it again.
func prepareGeneral(e mtypes.Entry, local, remote string) (Outbound, SkipReason, error) {
	pe, err := ParseEntry(e.Data)
	if err != nil {
		return Outbound{}, SkipCorrupt, err
	}
	md := pe.Metadata
	if md.ReplicatedFrom != nil {
		return Outbound{}, SkipReplicated, nil
	}
	marker := md.MarkerType != nil // any marker type, as the broker judges it (wire.IsMarker)
	if marker && !forwardedMarkers[md.GetMarkerType()] {
		return Outbound{}, SkipMarker, nil
	}
	if rt := md.GetReplicateTo(); len(rt) > 0 && !slices.Contains(rt, remote) {
		return Outbound{}, SkipReplicateTo, nil
	}
	md.ReplicatedFrom = proto.String(local)
	md.TxnidLeastBits, md.TxnidMostBits = nil, nil
	props := md.Properties[:0:0]
	for _, kv := range md.Properties {
		if k := kv.GetKey(); k != SourcePositionProperty && k != SourceIncarnationProperty {
			props = append(props, kv)
		}
	}
	md.Properties = append(props, &pulsarpb.KeyValue{
		Key: proto.String(SourcePositionProperty), Value: proto.String(e.Position.String()),
	})
	if e.Incarnation != 0 {
		md.Properties = append(md.Properties, &pulsarpb.KeyValue{
			Key: proto.String(SourceIncarnationProperty), Value: proto.String(wire.FormatIncarnation(e.Incarnation)),
		})
	}
	data, err := encodeStoredEntry(md, pe.Payload)
	if err != nil {
		return Outbound{}, SkipCorrupt, err
	}
	n := int(md.GetNumMessagesInBatch())
	if n < 1 {
		n = 1
	}
	return Outbound{
		Source: e.Position, Data: data, Messages: n, PublishTime: e.PublishTime,
		Marker: marker, ChunkID: md.GetChunkId(),
	}, SkipNone, nil
}

// SourceIncarnationOf returns the source incarnation of a replicated entry
// (SourceIncarnationProperty; 0 without one).
func SourceIncarnationOf(md *pulsarpb.MessageMetadata) (uint64, error) {
	var inc uint64
	for _, kv := range md.GetProperties() {
		if kv.GetKey() == SourceIncarnationProperty {
			v, err := wire.ParseIncarnation([]byte(kv.GetValue()))
			if err != nil {
				return 0, err
			}
			inc = v
		}
	}
	return inc, nil
}

// SourceOf returns the origin cluster and origin position of a replicated entry (replicated_from and
// SourcePositionProperty). ok is false for entries that are not replicated or carry no source position.
func SourceOf(md *pulsarpb.MessageMetadata) (origin string, pos mtypes.Position, ok bool, err error) {
	if md.ReplicatedFrom == nil {
		return "", mtypes.Position{}, false, nil
	}
	for _, kv := range md.GetProperties() {
		if kv.GetKey() == SourcePositionProperty {
			p, err := mtypes.ParsePosition(kv.GetValue())
			if err != nil {
				return md.GetReplicatedFrom(), mtypes.Position{}, false, err
			}
			return md.GetReplicatedFrom(), p, true, nil
		}
	}
	return md.GetReplicatedFrom(), mtypes.Position{}, false, nil
}
