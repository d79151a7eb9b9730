// Package wire is Meridian's codec for the Pulsar binary protocol (v20): frames, payloads, message
// metadata, batches, broker entry metadata and the table between ServerError codes and Go errors.
// It is pure: no sockets of its own, no goroutines, no logging. The protobuf types are generated into
// package pulsarpb from our own .proto description (scripts/gen-proto.sh).
package wire
