package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/naming"
)

func (h *Handler) topicRoutes() {
	for _, domain := range []string{string(naming.Persistent), string(naming.NonPersistent)} {
		nsPath := "/admin/v2/" + domain + "/{tenant}/{namespace}"
		base := nsPath + "/{topic}"
		dom := naming.Domain(domain)
		h.handle("GET "+nsPath, func(w http.ResponseWriter, r *http.Request) error {
			ns, err := h.existingNamespace(r)
			if err != nil {
				return err
			}
			list, err := h.listTopics(r.Context(), ns.String(), dom)
			if err != nil {
				return err
			}
			return ok(w, list)
		})
		h.handle("GET "+nsPath+"/partitioned", func(w http.ResponseWriter, r *http.Request) error {
			ns, err := h.existingNamespace(r)
			if err != nil {
				return err
			}
			out := []string{}
			for _, t := range h.cat.PartitionedTopics(ns.String()) {
				if strings.HasPrefix(t, domain+"://") {
					out = append(out, t)
				}
			}
			return ok(w, out)
		})
		h.handle("PUT "+base, h.topicCreate)
		h.handle("DELETE "+base, h.topicDelete)
		h.handle("PUT "+base+"/partitions", h.partitionedCreate)
		h.handle("POST "+base+"/partitions", h.partitionedUpdate)
		h.handle("GET "+base+"/partitions", h.partitionedMetadata)
		h.handle("DELETE "+base+"/partitions", h.partitionedDelete)
		h.handle("GET "+base+"/stats", h.topicStats)
		h.handle("GET "+base+"/partitioned-stats", h.partitionedStats)
		h.handle("GET "+base+"/internalStats", h.topicInternalStats)
		h.handle("GET "+base+"/internal-info", h.topicInternalInfo)
		h.handle("GET "+base+"/lastMessageId", h.topicLastMessageID)
		h.handle("GET "+base+"/messageid/{timestamp}", h.topicMessageIDByTime)
		h.handle("PUT "+base+"/unload", h.topicUnload)
		h.handle("POST "+base+"/terminate", h.topicTerminate)
		h.handle("GET "+base+"/properties", h.topicPropertiesGet)
		h.handle("PUT "+base+"/properties", h.topicPropertiesUpdate)
		h.handle("DELETE "+base+"/properties", h.topicPropertiesRemove)
		h.handle("GET "+base+"/replication", h.topicReplicationGet)
		h.handle("POST "+base+"/replication", h.topicReplicationSet)
		h.handle("DELETE "+base+"/replication", h.topicReplicationRemove)
		h.handle("POST "+base+"/backlogQuota", h.topicBacklogQuotaSet)
		h.handle("DELETE "+base+"/backlogQuota", h.topicBacklogQuotaRemove)
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
	list, err := h.cfg.Topics.ListTopics(ctx, t.NamespaceName().String())
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

func (h *Handler) topicCreate(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
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
	if len(props) > 0 {
		if err := h.cat.UpdateTopicPolicies(r.Context(), t.String(), func(tp *adminapi.TopicPolicies) error {
			tp.Properties = props
			return nil
		}); err != nil {
			return err
		}
	}
	return noContent(w)
}

func (h *Handler) topicDelete(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
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
	return noContent(w)
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

func (h *Handler) partitionedCreate(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
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
	if err := h.requireTopicNamespace(t); err != nil {
		return err
	}
	if t.IsPartition() {
		return fail(http.StatusPreconditionFailed, "Partitioned Topic Name should not contain '-partition-'")
	}
	if h.cfg.Topics != nil {
		list, err := h.cfg.Topics.ListTopics(r.Context(), t.NamespaceName().String())
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
	return noContent(w)
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

func (h *Handler) partitionedUpdate(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
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
	return noContent(w)
}

func (h *Handler) partitionedMetadata(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
	if meta, found := h.cat.PartitionedTopic(t.String()); found && !t.IsPartition() {
		return ok(w, adminapi.PartitionedTopicMetadata{Partitions: meta.Partitions, Properties: meta.Properties})
	}
	if queryBool(r, "checkAllowAutoCreation") && !t.IsPartition() {
		// Pulsar creates the partitioned metadata on this lookup when the namespace auto-creates
		// partitioned topics and the topic does not exist yet.
		p, _ := h.cat.Namespace(t.NamespaceName().String())
		if o := p.AutoTopicCreationOverride; o != nil && o.AllowAutoTopicCreation && o.TopicType == adminapi.TopicTypePartitioned && o.DefaultNumPartitions != nil {
			exists, err := h.topicExists(r.Context(), t)
			if err != nil {
				return err
			}
			if !exists {
				err := h.cat.CreatePartitionedTopic(r.Context(), t.String(), *o.DefaultNumPartitions, nil)
				if err != nil && !catalog.IsKind(err, catalog.ErrAlreadyExists) {
					return err
				}
				meta, _ := h.cat.PartitionedTopic(t.String())
				return ok(w, adminapi.PartitionedTopicMetadata{Partitions: meta.Partitions})
			}
		}
	}
	return ok(w, adminapi.PartitionedTopicMetadata{Partitions: 0})
}

func (h *Handler) partitionedDelete(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
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
	if err := h.cat.DeletePartitionedTopic(r.Context(), t.String()); err != nil {
		return err
	}
	return noContent(w)
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

func (h *Handler) topicStats(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
	svc, err := h.topics()
	if err != nil {
		return err
	}
	st, err := svc.TopicStats(r.Context(), t.String(), statsOptions(r))
	if err != nil {
		return err
	}
	normalizeStats(&st)
	return ok(w, st)
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

func (h *Handler) partitionedStats(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
	meta, found := h.cat.PartitionedTopic(t.String())
	if !found || t.IsPartition() {
		return fail(http.StatusNotFound, "Partitioned Topic not found: %s", t)
	}
	svc, err := h.topics()
	if err != nil {
		return err
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
			return err
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
	return ok(w, agg)
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

func (h *Handler) topicInternalStats(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
	svc, err := h.topics()
	if err != nil {
		return err
	}
	st, err := svc.InternalStats(r.Context(), t.String())
	if err != nil {
		return err
	}
	if st.Ledgers == nil {
		st.Ledgers = []adminapi.LedgerInfo{}
	}
	if st.Cursors == nil {
		st.Cursors = map[string]adminapi.CursorStats{}
	}
	return ok(w, st)
}

func (h *Handler) topicLastMessageID(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
	svc, err := h.topics()
	if err != nil {
		return err
	}
	id, err := svc.LastMessageID(r.Context(), t.String())
	if err != nil {
		return err
	}
	return ok(w, id)
}

func (h *Handler) topicMessageIDByTime(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
	ts, err := strconv.ParseInt(r.PathValue("timestamp"), 10, 64)
	if err != nil {
		return fail(http.StatusBadRequest, "Invalid timestamp %q", r.PathValue("timestamp"))
	}
	if err := h.requireTopicNamespace(t); err != nil {
		return err
	}
	svc, err := h.topics()
	if err != nil {
		return err
	}
	id, err := svc.MessageIDByTimestamp(r.Context(), t.String(), ts)
	if err != nil {
		return err
	}
	return ok(w, id)
}

func (h *Handler) topicUnload(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
	svc, err := h.topics()
	if err != nil {
		return err
	}
	targets := h.partitionsOf(t)
	if targets == nil {
		targets = []naming.TopicName{t}
	}
	for _, p := range targets {
		if err := svc.Unload(r.Context(), p.String()); err != nil && !(len(targets) > 1 && errors.Is(err, ErrTopicNotFound)) {
			return err
		}
	}
	return noContent(w)
}

func (h *Handler) topicTerminate(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
	if h.partitionsOf(t) != nil {
		return fail(http.StatusMethodNotAllowed, "Termination of a partitioned topic is not allowed")
	}
	svc, err := h.topics()
	if err != nil {
		return err
	}
	term, supported := svc.(TopicTerminator)
	if !supported {
		return fail(http.StatusNotImplemented, "Operation not supported: terminate")
	}
	id, err := term.Terminate(r.Context(), t.String())
	if err != nil {
		return err
	}
	return ok(w, id)
}

// ---- properties: partitioned topics keep them in their metadata, others in the topic policies ----

func (h *Handler) topicPropertiesGet(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
	if err := h.requireExistingTopic(r, t); err != nil {
		return err
	}
	if meta, found := h.cat.PartitionedTopic(t.Base().String()); found {
		if meta.Properties == nil {
			meta.Properties = map[string]string{}
		}
		return ok(w, meta.Properties)
	}
	tp, _ := h.cat.TopicPolicies(t.String())
	if tp.Properties == nil {
		tp.Properties = map[string]string{}
	}
	return ok(w, tp.Properties)
}

func (h *Handler) updateTopicProperties(r *http.Request, t naming.TopicName, fn func(map[string]string)) error {
	if _, found := h.cat.PartitionedTopic(t.Base().String()); found {
		return h.cat.UpdatePartitionedTopicWith(r.Context(), t.Base().String(), func(m *adminapi.PartitionedTopicMetadata) error {
			if m.Properties == nil {
				m.Properties = map[string]string{}
			}
			fn(m.Properties)
			return nil
		})
	}
	return h.cat.UpdateTopicPolicies(r.Context(), t.String(), func(tp *adminapi.TopicPolicies) error {
		if tp.Properties == nil {
			tp.Properties = map[string]string{}
		}
		fn(tp.Properties)
		if len(tp.Properties) == 0 {
			tp.Properties = nil
		}
		return nil
	})
}

func (h *Handler) topicPropertiesUpdate(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
	var props map[string]string
	if err := decodeBody(r, &props); err != nil {
		return err
	}
	if err := h.requireExistingTopic(r, t); err != nil {
		return err
	}
	if err := h.updateTopicProperties(r, t, func(m map[string]string) {
		for k, v := range props {
			m[k] = v
		}
	}); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) topicPropertiesRemove(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
	key := r.URL.Query().Get("key")
	if key == "" {
		return fail(http.StatusBadRequest, "Query parameter key is required")
	}
	if err := h.requireExistingTopic(r, t); err != nil {
		return err
	}
	if err := h.updateTopicProperties(r, t, func(m map[string]string) { delete(m, key) }); err != nil {
		return err
	}
	return noContent(w)
}

// ---- topic-level replication and backlog quotas (need the tenant and query parameters) ----

func (h *Handler) topicReplicationGet(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
	tp, _ := h.cat.TopicPolicies(t.String())
	if len(tp.ReplicationClusters) > 0 {
		return ok(w, tp.ReplicationClusters)
	}
	if queryBool(r, "applied") {
		p, _ := h.cat.Namespace(t.NamespaceName().String())
		return ok(w, p.ReplicationClusters)
	}
	return noContent(w)
}

func (h *Handler) topicReplicationSet(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
	var clusters []string
	if err := decodeBody(r, &clusters); err != nil {
		return err
	}
	if err := h.requireExistingTopic(r, t); err != nil {
		return err
	}
	clusters, err = h.cat.ValidateReplicationClusters(t.Tenant, clusters)
	if err != nil {
		return err
	}
	return h.storeTopicReplication(w, r, t, clusters)
}

func (h *Handler) topicReplicationRemove(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
	if err := h.requireExistingTopic(r, t); err != nil {
		return err
	}
	return h.storeTopicReplication(w, r, t, nil)
}

// storeTopicReplication stores a topic's replication clusters (nil: follow the namespace), brings the
// replicators in step and answers 204.
func (h *Handler) storeTopicReplication(w http.ResponseWriter, r *http.Request, t naming.TopicName, clusters []string) error {
	if err := h.cat.UpdateTopicPolicies(r.Context(), t.Base().String(), func(tp *adminapi.TopicPolicies) error {
		tp.ReplicationClusters = clusters
		return nil
	}); err != nil {
		return err
	}
	h.replicationApplied(r, t.NamespaceName().String())
	return noContent(w)
}

func (h *Handler) topicBacklogQuotaSet(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
	typ, err := backlogQuotaType(r)
	if err != nil {
		return err
	}
	var q adminapi.BacklogQuota
	if err := decodeBody(r, &q); err != nil {
		return err
	}
	q.Normalize()
	if q.Policy == "" {
		q.Policy = adminapi.BacklogPolicyProducerRequestHold
	}
	if err := catalog.ValidateBacklogQuota(q); err != nil {
		return err
	}
	if err := h.requireExistingTopic(r, t); err != nil {
		return err
	}
	if err := h.cat.UpdateTopicPolicies(r.Context(), t.Base().String(), func(tp *adminapi.TopicPolicies) error {
		if tp.BacklogQuotaMap == nil {
			tp.BacklogQuotaMap = map[string]adminapi.BacklogQuota{}
		}
		tp.BacklogQuotaMap[typ] = q
		return nil
	}); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) topicBacklogQuotaRemove(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicFromPath(r)
	if err != nil {
		return err
	}
	typ, err := backlogQuotaType(r)
	if err != nil {
		return err
	}
	if err := h.requireExistingTopic(r, t); err != nil {
		return err
	}
	if err := h.cat.UpdateTopicPolicies(r.Context(), t.Base().String(), func(tp *adminapi.TopicPolicies) error {
		delete(tp.BacklogQuotaMap, typ)
		if len(tp.BacklogQuotaMap) == 0 {
			tp.BacklogQuotaMap = nil
		}
		return nil
	}); err != nil {
		return err
	}
	return noContent(w)
}
