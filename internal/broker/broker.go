package broker

import (
	"context"
	"log/slog"
	"time"

	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/wire"
)

// Config holds the broker core's settings. Zero values mean the documented defaults.
type Config struct {
	// Cluster is this cluster's name; it prefixes generated producer names ("<cluster>-<brokerID>-<n>").
	Cluster string
	// BrokerID distinguishes brokers of one cluster in generated names; default "0".
	BrokerID string
	// DedupDefault is the broker-wide default for producer deduplication (--dedup); a namespace or
	// topic policy overrides it.
	DedupDefault bool
	// AutoTopicCreation is the broker-wide default for creating non-partitioned topics on first use
	// (--auto-topic-creation); a namespace policy overrides it.
	AutoTopicCreation bool
	// DedupSnapshotInterval is the number of entries between two persisted dedup snapshots; entries
	// after the last snapshot are replayed on topic load. Default 1000 (Pulsar's
	// brokerDeduplicationEntriesInterval).
	DedupSnapshotInterval int
	// DispatchMaxEntries bounds one storage read of a dispatcher. Default 100.
	DispatchMaxEntries int
	// DispatchMaxBytes bounds one storage read of a dispatcher. Default 5 MiB.
	DispatchMaxBytes int64
	// MaxUnackedMessagesPerConsumer stops dispatching to a Shared or Key_Shared consumer holding
	// this many unacknowledged messages until it acknowledges some. Default 50000 (Pulsar's); <0 =
	// unlimited.
	MaxUnackedMessagesPerConsumer int
	// MaxUnackedMessagesPerSubscription stops dispatching on a Shared or Key_Shared subscription
	// whose consumers hold this many unacknowledged messages together. Default 200000 (Pulsar's);
	// <0 = unlimited.
	MaxUnackedMessagesPerSubscription int
	// MaxPublishBytesInFlight is the broker-wide budget of bytes of published entries not yet
	// acknowledged by storage (see Broker.PublishLimiter). Default 256 MiB; <0 = unlimited.
	MaxPublishBytesInFlight int64
	// StatsInterval is how often rates (msgRateIn, ...) are recomputed. Default 5 s.
	StatsInterval time.Duration
	// BacklogQuotaCheckInterval is how often backlog quotas are enforced on loaded topics (Pulsar's
	// backlogQuotaCheckIntervalInSeconds). Default 5 s; it runs on the stats ticker, so it is at
	// least StatsInterval.
	BacklogQuotaCheckInterval time.Duration
	// ReplicatorPrefix marks producer and cursor names of replicators. Default "pulsar.repl".
	ReplicatorPrefix string
}

// Clock is the broker's source of time (publish-time clamps, stats, connectedSince). Tests may
// substitute a fake.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Deps are the broker's collaborators, built by internal/node.
type Deps struct {
	Storage  *storage.Engine
	Policies PolicySource // nil = no namespace policies: every namespace exists, broker defaults apply
	Logger   *slog.Logger // nil = slog.Default()
	Clock    Clock        // nil = the system clock
	// ReplicatedIndex opens the inbound replication index of a topic (internal/replication's Index,
	// wired by the node). Called once per topic load, after the ledger is open and before the topic
	// is published. nil = no index: replicated entries are appended without origin dedup.
	ReplicatedIndex func(ctx context.Context, topic naming.TopicName, ledger *storage.Ledger) (ReplicatedEntryIndex, error)
	// SubscriptionSync syncs replicated subscriptions (internal/replication's Manager, wired by the
	// node); nil = replicated subscriptions are flagged and persisted but not synced.
	SubscriptionSync SubscriptionSync
	// Owns says whether this broker serves a topic, in a cluster of several brokers where each
	// topic belongs to the owner of its bundle (docs/cluster.md). A topic it does not own is
	// never loaded or created here (ErrNotServedHere), whoever asks: a client, the admin API or a
	// replicator. nil = this broker serves every topic.
	Owns func(naming.TopicName) bool
	// LedgerIDFloor, when set, is the least ledger id a persistent topic's ledger may open its new
	// segment with (0: any): the floor of a bundle taken over from a dead broker, so that what that
	// broker wrote merges in before everything written here (docs/cluster.md, "When a broker dies").
	LedgerIDFloor func(naming.TopicName) int64
	// HoldsStrandedSubscriptions, when set, reports whether another broker may hold subscriptions
	// of the topic that this one does not know: its bundle was taken over from a broker that died
	// holding it, whose data has not merged back yet. A durable subscription created here then
	// starts at the earliest entry, whatever its initial position: it may be one of that broker's,
	// and must not miss what was written since the takeover (docs/cluster.md, "When a broker dies").
	HoldsStrandedSubscriptions func(naming.TopicName) bool
}

// ReplicatedEntryIndex deduplicates entries arriving from replicator producers (producer names with
// the replicator prefix) by their origin position, durable with the log (docs/design.md, "Replication invariants").
type ReplicatedEntryIndex interface {
	// AdmitTicket is called for every SEND of a replicator producer, under the lock that orders
	// appends, right before the append. err != nil refuses the SEND with a retriable error
	// (PersistenceError); dup drops it, answered with (dupLedger, dupEntry); ticket > 0 must be
	// passed to Commit exactly once with the stored position (or the append's error); ticket 0 &&
	// !dup: not indexed. AdmitTicket must not keep entry (or a slice of it) after it returns: the
	// server reuses the buffer. (A ticket rather than a commit function: no allocation per entry.)
	AdmitTicket(entry []byte) (dup bool, dupLedger, dupEntry int64, ticket uint64, err error)
	// Commit completes an admitted entry: ledger:entry is where it was stored, or err why not.
	Commit(ticket uint64, ledger, entry int64, err error)
	// Close is called when the topic unloads, before its ledger closes.
	Close(ctx context.Context) error
}

// OriginAdmitter is implemented by a ReplicatedEntryIndex that can admit an entry whose metadata
// the server scanned already (PublishRequest.Origin): the broker calls AdmitOriginTicket instead
// of AdmitTicket when the request carries the origin, with the same contract and result.
type OriginAdmitter interface {
	AdmitOriginTicket(entry []byte, origin wire.ReplicatedOrigin) (dup bool, dupLedger, dupEntry int64, ticket uint64, err error)
}

// PolicySource is what the broker needs from namespace and topic policies. internal/node adapts the
// catalog to it. Implementations answer from a cache and must be fast; they are called on topic
// load and after PoliciesChanged.
type PolicySource interface {
	// TopicPolicies returns the effective policies of topic (namespace policies with topic-level
	// overrides applied). For a partition, the policies of its partitioned topic. It returns an error
	// wrapping ErrNamespaceNotFound if the namespace does not exist.
	TopicPolicies(ctx context.Context, topic naming.TopicName) (TopicPolicies, error)
}

// TopicPolicies are the effective policies of one topic. Pointers and negative numbers mean "not set":
// the broker default applies.
type TopicPolicies struct {
	// Deduplication enables producer deduplication; nil = Config.DedupDefault.
	Deduplication *bool
	// AutoTopicCreation allows creating a non-partitioned topic on first use; nil =
	// Config.AutoTopicCreation. (Creating partitioned metadata on lookup is the catalog's job.)
	AutoTopicCreation *bool
	// Partitions is the partition count of the topic's partitioned base topic, 0 if it is not
	// partitioned. A partition name with index < Partitions may always be created.
	Partitions int
	// MessageTTL expires unacknowledged messages older than this; 0 = never.
	MessageTTL time.Duration
	// RetentionTime / RetentionSizeBytes keep acknowledged data: -1 infinite, 0 none (default).
	RetentionTime      time.Duration
	RetentionSizeBytes int64
	// BacklogQuotaLimitBytes is the destination-storage backlog quota: once a subscription's
	// backlog exceeds it, BacklogQuotaPolicy applies (checked every Config.BacklogQuotaCheckInterval
	// and when a producer is created); <=0 = no quota.
	BacklogQuotaLimitBytes int64
	// BacklogQuotaPolicy is Pulsar's retention policy name: "producer_request_hold" (default:
	// producers are disconnected and refused with ProducerBlockedQuotaExceededError, so clients
	// hold their messages and retry), "producer_exception" (the same with
	// ProducerBlockedQuotaExceededException: clients fail their pending messages), or
	// "consumer_backlog_eviction" (the oldest backlog of the subscriptions over the quota is
	// acknowledged until they fit).
	BacklogQuotaPolicy string
	// ReplicationClusters lists the clusters the topic replicates to (including this one).
	ReplicationClusters []string
	// MaxProducers and MaxConsumers per topic; 0 = unlimited.
	MaxProducers int
	MaxConsumers int
	// SubscriptionExpiration deletes durable subscriptions that have had no consumer for this long
	// (namespace subscription_expiration_time_minutes); 0 = never. Replicated subscriptions are kept.
	SubscriptionExpiration time.Duration
	// ReplicateSubscriptions, when true, makes every durable subscription of the topic replicated
	// while it is in force (topic policy replicateSubscriptionState, else the namespace's); nil or
	// false leaves each subscription's own flag.
	ReplicateSubscriptions *bool
}

// Broker is the broker core: the set of topics this broker has loaded.
type Broker struct {
	b *brokerState
}

// New builds a broker. It starts the stats ticker; Close stops it.
func New(cfg Config, deps Deps) (*Broker, error) { return newBroker(cfg, deps) }

// GetTopic returns the loaded topic, loading it from storage if needed. If the topic has no stored
// data it is created when createIfMissing is set and the policies allow it (auto topic creation,
// or a partition of an existing partitioned topic); otherwise the error wraps ErrTopicNotFound.
// Loading recovers the deduplication state (snapshot plus replay) before the topic is returned.
// Concurrent callers for one name share one load. Non-persistent topics live in memory only:
// published messages go at once to a consumer with permits in each subscription, and are dropped
// for subscriptions that have none (no storage, acks and seeks do not apply).
func (b *Broker) GetTopic(ctx context.Context, name naming.TopicName, createIfMissing bool) (*Topic, error) {
	return b.b.getTopic(ctx, name, createIfMissing)
}

// LoadedTopic returns the topic if it is loaded (without loading it), else nil.
func (b *Broker) LoadedTopic(name naming.TopicName) *Topic { return b.b.loadedTopic(name) }

// LoadedTopics returns the topics currently loaded, sorted by name.
func (b *Broker) LoadedTopics() []*Topic { return b.b.loadedTopics() }

// TopicExists reports whether the topic is loaded or has stored data.
func (b *Broker) TopicExists(ctx context.Context, name naming.TopicName) (bool, error) {
	return b.b.topicExists(ctx, name)
}

// ListTopics lists the persistent topics (and partitions, individually) of a namespace that exist
// in storage or are loaded, sorted by name.
func (b *Broker) ListTopics(ctx context.Context, ns naming.NamespaceName) ([]naming.TopicName, error) {
	return b.b.listTopics(ctx, ns)
}

// ListNonPersistentTopics lists the loaded non-persistent topics of a namespace (they exist only
// while loaded), sorted by name.
func (b *Broker) ListNonPersistentTopics(ns naming.NamespaceName) []naming.TopicName {
	var out []naming.TopicName
	for _, t := range b.b.loadedTopics() {
		if !t.t.name.IsPersistent() && t.t.name.NamespaceName() == ns {
			out = append(out, t.t.name)
		}
	}
	return out
}

// CreateTopic creates a non-partitioned topic (or one partition) explicitly, as the admin API does.
// It fails with an error wrapping ErrNotAllowed if the topic already exists.
func (b *Broker) CreateTopic(ctx context.Context, name naming.TopicName) error {
	return b.b.createTopic(ctx, name)
}

// DeleteTopic deletes a topic's data and subscriptions. Without force it fails (ErrNotAllowed) while
// producers or consumers are connected; with force they are disconnected first (their sinks and
// producers are told). Deleting a missing topic wraps ErrTopicNotFound.
func (b *Broker) DeleteTopic(ctx context.Context, name naming.TopicName, force bool) error {
	return b.b.deleteTopic(ctx, name, force)
}

// UnloadTopic closes a loaded topic (clients are disconnected and reconnect, loading it again); a
// topic that is not loaded is a no-op.
func (b *Broker) UnloadTopic(ctx context.Context, name naming.TopicName) error {
	return b.b.unloadTopic(ctx, name, Reassigned{})
}

// UnloadTopicTo is UnloadTopic of a topic whose bundle moves to another broker: its producers and
// consumers are told to reconnect there directly (docs/cluster.md, "Moving a bundle").
func (b *Broker) UnloadTopicTo(ctx context.Context, name naming.TopicName, to Reassigned) error {
	return b.b.unloadTopic(ctx, name, to)
}

// PoliciesChanged tells the broker that the policies of a namespace (or of topics in it) changed;
// loaded topics of that namespace re-read their policies (dedup on/off, retention, ...) in the
// background.
func (b *Broker) PoliciesChanged(ns naming.NamespaceName) { b.b.policiesChanged(ns) }

// PublishLimiter is the broker-wide budget of in-flight publish bytes (Config.MaxPublishBytesInFlight).
// The server makes each connection's limiter a child of it (NewMemoryLimiter(limit, parent)).
func (b *Broker) PublishLimiter() *MemoryLimiter { return b.b.publishLimiter }

// PublishLatency is the histogram of the time from the broker core taking a publish to handing
// its result to the caller, for every publish of every topic: waiting behind the producer's
// earlier publishes, dedup, and (persistent topics) the group commit. Network and the
// connection's own queues are not in it.
func (b *Broker) PublishLatency() storage.LatencyHistogram { return b.b.publishLatency.Snapshot() }

// Cluster returns Config.Cluster.
func (b *Broker) Cluster() string { return b.b.cfg.Cluster }

// Close unloads every topic (disconnecting producers and consumers, waiting for pending appends)
// and stops the broker's goroutines. It does not close the storage engine (its owner does).
func (b *Broker) Close(ctx context.Context) error { return b.b.close(ctx) }

// IgnoredAcks is the number of acknowledgements not applied because they name no stored entry of
// their topic (ackcheck.go).
func (b *Broker) IgnoredAcks() int64 { return b.b.ignoredAcks.count.Load() }
