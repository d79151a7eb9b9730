package admin

import (
	"context"
	"errors"
	"maps"
	"math"
	"net/http"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
)

func (h *Handler) topicRoutes() {
	for _, domain := range []string{string(naming.Persistent), string(naming.NonPersistent)} {
		nsPath := "/admin/v2/" + domain + "/{tenant}/{namespace}"
		base := nsPath + "/{topic}"
		dom := naming.Domain(domain)
		h.handle("GET "+nsPath, readEndpoint(h.existingNamespace, func(r *http.Request, ns naming.NamespaceName) ([]string, error) {
			return h.listTopics(r.Context(), ns.String(), dom)
		}))
		h.handle("GET "+nsPath+"/partitioned", readEndpoint(h.existingNamespace, func(r *http.Request, ns naming.NamespaceName) ([]string, error) {
			out := []string{}
			for _, t := range h.cat.PartitionedTopics(ns.String()) {
				if strings.HasPrefix(t, domain+"://") {
					out = append(out, t)
				}
			}
			return out, nil
		}))
		h.handle("PUT "+base, writeEndpoint(h.topicFromPath, h.topicCreate))
		h.handle("DELETE "+base, writeEndpoint(h.topicInExistingNamespace, h.topicDelete))
		h.handle("PUT "+base+"/partitions", writeEndpoint(h.topicFromPath, h.partitionedCreate))
		h.handle("POST "+base+"/partitions", writeEndpoint(h.topicFromPath, h.partitionedUpdate))
		h.handle("GET "+base+"/partitions", readEndpoint(h.topicInExistingNamespace, h.partitionedMetadata))
		h.handle("DELETE "+base+"/partitions", writeEndpoint(h.topicInExistingNamespace, h.partitionedDelete))
		h.handle("GET "+base+"/stats", readEndpoint(h.topicCallOf, func(r *http.Request, c topicCall) (adminapi.TopicStats, error) {
			st, err := c.svc.TopicStats(r.Context(), c.topic.String(), statsOptions(r))
			normalizeStats(&st)
			return st, err
		}))
		h.handle("GET "+base+"/partitioned-stats", readEndpoint(h.topicInExistingNamespace, h.partitionedStats))
		h.handle("GET "+base+"/internalStats", readEndpoint(h.topicCallOf, topicInternalStats))
		h.handle("GET "+base+"/partitioned-internalStats", readEndpoint(h.topicInExistingNamespace, h.partitionedInternalStats))
		h.handle("GET "+base+"/internal-info", readEndpoint(h.topicCallOf, topicInternalInfo))
		h.handle("GET "+base+"/lastMessageId", readEndpoint(h.topicCallOf, func(r *http.Request, c topicCall) (adminapi.MessageID, error) {
			return c.svc.LastMessageID(r.Context(), c.topic.String())
		}))
		h.handle("GET "+base+"/messageid/{timestamp}", readEndpoint(h.topicFromPath, h.topicMessageIDByTime))
		h.handle("PUT "+base+"/unload", writeEndpoint(h.topicOpOf, func(r *http.Request, op topicOp) error {
			return op.each(r.Context(), op.svc.Unload)
		}))
		h.handle("POST "+base+"/terminate", readEndpoint(h.topicInExistingNamespace, h.topicTerminate))
		h.handle("GET "+base+"/properties", readEndpoint(h.existingTopic, h.topicPropertiesGet))
		h.handle("PUT "+base+"/properties", writeEndpoint(h.topicFromPath, h.topicPropertiesUpdate))
		h.handle("DELETE "+base+"/properties", writeEndpoint(h.topicFromPath, h.topicPropertiesRemove))
		h.subscriptionRoutes(base)
		h.translateRoutes(base)
		for _, pol := range topicPolicies(h.cfg.Cluster) {
			h.registerTopicPolicy(base, pol)
		}
	}
}

// topicFromPath builds the topic name from {domain}/{tenant}/{namespace}/{topic}.
func (h *Handler) topicFromPath(r *http.Request) (naming.TopicName, error) {
	domain := naming.Persistent
	if strings.HasPrefix(r.URL.Path, "/admin/v2/non-persistent/") || strings.HasPrefix(r.URL.Path, "/lookup/v2/topic/non-persistent/") ||
		strings.HasPrefix(r.URL.Path, "/lookup/v2/destination/non-persistent/") {
		domain = naming.NonPersistent
	}
	t, err := naming.ParseTopic(string(domain) + "://" + r.PathValue("tenant") + "/" + r.PathValue("namespace") + "/" + r.PathValue("topic"))
	if err != nil {
		return t, fail(http.StatusPreconditionFailed, "Topic name is not valid: %v", err)
	}
	return t, nil
}

// topicInExistingNamespace is topicFromPath followed by requireTopicNamespace, the start of most
// topic endpoints.
func (h *Handler) topicInExistingNamespace(r *http.Request) (naming.TopicName, error) {
	t, err := h.topicFromPath(r)
	if err != nil {
		return t, err
	}
	return t, h.requireTopicNamespace(t)
}

func (h *Handler) requireTopicNamespace(t naming.TopicName) error {
	if _, found := h.cat.Tenant(t.Tenant); !found {
		return fail(http.StatusNotFound, "Tenant does not exist")
	}
	// Existence only: the shared view avoids deep-copying the namespace's policies.
	if _, found := h.cat.NamespaceShared(t.NamespaceName().String()); !found {
		return fail(http.StatusNotFound, "Namespace does not exist")
	}
	return nil
}

func (h *Handler) topics() (TopicService, error) {
	if h.cfg.Topics == nil {
		return nil, fail(http.StatusServiceUnavailable, "Topic service not available")
	}
	return h.cfg.Topics, nil
}

// topicExists reports whether t exists as a partitioned topic or in the broker.
func (h *Handler) topicExists(ctx context.Context, t naming.TopicName) (bool, error) {
	if _, found := h.cat.PartitionedTopic(t.Base().String()); found {
		return true, nil
	}
	if h.cfg.Topics == nil {
		return false, nil
	}
	list, err := h.topicsOfNamespace(ctx, t.NamespaceName().String())
	if err != nil {
		return false, err
	}
	for _, x := range list {
		if x == t.String() {
			return true, nil
		}
	}
	return false, nil
}

// requireExistingTopic: namespace exists and the topic (or its partitioned parent) exists.
func (h *Handler) requireExistingTopic(r *http.Request, t naming.TopicName) error {
	if err := h.requireTopicNamespace(t); err != nil {
		return err
	}
	exists, err := h.topicExists(r.Context(), t)
	if err != nil {
		return err
	}
	if !exists {
		return fail(http.StatusNotFound, "Topic not found")
	}
	return nil
}

// partitionsOf returns the partition names of t when t is a partitioned topic, or nil.
func (h *Handler) partitionsOf(t naming.TopicName) []naming.TopicName {
	if t.IsPartition() {
		return nil
	}
	meta, found := h.cat.PartitionedTopic(t.String())
	if !found {
		return nil
	}
	out := make([]naming.TopicName, meta.Partitions)
	for i := range out {
		out[i] = t.Partition(i)
	}
	return out
}

func (h *Handler) topicCreate(r *http.Request, t naming.TopicName) error {
	var props map[string]string
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(string(b)); s != "" && s != "null" {
		if err := decodeBytes(b, &props); err != nil {
			return err
		}
	}
	if err := checkTopicProperties(props); err != nil {
		return err
	}
	if err := h.requireTopicNamespace(t); err != nil {
		return err
	}
	if _, found := h.cat.PartitionedTopic(t.String()); found && !t.IsPartition() {
		return fail(http.StatusConflict, "This topic already exists")
	}
	svc, err := h.topics()
	if err != nil {
		return err
	}
	if err := svc.CreateTopic(r.Context(), t.String(), props); err != nil {
		return err
	}
	if len(props) == 0 {
		return nil
	}
	return h.cat.UpdateTopicPolicies(r.Context(), t.String(), func(tp *adminapi.TopicPolicies) error {
		tp.Properties = props
		return nil
	})
}

func (h *Handler) topicDelete(r *http.Request, t naming.TopicName) error {
	if _, found := h.cat.PartitionedTopic(t.String()); found && !t.IsPartition() {
		return fail(http.StatusConflict, "%s is a partitioned topic; delete it with DELETE .../partitions", t)
	}
	svc, err := h.topics()
	if err != nil {
		return err
	}
	if err := svc.DeleteTopic(r.Context(), t.String(), queryBool(r, "force")); err != nil {
		return err
	}
	if !t.IsPartition() {
		if err := h.cat.DeleteTopicPolicies(r.Context(), t.String()); err != nil && !catalog.IsKind(err, catalog.ErrNotFound) {
			return err
		}
	}
	return nil
}

// decodePartitions accepts a bare integer (the client test suite, `POST .../partitions`) or
// {"partitions": N, "properties": {...}} (pulsaradmin).
func decodePartitions(b []byte) (int, map[string]string, error) {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil, fail(http.StatusBadRequest, "Request body is empty; the number of partitions is required")
	}
	if s[0] == '{' {
		var m adminapi.PartitionedTopicMetadata
		if err := decodeBytes(b, &m); err != nil {
			return 0, nil, err
		}
		return m.Partitions, m.Properties, nil
	}
	n, err := decodeValue[int](b)
	return n, nil, err
}

func (h *Handler) partitionedCreate(r *http.Request, t naming.TopicName) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	n, props, err := decodePartitions(b)
	if err != nil {
		return err
	}
	if n < 1 || n > catalog.MaxPartitions {
		return fail(http.StatusPreconditionFailed, "Number of partitions should be more than 0 and at most %d", catalog.MaxPartitions)
	}
	if err := checkPartitionNames(t, n); err != nil {
		return err
	}
	if err := checkTopicProperties(props); err != nil {
		return err
	}
	if err := h.requireTopicNamespace(t); err != nil {
		return err
	}
	if t.IsPartition() {
		return fail(http.StatusPreconditionFailed, "Partitioned Topic Name should not contain '-partition-'")
	}
	if h.cfg.Topics != nil {
		list, err := h.topicsOfNamespace(r.Context(), t.NamespaceName().String())
		if err != nil {
			return err
		}
		for _, x := range list {
			if x == t.String() {
				return fail(http.StatusConflict, "This topic already exists")
			}
		}
	}
	if err := h.cat.CreatePartitionedTopic(r.Context(), t.String(), n, props); err != nil {
		return err
	}
	if err := h.createPartitions(r.Context(), t, 0, n); err != nil {
		// Nothing half-written: without its partitions the metadata goes too.
		if derr := h.cat.DeletePartitionedTopic(context.WithoutCancel(r.Context()), t.String()); derr != nil {
			h.log.Error("rolling back a partitioned topic failed", "topic", t.String(), "err", derr)
		}
		return err
	}
	return nil
}

// checkPartitionNames refuses a partition count whose partition names would not be valid topic
// names (the "-partition-N" suffix makes them longer than the partitioned topic's name).
func checkPartitionNames(t naming.TopicName, n int) error {
	if _, err := naming.ParseTopic(t.Partition(n - 1).String()); err != nil {
		return fail(http.StatusPreconditionFailed, "Topic name is not valid for %d partitions: %v", n, err)
	}
	return nil
}

// createPartitions creates partitions [from, to) in the broker (existing ones are fine). On failure
// it deletes the partitions it created, so the caller can roll the metadata back to a whole state.
func (h *Handler) createPartitions(ctx context.Context, t naming.TopicName, from, to int) error {
	if h.cfg.Topics == nil {
		return nil
	}
	var created []string
	for i := from; i < to; i++ {
		p := t.Partition(i).String()
		err := h.cfg.Topics.CreateTopic(ctx, p, nil)
		if err == nil {
			created = append(created, p)
			continue
		}
		if errors.Is(err, ErrTopicExists) {
			continue
		}
		cleanup := context.WithoutCancel(ctx)
		for _, c := range created {
			if derr := h.cfg.Topics.DeleteTopic(cleanup, c, true); derr != nil && !errors.Is(derr, ErrTopicNotFound) {
				h.log.Error("removing a partition after a failed creation", "topic", c, "err", derr)
			}
		}
		return err
	}
	return nil
}

func (h *Handler) partitionedUpdate(r *http.Request, t naming.TopicName) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	n, _, err := decodePartitions(b)
	if err != nil {
		return err
	}
	if err := h.requireTopicNamespace(t); err != nil {
		return err
	}
	before, found := h.cat.PartitionedTopic(t.String())
	if !found {
		return fail(http.StatusNotFound, "Partitioned topic does not exist")
	}
	if n > before.Partitions {
		if err := checkPartitionNames(t, n); err != nil {
			return err
		}
	}
	if err := h.cat.UpdatePartitionedTopic(r.Context(), t.String(), n); err != nil {
		return err
	}
	if err := h.createPartitions(r.Context(), t, before.Partitions, n); err != nil {
		// Back to the old count, so metadata never names partitions that do not exist.
		if rerr := h.cat.UpdatePartitionedTopicWith(context.WithoutCancel(r.Context()), t.String(), func(m *adminapi.PartitionedTopicMetadata) error {
			m.Partitions = before.Partitions
			return nil
		}); rerr != nil {
			h.log.Error("rolling back a partition count failed", "topic", t.String(), "err", rerr)
		}
		return err
	}
	return nil
}

func (h *Handler) partitionedMetadata(r *http.Request, t naming.TopicName) (adminapi.PartitionedTopicMetadata, error) {
	if meta, found := h.cat.PartitionedTopic(t.String()); found && !t.IsPartition() {
		return adminapi.PartitionedTopicMetadata{Partitions: meta.Partitions, Properties: meta.Properties}, nil
	}
	if queryBool(r, "checkAllowAutoCreation") && !t.IsPartition() {
		// Pulsar creates the partitioned metadata on this lookup when the namespace auto-creates
		// partitioned topics and the topic does not exist yet.
		p, _ := h.cat.Namespace(t.NamespaceName().String())
		if o := p.AutoTopicCreationOverride; o != nil && o.AllowAutoTopicCreation && o.TopicType == adminapi.TopicTypePartitioned && o.DefaultNumPartitions != nil {
			exists, err := h.topicExists(r.Context(), t)
			if err != nil {
				return adminapi.PartitionedTopicMetadata{}, err
			}
			if !exists {
				err := h.cat.CreatePartitionedTopic(r.Context(), t.String(), *o.DefaultNumPartitions, nil)
				if err != nil && !catalog.IsKind(err, catalog.ErrAlreadyExists) {
					return adminapi.PartitionedTopicMetadata{}, err
				}
				meta, _ := h.cat.PartitionedTopic(t.String())
				return adminapi.PartitionedTopicMetadata{Partitions: meta.Partitions}, nil
			}
		}
	}
	return adminapi.PartitionedTopicMetadata{Partitions: 0}, nil
}

func (h *Handler) partitionedDelete(r *http.Request, t naming.TopicName) error {
	parts := h.partitionsOf(t)
	if parts == nil {
		return fail(http.StatusNotFound, "Partitioned topic does not exist")
	}
	force := queryBool(r, "force")
	if h.cfg.Topics != nil {
		if !force {
			// Check every partition before deleting any, so a refusal leaves the topic whole.
			for _, p := range parts {
				st, err := h.cfg.Topics.TopicStats(r.Context(), p.String(), adminapi.GetStatsOptions{})
				if errors.Is(err, ErrTopicNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				if inUse(st) {
					return fail(http.StatusPreconditionFailed, "Topic has active producers/subscriptions")
				}
			}
		}
		for _, p := range parts {
			if err := h.cfg.Topics.DeleteTopic(r.Context(), p.String(), force); err != nil && !errors.Is(err, ErrTopicNotFound) {
				return err
			}
		}
	}
	return h.cat.DeletePartitionedTopic(r.Context(), t.String())
}

// inUse reports whether a topic has connected producers or consumers.
func inUse(st adminapi.TopicStats) bool {
	if len(st.Publishers) > 0 {
		return true
	}
	for _, s := range st.Subscriptions {
		if len(s.Consumers) > 0 {
			return true
		}
	}
	return false
}

func statsOptions(r *http.Request) adminapi.GetStatsOptions {
	return adminapi.GetStatsOptions{
		GetPreciseBacklog:        queryBool(r, "getPreciseBacklog"),
		SubscriptionBacklogSize:  queryBool(r, "subscriptionBacklogSize"),
		GetEarliestTimeInBacklog: queryBool(r, "getEarliestTimeInBacklog"),
		ExcludePublishers:        queryBool(r, "excludePublishers"),
		ExcludeConsumers:         queryBool(r, "excludeConsumers"),
	}
}

// normalizeStats turns absent lists and maps into empty ones, as Pulsar answers them (pulsaradmin's
// tests compare e.g. subscriptionProperties with an empty map, not null).
func normalizeStats(st *adminapi.TopicStats) {
	if st.Publishers == nil {
		st.Publishers = []adminapi.PublisherStats{}
	}
	for i := range st.Publishers {
		if st.Publishers[i].Metadata == nil {
			st.Publishers[i].Metadata = map[string]string{}
		}
	}
	if st.Subscriptions == nil {
		st.Subscriptions = map[string]adminapi.SubscriptionStats{}
	}
	for name, s := range st.Subscriptions {
		if s.Consumers == nil {
			s.Consumers = []adminapi.ConsumerStats{}
		}
		for i := range s.Consumers {
			if s.Consumers[i].Metadata == nil {
				s.Consumers[i].Metadata = map[string]string{}
			}
		}
		if s.ConsumersAfterMarkDeletePosition == nil {
			s.ConsumersAfterMarkDeletePosition = map[string]string{}
		}
		if s.SubscriptionProperties == nil {
			s.SubscriptionProperties = map[string]string{}
		}
		st.Subscriptions[name] = s
	}
	if st.Replication == nil {
		st.Replication = map[string]adminapi.ReplicatorStats{}
	}
}

func (h *Handler) partitionedStats(r *http.Request, t naming.TopicName) (adminapi.PartitionedTopicStats, error) {
	meta, found := h.cat.PartitionedTopic(t.String())
	if !found || t.IsPartition() {
		return adminapi.PartitionedTopicStats{}, fail(http.StatusNotFound, "Partitioned Topic not found: %s", t)
	}
	svc, err := h.topics()
	if err != nil {
		return adminapi.PartitionedTopicStats{}, err
	}
	perPartition := r.URL.Query().Get("perPartition") == "" || queryBool(r, "perPartition")
	agg := adminapi.PartitionedTopicStats{
		Metadata:               adminapi.PartitionedTopicMetadata{Partitions: meta.Partitions},
		Publishers:             []adminapi.PublisherStats{},
		Subscriptions:          map[string]adminapi.SubscriptionStats{},
		Replication:            map[string]adminapi.ReplicatorStats{},
		Partitions:             map[string]adminapi.TopicStats{},
		TopicCreationTimeStamp: meta.CreationTimestamp,
	}
	for _, p := range h.partitionsOf(t) {
		st, err := svc.TopicStats(r.Context(), p.String(), statsOptions(r))
		if errors.Is(err, ErrTopicNotFound) {
			continue
		}
		if err != nil {
			return adminapi.PartitionedTopicStats{}, err
		}
		normalizeStats(&st)
		aggregate(&agg, st)
		if perPartition {
			agg.Partitions[p.String()] = st
		}
	}
	if agg.MsgInCounter > 0 {
		agg.AverageMsgSize = float64(agg.BytesInCounter) / float64(agg.MsgInCounter)
	}
	return agg, nil
}

// aggregate folds one partition's stats into a partitioned topic's: sums of rates, counters and
// sizes; subscriptions and replication merged by name.
func aggregate(agg *adminapi.PartitionedTopicStats, st adminapi.TopicStats) {
	agg.MsgRateIn += st.MsgRateIn
	agg.MsgThroughputIn += st.MsgThroughputIn
	agg.MsgRateOut += st.MsgRateOut
	agg.MsgThroughputOut += st.MsgThroughputOut
	agg.BytesInCounter += st.BytesInCounter
	agg.MsgInCounter += st.MsgInCounter
	agg.BytesOutCounter += st.BytesOutCounter
	agg.MsgOutCounter += st.MsgOutCounter
	agg.StorageSize += st.StorageSize
	agg.BacklogSize += st.BacklogSize
	agg.Publishers = append(agg.Publishers, st.Publishers...)
	if agg.DeduplicationStatus == "" {
		agg.DeduplicationStatus = st.DeduplicationStatus
	}
	if agg.TopicCreationTimeStamp == 0 || (st.TopicCreationTimeStamp > 0 && st.TopicCreationTimeStamp < agg.TopicCreationTimeStamp) {
		agg.TopicCreationTimeStamp = st.TopicCreationTimeStamp
	}
	agg.LastPublishTimeStamp = max(agg.LastPublishTimeStamp, st.LastPublishTimeStamp)
	for name, s := range st.Subscriptions {
		a, seen := agg.Subscriptions[name]
		if !seen {
			a = s
			a.Consumers = append([]adminapi.ConsumerStats(nil), s.Consumers...)
		} else {
			a.MsgRateOut += s.MsgRateOut
			a.MsgThroughputOut += s.MsgThroughputOut
			a.BytesOutCounter += s.BytesOutCounter
			a.MsgOutCounter += s.MsgOutCounter
			a.MsgRateRedeliver += s.MsgRateRedeliver
			a.MessageAckRate += s.MessageAckRate
			a.MsgBacklog += s.MsgBacklog
			a.BacklogSize += s.BacklogSize
			a.MsgBacklogNoDelayed += s.MsgBacklogNoDelayed
			a.MsgDelayed += s.MsgDelayed
			a.UnackedMessages += s.UnackedMessages
			a.MsgRateExpired += s.MsgRateExpired
			a.TotalMsgExpired += s.TotalMsgExpired
			a.Consumers = append(a.Consumers, s.Consumers...)
			a.LastConsumedTimestamp = max(a.LastConsumedTimestamp, s.LastConsumedTimestamp)
			a.LastAckedTimestamp = max(a.LastAckedTimestamp, s.LastAckedTimestamp)
		}
		agg.Subscriptions[name] = a
	}
	for name, s := range st.Replication {
		a, seen := agg.Replication[name]
		if !seen {
			agg.Replication[name] = s
			continue
		}
		a.MsgRateIn += s.MsgRateIn
		a.MsgThroughputIn += s.MsgThroughputIn
		a.MsgRateOut += s.MsgRateOut
		a.MsgThroughputOut += s.MsgThroughputOut
		a.MsgRateExpired += s.MsgRateExpired
		a.ReplicationBacklog += s.ReplicationBacklog
		a.ReplicationBacklogBytes += s.ReplicationBacklogBytes
		a.MsgOutCounter += s.MsgOutCounter
		a.BytesOutCounter += s.BytesOutCounter
		a.MsgInCounter += s.MsgInCounter
		a.BytesInCounter += s.BytesInCounter
		a.Connected = a.Connected && s.Connected
		a.ReplicationDelayInSeconds = max(a.ReplicationDelayInSeconds, s.ReplicationDelayInSeconds)
		a.LastProgressTimestamp = min(a.LastProgressTimestamp, s.LastProgressTimestamp)
		if a.LastError == "" {
			a.LastError, a.LastErrorTimestamp = s.LastError, s.LastErrorTimestamp
		}
		agg.Replication[name] = a
	}
	for src, s := range st.InboundReplication {
		if agg.InboundReplication == nil {
			agg.InboundReplication = map[string]adminapi.InboundReplicationStats{}
		}
		a, seen := agg.InboundReplication[src]
		if !seen {
			agg.InboundReplication[src] = s
			continue
		}
		a.MsgRateIn += s.MsgRateIn
		a.MsgThroughputIn += s.MsgThroughputIn
		agg.InboundReplication[src] = a
	}
}

func topicInternalStats(r *http.Request, c topicCall) (adminapi.PersistentTopicInternalStats, error) {
	st, err := c.svc.InternalStats(r.Context(), c.topic.String())
	normalizeInternalStats(&st)
	return st, err
}

// normalizeInternalStats answers empty lists and maps as [] and {}, as Pulsar does.
func normalizeInternalStats(st *adminapi.PersistentTopicInternalStats) {
	if st.Ledgers == nil {
		st.Ledgers = []adminapi.LedgerInfo{}
	}
	if st.Cursors == nil {
		st.Cursors = map[string]adminapi.CursorStats{}
	}
}

// partitionedInternalStats answers every partition's internal stats (partitions not created yet
// are left out); in a cluster of several brokers each comes from the partition's owner.
func (h *Handler) partitionedInternalStats(r *http.Request, t naming.TopicName) (adminapi.PartitionedTopicInternalStats, error) {
	meta, found := h.cat.PartitionedTopic(t.String())
	if !found || t.IsPartition() {
		return adminapi.PartitionedTopicInternalStats{}, fail(http.StatusNotFound, "Partitioned Topic not found: %s", t)
	}
	svc, err := h.topics()
	if err != nil {
		return adminapi.PartitionedTopicInternalStats{}, err
	}
	out := adminapi.PartitionedTopicInternalStats{
		Metadata:   adminapi.PartitionedTopicMetadata{Partitions: meta.Partitions},
		Partitions: map[string]adminapi.PersistentTopicInternalStats{},
	}
	for _, p := range h.partitionsOf(t) {
		st, err := svc.InternalStats(r.Context(), p.String())
		if errors.Is(err, ErrTopicNotFound) {
			continue
		}
		if err != nil {
			return adminapi.PartitionedTopicInternalStats{}, err
		}
		normalizeInternalStats(&st)
		out.Partitions[p.String()] = st
	}
	return out, nil
}

func (h *Handler) topicMessageIDByTime(r *http.Request, t naming.TopicName) (adminapi.MessageID, error) {
	ts, err := pathInt(r, "timestamp", math.MinInt64, math.MaxInt64, http.StatusBadRequest, "Invalid timestamp %q")
	if err != nil {
		return adminapi.MessageID{}, err
	}
	if err := h.requireTopicNamespace(t); err != nil {
		return adminapi.MessageID{}, err
	}
	svc, err := h.topics()
	if err != nil {
		return adminapi.MessageID{}, err
	}
	return svc.MessageIDByTimestamp(r.Context(), t.String(), ts)
}

func (h *Handler) topicTerminate(r *http.Request, t naming.TopicName) (adminapi.MessageID, error) {
	if h.partitionsOf(t) != nil {
		return adminapi.MessageID{}, fail(http.StatusMethodNotAllowed, "Termination of a partitioned topic is not allowed")
	}
	svc, err := h.topics()
	if err != nil {
		return adminapi.MessageID{}, err
	}
	term, supported := svc.(TopicTerminator)
	if !supported {
		return adminapi.MessageID{}, fail(http.StatusNotImplemented, "Operation not supported: terminate")
	}
	return term.Terminate(r.Context(), t.String())
}

// ---- properties: partitioned topics keep them in their metadata, others in the topic policies ----

// existingTopic resolves the path's topic and checks that it (or its partitioned topic) exists.
func (h *Handler) existingTopic(r *http.Request) (naming.TopicName, error) {
	t, err := h.topicFromPath(r)
	if err != nil {
		return t, err
	}
	return t, h.requireExistingTopic(r, t)
}

func (h *Handler) topicPropertiesGet(_ *http.Request, t naming.TopicName) (map[string]string, error) {
	props := map[string]string{}
	if meta, found := h.cat.PartitionedTopic(t.Base().String()); found {
		if meta.Properties != nil {
			props = meta.Properties
		}
		return props, nil
	}
	if tp, _ := h.cat.TopicPolicies(t.String()); tp.Properties != nil {
		props = tp.Properties
	}
	return props, nil
}

func (h *Handler) updateTopicProperties(r *http.Request, t naming.TopicName, fn func(map[string]string) error) error {
	if _, found := h.cat.PartitionedTopic(t.Base().String()); found {
		return h.cat.UpdatePartitionedTopicWith(r.Context(), t.Base().String(), func(m *adminapi.PartitionedTopicMetadata) error {
			if m.Properties == nil {
				m.Properties = map[string]string{}
			}
			return fn(m.Properties)
		})
	}
	return h.cat.UpdateTopicPolicies(r.Context(), t.String(), func(tp *adminapi.TopicPolicies) error {
		if tp.Properties == nil {
			tp.Properties = map[string]string{}
		}
		if err := fn(tp.Properties); err != nil {
			return err
		}
		if len(tp.Properties) == 0 {
			tp.Properties = nil
		}
		return nil
	})
}

func (h *Handler) topicPropertiesUpdate(r *http.Request, t naming.TopicName) error {
	var props map[string]string
	if err := decodeBody(r, &props); err != nil {
		return err
	}
	if err := h.requireExistingTopic(r, t); err != nil {
		return err
	}
	return h.updateTopicProperties(r, t, func(m map[string]string) error {
		merged := maps.Clone(m)
		maps.Copy(merged, props)
		if err := checkTopicProperties(merged); err != nil {
			return err
		}
		maps.Copy(m, props)
		return nil
	})
}

// checkTopicProperties holds a topic's properties to the limits of subscription properties
// (docs/admin.md): they are stored in one metadata value with the topic's policies or partitioned
// metadata.
func checkTopicProperties(props map[string]string) error {
	if err := wire.CheckProperties("topic", props); err != nil {
		return fail(http.StatusPreconditionFailed, "Invalid topic properties: %v", err)
	}
	return nil
}

func (h *Handler) topicPropertiesRemove(r *http.Request, t naming.TopicName) error {
	key := r.URL.Query().Get("key")
	if key == "" {
		return fail(http.StatusBadRequest, "Query parameter key is required")
	}
	if err := h.requireExistingTopic(r, t); err != nil {
		return err
	}
	return h.updateTopicProperties(r, t, func(m map[string]string) error {
		delete(m, key)
		return nil
	})
}
