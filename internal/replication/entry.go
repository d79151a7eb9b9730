package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Names of the protocol conventions the replicator follows (Pulsar's, so its tools recognise them).
const (
	// SourcePositionProperty carries the source entry's position ("<ledgerId>:<entryId>") on every
	// replicated entry; the receiver deduplicates and maps positions by it.
	SourcePositionProperty = "__MSG_PROP_REPL_SOURCE_POSITION"
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

// magicCRC32C starts a stored entry whose metadata and payload carry a CRC32C checksum.
const magicCRC32C = 0x0e01

// maxMetadataSize bounds the metadata of one entry; anything larger is corrupt (Pulsar's frames are at
// most a few MiB and metadata is small).
const maxMetadataSize = 1 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

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
	rest := data
	if len(rest) >= 2 && binary.BigEndian.Uint16(rest) == magicCRC32C {
		if len(rest) < 6 {
			return ParsedEntry{}, fmt.Errorf("%w: truncated checksum", ErrCorruptEntry)
		}
		want := binary.BigEndian.Uint32(rest[2:6])
		rest = rest[6:]
		if got := crc32.Checksum(rest, crcTable); got != want {
			return ParsedEntry{}, fmt.Errorf("%w: checksum %08x, stored %08x", ErrCorruptEntry, got, want)
		}
	}
	if len(rest) < 4 {
		return ParsedEntry{}, fmt.Errorf("%w: truncated metadata size", ErrCorruptEntry)
	}
	size := binary.BigEndian.Uint32(rest)
	if size > maxMetadataSize || int64(size) > int64(len(rest)-4) {
		return ParsedEntry{}, fmt.Errorf("%w: metadata size %d of %d bytes", ErrCorruptEntry, size, len(rest)-4)
	}
	md := &pulsarpb.MessageMetadata{}
	if err := proto.Unmarshal(rest[4:4+size], md); err != nil {
		return ParsedEntry{}, fmt.Errorf("%w: metadata: %v", ErrCorruptEntry, err)
	}
	return ParsedEntry{Metadata: md, Payload: rest[4+size:]}, nil
}

// EncodeEntry builds stored/sent bytes with a CRC32C checksum from metadata and payload.
func EncodeEntry(md *pulsarpb.MessageMetadata, payload []byte) ([]byte, error) {
	mb, err := proto.MarshalOptions{Deterministic: true}.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("replication: encode metadata: %w", err)
	}
	out := make([]byte, 10+len(mb)+len(payload))
	binary.BigEndian.PutUint16(out, magicCRC32C)
	binary.BigEndian.PutUint32(out[6:], uint32(len(mb)))
	copy(out[10:], mb)
	copy(out[10+len(mb):], payload)
	binary.BigEndian.PutUint32(out[2:], crc32.Checksum(out[6:], crcTable))
	return out, nil
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

// Outbound is an entry ready to send to the remote cluster.
type Outbound struct {
	Source      Position
	Data        []byte // re-encoded entry: original metadata + replicated_from + source position
	Messages    int    // messages in the entry (batch size), for rates and the rate limiter
	PublishTime int64  // unix ms of the source entry
	Marker      bool   // SEND must carry marker=true
	ChunkID     int32  // chunk id for chunked messages (informational)
}

// forwardedMarkers are marker types that travel to remotes (replicated-subscription request,
// response and update, PIP-33); snapshots (12), transaction markers and unknown markers stay local.
var forwardedMarkers = map[int32]bool{10: true, 11: true, 13: true}

// PrepareEntry decides whether the entry at e goes from cluster local to remote and, if so, returns
// the bytes to send: the original metadata and payload (batch, compression, producer name, sequence
// id, publish time and properties unchanged) with replicated_from = local, the source position in
// SourcePositionProperty, transaction ids cleared and the checksum recomputed.
func PrepareEntry(e Entry, local, remote string) (Outbound, SkipReason, error) {
	pe, err := ParseEntry(e.Data)
	if err != nil {
		return Outbound{}, SkipCorrupt, err
	}
	md := pe.Metadata
	if md.ReplicatedFrom != nil {
		return Outbound{}, SkipReplicated, nil
	}
	marker := md.MarkerType != nil && md.GetMarkerType() != 0
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
		if kv.GetKey() != SourcePositionProperty {
			props = append(props, kv)
		}
	}
	md.Properties = append(props, &pulsarpb.KeyValue{
		Key: proto.String(SourcePositionProperty), Value: proto.String(e.Position.String()),
	})
	data, err := EncodeEntry(md, pe.Payload)
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

// SourceOf returns the origin cluster and origin position of a replicated entry (replicated_from and
// SourcePositionProperty). ok is false for entries that are not replicated or carry no source position.
func SourceOf(md *pulsarpb.MessageMetadata) (origin string, pos Position, ok bool, err error) {
	if md.ReplicatedFrom == nil {
		return "", Position{}, false, nil
	}
	for _, kv := range md.GetProperties() {
		if kv.GetKey() == SourcePositionProperty {
			p, err := ParsePosition(kv.GetValue())
			if err != nil {
				return md.GetReplicatedFrom(), Position{}, false, err
			}
			return md.GetReplicatedFrom(), p, true, nil
		}
	}
	return md.GetReplicatedFrom(), Position{}, false, nil
}
