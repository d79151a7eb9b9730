package adminapi

// TopicStats is `GET .../{topic}/stats`, with Pulsar's field names (pulsaradmin reads the subset it
// knows; Pulsar's broker writes them all). Rates are per second over the broker's last stats interval.
type TopicStats struct {
	MsgRateIn                        float64                      `json:"msgRateIn"`
	MsgThroughputIn                  float64                      `json:"msgThroughputIn"`
	MsgRateOut                       float64                      `json:"msgRateOut"`
	MsgThroughputOut                 float64                      `json:"msgThroughputOut"`
	BytesInCounter                   int64                        `json:"bytesInCounter"`
	MsgInCounter                     int64                        `json:"msgInCounter"`
	BytesOutCounter                  int64                        `json:"bytesOutCounter"`
	MsgOutCounter                    int64                        `json:"msgOutCounter"`
	AverageMsgSize                   float64                      `json:"averageMsgSize"`
	MsgChunkPublished                bool                         `json:"msgChunkPublished"`
	StorageSize                      int64                        `json:"storageSize"`
	BacklogSize                      int64                        `json:"backlogSize"`
	BacklogQuotaLimitSize            int64                        `json:"backlogQuotaLimitSize"`
	BacklogQuotaLimitTime            int64                        `json:"backlogQuotaLimitTime"`
	OldestBacklogMessageAgeSeconds   int64                        `json:"oldestBacklogMessageAgeSeconds"`
	OldestBacklogMessageSubscription string                       `json:"oldestBacklogMessageSubscriptionName,omitempty"`
	EarliestMsgPublishTimeInBacklogs int64                        `json:"earliestMsgPublishTimeInBacklogs"`
	PublishRateLimitedTimes          int64                        `json:"publishRateLimitedTimes"`
	OffloadedStorageSize             int64                        `json:"offloadedStorageSize"`
	Publishers                       []PublisherStats             `json:"publishers"`
	WaitingPublishers                int                          `json:"waitingPublishers"`
	Subscriptions                    map[string]SubscriptionStats `json:"subscriptions"`
	Replication                      map[string]ReplicatorStats   `json:"replication"`
	// InboundReplication (Meridian's addition) lists the clusters whose replicators write to this
	// topic, by cluster name. Replication holds only this cluster's own (outbound) replicators, so a
	// cluster that only receives has entries here and none there.
	InboundReplication                map[string]InboundReplicationStats `json:"inboundReplication,omitempty"`
	DeduplicationStatus               string                             `json:"deduplicationStatus,omitempty"`
	NonContiguousDeletedMessagesRange int                                `json:"nonContiguousDeletedMessagesRanges"`
	NonContiguousDeletedRangesSrzSize int                                `json:"nonContiguousDeletedMessagesRangesSerializedSize"`
	DelayedMessageIndexSizeInBytes    int64                              `json:"delayedMessageIndexSizeInBytes"`
	OwnerBroker                       string                             `json:"ownerBroker,omitempty"`
	// TopicEpoch is set while an exclusive producer holds the topic.
	TopicEpoch             *int64 `json:"topicEpoch,omitempty"`
	TopicCreationTimeStamp int64  `json:"topicCreationTimeStamp"`
	LastPublishTimeStamp   int64  `json:"lastPublishTimeStamp"`
}

// PublisherStats is one producer in TopicStats.publishers.
type PublisherStats struct {
	AccessMode              string            `json:"accessMode"`
	ProducerID              int64             `json:"producerId"`
	ProducerName            string            `json:"producerName"`
	MsgRateIn               float64           `json:"msgRateIn"`
	MsgThroughputIn         float64           `json:"msgThroughputIn"`
	AverageMsgSize          float64           `json:"averageMsgSize"`
	ChunkedMessageRate      float64           `json:"chunkedMessageRate"`
	SupportsPartialProducer bool              `json:"supportsPartialProducer"`
	IsReplicator            bool              `json:"isReplicator,omitempty"`
	Address                 string            `json:"address"`
	ConnectedSince          string            `json:"connectedSince"`
	ClientVersion           string            `json:"clientVersion"`
	Metadata                map[string]string `json:"metadata"`
}

// SubscriptionStats is one subscription in TopicStats.subscriptions.
type SubscriptionStats struct {
	MsgRateOut                        float64           `json:"msgRateOut"`
	MsgThroughputOut                  float64           `json:"msgThroughputOut"`
	BytesOutCounter                   int64             `json:"bytesOutCounter"`
	MsgOutCounter                     int64             `json:"msgOutCounter"`
	MsgRateRedeliver                  float64           `json:"msgRateRedeliver"`
	MessageAckRate                    float64           `json:"messageAckRate"`
	ChunkedMessageRate                float64           `json:"chunkedMessageRate"`
	MsgBacklog                        int64             `json:"msgBacklog"`
	BacklogSize                       int64             `json:"backlogSize"`
	EarliestMsgPublishTimeInBacklog   int64             `json:"earliestMsgPublishTimeInBacklog"`
	MsgBacklogNoDelayed               int64             `json:"msgBacklogNoDelayed"`
	BlockedSubscriptionOnUnackedMsgs  bool              `json:"blockedSubscriptionOnUnackedMsgs"`
	MsgDelayed                        int64             `json:"msgDelayed"`
	UnackedMessages                   int64             `json:"unackedMessages"`
	Type                              string            `json:"type"`
	ActiveConsumerName                string            `json:"activeConsumerName,omitempty"`
	MsgRateExpired                    float64           `json:"msgRateExpired"`
	TotalMsgExpired                   int64             `json:"totalMsgExpired"`
	LastExpireTimestamp               int64             `json:"lastExpireTimestamp"`
	LastConsumedFlowTimestamp         int64             `json:"lastConsumedFlowTimestamp"`
	LastConsumedTimestamp             int64             `json:"lastConsumedTimestamp"`
	LastAckedTimestamp                int64             `json:"lastAckedTimestamp"`
	LastMarkDeleteAdvancedTimestamp   int64             `json:"lastMarkDeleteAdvancedTimestamp"`
	Consumers                         []ConsumerStats   `json:"consumers"`
	IsDurable                         bool              `json:"isDurable"`
	IsReplicated                      bool              `json:"isReplicated"`
	AllowOutOfOrderDelivery           bool              `json:"allowOutOfOrderDelivery"`
	ConsumersAfterMarkDeletePosition  map[string]string `json:"consumersAfterMarkDeletePosition"`
	NonContiguousDeletedMessagesRange int               `json:"nonContiguousDeletedMessagesRanges"`
	NonContiguousDeletedRangesSrzSize int               `json:"nonContiguousDeletedMessagesRangesSerializedSize"`
	DelayedMessageIndexSizeInBytes    int64             `json:"delayedMessageIndexSizeInBytes"`
	SubscriptionProperties            map[string]string `json:"subscriptionProperties"`
	FilterProcessedMsgCount           int64             `json:"filterProcessedMsgCount"`
	FilterAcceptedMsgCount            int64             `json:"filterAcceptedMsgCount"`
	FilterRejectedMsgCount            int64             `json:"filterRejectedMsgCount"`
	FilterRescheduledMsgCount         int64             `json:"filterRescheduledMsgCount"`
	// ReplicatedSubscriptionSync is the sync of a replicated subscription's state with the topic's
	// remote clusters (Meridian's; absent for subscriptions that never synced).
	ReplicatedSubscriptionSync *ReplicatedSubscriptionSync `json:"replicatedSubscriptionSync,omitempty"`
}

// ReplicatedSubscriptionSync is a replicated subscription's sync, per remote cluster.
type ReplicatedSubscriptionSync struct {
	// Outbound: the states this cluster wrote, per remote it replicates to.
	Outbound map[string]ReplicatedSubscriptionOutbound `json:"outbound,omitempty"`
	// Inbound: the states received from each source cluster.
	Inbound map[string]ReplicatedSubscriptionInbound `json:"inbound,omitempty"`
}

// ReplicatedSubscriptionOutbound is the sync of a subscription's state to one remote.
type ReplicatedSubscriptionOutbound struct {
	LastStateTimestamp     int64 `json:"lastStateTimestamp"`     // when the last state was taken (unix ms)
	LastDeliveredTimestamp int64 `json:"lastDeliveredTimestamp"` // when the remote last acknowledged a state
	// SyncLagMs is the age of the oldest state the remote has not acknowledged; with none
	// outstanding, how long the last one took from taken to acknowledged.
	SyncLagMs     int64 `json:"syncLagMs"`
	PendingStates int   `json:"pendingStates"`
}

// ReplicatedSubscriptionInbound is the sync of a subscription's state from one source cluster.
type ReplicatedSubscriptionInbound struct {
	LastStateTimestamp   int64 `json:"lastStateTimestamp"`   // the source's clock when it took the last state applied
	LastAppliedTimestamp int64 `json:"lastAppliedTimestamp"` // this cluster's clock when it applied it
	// ApplyLagMs is applied minus taken (two clusters' clocks).
	ApplyLagMs int64 `json:"applyLagMs"`
	// WaitingFor names the origin clusters whose entries the last state names but that have not
	// all arrived here.
	WaitingFor []string `json:"waitingFor,omitempty"`
	// Untranslated counts acknowledgements whose entries are not mapped here (delivered again
	// after a move, never skipped).
	Untranslated int64 `json:"untranslated"`
}

// ConsumerStats is one consumer in SubscriptionStats.consumers.
type ConsumerStats struct {
	ConsumerName                 string            `json:"consumerName"`
	MsgRateOut                   float64           `json:"msgRateOut"`
	MsgThroughputOut             float64           `json:"msgThroughputOut"`
	BytesOutCounter              int64             `json:"bytesOutCounter"`
	MsgOutCounter                int64             `json:"msgOutCounter"`
	MsgRateRedeliver             float64           `json:"msgRateRedeliver"`
	MessageAckRate               float64           `json:"messageAckRate"`
	ChunkedMessageRate           float64           `json:"chunkedMessageRate"`
	AvailablePermits             int               `json:"availablePermits"`
	UnackedMessages              int               `json:"unackedMessages"`
	AvgMessagesPerEntry          int               `json:"avgMessagesPerEntry"`
	BlockedConsumerOnUnackedMsgs bool              `json:"blockedConsumerOnUnackedMsgs"`
	Address                      string            `json:"address"`
	ConnectedSince               string            `json:"connectedSince"`
	ClientVersion                string            `json:"clientVersion"`
	LastAckedTimestamp           int64             `json:"lastAckedTimestamp"`
	LastConsumedTimestamp        int64             `json:"lastConsumedTimestamp"`
	LastConsumedFlowTimestamp    int64             `json:"lastConsumedFlowTimestamp"`
	Metadata                     map[string]string `json:"metadata"`
}

// InboundReplicationStats is TopicStats.inboundReplication[sourceCluster]: the source cluster's
// replicator producer connected to this topic.
type InboundReplicationStats struct {
	// The replicator producer, while it is connected (empty otherwise).
	ProducerName   string `json:"producerName,omitempty"`
	Connection     string `json:"connection,omitempty"`
	ConnectedSince string `json:"connectedSince,omitempty"`
	// What arrived from the source cluster since this topic was loaded.
	MsgRateIn         float64 `json:"msgRateIn"`
	MsgThroughputIn   float64 `json:"msgThroughputIn"`
	MsgInCounter      int64   `json:"msgInCounter"`
	BytesInCounter    int64   `json:"bytesInCounter"`
	DuplicatesDropped int64   `json:"duplicatesDropped"`
}

// ReplicatorStats is TopicStats.replication[remoteCluster]. The first block is Pulsar's; the second is
// Meridian's addition so that a stalled replicator is always visible (docs/design.md, "Replication invariants").
type ReplicatorStats struct {
	MsgRateIn                 float64 `json:"msgRateIn"`
	MsgThroughputIn           float64 `json:"msgThroughputIn"`
	MsgRateOut                float64 `json:"msgRateOut"`
	MsgThroughputOut          float64 `json:"msgThroughputOut"`
	MsgRateExpired            float64 `json:"msgRateExpired"`
	ReplicationBacklog        int64   `json:"replicationBacklog"`
	Connected                 bool    `json:"connected"`
	ReplicationDelayInSeconds int64   `json:"replicationDelayInSeconds"`
	InboundConnection         string  `json:"inboundConnection,omitempty"`
	InboundConnectedSince     string  `json:"inboundConnectedSince,omitempty"`
	OutboundConnection        string  `json:"outboundConnection,omitempty"`
	OutboundConnectedSince    string  `json:"outboundConnectedSince,omitempty"`

	// Meridian additions.
	MsgOutCounter   int64 `json:"msgOutCounter"`
	BytesOutCounter int64 `json:"bytesOutCounter"`
	MsgInCounter    int64 `json:"msgInCounter"`
	BytesInCounter  int64 `json:"bytesInCounter"`
	// ReplicationBacklogBytes: bytes of entries not yet acknowledged by the remote (when known).
	ReplicationBacklogBytes int64 `json:"replicationBacklogBytes"`
	// StartMode is "earliest" or "latest": where this replicator's cursor was created.
	StartMode string `json:"startMode,omitempty"`
	// StartPosition is "ledgerId:entryId", the cursor position at creation.
	StartPosition string `json:"startPosition,omitempty"`
	// LastProgressTimestamp (ms) is when the remote last acknowledged an entry.
	LastProgressTimestamp int64 `json:"lastProgressTimestamp"`
	// LastError is the most recent failure (connect, remote refusal, ...), empty once healthy again.
	LastError string `json:"lastError,omitempty"`
	// LastErrorTimestamp (ms) is when LastError was recorded.
	LastErrorTimestamp int64 `json:"lastErrorTimestamp,omitempty"`
	// RateLimited reports whether replicatorDispatchRate is currently holding the replicator back.
	RateLimited bool `json:"rateLimited,omitempty"`
	// MemoryLimited reports whether the broker's replication memory budget (--replication-memory-bytes)
	// is holding the replicator back: its next read waits until other replicators' entries are
	// acknowledged (many topics catching up at once).
	MemoryLimited bool `json:"memoryLimited,omitempty"`
	// DuplicatesDropped counts inbound replicated entries this cluster already had (by origin position).
	DuplicatesDropped int64 `json:"duplicatesDropped,omitempty"`
	// Reconnects counts the replicator's reconnections to the remote cluster.
	Reconnects int64 `json:"reconnects,omitempty"`
	// Stalled is true while the replicator has a backlog and has made no progress (no entry
	// acknowledged by the remote, no cursor advance) for the broker's --replication-stall-timeout.
	// StalledSince (ms) is its last progress (or when the backlog appeared), StalledReason why it
	// is stuck as far as the broker knows (the last error, or "disconnected", ...).
	Stalled       bool   `json:"stalled"`
	StalledSince  int64  `json:"stalledSince,omitempty"`
	StalledReason string `json:"stalledReason,omitempty"`
	// Skipped counts entries not sent, by reason (markers, already replicated, replicate_to).
	Skipped map[string]int64 `json:"skipped,omitempty"`
	// MarkDeletePosition is the replication cursor's "ledgerId:entryId".
	MarkDeletePosition string `json:"markDeletePosition,omitempty"`
}

// PartitionedTopicStats is `GET .../{topic}/partitioned-stats`: aggregates plus, with perPartition=true,
// each partition's TopicStats keyed by partition topic name.
type PartitionedTopicStats struct {
	MsgRateIn              float64                            `json:"msgRateIn"`
	MsgThroughputIn        float64                            `json:"msgThroughputIn"`
	MsgRateOut             float64                            `json:"msgRateOut"`
	MsgThroughputOut       float64                            `json:"msgThroughputOut"`
	BytesInCounter         int64                              `json:"bytesInCounter"`
	MsgInCounter           int64                              `json:"msgInCounter"`
	BytesOutCounter        int64                              `json:"bytesOutCounter"`
	MsgOutCounter          int64                              `json:"msgOutCounter"`
	AverageMsgSize         float64                            `json:"averageMsgSize"`
	StorageSize            int64                              `json:"storageSize"`
	BacklogSize            int64                              `json:"backlogSize"`
	Publishers             []PublisherStats                   `json:"publishers"`
	Subscriptions          map[string]SubscriptionStats       `json:"subscriptions"`
	Replication            map[string]ReplicatorStats         `json:"replication"`
	InboundReplication     map[string]InboundReplicationStats `json:"inboundReplication,omitempty"`
	DeduplicationStatus    string                             `json:"deduplicationStatus,omitempty"`
	Metadata               PartitionedTopicMetadata           `json:"metadata"`
	Partitions             map[string]TopicStats              `json:"partitions"`
	TopicCreationTimeStamp int64                              `json:"topicCreationTimeStamp"`
	LastPublishTimeStamp   int64                              `json:"lastPublishTimeStamp"`
}

// PartitionedTopicInternalStats is `GET .../{topic}/partitioned-internalStats`: each partition's
// PersistentTopicInternalStats keyed by partition topic name.
type PartitionedTopicInternalStats struct {
	Metadata   PartitionedTopicMetadata                `json:"metadata"`
	Partitions map[string]PersistentTopicInternalStats `json:"partitions"`
}

// PersistentTopicInternalStats is `GET .../{topic}/internalStats`: the log and its cursors
// (replication cursors `pulsar.repl.<remote>` included).
type PersistentTopicInternalStats struct {
	EntriesAddedCounter                int64                  `json:"entriesAddedCounter"`
	NumberOfEntries                    int64                  `json:"numberOfEntries"`
	TotalSize                          int64                  `json:"totalSize"`
	CurrentLedgerEntries               int64                  `json:"currentLedgerEntries"`
	CurrentLedgerSize                  int64                  `json:"currentLedgerSize"`
	LastLedgerCreatedTimestamp         string                 `json:"lastLedgerCreatedTimestamp"`
	LastLedgerCreationFailureTimestamp string                 `json:"lastLedgerCreationFailureTimestamp,omitempty"`
	WaitingCursorsCount                int                    `json:"waitingCursorsCount"`
	PendingAddEntriesCount             int                    `json:"pendingAddEntriesCount"`
	LastConfirmedEntry                 string                 `json:"lastConfirmedEntry"`
	State                              string                 `json:"state"`
	Ledgers                            []LedgerInfo           `json:"ledgers"`
	Cursors                            map[string]CursorStats `json:"cursors"`
	SchemaLedgers                      []LedgerInfo           `json:"schemaLedgers"`
	CompactedLedger                    *LedgerInfo            `json:"compactedLedger,omitempty"`
}

// LedgerInfo is one ledger of a topic's log.
type LedgerInfo struct {
	LedgerID        int64  `json:"ledgerId"`
	Entries         int64  `json:"entries"`
	Size            int64  `json:"size"`
	Timestamp       int64  `json:"timestamp"`
	Offloaded       bool   `json:"offloaded"`
	Metadata        string `json:"metadata,omitempty"`
	UnderReplicated bool   `json:"underReplicated"`
}

// CursorStats is one cursor in PersistentTopicInternalStats.cursors. Positions are "ledgerId:entryId".
type CursorStats struct {
	MarkDeletePosition                       string           `json:"markDeletePosition"`
	ReadPosition                             string           `json:"readPosition"`
	WaitingReadOp                            bool             `json:"waitingReadOp"`
	PendingReadOps                           int              `json:"pendingReadOps"`
	MessagesConsumedCounter                  int64            `json:"messagesConsumedCounter"`
	CursorLedger                             int64            `json:"cursorLedger"`
	CursorLedgerLastEntry                    int64            `json:"cursorLedgerLastEntry"`
	IndividuallyDeletedMessages              string           `json:"individuallyDeletedMessages"`
	LastLedgerSwitchTimestamp                string           `json:"lastLedgerSwitchTimestamp"`
	State                                    string           `json:"state"`
	Active                                   bool             `json:"active"`
	NumberOfEntriesSinceFirstNotAckedMessage int64            `json:"numberOfEntriesSinceFirstNotAckedMessage"`
	TotalNonContiguousDeletedMessagesRange   int              `json:"totalNonContiguousDeletedMessagesRange"`
	SubscriptionHavePendingRead              bool             `json:"subscriptionHavePendingRead"`
	SubscriptionHavePendingReplayRead        bool             `json:"subscriptionHavePendingReplayRead"`
	Properties                               map[string]int64 `json:"properties"`
}

// GetStatsOptions are the query parameters of `.../stats` and `.../partitioned-stats`.
type GetStatsOptions struct {
	GetPreciseBacklog        bool
	SubscriptionBacklogSize  bool
	GetEarliestTimeInBacklog bool
	ExcludePublishers        bool
	ExcludeConsumers         bool
}

// NamespaceOwnershipStatus is one bundle of `GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces`
// (Pulsar's field names, with underscores).
type NamespaceOwnershipStatus struct {
	BrokerAssignment string `json:"broker_assignment"` // primary, secondary or shared
	IsControlled     bool   `json:"is_controlled"`
	IsActive         bool   `json:"is_active"`
}

// ManagedLedgerInfo is `GET .../{topic}/internal-info`: the topic's log metadata in Pulsar's shape.
type ManagedLedgerInfo struct {
	Version            int64                        `json:"version"`
	CreationDate       string                       `json:"creationDate,omitempty"`
	ModificationDate   string                       `json:"modificationDate,omitempty"`
	Ledgers            []ManagedLedgerLedgerInfo    `json:"ledgers"`
	TerminatedPosition *PositionInfo                `json:"terminatedPosition,omitempty"`
	Cursors            map[string]ManagedCursorInfo `json:"cursors"`
	Properties         map[string]string            `json:"properties"`
}

// ManagedLedgerLedgerInfo is one ledger of ManagedLedgerInfo.
type ManagedLedgerLedgerInfo struct {
	LedgerID    int64  `json:"ledgerId"`
	Entries     *int64 `json:"entries,omitempty"`
	Size        *int64 `json:"size,omitempty"`
	Timestamp   *int64 `json:"timestamp,omitempty"`
	IsOffloaded bool   `json:"isOffloaded"`
}

// ManagedCursorInfo is one cursor of ManagedLedgerInfo.
type ManagedCursorInfo struct {
	Version                   int64              `json:"version"`
	CreationDate              string             `json:"creationDate,omitempty"`
	ModificationDate          string             `json:"modificationDate,omitempty"`
	CursorsLedgerID           int64              `json:"cursorsLedgerId"`
	MarkDelete                *PositionInfo      `json:"markDelete,omitempty"`
	IndividualDeletedMessages []MessageRangeInfo `json:"individualDeletedMessages"`
	Properties                map[string]int64   `json:"properties"`
}

// PositionInfo is a (ledgerId, entryId) position in ManagedLedgerInfo.
type PositionInfo struct {
	LedgerID int64 `json:"ledgerId"`
	EntryID  int64 `json:"entryId"`
}

// MessageRangeInfo is a range of individually deleted messages in ManagedCursorInfo.
type MessageRangeInfo struct {
	From PositionInfo `json:"from"`
	To   PositionInfo `json:"to"`
}

// ReplicationAdvertisement is what a source cluster tells each replication target about once a
// second (POST /admin/v2/replication/advertisements, Meridian's): for every topic written since the
// previous advertisement, its last stored position and its backlog to that target. A target thus
// always knows how far behind it was, even after the source is gone (docs/replication-design.md,
// "Advertised positions").
type ReplicationAdvertisement struct {
	Source    string                     `json:"source"`
	Timestamp int64                      `json:"timestamp"` // the source's clock, unix ms
	Topics    map[string]AdvertisedTopic `json:"topics"`
}

// AdvertisedTopic is one topic of a ReplicationAdvertisement.
type AdvertisedTopic struct {
	LastPosition string `json:"lastPosition"` // "ledgerId:entryId" of the last entry stored on the source
	Backlog      int64  `json:"backlog"`      // entries the target had not acknowledged
	BacklogBytes int64  `json:"backlogBytes"`
}

// SourceTopicState is what a target knows of one source's topic (GET
// /admin/v2/namespaces/{tenant}/{namespace}/replicationSources): the last advertisement and how
// much of it has arrived since.
type SourceTopicState struct {
	Source string `json:"source"`
	Topic  string `json:"topic"`
	AdvertisedTopic
	AdvertisedAt int64 `json:"advertisedAt"` // the source's clock
	ReceivedAt   int64 `json:"receivedAt"`   // this cluster's clock
	// ArrivedThrough is the last position of the source's that is stored here ("" if none, or the
	// topic's index is not loaded).
	ArrivedThrough string `json:"arrivedThrough,omitempty"`
	// Missing estimates the source's entries up to LastPosition that never arrived: exact when
	// both positions are in one ledger (MissingExact), else the advertised backlog, an upper
	// bound at the time of the advertisement.
	Missing      int64 `json:"missing"`
	MissingExact bool  `json:"missingExact"`
}
