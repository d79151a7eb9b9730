package mtypes

import (
	"errors"
	"fmt"
)

// The protocol's enums as the broker's API and the replication layer use them. Their values are
// Pulsar's (PulsarApi.proto), so the server converts a decoded command's enum with a plain type
// conversion; a test compares them with the generated ones.

// AccessMode is a producer's access mode (ProducerAccessMode).
type AccessMode int32

const (
	// AccessShared: any number of producers.
	AccessShared AccessMode = 0
	// AccessExclusive: one producer; others are refused as busy.
	AccessExclusive AccessMode = 1
	// AccessWaitForExclusive: queue until the exclusive producer leaves.
	AccessWaitForExclusive AccessMode = 2
	// AccessExclusiveWithFencing: take the topic, fencing the current exclusive/shared producers.
	AccessExclusiveWithFencing AccessMode = 3
)

var accessModeNames = []string{"Shared", "Exclusive", "WaitForExclusive", "ExclusiveWithFencing"}

func (m AccessMode) String() string { return enumName(accessModeNames, "AccessMode", int32(m)) }

// SubType is a subscription type (CommandSubscribe.SubType).
type SubType int32

const (
	SubExclusive SubType = 0
	SubShared    SubType = 1
	SubFailover  SubType = 2
	SubKeyShared SubType = 3
)

// Valid reports whether s is one of the four subscription types.
func (s SubType) Valid() bool { return s >= SubExclusive && s <= SubKeyShared }

var subTypeNames = []string{"Exclusive", "Shared", "Failover", "Key_Shared"}

func (s SubType) String() string { return enumName(subTypeNames, "SubType", int32(s)) }

// InitialPosition is where a new durable subscription starts (CommandSubscribe.InitialPosition).
type InitialPosition int32

const (
	InitialLatest   InitialPosition = 0
	InitialEarliest InitialPosition = 1
)

// KeySharedMode is how a Key_Shared subscription splits the key hash space (KeySharedMode).
type KeySharedMode int32

const (
	KeySharedAutoSplit KeySharedMode = 0
	KeySharedSticky    KeySharedMode = 1
)

// ErrSubscriptionNotReplicated: a replicated state names a subscription that exists here and is
// not replicated; another cluster's state never changes it, and it is not applied.
var ErrSubscriptionNotReplicated = errors.New("subscription exists here and is not replicated")

// enumName is names[v], the protocol's name of value v, or "typ(v)" for a value it does not name.
func enumName(names []string, typ string, v int32) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}
