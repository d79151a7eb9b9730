package replication

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/crc32c"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
)

// The replicator's hot path: most entries are ordinary messages whose metadata only needs
// replicated_from and the source-position property added. Protobuf allows fields in any order and
// a repeated field's elements to be split, so both can be appended to the encoded metadata as it is,
// without decoding it into a message and encoding it again. mdScan reads just the fields the skip
// rules need; anything unusual (transaction ids to clear, an existing source-position property,
// malformed input) takes the general path, PrepareEntry's decode-edit-encode. Field numbers come
// from the descriptors (wire.MetadataField); FuzzPrepareFastMatchesGeneral compares both paths.

type mdScan struct {
	hasReplicatedFrom bool
	replicatedFrom    []byte // aliases the metadata
	replicateTo       int    // number of replicate_to elements
	replicateToRemote bool   // one of them is the remote asked for (scanMetadata's argument)
	hasMarker         bool
	markerType        int32
	hasTxn            bool
	numMessages       int32 // 1 if absent
	hasNumMessages    bool
	chunkID           int32
	highestSeq        uint64
	hasHighestSeq     bool
	numChunks         int32
	sourcePosition    []byte // aliases the metadata
	hasSourcePosition bool
	sourceIncarnation []byte // aliases the metadata
	hasIncarnation    bool
}

// excludes reports whether replicate_to is present and does not name the remote.
func (s *mdScan) excludes() bool { return s.replicateTo > 0 && !s.replicateToRemote }

var errScan = errors.New("metadata scan")

// scanMetadata reads the fields of encoded MessageMetadata that replication decisions need (remote:
// the cluster replicate_to is checked against). It allocates nothing: byte fields alias b.
func scanMetadata(b []byte, remote string) (mdScan, error) {
	s := mdScan{numMessages: 1}
	for len(b) > 0 {
		num, typ, n := wire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber { // protobuf refuses larger field numbers
			return s, errScan
		}
		b = b[n:]
		switch code := scanCodes.Code(num); {
		case typ == protowire.BytesType && code >= scanReplicatedFrom && code <= scanProperties:
			v, n := wire.ConsumeBytes(b)
			if n < 0 {
				return s, errScan
			}
			b = b[n:]
			switch code {
			case scanReplicatedFrom:
				s.hasReplicatedFrom, s.replicatedFrom = true, v
			case scanReplicateTo:
				s.replicateTo++
				if string(v) == remote {
					s.replicateToRemote = true
				}
			case scanProperties:
				k, val, ok := wire.ScanKeyValue(v)
				if !ok {
					return s, errScan
				}
				switch string(k) {
				case SourcePositionProperty:
					s.hasSourcePosition, s.sourcePosition = true, val
				case SourceIncarnationProperty:
					s.hasIncarnation, s.sourceIncarnation = true, val
				}
			}
		case typ == protowire.VarintType && code >= scanNumMessages:
			v, n := wire.ConsumeVarint(b)
			if n < 0 {
				return s, errScan
			}
			b = b[n:]
			switch code {
			case scanNumMessages:
				s.numMessages, s.hasNumMessages = int32(v), true
			case scanMarkerType:
				s.hasMarker, s.markerType = true, int32(v)
			case scanTxnid:
				s.hasTxn = true
			case scanChunkID:
				s.chunkID = int32(v)
			case scanHighestSeq:
				s.highestSeq, s.hasHighestSeq = v, true
			case scanNumChunks:
				s.numChunks = int32(v)
			}
		default:
			n := wire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return s, errScan
			}
			b = b[n:]
		}
	}
	return s, nil
}

// The MessageMetadata fields scanMetadata reads: byte fields first, then varints.
const (
	scanReplicatedFrom = 1 + iota
	scanReplicateTo
	scanProperties
	scanNumMessages
	scanMarkerType
	scanTxnid
	scanChunkID
	scanHighestSeq
	scanNumChunks
)

var scanCodes = wire.NewFieldCodes(map[protowire.Number]uint8{
	wire.MetadataField.ReplicatedFrom:     scanReplicatedFrom,
	wire.MetadataField.ReplicateTo:        scanReplicateTo,
	wire.MetadataField.Properties:         scanProperties,
	wire.MetadataField.NumMessagesInBatch: scanNumMessages,
	wire.MetadataField.MarkerType:         scanMarkerType,
	wire.MetadataField.TxnidLeastBits:     scanTxnid,
	wire.MetadataField.TxnidMostBits:      scanTxnid,
	wire.MetadataField.ChunkID:            scanChunkID,
	wire.MetadataField.HighestSequenceID:  scanHighestSeq,
	wire.MetadataField.NumChunksFromMsg:   scanNumChunks,
})

// prepareFast is PrepareEntry for the common case; ok is false when the general path must decide.
func prepareFast(e mtypes.Entry, local, remote string, headroom *[]byte, shifts *crc32c.ShiftCache) (out Outbound, reason SkipReason, ok bool) {
	parts, err := wire.ParseEntry(e.Data)
	if err != nil {
		return Outbound{}, "", false
	}
	// A large body is not read at all: it is sent from where it is stored (Outbound.Body), and its
	// CRC is derived from the stored checksum (crc(head‖body) = crc(head)·x^(8·len(body)) ⊕
	// crc(body), so crc(body) follows from the stored sum and the head's CRC). That trusts the
	// stored checksum, which is safe: the server checked it when the entry was published, and
	// storage checks its own record CRC on every read from disk. Should the body still differ
	// from what the checksum says, the new checksum does not match it either, so the remote refuses
	// the entry (ChecksumError: retried and shown as lastError), it never receives it as valid.
	// Small entries are checked (one pass is cheaper than combining checksums).
	large := len(parts.Body) >= zeroCopyMinBody
	var bodyCRC uint32
	var shift crc32c.Shift
	if large {
		shift = crc32c.ShiftFor(len(parts.Body))
		if parts.HasChecksum {
			head := parts.Checked[:len(parts.Checked)-len(parts.Body)]
			bodyCRC = parts.Checksum ^ shift.Apply(crc32.Checksum(head, castagnoli))
		} else {
			bodyCRC = crc32.Checksum(parts.Body, castagnoli)
		}
	} else if parts.HasChecksum && wire.Checksum(parts.Checked) != parts.Checksum {
		return Outbound{}, "", false
	}
	s, err := scanMetadata(parts.Metadata, remote)
	if err != nil {
		return Outbound{}, "", false
	}
	if s.hasReplicatedFrom {
		return Outbound{}, SkipReplicated, true
	}
	marker := s.hasMarker
	if marker && !forwardedMarkers[s.markerType] {
		return Outbound{}, SkipMarker, true
	}
	if s.excludes() {
		return Outbound{}, SkipReplicateTo, true
	}
	if s.hasTxn || s.hasSourcePosition || s.hasIncarnation {
		return Outbound{}, "", false // needs editing, not only appending
	}
	// Appended fields: replicated_from and one more properties element {key, value} for the
	// source position, another for the source incarnation when it is known.
	var posBuf [48]byte
	pos := e.Position.AppendTo(posBuf[:0])
	var incBuf [16]byte
	var inc []byte
	if e.Incarnation != 0 {
		inc = wire.AppendIncarnation(incBuf[:0], e.Incarnation)
	}
	extra := protowire.SizeTag(wire.MetadataField.ReplicatedFrom) + protowire.SizeBytes(len(local)) + propertySize(SourcePositionProperty, pos)
	if inc != nil {
		extra += propertySize(SourceIncarnationProperty, inc)
	}
	mdLen := len(parts.Metadata) + extra
	buf := carve(headroom, 10+mdLen)[:10]
	buf = append(buf, parts.Metadata...)
	buf = protowire.AppendTag(buf, wire.MetadataField.ReplicatedFrom, protowire.BytesType)
	buf = protowire.AppendString(buf, local)
	buf = appendProperty(buf, SourcePositionProperty, pos)
	if inc != nil {
		buf = appendProperty(buf, SourceIncarnationProperty, inc)
	}
	binary.BigEndian.PutUint16(buf, wire.MagicCRC32C)
	binary.BigEndian.PutUint32(buf[6:], uint32(mdLen))
	// The body stays where it is (read-only): the outbound entry is the new head plus the stored
	// body, which the client writes together (copied into its burst buffer when small, by writev
	// when large). No per-entry copy of the body here.
	out = Outbound{Source: e.Position, Data: buf, Body: parts.Body, Messages: int(s.numMessages), PublishTime: e.PublishTime, Marker: marker, ChunkID: s.chunkID,
		Info: client.RawInfo{Known: true, HasNumMessages: s.hasNumMessages,
			HighestSequenceID: s.highestSeq, HasHighestSequenceID: s.hasHighestSeq, Chunked: s.numChunks > 1, Marker: marker}}
	binary.BigEndian.PutUint32(buf[2:], newChecksum(buf[6:], parts, large, shift, bodyCRC, shifts))
	if s.hasNumMessages {
		out.Info.NumMessages = s.numMessages
	}
	if !s.hasNumMessages || out.Messages < 1 {
		out.Messages = 1
	}
	return out, SkipNone, true
}

// propertySize is the encoded size of a properties element {key, value}.
func propertySize(key string, value []byte) int {
	return protowire.SizeTag(wire.MetadataField.Properties) + protowire.SizeBytes(keyValueSize(key, value))
}

// keyValueSize is the encoded size of a KeyValue {key, value}.
func keyValueSize(key string, value []byte) int {
	kv := &wire.KeyValueField
	return protowire.SizeTag(kv.Key) + protowire.SizeBytes(len(key)) + protowire.SizeTag(kv.Value) + protowire.SizeBytes(len(value))
}

// appendProperty appends a properties element {key, value} to encoded metadata.
func appendProperty(b []byte, key string, value []byte) []byte {
	kv := &wire.KeyValueField
	b = protowire.AppendTag(b, wire.MetadataField.Properties, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(keyValueSize(key, value)))
	b = protowire.AppendTag(b, kv.Key, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, kv.Value, protowire.BytesType)
	return protowire.AppendBytes(b, value)
}

// newChecksum is the checksum of the re-headed entry, head (metadata size and metadata) followed by
// the stored body.
func newChecksum(head []byte, parts wire.EntryParts, large bool, shift crc32c.Shift, bodyCRC uint32, shifts *crc32c.ShiftCache) uint32 {
	if large {
		return shift.Apply(crc32.Checksum(head, castagnoli)) ^ bodyCRC
	}
	if parts.HasChecksum && shifts != nil {
		// The stored checksum was verified above: crc(oldHead‖body) = shift(crc(oldHead)) ⊕
		// crc(body), so the new one is the stored one ⊕ shift(crc(oldHead) ⊕ crc(head)), with
		// no second pass over the body. The shift by the body's length is a table lookup when
		// that length recurs (a stream of equal-sized entries), else the body is checksummed
		// again (a table costs more to build than one pass of a small body).
		if tab := shifts.Lookup(len(parts.Body)); tab != nil {
			oldHead := parts.Checked[:len(parts.Checked)-len(parts.Body)]
			return parts.Checksum ^ tab.Apply(crc32.Checksum(head, castagnoli)^crc32.Checksum(oldHead, castagnoli))
		}
	}
	return crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, parts.Body)
}

// zeroCopyMinBody is the body size from which the stored checksum is trusted and the body not
// read at all; below it checking it and checksumming it again cost less than combining checksums.
const zeroCopyMinBody = 16 << 10

// headroomChunk is the size of the blocks heads are carved from: ~300 entries' ~100-byte heads
// fill one block.
const headroomChunk = 32 << 10

// carve returns a zero-length slice with capacity n from *headroom (a new block when the current
// one is short; its own allocation when headroom is nil or n is large). Carved slices never
// overlap, so an outbound entry keeps its head for as long as it needs it, whatever comes after.
func carve(headroom *[]byte, n int) []byte {
	if headroom == nil || n > headroomChunk/8 {
		return make([]byte, 0, n)
	}
	h := *headroom
	if cap(h)-len(h) < n {
		h = make([]byte, 0, headroomChunk)
	}
	b := h[len(h) : len(h) : len(h)+n]
	*headroom = h[:len(h)+n]
	return b
}
