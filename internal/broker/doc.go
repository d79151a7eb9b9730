// Package broker is Meridian's broker core: topics, producers, subscriptions, consumers, dispatch and
// producer deduplication. It is deterministic, socket-free Go: it knows nothing of connections, frames
// or HTTP (docs/design.md, "Dependency rules"). internal/server drives it from the binary protocol and internal/admin from the
// REST API; internal/node builds it.
//
// # Shape
//
//	Broker ── GetTopic(name) ──▶ Topic ── AddProducer ──▶ Producer.Publish(entry) ──▶ storage.Ledger.AppendAsync
//	                               │
//	                               └── Subscribe(opts, sink) ──▶ Consumer (Flow, Ack, Redeliver, Seek, ...)
//	                                      │
//	                               subscription (cursor + dispatcher goroutine) ──▶ ConsumerSink.SendMessages
//
// A topic (or one partition of a partitioned topic) owns one storage ledger named
// naming.TopicName.StorageName(). Each durable subscription owns a storage cursor of the same name;
// the deduplication state lives in the properties of a dedicated cursor named "pulsar.dedup".
//
// # Concurrency
//
// Every exported method is safe for concurrent use. Methods that may block (they wait for storage)
// take a context first. Callbacks the broker makes into the caller (ConsumerSink methods, publish
// completions) must not block and must not call back into the broker synchronously; they run on
// broker or storage goroutines. Each subscription with consumers runs one dispatcher goroutine, owned by
// the subscription and stopped when its last consumer leaves or the topic closes.
//
// Decision logic lives in small deterministic types (dedupState, the dispatch planner in dispatch.go,
// the failover selector) so it can be tested with tables; goroutines and storage I/O stay at the edges.
//
// Publish costs no allocation of its own in a steady stream (one-message entries make per-publish
// costs count): the in-order completion record (pubSlot) also carries what the storage completion
// needs, its completion function is bound once per slot, and slots are recycled through a sync.Pool
// once delivered; a replicated entry's admission in ReplicatedEntryIndex is a ticket, not a closure.
//
// # Persisted state
//
// The broker core keeps no files of its own; what it persists lives in storage cursors:
//
//   - one cursor per durable subscription, named after it;
//   - "pulsar.dedup": producer deduplication snapshot, format version 1, in the cursor's
//     properties: key "v" = "1" (the format version), and for each producer name N a key "p:N" whose
//     value is the decimal highest persisted sequence id (at most 10,000 producers). The cursor's
//     mark-delete position is the last entry the snapshot covers; entries after it are replayed
//     on load. Unknown keys are ignored, so later versions may add some. It is created by the
//     first producer of a topic with deduplication on (at the end of the log), not at load, so an
//     idle topic has none;
//   - "pulsar.repl.<cluster>": replication cursors created for new topics (owned by replication);
//   - "meridian.*": reserved for Meridian's own cursors (e.g. the replication index).
//
// # Errors
//
// Errors returned to the server wrap the sentinel errors declared in errors.go; each sentinel maps to
// exactly one Pulsar ServerError code (see the table in errors.go), so the server maps with errors.Is.
package broker
