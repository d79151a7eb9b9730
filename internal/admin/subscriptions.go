package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
)

// MaxPeekPosition bounds peek positions, so a request cannot make the broker walk an unbounded backlog.
const MaxPeekPosition = 1000

func (h *Handler) subscriptionRoutes(base string) {
	sub := base + "/subscription/{subscription}"
	h.handle("GET "+base+"/subscriptions", h.subscriptionsList)
	h.handle("PUT "+sub, h.subscriptionCreate)
	h.handle("DELETE "+sub, h.subscriptionDelete)
	h.handle("POST "+sub+"/resetcursor", h.subscriptionResetToID)
	h.handle("POST "+sub+"/resetcursor/{timestamp}", h.subscriptionResetToTime)
	h.handle("POST "+sub+"/skip/{n}", h.subscriptionSkip)
	h.handle("POST "+sub+"/skip_all", h.subscriptionSkipAll)
	h.handle("POST "+sub+"/expireMessages/{seconds}", h.subscriptionExpire)
	h.handle("POST "+base+"/all_subscription/expireMessages/{seconds}", h.subscriptionExpireAll)
	h.handle("GET "+sub+"/position/{n}", h.subscriptionPeek)
	h.handle("GET "+base+"/ledger/{ledger}/entry/{entry}", h.messageByID)
	h.subscriptionPropertiesRoutes(sub)
	h.replicatedSubscriptionRoutes(sub)
}

// topicTargets resolves the path's topic to the topics an operation applies to: the partitions of a
// partitioned topic, or the topic itself. It checks the namespace and the topic service.
func (h *Handler) topicTargets(r *http.Request) (naming.TopicName, []naming.TopicName, TopicService, error) {
	t, err := h.topicFromPath(r)
	if err != nil {
		return t, nil, nil, err
	}
	if err := h.requireTopicNamespace(t); err != nil {
		return t, nil, nil, err
	}
	svc, err := h.topics()
	if err != nil {
		return t, nil, nil, err
	}
	targets := h.partitionsOf(t)
	if targets == nil {
		targets = []naming.TopicName{t}
	}
	return t, targets, svc, nil
}

// eachTarget runs fn on every target; on a partitioned topic, partitions not created yet are skipped.
func eachTarget(ctx context.Context, targets []naming.TopicName, fn func(ctx context.Context, topic string) error) error {
	for _, p := range targets {
		if err := fn(ctx, p.String()); err != nil {
			if len(targets) > 1 && errors.Is(err, ErrTopicNotFound) {
				continue
			}
			return err
		}
	}
	return nil
}

func (h *Handler) subscriptionsList(w http.ResponseWriter, r *http.Request) error {
	_, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return err
	}
	set := map[string]struct{}{}
	err = eachTarget(r.Context(), targets, func(ctx context.Context, topic string) error {
		subs, err := svc.Subscriptions(ctx, topic)
		for _, s := range subs {
			set[s] = struct{}{}
		}
		return err
	})
	if err != nil {
		return err
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return ok(w, out)
}

func (h *Handler) subscriptionCreate(w http.ResponseWriter, r *http.Request) error {
	_, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return err
	}
	start := adminapi.Latest
	var props map[string]string
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(string(b)); s != "" && s != "null" {
		// Pulsar's ResetCursorData also carries isExcluded, batchIndex and properties.
		var body struct {
			adminapi.MessageID
			IsExcluded bool              `json:"isExcluded"`
			Properties map[string]string `json:"properties"`
		}
		if err := decodeBytes(b, &body); err != nil {
			return err
		}
		start, props = body.MessageID, body.Properties
	}
	replicated := queryBool(r, "replicated")
	name := r.PathValue("subscription")
	if err := checkSubscription(name, props); err != nil {
		return err
	}
	if len(targets) > 1 && start.PartitionIndex >= 0 && !start.IsLatest() && !start.IsEarliest() {
		// A position names one partition; the others start at the latest message.
		for _, p := range targets {
			pos := adminapi.Latest
			if p.PartitionIndex == start.PartitionIndex {
				pos = start
			}
			if err := svc.CreateSubscription(r.Context(), p.String(), name, pos, replicated, props); err != nil && !errors.Is(err, ErrTopicNotFound) {
				return err
			}
		}
		return noContent(w)
	}
	if err := eachTarget(r.Context(), targets, func(ctx context.Context, topic string) error {
		return svc.CreateSubscription(ctx, topic, name, start, replicated, props)
	}); err != nil {
		return err
	}
	return noContent(w)
}

// checkSubscription applies the limits on subscription names and properties (docs/admin.md).
func checkSubscription(name string, props map[string]string) error {
	if name == "" {
		return fail(http.StatusPreconditionFailed, "Subscription name is empty")
	}
	if err := wire.CheckName("subscription", name); err != nil {
		return fail(http.StatusPreconditionFailed, "Invalid subscription name: %v", err)
	}
	if err := wire.CheckProperties("subscription", props); err != nil {
		return fail(http.StatusPreconditionFailed, "Invalid subscription properties: %v", err)
	}
	return nil
}

func (h *Handler) subscriptionDelete(w http.ResponseWriter, r *http.Request) error {
	_, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return err
	}
	name, force := r.PathValue("subscription"), queryBool(r, "force")
	deleted := 0
	err = eachTarget(r.Context(), targets, func(ctx context.Context, topic string) error {
		err := svc.DeleteSubscription(ctx, topic, name, force)
		if err == nil {
			deleted++
		}
		if len(targets) > 1 && errors.Is(err, ErrSubscriptionNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if deleted == 0 {
		return fail(http.StatusNotFound, "Subscription not found")
	}
	return noContent(w)
}

func (h *Handler) subscriptionResetToID(w http.ResponseWriter, r *http.Request) error {
	t, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return err
	}
	var body struct {
		adminapi.MessageID
		IsExcluded bool              `json:"isExcluded"`
		Properties map[string]string `json:"properties"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	id := body.MessageID
	name := r.PathValue("subscription")
	if len(targets) > 1 || h.partitionsOf(t) != nil {
		if id.PartitionIndex < 0 || id.PartitionIndex >= len(targets) {
			return fail(http.StatusPreconditionFailed, "Reset cursor on a partitioned topic needs the partitionIndex of the message id")
		}
		targets = []naming.TopicName{targets[id.PartitionIndex]}
	}
	if err := svc.ResetCursor(r.Context(), targets[0].String(), name, id); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) subscriptionResetToTime(w http.ResponseWriter, r *http.Request) error {
	_, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return err
	}
	ts, err := strconv.ParseInt(r.PathValue("timestamp"), 10, 64)
	if err != nil {
		return fail(http.StatusBadRequest, "Invalid timestamp %q", r.PathValue("timestamp"))
	}
	name := r.PathValue("subscription")
	if err := eachTarget(r.Context(), targets, func(ctx context.Context, topic string) error {
		return svc.ResetCursorToTime(ctx, topic, name, ts)
	}); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) subscriptionSkip(w http.ResponseWriter, r *http.Request) error {
	_, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 0 {
		return fail(http.StatusBadRequest, "Invalid number of messages %q", r.PathValue("n"))
	}
	if len(targets) > 1 {
		return fail(http.StatusMethodNotAllowed, "Skip messages on a partitioned topic is not allowed")
	}
	if err := svc.SkipMessages(r.Context(), targets[0].String(), r.PathValue("subscription"), n); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) subscriptionSkipAll(w http.ResponseWriter, r *http.Request) error {
	_, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return err
	}
	name := r.PathValue("subscription")
	if err := eachTarget(r.Context(), targets, func(ctx context.Context, topic string) error {
		return svc.ClearBacklog(ctx, topic, name)
	}); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) subscriptionExpire(w http.ResponseWriter, r *http.Request) error {
	_, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return err
	}
	secs, err := strconv.ParseInt(r.PathValue("seconds"), 10, 64)
	if err != nil || secs < 0 {
		return fail(http.StatusBadRequest, "Invalid expiration time %q", r.PathValue("seconds"))
	}
	name := r.PathValue("subscription")
	if err := eachTarget(r.Context(), targets, func(ctx context.Context, topic string) error {
		return svc.ExpireMessages(ctx, topic, name, secs)
	}); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) subscriptionExpireAll(w http.ResponseWriter, r *http.Request) error {
	_, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return err
	}
	secs, err := strconv.ParseInt(r.PathValue("seconds"), 10, 64)
	if err != nil || secs < 0 {
		return fail(http.StatusBadRequest, "Invalid expiration time %q", r.PathValue("seconds"))
	}
	if err := eachTarget(r.Context(), targets, func(ctx context.Context, topic string) error {
		subs, err := svc.Subscriptions(ctx, topic)
		if err != nil {
			return err
		}
		for _, s := range subs {
			if err := svc.ExpireMessages(ctx, topic, s, secs); err != nil && !errors.Is(err, ErrSubscriptionNotFound) {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	return noContent(w)
}

func (h *Handler) subscriptionPeek(w http.ResponseWriter, r *http.Request) error {
	t, targets, svc, err := h.topicTargets(r)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		return fail(http.StatusPreconditionFailed, "Invalid message position %q: positions start at 1", r.PathValue("n"))
	}
	if n > MaxPeekPosition {
		return fail(http.StatusPreconditionFailed, "Message position %d is beyond the peek limit of %d; reset a subscription or read by id instead", n, MaxPeekPosition)
	}
	if len(targets) > 1 || h.partitionsOf(t) != nil {
		return fail(http.StatusMethodNotAllowed, "Peek messages on a partitioned topic is not allowed; peek its partitions")
	}
	m, err := svc.PeekMessage(r.Context(), targets[0].String(), r.PathValue("subscription"), n)
	if err != nil {
		return err
	}
	return writeRawMessage(w, m)
}

func (h *Handler) messageByID(w http.ResponseWriter, r *http.Request) error {
	t, err := h.topicInExistingNamespace(r)
	if err != nil {
		return err
	}
	svc, err := h.topics()
	if err != nil {
		return err
	}
	ledger, err1 := strconv.ParseInt(r.PathValue("ledger"), 10, 64)
	entry, err2 := strconv.ParseInt(r.PathValue("entry"), 10, 64)
	if err1 != nil || err2 != nil {
		return fail(http.StatusBadRequest, "Invalid ledger or entry id")
	}
	if h.partitionsOf(t) != nil {
		return fail(http.StatusMethodNotAllowed, "Get message by id on a partitioned topic is not allowed; use a partition")
	}
	m, err := svc.GetMessageByID(r.Context(), t.String(), ledger, entry)
	if err != nil {
		return err
	}
	return writeRawMessage(w, m)
}

// writeRawMessage answers a peeked message as Pulsar does: the payload as an octet stream and the
// metadata in X-Pulsar-* headers (properties both one header per key and as one JSON header).
func writeRawMessage(w http.ResponseWriter, m adminapi.RawMessage) error {
	hd := w.Header()
	id := m.ID
	if id.BatchIndex < 0 {
		id.BatchIndex = -1
	}
	hd.Set(adminapi.HeaderMessageID, strconv.FormatInt(id.LedgerID, 10)+":"+strconv.FormatInt(id.EntryID, 10)+":"+strconv.Itoa(id.PartitionIndex))
	// Times as Pulsar's broker formats them: ISO 8601 in UTC with milliseconds.
	if m.PublishTime > 0 {
		hd.Set(adminapi.HeaderPublishTime, adminapi.FormatHeaderTime(m.PublishTime))
	}
	if m.EventTime > 0 {
		hd.Set(adminapi.HeaderEventTime, adminapi.FormatHeaderTime(m.EventTime))
	}
	if m.Batched {
		hd.Set(adminapi.HeaderNumBatchMessage, strconv.Itoa(m.NumBatchMessages))
	}
	if len(m.Properties) > 0 {
		keys := make([]string, 0, len(m.Properties))
		for k := range m.Properties {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if validHeaderToken(k) {
				hd.Set(adminapi.HeaderPropertyPrefix+k, m.Properties[k])
			}
		}
		if b, err := json.Marshal(m.Properties); err == nil {
			hd.Set(adminapi.HeaderProperties, string(b))
		}
	}
	if m.PartitionKey != "" {
		hd.Set(adminapi.HeaderPartitionKey, m.PartitionKey)
	}
	if m.ProducerName != "" {
		hd.Set(adminapi.HeaderProducerName, m.ProducerName)
	}
	hd.Set(adminapi.HeaderSequenceID, strconv.FormatInt(m.SequenceID, 10))
	if m.ReplicatedFrom != "" {
		hd.Set(adminapi.HeaderReplicatedFrom, m.ReplicatedFrom)
	}
	if m.Compression != "" {
		hd.Set(adminapi.HeaderCompression, m.Compression)
		hd.Set(adminapi.HeaderUncompressed, strconv.Itoa(m.UncompressedSize))
	}
	hd.Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(m.Payload)
	return err
}

// validHeaderToken reports whether s can be part of a header name (RFC 7230 token characters).
func validHeaderToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}
