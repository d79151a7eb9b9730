package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the protocol's CRC32C (Castagnoli) of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// EntryParts is an entry (or payload) split into its fields. Slices alias the input.
type EntryParts struct {
	// HasChecksum is true when the payload starts with MagicCRC32C.
	HasChecksum bool
	// Checksum is the stored checksum (valid only with HasChecksum).
	Checksum uint32
	// Checked is the range the checksum covers: metadataSize, metadata and body.
	Checked []byte
	// Metadata is the encoded MessageMetadata.
	Metadata []byte
	// Body is the message (or batch) body, possibly compressed.
	Body []byte
}

// entryHeaderSize is magic + checksum + metadataSize.
const entryHeaderSize = 2 + 4 + 4

// ParseEntry splits entry bytes (or a SEND payload, with or without magic and checksum). It checks
// structure only; VerifyChecksum checks the checksum. A payload that starts with the broker entry
// metadata magic is refused with ErrBadMagic: strip it first with SplitBrokerEntryMetadata.
func ParseEntry(b []byte) (EntryParts, error) {
	var p EntryParts
	if len(b) >= 2 {
		switch binary.BigEndian.Uint16(b) {
		case MagicCRC32C:
			if len(b) < entryHeaderSize {
				return p, fmt.Errorf("%w: %d bytes, shorter than the checksum header", ErrMalformedPayload, len(b))
			}
			p.HasChecksum = true
			p.Checksum = binary.BigEndian.Uint32(b[2:])
			b = b[6:]
		case MagicBrokerEntryMetadata:
			return p, fmt.Errorf("%w: broker entry metadata where entry bytes were expected", ErrBadMagic)
		}
	}
	if len(b) < 4 {
		return p, fmt.Errorf("%w: %d bytes, no metadata size", ErrMalformedPayload, len(b))
	}
	p.Checked = b
	mdSize := binary.BigEndian.Uint32(b)
	if int64(mdSize) > int64(len(b)-4) {
		return p, fmt.Errorf("%w: metadata size %d exceeds the %d bytes left", ErrMalformedPayload, mdSize, len(b)-4)
	}
	p.Metadata = b[4 : 4+mdSize]
	p.Body = b[4+mdSize:]
	return p, nil
}

// VerifyChecksum checks an entry's checksum. A payload without magic has no checksum and passes
// (the checksum is optional in the protocol). A mismatch wraps ErrChecksum, so the server can answer
// SEND_ERROR ChecksumError with ServerErrorOf.
func VerifyChecksum(entry []byte) error {
	p, err := ParseEntry(entry)
	if err != nil {
		return err
	}
	if !p.HasChecksum {
		return nil
	}
	if got := Checksum(p.Checked); got != p.Checksum {
		return fmt.Errorf("%w: stored %08x, computed %08x", ErrChecksum, p.Checksum, got)
	}
	return nil
}

// NormalizeEntry returns the entry bytes for a SEND payload: the payload itself when it carries
// magic and checksum (not verified here), else a new slice with magic and a computed checksum in
// front, so that what the broker stores always has them (the Go client requires the magic).
func NormalizeEntry(payload []byte) ([]byte, error) {
	p, err := ParseEntry(payload)
	if err != nil {
		return nil, err
	}
	if p.HasChecksum {
		return payload, nil
	}
	out := make([]byte, 6, 6+len(p.Checked))
	binary.BigEndian.PutUint16(out, MagicCRC32C)
	binary.BigEndian.PutUint32(out[2:], Checksum(p.Checked))
	return append(out, p.Checked...), nil
}

// DecodeMetadata parses the MessageMetadata of entry bytes (or a SEND payload). It does not verify
// the checksum and does not require the protobuf-required fields, so that broker-side decisions
// (marker? batch size? dedup key?) work on whatever a client sent; see CheckMetadata.
func DecodeMetadata(entry []byte) (*pulsarpb.MessageMetadata, error) {
	p, err := ParseEntry(entry)
	if err != nil {
		return nil, err
	}
	md := &pulsarpb.MessageMetadata{}
	if err := unmarshalPartial.Unmarshal(p.Metadata, md); err != nil {
		return nil, fmt.Errorf("%w: metadata: %v", ErrMalformedPayload, err)
	}
	return md, nil
}

// CheckMetadata reports an error if md lacks a required field (producer_name, sequence_id,
// publish_time) or has an impossible batch size.
func CheckMetadata(md *pulsarpb.MessageMetadata) error {
	if err := proto.CheckInitialized(md); err != nil {
		return fmt.Errorf("%w: metadata: %v", ErrMalformedPayload, err)
	}
	if md.NumMessagesInBatch != nil && md.GetNumMessagesInBatch() < 0 {
		return fmt.Errorf("%w: num_messages_in_batch %d", ErrMalformedPayload, md.GetNumMessagesInBatch())
	}
	return nil
}

// NumMessages is the number of messages an entry holds: num_messages_in_batch when present (a
// batch), else 1. Flow-control permits count these.
func NumMessages(md *pulsarpb.MessageMetadata) int {
	if md.NumMessagesInBatch != nil {
		return int(md.GetNumMessagesInBatch())
	}
	return 1
}

// IsMarker reports whether the metadata marks a broker-written marker entry (never dispatched).
func IsMarker(md *pulsarpb.MessageMetadata) bool { return md.MarkerType != nil }

// AppendEntry appends entry bytes for metadata and body: magic, checksum, metadata size, metadata,
// body. It fails if md lacks a required field.
func AppendEntry(dst []byte, md *pulsarpb.MessageMetadata, body []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	var err error
	dst, err = marshalOpts.MarshalAppend(dst, md)
	if err != nil {
		return dst[:start], fmt.Errorf("wire: encode metadata: %w", err)
	}
	mdSize := len(dst) - start - entryHeaderSize
	dst = append(dst, body...)
	finishEntry(dst[start:], mdSize)
	return dst, nil
}

// AppendRawEntry is AppendEntry for metadata that is already encoded.
func AppendRawEntry(dst, metadata, body []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	dst = append(dst, metadata...)
	dst = append(dst, body...)
	finishEntry(dst[start:], len(metadata))
	return dst
}

// EncodeEntry is AppendEntry into a new slice.
func EncodeEntry(md *pulsarpb.MessageMetadata, body []byte) ([]byte, error) {
	return AppendEntry(make([]byte, 0, entryHeaderSize+marshalOpts.Size(md)+len(body)), md, body)
}

// finishEntry fills magic, metadata size and checksum of an entry laid out in e.
func finishEntry(e []byte, mdSize int) {
	binary.BigEndian.PutUint16(e, MagicCRC32C)
	binary.BigEndian.PutUint32(e[6:], uint32(mdSize))
	binary.BigEndian.PutUint32(e[2:], Checksum(e[6:]))
}

// RewriteMetadata decodes an entry's metadata, lets edit change it, and returns new entry bytes
// with the re-encoded metadata, the original body and a fresh checksum. Field presence and unknown
// fields survive the round trip. Used by the replicator; dispatch never re-encodes.
func RewriteMetadata(entry []byte, edit func(md *pulsarpb.MessageMetadata)) ([]byte, error) {
	p, err := ParseEntry(entry)
	if err != nil {
		return nil, err
	}
	md := &pulsarpb.MessageMetadata{}
	if err := unmarshalPartial.Unmarshal(p.Metadata, md); err != nil {
		return nil, fmt.Errorf("%w: metadata: %v", ErrMalformedPayload, err)
	}
	edit(md)
	out := make([]byte, 0, entryHeaderSize+marshalOpts.Size(md)+len(p.Body))
	return AppendEntry(out, md, p.Body)
}

// SetReplicatedFrom returns a copy of entry with replicated_from = cluster and, when
// sourcePosition is not empty, the message property ReplSourcePositionProperty = sourcePosition
// ("<ledgerId>:<entryId>" of the entry in its origin topic).
func SetReplicatedFrom(entry []byte, cluster, sourcePosition string) ([]byte, error) {
	return RewriteMetadata(entry, func(md *pulsarpb.MessageMetadata) {
		md.ReplicatedFrom = proto.String(cluster)
		if sourcePosition != "" {
			setProperty(md, ReplSourcePositionProperty, sourcePosition)
		}
	})
}

// SetReplicatedSource is SetReplicatedFrom that also sets ReplSourceIncarnationProperty to
// incarnation (FormatIncarnation), or removes it for incarnation 0 (unknown).
func SetReplicatedSource(entry []byte, cluster, sourcePosition string, incarnation uint64) ([]byte, error) {
	return RewriteMetadata(entry, func(md *pulsarpb.MessageMetadata) {
		md.ReplicatedFrom = proto.String(cluster)
		if sourcePosition != "" {
			setProperty(md, ReplSourcePositionProperty, sourcePosition)
		}
		if incarnation != 0 {
			setProperty(md, ReplSourceIncarnationProperty, FormatIncarnation(incarnation))
			return
		}
		md.Properties = slices.DeleteFunc(md.Properties, func(kv *pulsarpb.KeyValue) bool { return kv.GetKey() == ReplSourceIncarnationProperty })
	})
}

// setProperty sets md's property key to value (the first one of that key; appended if none).
func setProperty(md *pulsarpb.MessageMetadata, key, value string) {
	for _, kv := range md.Properties {
		if kv.GetKey() == key {
			kv.Value = proto.String(value)
			return
		}
	}
	md.Properties = append(md.Properties, &pulsarpb.KeyValue{Key: proto.String(key), Value: proto.String(value)})
}

// ReplSourcePositionProperty is Pulsar's message property carrying a replicated entry's position in
// its origin topic, "<ledgerId>:<entryId>".
const ReplSourcePositionProperty = "__MSG_PROP_REPL_SOURCE_POSITION"

// ReplSourceIncarnationProperty is Meridian's message property carrying the storage incarnation
// of a replicated entry's ledger in its origin cluster, as 16 hexadecimal digits
// (FormatIncarnation): with ReplSourcePositionProperty it names the source entry uniquely, also
// after the origin's data dir was restored from an older copy. Entries without it (from Pulsar,
// or from ledgers older than incarnations) have incarnation 0.
const ReplSourceIncarnationProperty = "__MSG_PROP_REPL_SOURCE_INCARNATION"

// FormatIncarnation is the ReplSourceIncarnationProperty value of incarnation: 16 lowercase
// hexadecimal digits.
func FormatIncarnation(incarnation uint64) string {
	return string(AppendIncarnation(make([]byte, 0, 16), incarnation))
}

// AppendIncarnation appends FormatIncarnation(incarnation) to b.
func AppendIncarnation(b []byte, incarnation uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[(incarnation>>shift)&0xf])
	}
	return b
}

// ParseIncarnation parses a ReplSourceIncarnationProperty value: exactly 16 hexadecimal digits
// (either case). It allocates nothing.
func ParseIncarnation(b []byte) (uint64, error) {
	if len(b) != 16 {
		return 0, fmt.Errorf("%w: source incarnation %q: want 16 hexadecimal digits", ErrMalformedPayload, b)
	}
	var v uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint64(c-'A'+10)
		default:
			return 0, fmt.Errorf("%w: source incarnation %q: want 16 hexadecimal digits", ErrMalformedPayload, b)
		}
	}
	return v, nil
}

// AppendBrokerEntryMetadata appends the broker entry metadata prefix: magic 0x0e02, size, message.
func AppendBrokerEntryMetadata(dst []byte, bem *pulsarpb.BrokerEntryMetadata) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0)
	var err error
	dst, err = marshalOpts.MarshalAppend(dst, bem)
	if err != nil {
		return dst[:start], fmt.Errorf("wire: encode broker entry metadata: %w", err)
	}
	binary.BigEndian.PutUint16(dst[start:], MagicBrokerEntryMetadata)
	binary.BigEndian.PutUint32(dst[start+2:], uint32(len(dst)-start-6))
	return dst, nil
}

// SplitBrokerEntryMetadata removes a broker entry metadata prefix from a MESSAGE payload. Without
// the prefix it returns nil and the payload unchanged.
func SplitBrokerEntryMetadata(payload []byte) (*pulsarpb.BrokerEntryMetadata, []byte, error) {
	if len(payload) < 2 || binary.BigEndian.Uint16(payload) != MagicBrokerEntryMetadata {
		return nil, payload, nil
	}
	if len(payload) < 6 {
		return nil, nil, fmt.Errorf("%w: truncated broker entry metadata header", ErrMalformedPayload)
	}
	n := binary.BigEndian.Uint32(payload[2:])
	if int64(n) > int64(len(payload)-6) {
		return nil, nil, fmt.Errorf("%w: broker entry metadata size %d exceeds the %d bytes left", ErrMalformedPayload, n, len(payload)-6)
	}
	bem := &pulsarpb.BrokerEntryMetadata{}
	if err := unmarshalPartial.Unmarshal(payload[6:6+n], bem); err != nil {
		return nil, nil, fmt.Errorf("%w: broker entry metadata: %v", ErrMalformedPayload, err)
	}
	return bem, payload[6+n:], nil
}
