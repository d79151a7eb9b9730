package node

import (
	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/broker"
)

// The broker core reports stats in its own types (it does not serve HTTP); the admin API answers
// with adminapi's, whose JSON is Pulsar's. These functions are the one mapping between the two,
// field by field: TestStatsConvertersCarryEveryBrokerField fails when a broker field is added and
// not carried over. The broker builds fresh stats on every call, so maps and slices of strings are
// handed over, not copied.

func adminTopicStats(s broker.TopicStats) adminapi.TopicStats {
	out := adminapi.TopicStats{
		MsgRateIn:              s.MsgRateIn,
		MsgThroughputIn:        s.MsgThroughputIn,
		MsgRateOut:             s.MsgRateOut,
		MsgThroughputOut:       s.MsgThroughputOut,
		BytesInCounter:         s.BytesInCounter,
		MsgInCounter:           s.MsgInCounter,
		BytesOutCounter:        s.BytesOutCounter,
		MsgOutCounter:          s.MsgOutCounter,
		AverageMsgSize:         s.AverageMsgSize,
		MsgChunkPublished:      s.MsgChunkPublished,
		StorageSize:            s.StorageSize,
		BacklogSize:            s.BacklogSize,
		WaitingPublishers:      s.WaitingPublishers,
		DeduplicationStatus:    s.DeduplicationStatus,
		TopicCreationTimeStamp: s.TopicCreationTimeStamp,
		LastPublishTimeStamp:   s.LastPublishTimeStamp,
	}
	if s.TopicEpoch != nil {
		e := int64(*s.TopicEpoch)
		out.TopicEpoch = &e
	}
	if s.Publishers != nil {
		out.Publishers = make([]adminapi.PublisherStats, len(s.Publishers))
		for i, p := range s.Publishers {
			out.Publishers[i] = adminPublisherStats(p)
		}
	}
	if s.Subscriptions != nil {
		out.Subscriptions = make(map[string]adminapi.SubscriptionStats, len(s.Subscriptions))
		for name, sub := range s.Subscriptions {
			out.Subscriptions[name] = adminSubscriptionStats(sub)
		}
	}
	if s.Replication != nil {
		out.Replication = make(map[string]adminapi.ReplicatorStats, len(s.Replication))
		for remote, r := range s.Replication {
			out.Replication[remote] = adminReplicatorStats(r)
		}
	}
	return out
}

func adminPublisherStats(p broker.PublisherStats) adminapi.PublisherStats {
	return adminapi.PublisherStats{
		AccessMode:              p.AccessMode,
		ProducerID:              int64(p.ProducerID), // Pulsar's producerId is a signed long
		ProducerName:            p.ProducerName,
		MsgRateIn:               p.MsgRateIn,
		MsgThroughputIn:         p.MsgThroughputIn,
		AverageMsgSize:          p.AverageMsgSize,
		ChunkedMessageRate:      p.ChunkedMessageRate,
		SupportsPartialProducer: p.SupportsPartialProducer,
		Address:                 p.Address,
		ConnectedSince:          p.ConnectedSince,
		ClientVersion:           p.ClientVersion,
		Metadata:                p.Metadata,
	}
}

func adminSubscriptionStats(s broker.SubscriptionStats) adminapi.SubscriptionStats {
	out := adminapi.SubscriptionStats{
		MsgRateOut:                        s.MsgRateOut,
		MsgThroughputOut:                  s.MsgThroughputOut,
		BytesOutCounter:                   s.BytesOutCounter,
		MsgOutCounter:                     s.MsgOutCounter,
		MsgRateRedeliver:                  s.MsgRateRedeliver,
		MessageAckRate:                    s.MessageAckRate,
		ChunkedMessageRate:                s.ChunkedMessageRate,
		MsgBacklog:                        s.MsgBacklog,
		BacklogSize:                       s.BacklogSize,
		EarliestMsgPublishTimeInBacklog:   s.EarliestMsgPublishTimeInBacklog,
		MsgBacklogNoDelayed:               s.MsgBacklogNoDelayed,
		BlockedSubscriptionOnUnackedMsgs:  s.BlockedSubscriptionOnUnackedMsgs,
		MsgDelayed:                        s.MsgDelayed,
		UnackedMessages:                   s.UnackedMessages,
		Type:                              s.Type,
		ActiveConsumerName:                s.ActiveConsumerName,
		MsgRateExpired:                    s.MsgRateExpired,
		TotalMsgExpired:                   s.TotalMsgExpired,
		LastExpireTimestamp:               s.LastExpireTimestamp,
		LastConsumedFlowTimestamp:         s.LastConsumedFlowTimestamp,
		LastConsumedTimestamp:             s.LastConsumedTimestamp,
		LastAckedTimestamp:                s.LastAckedTimestamp,
		LastMarkDeleteAdvancedTimestamp:   s.LastMarkDeleteAdvancedTimestamp,
		IsDurable:                         s.IsDurable,
		IsReplicated:                      s.IsReplicated,
		AllowOutOfOrderDelivery:           s.AllowOutOfOrderDelivery,
		SubscriptionProperties:            s.SubscriptionProperties,
		NonContiguousDeletedMessagesRange: s.NonContiguousDeletedMessagesRanges,
	}
	if s.Consumers != nil {
		out.Consumers = make([]adminapi.ConsumerStats, len(s.Consumers))
		for i, c := range s.Consumers {
			out.Consumers[i] = adminConsumerStats(c)
		}
	}
	return out
}

func adminConsumerStats(c broker.ConsumerStats) adminapi.ConsumerStats {
	return adminapi.ConsumerStats{
		ConsumerName:                 c.ConsumerName,
		MsgRateOut:                   c.MsgRateOut,
		MsgThroughputOut:             c.MsgThroughputOut,
		BytesOutCounter:              c.BytesOutCounter,
		MsgOutCounter:                c.MsgOutCounter,
		MsgRateRedeliver:             c.MsgRateRedeliver,
		MessageAckRate:               c.MessageAckRate,
		ChunkedMessageRate:           c.ChunkedMessageRate,
		AvailablePermits:             int(c.AvailablePermits), // Pulsar's availablePermits and unackedMessages are ints
		UnackedMessages:              int(c.UnackedMessages),
		AvgMessagesPerEntry:          c.AvgMessagesPerEntry,
		BlockedConsumerOnUnackedMsgs: c.BlockedConsumerOnUnackedMsgs,
		Address:                      c.Address,
		ConnectedSince:               c.ConnectedSince,
		ClientVersion:                c.ClientVersion,
		LastAckedTimestamp:           c.LastAckedTimestamp,
		LastConsumedTimestamp:        c.LastConsumedTimestamp,
		LastConsumedFlowTimestamp:    c.LastConsumedFlowTimestamp,
		Metadata:                     c.Metadata,
	}
}

func adminReplicatorStats(r broker.ReplicatorStats) adminapi.ReplicatorStats {
	return adminapi.ReplicatorStats{
		MsgRateIn:                 r.MsgRateIn,
		MsgThroughputIn:           r.MsgThroughputIn,
		MsgRateOut:                r.MsgRateOut,
		MsgThroughputOut:          r.MsgThroughputOut,
		MsgRateExpired:            r.MsgRateExpired,
		ReplicationBacklog:        r.ReplicationBacklog,
		Connected:                 r.Connected,
		ReplicationDelayInSeconds: r.ReplicationDelayInSeconds,
		InboundConnection:         r.InboundConnection,
		InboundConnectedSince:     r.InboundConnectedSince,
		OutboundConnection:        r.OutboundConnection,
		OutboundConnectedSince:    r.OutboundConnectedSince,
	}
}

func adminInternalStats(s broker.InternalStats) adminapi.PersistentTopicInternalStats {
	out := adminapi.PersistentTopicInternalStats{
		EntriesAddedCounter:    s.EntriesAddedCounter,
		NumberOfEntries:        s.NumberOfEntries,
		TotalSize:              s.TotalSize,
		CurrentLedgerEntries:   s.CurrentLedgerEntries,
		CurrentLedgerSize:      s.CurrentLedgerSize,
		LastConfirmedEntry:     s.LastConfirmedEntry,
		State:                  s.State,
		PendingAddEntriesCount: s.PendingAddEntries,
	}
	if s.Ledgers != nil {
		out.Ledgers = make([]adminapi.LedgerInfo, len(s.Ledgers))
		for i, l := range s.Ledgers {
			out.Ledgers[i] = adminapi.LedgerInfo{LedgerID: l.LedgerID, Entries: l.Entries, Size: l.Size, Timestamp: l.Timestamp}
		}
	}
	if s.Cursors != nil {
		out.Cursors = make(map[string]adminapi.CursorStats, len(s.Cursors))
		for name, c := range s.Cursors {
			out.Cursors[name] = adminapi.CursorStats{
				MarkDeletePosition:                       c.MarkDeletePosition,
				ReadPosition:                             c.ReadPosition,
				MessagesConsumedCounter:                  c.MessagesConsumed,
				State:                                    c.State,
				NumberOfEntriesSinceFirstNotAckedMessage: c.Backlog,
				Properties:                               c.Properties,
			}
		}
	}
	return out
}
