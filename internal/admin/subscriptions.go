package admin

import (
	"context"
	"encoding/json"
	"errors"
	"math"
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
	h.handle("GET "+base+"/subscriptions", readEndpoint(h.topicOpOf, subscriptionsList))
	h.handle("PUT "+sub, writeEndpoint(h.topicOpOf, subscriptionCreate))
	h.handle("DELETE "+sub, writeEndpoint(h.topicOpOf, func(r *http.Request, op topicOp) error {
		force := queryBool(r, "force")
		return eachWithSubscription(op.names(), func(topic string) error {
			return op.svc.DeleteSubscription(r.Context(), topic, r.PathValue("subscription"), force)
		})
	}))
	h.handle("POST "+sub+"/resetcursor", writeEndpoint(h.topicOpOf, subscriptionResetToID))
	h.handle("POST "+sub+"/resetcursor/{timestamp}", writeEndpoint(h.topicOpOf, func(r *http.Request, op topicOp) error {
		ts, err := pathInt(r, "timestamp", math.MinInt64, math.MaxInt64, http.StatusBadRequest, "Invalid timestamp %q")
		if err != nil {
			return err
		}
		return op.each(r.Context(), func(ctx context.Context, topic string) error {
			return op.svc.ResetCursorToTime(ctx, topic, r.PathValue("subscription"), ts)
		})
	}))
	h.handle("POST "+sub+"/skip/{n}", writeEndpoint(h.topicOpOf, func(r *http.Request, op topicOp) error {
		n, err := pathInt(r, "n", 0, math.MaxInt64, http.StatusBadRequest, "Invalid number of messages %q")
		if err != nil {
			return err
		}
		if len(op.targets) > 1 {
			return fail(http.StatusMethodNotAllowed, "Skip messages on a partitioned topic is not allowed")
		}
		return op.svc.SkipMessages(r.Context(), op.targets[0].String(), r.PathValue("subscription"), n)
	}))
	h.handle("POST "+sub+"/skip_all", writeEndpoint(h.topicOpOf, func(r *http.Request, op topicOp) error {
		return op.each(r.Context(), func(ctx context.Context, topic string) error {
			return op.svc.ClearBacklog(ctx, topic, r.PathValue("subscription"))
		})
	}))
	h.handle("POST "+sub+"/expireMessages/{seconds}", writeEndpoint(h.topicOpOf, func(r *http.Request, op topicOp) error {
		secs, err := expireSeconds(r)
		if err != nil {
			return err
		}
		return op.each(r.Context(), func(ctx context.Context, topic string) error {
			return op.svc.ExpireMessages(ctx, topic, r.PathValue("subscription"), secs)
		})
	}))
	h.handle("POST "+base+"/all_subscription/expireMessages/{seconds}", writeEndpoint(h.topicOpOf, subscriptionExpireAll))
	h.handle("GET "+sub+"/position/{n}", endpoint(h.topicOpOf, subscriptionPeek, writeRawMessage))
	h.handle("GET "+base+"/ledger/{ledger}/entry/{entry}", endpoint(h.topicCallOf, h.messageByID, writeRawMessage))
	h.subscriptionPropertiesRoutes(sub)
	h.replicatedSubscriptionRoutes(sub)
}

// subscriptionsList answers the subscriptions of the topic (of all its partitions), sorted.
func subscriptionsList(r *http.Request, op topicOp) ([]string, error) {
	set := map[string]struct{}{}
	err := op.each(r.Context(), func(ctx context.Context, topic string) error {
		subs, err := op.svc.Subscriptions(ctx, topic)
		for _, s := range subs {
			set[s] = struct{}{}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

// resetCursorData is Pulsar's ResetCursorData: a message id with isExcluded, batchIndex and
// properties. It stays an unnamed struct type: decoding errors name the type, and clients see them.
type resetCursorData = struct {
	adminapi.MessageID
	IsExcluded bool              `json:"isExcluded"`
	Properties map[string]string `json:"properties"`
}

func subscriptionCreate(r *http.Request, op topicOp) error {
	start := adminapi.Latest
	var props map[string]string
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(string(b)); s != "" && s != "null" {
		var body resetCursorData
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
	if len(op.targets) > 1 && start.PartitionIndex >= 0 && !start.IsLatest() && !start.IsEarliest() {
		// A position names one partition; the others start at the latest message.
		for _, p := range op.targets {
			pos := adminapi.Latest
			if p.PartitionIndex == start.PartitionIndex {
				pos = start
			}
			if err := op.svc.CreateSubscription(r.Context(), p.String(), name, pos, replicated, props); err != nil && !errors.Is(err, ErrTopicNotFound) {
				return err
			}
		}
		return nil
	}
	return op.each(r.Context(), func(ctx context.Context, topic string) error {
		return op.svc.CreateSubscription(ctx, topic, name, start, replicated, props)
	})
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

func subscriptionResetToID(r *http.Request, op topicOp) error {
	var body resetCursorData
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	id := body.MessageID
	targets := op.targets
	if len(targets) > 1 || op.partitioned {
		if id.PartitionIndex < 0 || id.PartitionIndex >= len(targets) {
			return fail(http.StatusPreconditionFailed, "Reset cursor on a partitioned topic needs the partitionIndex of the message id")
		}
		targets = []naming.TopicName{targets[id.PartitionIndex]}
	}
	return op.svc.ResetCursor(r.Context(), targets[0].String(), r.PathValue("subscription"), id)
}

func subscriptionExpireAll(r *http.Request, op topicOp) error {
	secs, err := expireSeconds(r)
	if err != nil {
		return err
	}
	return op.each(r.Context(), func(ctx context.Context, topic string) error {
		subs, err := op.svc.Subscriptions(ctx, topic)
		if err != nil {
			return err
		}
		for _, s := range subs {
			if err := op.svc.ExpireMessages(ctx, topic, s, secs); err != nil && !errors.Is(err, ErrSubscriptionNotFound) {
				return err
			}
		}
		return nil
	})
}

// expireSeconds reads expireMessages' {seconds}: 0 to math.MaxInt32, the range of Pulsar's int
// parameter. The broker multiplies it into nanoseconds, where a larger value could wrap into a tiny
// or negative age and expire the whole backlog.
func expireSeconds(r *http.Request) (int64, error) {
	return pathInt(r, "seconds", 0, math.MaxInt32, http.StatusBadRequest, "Invalid expiration time %q")
}

func subscriptionPeek(r *http.Request, op topicOp) (adminapi.RawMessage, error) {
	n, err := pathInt(r, "n", 1, math.MaxInt64, http.StatusPreconditionFailed, "Invalid message position %q: positions start at 1")
	if err != nil {
		return adminapi.RawMessage{}, err
	}
	if n > MaxPeekPosition {
		return adminapi.RawMessage{}, fail(http.StatusPreconditionFailed, "Message position %d is beyond the peek limit of %d; reset a subscription or read by id instead", n, MaxPeekPosition)
	}
	if len(op.targets) > 1 || op.partitioned {
		return adminapi.RawMessage{}, fail(http.StatusMethodNotAllowed, "Peek messages on a partitioned topic is not allowed; peek its partitions")
	}
	return op.svc.PeekMessage(r.Context(), op.targets[0].String(), r.PathValue("subscription"), int(n))
}

func (h *Handler) messageByID(r *http.Request, c topicCall) (adminapi.RawMessage, error) {
	ledger, err1 := strconv.ParseInt(r.PathValue("ledger"), 10, 64)
	entry, err2 := strconv.ParseInt(r.PathValue("entry"), 10, 64)
	if err1 != nil || err2 != nil {
		return adminapi.RawMessage{}, fail(http.StatusBadRequest, "Invalid ledger or entry id")
	}
	if h.partitionsOf(c.topic) != nil {
		return adminapi.RawMessage{}, fail(http.StatusMethodNotAllowed, "Get message by id on a partitioned topic is not allowed; use a partition")
	}
	return c.svc.GetMessageByID(r.Context(), c.topic.String(), ledger, entry)
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
