// Package wire is Meridian's codec for the Pulsar binary protocol (v20): frames, payloads, message
// metadata, batches, broker entry metadata and the table between ServerError codes and Go errors.
// It is pure: no sockets of its own, no goroutines, no logging. The protobuf types are generated into
// package pulsarpb from our own .proto description (scripts/gen-proto.sh).
//
// # Frames
//
// All integers are big-endian.
//
//	simple frame:   [u32 totalSize][u32 commandSize][BaseCommand]
//	payload frame:  [u32 totalSize][u32 commandSize][BaseCommand][payload]
//
// totalSize counts every byte after itself (4 + commandSize + len(payload)). Only SEND (client to
// broker) and MESSAGE (broker to client) carry a payload. Readers refuse a totalSize above their
// limit before allocating anything; Pulsar's limit is the negotiated max message size plus
// FramePadding (10 KiB) for the command and metadata. Below the limit, a frame's memory follows the
// bytes received (ReadAppend), never the size its header announces.
//
// # Payloads and entry bytes
//
// A SEND payload, as the Go client writes it:
//
//	offset  size  field
//	0       2     magic 0x0e01 (MagicCRC32C)
//	2       4     checksum: CRC32C (Castagnoli) of every byte from offset 6 to the end
//	6       4     metadataSize
//	10      n     MessageMetadata (protobuf)
//	10+n    rest  body: the message, or for batches N records [u32 size][SingleMessageMetadata][payload]
//
// Very old clients omit magic and checksum (the payload then starts at metadataSize); the checksum
// is optional in the protocol and VerifyChecksum accepts such payloads.
//
// Entry bytes, the unit the broker stores and dispatches, are exactly the layout above *with* magic
// and checksum: the SEND payload as received, byte for byte (NormalizeEntry adds magic and checksum
// to a payload that lacks them). A MESSAGE carries the entry bytes unchanged as its payload, so
// dispatch never re-encodes metadata; when the consumer announced supports_broker_entry_metadata,
// the broker may put a broker-entry-metadata prefix in front of them:
//
//	0       2     magic 0x0e02 (MagicBrokerEntryMetadata)
//	2       4     size
//	6       size  BrokerEntryMetadata (protobuf)
//	...           entry bytes
//
// Only the replicator changes entry bytes: RewriteMetadata re-encodes the metadata (to set
// replicated_from) and recomputes the checksum. Protobuf-go keeps proto2 field presence and
// unknown fields, so num_messages_in_batch stays present exactly when it was.
//
// # Errors
//
// Errors from Reader.ReadFrame that wrap ErrFrameTooLarge, ErrMalformedFrame or ErrTruncated, and
// I/O errors, leave the stream unusable: close the connection. Errors wrapping ErrMalformedCommand
// or ErrUnknownCommand concern one frame only; the reader is positioned at the next frame
// (Recoverable reports which is which).
package wire
