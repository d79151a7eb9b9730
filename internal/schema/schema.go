// Package schema is Meridian's schema registry: per-topic, versioned schemas as Pulsar keeps them,
// with Pulsar's compatibility strategies. The binary-protocol server uses it for GET_SCHEMA,
// GET_OR_CREATE_SCHEMA and the schema carried by PRODUCER and SUBSCRIBE; the admin REST API for
// /admin/v2/schemas.
//
// # Model (Pulsar's)
//
// A schema belongs to a topic's base name: every partition of a partitioned topic, and the
// persistent and non-persistent topics of the same tenant/namespace/name, share one history
// (Pulsar's TopicName.getSchemaName). A history is a list of versions 0, 1, 2, ...; each version is
// a schema (type, definition bytes, properties) or a tombstone written by a non-forced delete. The
// versions before the last tombstone no longer count: the topic "has no schema", and the next
// schema registered starts a new lineage with the next version number. A forced delete removes
// the whole history.
//
// Two schemas are the same schema when their types and definition bytes are equal (Pulsar's
// SchemaHash covers the type and the data, not the properties); registering a schema that already
// exists in the live lineage returns that version instead of adding one.
//
// Versions travel on the wire as 8-byte big-endian integers (VersionBytes), as Pulsar encodes
// them and as pulsar-client-go's HTTP lookup decodes them.
//
// The NONE/BYTES type (0) is a schema too when a producer declares it (pulsar-client-go's
// BytesSchema): it is stored on a topic without a typed schema, so that its messages carry a
// version GET_SCHEMA resolves, as on Pulsar. On a topic with a typed schema a BYTES producer is
// accepted without a version, and a consumer declaring BYTES is accepted everywhere.
//
// # Compatibility
//
// Compatible (a pure function, table-tested) decides whether a candidate may join a lineage under
// a Strategy. AVRO, JSON and PROTOBUF schemas are Avro definitions (the Go, Java and C++ clients
// generate Avro records for JSON and protobuf types too) and are checked with Avro's schema
// resolution rules: BACKWARD = the candidate can read data written with the existing schema,
// FORWARD = the existing schema can read data written with the candidate, FULL = both; the
// transitive variants check every live version, the others only the latest. A change of type is
// incompatible unless the strategy is ALWAYS_COMPATIBLE. Other types (STRING, primitives,
// KEY_VALUE, PROTOBUF_NATIVE) follow Pulsar's default check: compatible unless the strategy is
// ALWAYS_INCOMPATIBLE. The default strategy is FULL, Pulsar's broker default.
//
// # Storage format (version 1)
//
// One metadata-store key per version, in the cluster's local store (Pulsar keeps schemas per
// cluster; replication registers them on the remote):
//
//	/schemas/<tenant>/<namespace>/<topic base name>/<version as 20 decimal digits>
//
// whose value is a JSON document
//
//	{"v":1, "type":<int32, Pulsar's Schema.Type>, "name":<string>, "data":<base64>,
//	 "props":{...}, "ts":<unix ms>, "deleted":<bool>}
//
// Versions are created with a create-only Put (expected version 0), so two writers racing for the
// same version number cannot both win; the loser re-reads the history and retries.
package schema

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Type is Pulsar's Schema.Type as carried by the binary protocol.
type Type int32

// Schema types (values of the protocol's Schema.Type enum).
const (
	TypeNone           Type = 0 // NONE / BYTES: no schema
	TypeString         Type = 1
	TypeJSON           Type = 2
	TypeProtobuf       Type = 3
	TypeAvro           Type = 4
	TypeBool           Type = 5
	TypeInt8           Type = 6
	TypeInt16          Type = 7
	TypeInt32          Type = 8
	TypeInt64          Type = 9
	TypeFloat          Type = 10
	TypeDouble         Type = 11
	TypeDate           Type = 12
	TypeTime           Type = 13
	TypeTimestamp      Type = 14
	TypeKeyValue       Type = 15
	TypeInstant        Type = 16
	TypeLocalDate      Type = 17
	TypeLocalTime      Type = 18
	TypeLocalDateTime  Type = 19
	TypeProtobufNative Type = 20
)

var typeNames = map[Type]string{
	TypeNone: "BYTES", TypeString: "STRING", TypeJSON: "JSON", TypeProtobuf: "PROTOBUF", TypeAvro: "AVRO",
	TypeBool: "BOOLEAN", TypeInt8: "INT8", TypeInt16: "INT16", TypeInt32: "INT32", TypeInt64: "INT64",
	TypeFloat: "FLOAT", TypeDouble: "DOUBLE", TypeDate: "DATE", TypeTime: "TIME", TypeTimestamp: "TIMESTAMP",
	TypeKeyValue: "KEY_VALUE", TypeInstant: "INSTANT", TypeLocalDate: "LOCAL_DATE", TypeLocalTime: "LOCAL_TIME",
	TypeLocalDateTime: "LOCAL_DATE_TIME", TypeProtobufNative: "PROTOBUF_NATIVE",
}

// String is the type's name in Pulsar's admin API ("AVRO", "JSON", "BYTES", ...).
func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("Type(%d)", int32(t))
}

// ParseType parses an admin API type name (case-insensitive; "NONE" is BYTES).
func ParseType(s string) (Type, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	if u == "NONE" {
		return TypeNone, nil
	}
	for t, n := range typeNames {
		if n == u {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown schema type %q", ErrInvalidSchema, s)
}

// avroBased reports whether definitions of type t are Avro schemas.
func (t Type) avroBased() bool { return t == TypeAvro || t == TypeJSON || t == TypeProtobuf }

// Info is a schema as a client declares it.
type Info struct {
	Name       string
	Type       Type
	Data       []byte
	Properties map[string]string
}

// IsNone reports whether the info declares no schema (nil or NONE/BYTES).
func (i *Info) IsNone() bool { return i == nil || i.Type == TypeNone }

// Same reports whether a and b are the same schema: equal types and definition bytes.
func Same(a, b Info) bool { return a.Type == b.Type && string(a.Data) == string(b.Data) }

// Version is one stored version of a topic's schema history.
type Version struct {
	Info
	Version   int64
	Timestamp int64 // unix ms when it was registered
	Deleted   bool  // a tombstone written by a non-forced delete
}

// Errors. Each maps to one Pulsar ServerError in the server.
var (
	// ErrNotFound: the topic has no (live) schema, or no such version.
	ErrNotFound = errors.New("schema: not found")
	// ErrIncompatible: the schema is incompatible with the topic's schema under its strategy
	// (ServerError IncompatibleSchema).
	ErrIncompatible = errors.New("schema: incompatible schema")
	// ErrInvalidSchema: the definition does not parse for its type, or a bad argument.
	ErrInvalidSchema = errors.New("schema: invalid schema")
)

// VersionBytes encodes a version for the wire: 8 bytes, big-endian.
func VersionBytes(v int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

// ParseVersion decodes a wire version. Empty input means "latest" (ok false).
func ParseVersion(b []byte) (v int64, ok bool, err error) {
	if len(b) == 0 {
		return 0, false, nil
	}
	if len(b) != 8 {
		return 0, false, fmt.Errorf("%w: schema version of %d bytes, want 8", ErrInvalidSchema, len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), true, nil
}
