package wire

import "google.golang.org/protobuf/encoding/protowire"

// Small-value fast paths of protowire's Consume functions for the hand-written scanners on the
// per-message paths (ScanPublishMetadata here, the replication scanners): the one-byte tags,
// varints and lengths that metadata is almost entirely made of are decoded inline, since
// protowire's functions are too large to be inlined and a scan calls them a few times per field.
// Anything else goes to protowire, and results, including n < 0 for errors, are protowire's
// exactly (FuzzConsumeMatchesProtowire).

// ConsumeTag is protowire.ConsumeTag.
func ConsumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 && b[0] >= 8 { // field number 0 is an error: protowire says which
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	return protowire.ConsumeTag(b)
}

// ConsumeVarint is protowire.ConsumeVarint.
func ConsumeVarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return protowire.ConsumeVarint(b)
}

// ConsumeBytes is protowire.ConsumeBytes.
func ConsumeBytes(b []byte) ([]byte, int) {
	if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
		n := 1 + int(b[0])
		return b[1:n], n
	}
	return protowire.ConsumeBytes(b)
}

// ConsumeFieldValue is protowire.ConsumeFieldValue.
func ConsumeFieldValue(num protowire.Number, typ protowire.Type, b []byte) int {
	switch typ {
	case protowire.VarintType:
		if len(b) > 0 && b[0] < 0x80 {
			return 1
		}
	case protowire.BytesType:
		if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
			return 1 + int(b[0])
		}
	}
	return protowire.ConsumeFieldValue(num, typ, b)
}
