package broker

// Stats types are the broker core's report. The admin API answers with adminapi's types (Pulsar's
// JSON); internal/node converts between the two field by field (statsconv.go), and a test there fails
// when a field here is not carried over.

// TopicStats is "topics stats".
type TopicStats struct {
	MsgRateIn              float64                      `json:"msgRateIn"`
	MsgThroughputIn        float64                      `json:"msgThroughputIn"`
	MsgRateOut             float64                      `json:"msgRateOut"`
	MsgThroughputOut       float64                      `json:"msgThroughputOut"`
	BytesInCounter         int64                        `json:"bytesInCounter"`
	MsgInCounter           int64                        `json:"msgInCounter"`
	BytesOutCounter        int64                        `json:"bytesOutCounter"`
	MsgOutCounter          int64                        `json:"msgOutCounter"`
	AverageMsgSize         float64                      `json:"averageMsgSize"`
	MsgChunkPublished      bool                         `json:"msgChunkPublished"`
	StorageSize            int64                        `json:"storageSize"`
	BacklogSize            int64                        `json:"backlogSize"`
	Publishers             []PublisherStats             `json:"publishers"`
	WaitingPublishers      int                          `json:"waitingPublishers"`
	Subscriptions          map[string]SubscriptionStats `json:"subscriptions"`
	Replication            map[string]ReplicatorStats   `json:"replication"`
	DeduplicationStatus    string                       `json:"deduplicationStatus"`
	TopicEpoch             *uint64                      `json:"topicEpoch,omitempty"`
	TopicCreationTimeStamp int64                        `json:"topicCreationTimeStamp"`
	LastPublishTimeStamp   int64                        `json:"lastPublishTimestamp"`
}

// PublisherStats is one entry of TopicStats.Publishers.
type PublisherStats struct {
	AccessMode              string            `json:"accessMode"`
	ProducerID              uint64            `json:"producerId"`
	ProducerName            string            `json:"producerName"`
	MsgRateIn               float64           `json:"msgRateIn"`
	MsgThroughputIn         float64           `json:"msgThroughputIn"`
	AverageMsgSize          float64           `json:"averageMsgSize"`
	ChunkedMessageRate      float64           `json:"chunkedMessageRate"`
	SupportsPartialProducer bool              `json:"supportsPartialProducer"`
	Address                 string            `json:"address"`
	ConnectedSince          string            `json:"connectedSince"`
	ClientVersion           string            `json:"clientVersion"`
	Metadata                map[string]string `json:"metadata"`
}

// SubscriptionStats is one entry of TopicStats.Subscriptions.
type SubscriptionStats struct {
	MsgRateOut                         float64           `json:"msgRateOut"`
	MsgThroughputOut                   float64           `json:"msgThroughputOut"`
	BytesOutCounter                    int64             `json:"bytesOutCounter"`
	MsgOutCounter                      int64             `json:"msgOutCounter"`
	MsgRateRedeliver                   float64           `json:"msgRateRedeliver"`
	MessageAckRate                     float64           `json:"messageAckRate"`
	ChunkedMessageRate                 float64           `json:"chunkedMessageRate"`
	MsgBacklog                         int64             `json:"msgBacklog"`
	BacklogSize                        int64             `json:"backlogSize"`
	EarliestMsgPublishTimeInBacklog    int64             `json:"earliestMsgPublishTimeInBacklog"`
	MsgBacklogNoDelayed                int64             `json:"msgBacklogNoDelayed"`
	BlockedSubscriptionOnUnackedMsgs   bool              `json:"blockedSubscriptionOnUnackedMsgs"`
	MsgDelayed                         int64             `json:"msgDelayed"`
	UnackedMessages                    int64             `json:"unackedMessages"`
	Type                               string            `json:"type"`
	ActiveConsumerName                 string            `json:"activeConsumerName,omitempty"`
	MsgRateExpired                     float64           `json:"msgRateExpired"`
	TotalMsgExpired                    int64             `json:"totalMsgExpired"`
	LastExpireTimestamp                int64             `json:"lastExpireTimestamp"`
	LastConsumedFlowTimestamp          int64             `json:"lastConsumedFlowTimestamp"`
	LastConsumedTimestamp              int64             `json:"lastConsumedTimestamp"`
	LastAckedTimestamp                 int64             `json:"lastAckedTimestamp"`
	LastMarkDeleteAdvancedTimestamp    int64             `json:"lastMarkDeleteAdvancedTimestamp"`
	Consumers                          []ConsumerStats   `json:"consumers"`
	IsDurable                          bool              `json:"isDurable"`
	IsReplicated                       bool              `json:"isReplicated"`
	AllowOutOfOrderDelivery            bool              `json:"allowOutOfOrderDelivery"`
	SubscriptionProperties             map[string]string `json:"subscriptionProperties"`
	NonContiguousDeletedMessagesRanges int               `json:"nonContiguousDeletedMessagesRanges"`
}

// ConsumerStats is one entry of SubscriptionStats.Consumers.
type ConsumerStats struct {
	ConsumerName                 string            `json:"consumerName"`
	MsgRateOut                   float64           `json:"msgRateOut"`
	MsgThroughputOut             float64           `json:"msgThroughputOut"`
	BytesOutCounter              int64             `json:"bytesOutCounter"`
	MsgOutCounter                int64             `json:"msgOutCounter"`
	MsgRateRedeliver             float64           `json:"msgRateRedeliver"`
	MessageAckRate               float64           `json:"messageAckRate"`
	ChunkedMessageRate           float64           `json:"chunkedMessageRate"`
	AvailablePermits             int64             `json:"availablePermits"`
	UnackedMessages              int64             `json:"unackedMessages"`
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

// ReplicatorStats is one entry of TopicStats.Replication (filled by the replication layer; the
// broker core only reserves the map).
type ReplicatorStats struct {
	MsgRateIn                 float64 `json:"msgRateIn"`
	MsgThroughputIn           float64 `json:"msgThroughputIn"`
	MsgRateOut                float64 `json:"msgRateOut"`
	MsgThroughputOut          float64 `json:"msgThroughputOut"`
	MsgRateExpired            float64 `json:"msgRateExpired"`
	ReplicationBacklog        int64   `json:"replicationBacklog"`
	Connected                 bool    `json:"connected"`
	ReplicationDelayInSeconds int64   `json:"replicationDelayInSeconds"`
	InboundConnection         string  `json:"inboundConnection"`
	InboundConnectedSince     string  `json:"inboundConnectedSince"`
	OutboundConnection        string  `json:"outboundConnection"`
	OutboundConnectedSince    string  `json:"outboundConnectedSince"`
}

// InternalStats is "topics stats-internal" (Pulsar's PersistentTopicInternalStats, subset).
type InternalStats struct {
	EntriesAddedCounter  int64                  `json:"entriesAddedCounter"`
	NumberOfEntries      int64                  `json:"numberOfEntries"`
	TotalSize            int64                  `json:"totalSize"`
	CurrentLedgerEntries int64                  `json:"currentLedgerEntries"`
	CurrentLedgerSize    int64                  `json:"currentLedgerSize"`
	LastConfirmedEntry   string                 `json:"lastConfirmedEntry"`
	State                string                 `json:"state"`
	PendingAddEntries    int                    `json:"pendingAddEntriesCount"`
	Ledgers              []LedgerInfo           `json:"ledgers"`
	Cursors              map[string]CursorStats `json:"cursors"`
}

// LedgerInfo is one entry of InternalStats.Ledgers: one storage segment.
type LedgerInfo struct {
	LedgerID  int64 `json:"ledgerId"`
	Entries   int64 `json:"entries"`
	Size      int64 `json:"size"`
	Timestamp int64 `json:"timestamp"`
}

// CursorStats is one entry of InternalStats.Cursors.
type CursorStats struct {
	MarkDeletePosition string           `json:"markDeletePosition"`
	ReadPosition       string           `json:"readPosition"`
	MessagesConsumed   int64            `json:"messagesConsumedCounter"`
	State              string           `json:"state"`
	Backlog            int64            `json:"numberOfEntriesSinceFirstNotAckedMessage"`
	Properties         map[string]int64 `json:"properties"`
}
