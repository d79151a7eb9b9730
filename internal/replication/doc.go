// Package replication implements Meridian's geo-replication (docs/design.md, "Replication invariants"): replicators that copy a
// local topic's entries to remote clusters, the inbound index that deduplicates replicated entries by
// their origin position and maps origin positions to local ones, and the lifecycle controller that
// starts and stops replicators as policies change.
//
// # Shape
//
//	Manager (lifecycle: policies + clusters + topics -> desired replicators; Plan is pure)
//	   └── Runner per (topic, remote)   goroutine at the edge: executes actions, posts events
//	          └── Machine               deterministic: events in, actions out
//	                 LocalTopic ── cursor "pulsar.repl.<remote>", reads, waits for data
//	                 RemoteProducer ── internal/client producer "pulsar.repl.<local>--><remote>"
//
//	Index per local topic (receiving side): origin (cluster, ledger, entry) -> local position;
//	the broker consults it for every entry a replicator producer sends.
//
//	subSync, one per Manager (replicated subscriptions, subsync*.go): writes a replicated
//	subscription's acknowledgement state into its topic as a state marker in origin coordinates,
//	and applies the markers replicators store here, translated through the Index.
//
// The package never imports the broker, the server, the node or storage (docs/design.md, "Dependency rules"). It declares
// LocalTopic, Cursor, RemoteProducer(Factory) and the Manager's sources; internal/node implements them.
//
// # Guarantees
//
// A replicator advances its cursor only when the remote acknowledged (SEND_RECEIPT) every entry up to
// that position, so nothing is lost across restarts of either side; after any failure it rewinds to
// the oldest unacknowledged entry and sends again, and the receiver drops what it already stored by
// source position, so nothing is stored twice. There is no state in which a replicator stops without
// saying so: every failure is retried (backoff 100 ms doubling to 5 s) and shown as lastError in stats
// and in the log.
//
// # Hot path
//
// Per entry, the replicator scans the encoded metadata for the fields its skip rules need and appends
// replicated_from and the source-position property to it (fastpath.go); entries that need editing take
// the general decode-edit-encode path, and a fuzz test keeps both in agreement. Before an entry with a
// schema_version is sent, its schema is registered on the remote and the version rewritten
// (schemas.go). The receiving side's Index reads the origin the same way, without decoding.
//
// With one message per entry the per-entry overheads are the cost, so they are paid per batch where
// the order allows it: the machine reads whole batches one batch ahead of the in-flight window (a
// receipt finds the next entries ready; reads do not shrink to the slots a burst of receipts
// frees), emits one ActSends per event, keeps its window in a reused backing array and carves the
// new metadata heads from shared blocks; the runner hands all sends of an event to the client in
// one call (one lock, one writer wake-up), passing the SEND fields the fast path already read
// (client.RawInfo); the client hands receipts that arrive together back as one batch, and the
// mailbox wakes the loop once per batch of results.
//
// On the receiving side the broker asks the Index for a ticket (AdmitTicket) before each append and
// hands it back with the stored position (Commit): admissions wait in an in-order queue that reuses
// its array, and a commit normally pops its head, so the index allocates nothing per entry (a commit
// closure per entry with its captured state and a map of pending positions cost three allocations
// and two map operations). An entry is checked against the pending ones only when its position is
// not above the origin's highest pending position (a resend), by a scan of the queue. The queue is
// allocated by the first admission, so the Index of an idle topic stays in its 176-byte size class.
//
// # Persisted state
//
// The replication cursor's properties (version 1, written when the cursor is created):
//
//	replication.startMode      "earliest" | "latest"
//	replication.startPosition  "<ledgerId>:<entryId>": the cursor's mark-delete position at creation,
//	                           i.e. the last entry not replicated; entry -1 ("7:-1") means before the
//	                           first entry of that ledger (a cursor created on an empty topic)
//	replication.createdAt      RFC 3339 time of creation
//
// The inbound index snapshot format is documented in index.go.
package replication
