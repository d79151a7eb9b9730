// Package mtypes holds the value types that storage, the broker, replication and the node pass to
// each other: positions in a topic's log, a cursor's acknowledgement state and a replicated
// subscription's state, and the Pulsar protocol enums of producers and subscriptions.
//
// It imports nothing of the module, so every package may import it (internal/archtest keeps it
// that way): replication and storage, which never import each other, share one Position instead
// of each declaring its own, and the node hands values from one to the other as they are, with no
// conversion. It holds data and the few methods that belong to the data (ordering, formatting,
// parsing); behaviour stays in the packages that own it.
package mtypes
