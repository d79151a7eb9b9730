package wire

import (
	"fmt"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Limits on what a client may ask the broker to keep. Each of these ends up in state the broker
// persists (cursor records, the dedup snapshot) or allocates per message, so each is checked where
// it enters: at the protocol (server), at the admin API and in the broker core. docs/protocol.md
// and docs/admin.md list them.
const (
	// MaxNameBytes bounds subscription, producer and consumer names.
	MaxNameBytes = 256
	// MaxProperties bounds the number of properties of one producer, consumer or subscription.
	MaxProperties = 64
	// MaxPropertiesBytes bounds the bytes of those properties (keys plus values).
	MaxPropertiesBytes = 16 << 10
	// MaxBatchMessages bounds the messages of one entry (CommandSend.num_messages and
	// MessageMetadata.num_messages_in_batch): the storage reader refuses a batch-acknowledgement
	// bitset for more messages than this, so the writer never accepts a larger batch.
	MaxBatchMessages = 1 << 20
)

// LimitError is a refusal by one of the limits above. It matches ErrMetadata (the code a client
// gets for it); its text says which limit.
type LimitError struct{ msg string }

func (e *LimitError) Error() string { return e.msg }

// Unwrap makes errors.Is(err, ErrMetadata) hold.
func (e *LimitError) Unwrap() error { return ErrMetadata }

func limitError(format string, args ...any) error {
	return &LimitError{msg: fmt.Sprintf(format, args...)}
}

// CheckName refuses an empty name or one longer than MaxNameBytes; kind names it in the error
// ("subscription", "producer", "consumer").
func CheckName(kind, name string) error {
	if name == "" {
		return limitError("empty %s name", kind)
	}
	return CheckNameLength(kind, name)
}

// CheckNameLength is CheckName for names that may be empty (the broker then generates one).
func CheckNameLength(kind, name string) error {
	if len(name) > MaxNameBytes {
		return limitError("%s name of %d bytes exceeds the limit of %d bytes", kind, len(name), MaxNameBytes)
	}
	return nil
}

// CheckProperties refuses more than MaxProperties properties or more than MaxPropertiesBytes of
// keys and values; kind names their owner in the error.
func CheckProperties(kind string, props map[string]string) error {
	if len(props) > MaxProperties {
		return tooManyProperties(kind, len(props))
	}
	n := 0
	for k, v := range props {
		n += len(k) + len(v)
	}
	if n > MaxPropertiesBytes {
		return propertiesTooLarge(kind, n)
	}
	return nil
}

// CheckKeyValues is CheckProperties for properties as they arrive in a command, before they are
// collected into a map (so that a hostile list costs no map of its size). Repeated keys count
// once each time they appear.
func CheckKeyValues(kind string, kvs []*pulsarpb.KeyValue) error {
	if len(kvs) > MaxProperties {
		return tooManyProperties(kind, len(kvs))
	}
	n := 0
	for _, kv := range kvs {
		n += len(kv.GetKey()) + len(kv.GetValue())
	}
	if n > MaxPropertiesBytes {
		return propertiesTooLarge(kind, n)
	}
	return nil
}

func tooManyProperties(kind string, n int) error {
	return limitError("%d %s properties exceed the limit of %d", n, kind, MaxProperties)
}

func propertiesTooLarge(kind string, n int) error {
	return limitError("%s properties of %d bytes exceed the limit of %d bytes", kind, n, MaxPropertiesBytes)
}
