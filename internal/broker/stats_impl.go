package broker

import (
	"maps"
	"slices"
	"time"
)

// sampleRates updates the topic's, producers', subscriptions' and consumers' rates.
func (t *topicState) sampleRates(now time.Time) {
	if tr := t.traffic.Load(); tr != nil { // else no message yet: every rate is zero
		tr.rateIn.sample(tr.msgIn.Load(), now)
		tr.rateBytesIn.sample(tr.bytesIn.Load(), now)
		tr.rateOut.sample(tr.msgOut.Load(), now)
		tr.rateBytesOut.sample(tr.bytesOut.Load(), now)
		tr.writes.sample(now)
	}
	t.mu.Lock()
	ps := make([]*producerState, 0, len(t.producers))
	for _, p := range t.producers {
		ps = append(ps, p)
	}
	subs := make([]*subscriptionState, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, p := range ps {
		p.rateIn.sample(p.msgIn.Load(), now)
		p.rateBytesIn.sample(p.bytesIn.Load(), now)
		p.rateChunks.sample(p.chunksIn.Load(), now)
	}
	for _, s := range subs {
		s.rateOut.sample(s.msgOut.Load(), now)
		s.rateBytesOut.sample(s.bytesOut.Load(), now)
		s.rateExpired.sample(s.msgExpired.Load(), now)
		s.mu.Lock()
		cs := slices.Clone(s.consumers)
		s.mu.Unlock()
		for _, c := range cs {
			c.rateOut.sample(c.msgOut.Load(), now)
			c.rateBytesOut.sample(c.bytesOut.Load(), now)
			c.rateRedeliver.sample(c.msgRedeliver.Load(), now)
			c.rateAck.sample(c.msgAcked.Load(), now)
		}
	}
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// stats implements Topic.Stats.
func (t *topicState) stats() TopicStats {
	tr := t.traffic.Load()
	if tr == nil {
		tr = &topicTraffic{} // no message yet
	}
	st := TopicStats{
		MsgRateIn:              tr.rateIn.value(),
		MsgThroughputIn:        tr.rateBytesIn.value(),
		MsgRateOut:             tr.rateOut.value(),
		MsgThroughputOut:       tr.rateBytesOut.value(),
		BytesInCounter:         tr.bytesIn.Load(),
		MsgInCounter:           tr.msgIn.Load(),
		BytesOutCounter:        tr.bytesOut.Load(),
		MsgOutCounter:          tr.msgOut.Load(),
		StorageSize:            t.storageSize(),
		Publishers:             []PublisherStats{},
		Subscriptions:          map[string]SubscriptionStats{},
		Replication:            map[string]ReplicatorStats{},
		DeduplicationStatus:    "Disabled",
		TopicCreationTimeStamp: time.Unix(0, t.createdNs).UnixMilli(),
		LastPublishTimeStamp:   tr.lastPublish.Load(),
	}
	if st.MsgRateIn > 0 {
		st.AverageMsgSize = st.MsgThroughputIn / st.MsgRateIn
	}
	if t.dedupEnabled() {
		st.DeduplicationStatus = "Enabled"
	}
	t.mu.Lock()
	ps := make([]*producerState, 0, len(t.producers))
	for _, p := range t.producers {
		ps = append(ps, p)
	}
	subs := make([]*subscriptionState, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	st.WaitingPublishers = len(t.waiting)
	if t.exclusive {
		e := t.topicEpoch
		st.TopicEpoch = &e
	}
	t.mu.Unlock()
	slices.SortFunc(ps, func(a, b *producerState) int { return a.connectedSince.Compare(b.connectedSince) })
	for _, p := range ps {
		ps := PublisherStats{
			AccessMode:         p.opts.AccessMode.String(),
			ProducerID:         p.id,
			ProducerName:       p.name,
			MsgRateIn:          p.rateIn.value(),
			MsgThroughputIn:    p.rateBytesIn.value(),
			ChunkedMessageRate: p.rateChunks.value(),
			Address:            p.opts.Address,
			ConnectedSince:     formatTime(p.connectedSince),
			ClientVersion:      p.opts.ClientVersion,
			Metadata:           maps.Clone(p.opts.Properties),
		}
		if ps.MsgRateIn > 0 {
			ps.AverageMsgSize = ps.MsgThroughputIn / ps.MsgRateIn
		}
		if ps.Metadata == nil {
			ps.Metadata = map[string]string{}
		}
		if p.chunksIn.Load() > 0 {
			st.MsgChunkPublished = true
		}
		st.Publishers = append(st.Publishers, ps)
	}
	for _, s := range subs {
		ss := s.stats()
		st.Subscriptions[s.name] = ss
		st.BacklogSize += ss.BacklogSize
	}
	return st
}

// stats returns one subscription's stats.
func (s *subscriptionState) stats() SubscriptionStats {
	var backlog int64
	if s.cursor != nil {
		backlog = s.cursor.Backlog()
	}
	ss := SubscriptionStats{
		MsgRateOut:                      s.rateOut.value(),
		MsgThroughputOut:                s.rateBytesOut.value(),
		BytesOutCounter:                 s.bytesOut.Load(),
		MsgOutCounter:                   s.msgOut.Load(),
		MsgBacklog:                      backlog,
		MsgBacklogNoDelayed:             backlog,
		IsDurable:                       s.durable,
		IsReplicated:                    s.isReplicated(),
		LastMarkDeleteAdvancedTimestamp: s.lastMarkDeleteMove.Load(),
		MsgRateExpired:                  s.rateExpired.value(),
		TotalMsgExpired:                 s.msgExpired.Load(),
		LastExpireTimestamp:             s.lastExpire.Load(),
		Consumers:                       []ConsumerStats{},
	}
	if s.cursor == nil {
		// non-persistent: no backlog
	} else if total := s.topic.ledger.Entries(); total > 0 {
		ss.BacklogSize = s.topic.ledger.Bytes() * backlog / total // estimate: average entry size
	}
	s.mu.Lock()
	ss.SubscriptionProperties = maps.Clone(s.props)
	ss.Type = s.d.subType.String()
	ss.BlockedSubscriptionOnUnackedMsgs = s.d.subscriptionBlocked()
	ss.MsgDelayed = int64(len(s.d.delayed))
	ss.MsgBacklogNoDelayed = max(backlog-ss.MsgDelayed, 0)
	if s.d.active != nil && s.d.active.owner != nil {
		ss.ActiveConsumerName = s.d.active.owner.name
	}
	cs := slices.Clone(s.consumers)
	for _, c := range cs {
		if k := c.opts.KeyShared; k != nil && k.AllowOutOfOrderDelivery {
			ss.AllowOutOfOrderDelivery = true
		}
	}
	unacked := make([]int64, len(cs))
	permits := make([]int64, len(cs))
	blocked := make([]bool, len(cs))
	for i, c := range cs {
		unacked[i] = c.dc.unacked
		permits[i] = c.dc.permits
		blocked[i] = s.d.blocked(c.dc)
	}
	s.mu.Unlock()
	if ss.SubscriptionProperties == nil {
		ss.SubscriptionProperties = map[string]string{}
	}
	for i, c := range cs {
		cst := ConsumerStats{
			ConsumerName:                 c.name,
			MsgRateOut:                   c.rateOut.value(),
			MsgThroughputOut:             c.rateBytesOut.value(),
			BytesOutCounter:              c.bytesOut.Load(),
			MsgOutCounter:                c.msgOut.Load(),
			MsgRateRedeliver:             c.rateRedeliver.value(),
			MessageAckRate:               c.rateAck.value(),
			AvailablePermits:             permits[i],
			BlockedConsumerOnUnackedMsgs: blocked[i],
			UnackedMessages:              unacked[i],
			Address:                      c.opts.Address,
			ConnectedSince:               formatTime(c.connectedSince),
			ClientVersion:                c.opts.ClientVersion,
			LastAckedTimestamp:           c.lastAcked.Load(),
			LastConsumedTimestamp:        c.lastConsumed.Load(),
			LastConsumedFlowTimestamp:    c.lastFlow.Load(),
			Metadata:                     maps.Clone(c.opts.Metadata),
		}
		if cst.Metadata == nil {
			cst.Metadata = map[string]string{}
		}
		if n := c.entriesOut.Load(); n > 0 {
			cst.AvgMessagesPerEntry = int(cst.MsgOutCounter / n)
		}
		ss.UnackedMessages += unacked[i]
		ss.MsgRateRedeliver += cst.MsgRateRedeliver
		ss.MessageAckRate += cst.MessageAckRate
		ss.LastAckedTimestamp = max(ss.LastAckedTimestamp, cst.LastAckedTimestamp)
		ss.LastConsumedTimestamp = max(ss.LastConsumedTimestamp, cst.LastConsumedTimestamp)
		ss.LastConsumedFlowTimestamp = max(ss.LastConsumedFlowTimestamp, cst.LastConsumedFlowTimestamp)
		ss.Consumers = append(ss.Consumers, cst)
	}
	return ss
}

// internalStats implements Topic.InternalStats.
func (t *topicState) storageSize() int64 {
	if t.nonPersistent() {
		return 0
	}
	return t.ledger.Bytes()
}

func (t *topicState) internalStats() InternalStats {
	if t.nonPersistent() {
		return InternalStats{LastConfirmedEntry: "-1:-1", State: "NonPersistent", Cursors: map[string]CursorStats{}}
	}
	lc := t.ledger.LastConfirmed()
	st := InternalStats{
		EntriesAddedCounter:  t.ledger.Entries(),
		NumberOfEntries:      t.ledger.Entries(),
		TotalSize:            t.ledger.Bytes(),
		CurrentLedgerEntries: max(lc.EntryID+1, 0),
		LastConfirmedEntry:   lc.String(),
		State:                "LedgerOpened",
		Cursors:              map[string]CursorStats{},
	}
	if err := t.ledger.Err(); err != nil {
		st.State = "Fenced"
	}
	segs := t.ledger.Segments()
	st.Ledgers = make([]LedgerInfo, 0, len(segs))
	for _, sg := range segs {
		st.Ledgers = append(st.Ledgers, LedgerInfo{LedgerID: sg.ID, Entries: sg.Entries, Size: sg.Bytes, Timestamp: sg.MaxTime})
	}
	if n := len(segs); n > 0 {
		st.CurrentLedgerSize = segs[n-1].Bytes
	}
	t.mu.Lock()
	subs := maps.Clone(t.subs)
	t.mu.Unlock()
	for _, c := range t.ledger.Cursors() {
		cs := CursorStats{
			MarkDeletePosition: c.MarkDeletePosition().String(),
			ReadPosition:       next(c.MarkDeletePosition()).String(),
			State:              "Open",
			Backlog:            c.Backlog(),
			Properties:         map[string]int64{},
		}
		if s := subs[c.Name()]; s != nil {
			s.mu.Lock()
			cs.ReadPosition = s.d.readPos.String()
			s.mu.Unlock()
			cs.MessagesConsumed = s.msgOut.Load()
		}
		st.Cursors[c.Name()] = cs
	}
	return st
}
