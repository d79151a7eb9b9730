package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/catalog"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/schema"
	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/wire"
)

// topicService adapts the broker core to admin.TopicService. Names are full topic names of
// non-partitioned topics or single partitions (the admin layer fans out partitioned topics).
type topicService struct {
	broker *broker.Broker
	cat    *catalog.Catalog
	repl   *replication.Manager // nil: no replication stats
	schema *schema.Registry     // nil: no schemas to delete with their topic
	member *clusterMember       // nil: a cluster of one broker (no topic registry to update)
}

var _ admin.TopicService = topicService{}

// adminErr translates broker errors into the admin package's sentinels (which carry Pulsar's HTTP
// status and reason); notFound is the sentinel for "missing" in this operation's context.
func adminErr(err error, busy error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, broker.ErrTopicNotFound), errors.Is(err, broker.ErrNamespaceNotFound):
		return fmt.Errorf("%w: %s", admin.ErrTopicNotFound, withoutSentinel(err, broker.ErrNamespaceNotFound, broker.ErrTopicNotFound))
	case errors.Is(err, broker.ErrSubscriptionNotFound):
		return fmt.Errorf("%w: %s", admin.ErrSubscriptionNotFound, withoutSentinel(err, broker.ErrSubscriptionNotFound))
	case errors.Is(err, broker.ErrNotAllowed) && busy != nil:
		return fmt.Errorf("%w: %v", busy, err)
	case errors.Is(err, broker.ErrInvalidRequest), errors.Is(err, naming.ErrInvalidName):
		return fmt.Errorf("%w: %v", admin.ErrInvalidArgument, err)
	case errors.Is(err, broker.ErrServiceNotReady), errors.Is(err, broker.ErrBrokerClosed), errors.Is(err, broker.ErrTopicFenced):
		return fmt.Errorf("%w: %v", admin.ErrNotReady, err)
	}
	return err
}

// withoutSentinel is err's text without the trailing text of the first of sentinels it ends with:
// the admin sentinel in front already says "not found", so the reason says it once ("Topic not
// found: topic persistent://public/default/t").
func withoutSentinel(err error, sentinels ...error) string {
	s := err.Error()
	for _, sn := range sentinels {
		if t, ok := strings.CutSuffix(s, ": "+sn.Error()); ok {
			return t
		}
	}
	return s
}

func parseAdminTopic(topic string) (naming.TopicName, error) {
	t, err := naming.ParseTopic(topic)
	if err != nil {
		return naming.TopicName{}, fmt.Errorf("%w: %v", admin.ErrInvalidArgument, err)
	}
	return t, nil
}

// topic returns the existing topic, loading it if needed, without creating it.
func (s topicService) topic(ctx context.Context, topic string) (*broker.Topic, naming.TopicName, error) {
	name, err := parseAdminTopic(topic)
	if err != nil {
		return nil, name, err
	}
	t, err := s.broker.GetTopic(ctx, name, false)
	if err != nil {
		return nil, name, adminErr(err, nil)
	}
	return t, name, nil
}

func (s topicService) ListTopics(ctx context.Context, namespace string) ([]string, error) {
	ns, err := naming.ParseNamespace(namespace)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", admin.ErrInvalidArgument, err)
	}
	topics, err := s.broker.ListTopics(ctx, ns)
	if err != nil && !errors.Is(err, broker.ErrNamespaceNotFound) {
		return nil, adminErr(err, nil)
	}
	out := make([]string, 0, len(topics))
	for _, t := range topics {
		out = append(out, t.String())
	}
	return out, nil
}

func (s topicService) CreateTopic(ctx context.Context, topic string, properties map[string]string) error {
	name, err := parseAdminTopic(topic)
	if err != nil {
		return err
	}
	if s.member != nil {
		// A topic another broker owns is created there (a partitioned topic's partitions,
		// created through this broker): creating it here would put its data on the wrong broker.
		if base, remote, err := s.member.ownerForCreate(ctx, name); remote {
			if err != nil {
				return err
			}
			return s.member.remoteCreate(ctx, base, name)
		}
	}
	if err := s.broker.CreateTopic(ctx, name); err != nil {
		return adminErr(err, admin.ErrTopicExists)
	}
	if s.member != nil {
		s.member.register(ctx, name)
	}
	if len(properties) > 0 {
		return s.cat.UpdateTopicPolicies(ctx, name.String(), func(p *adminapi.TopicPolicies) error {
			p.Properties = properties
			return nil
		})
	}
	return nil
}

func (s topicService) DeleteTopic(ctx context.Context, topic string, force bool) error {
	name, err := parseAdminTopic(topic)
	if err != nil {
		return err
	}
	if s.member != nil {
		// A topic another broker owns is deleted there (a partitioned topic or a namespace
		// deleted here).
		if base, remote, err := s.member.remoteTopic(name); remote {
			if err != nil {
				return err
			}
			return s.member.remoteDelete(ctx, base, name, force)
		}
	}
	if err := s.broker.DeleteTopic(ctx, name, force); err != nil {
		return adminErr(err, admin.ErrTopicBusy)
	}
	if s.member != nil {
		s.member.forget(ctx, name)
	}
	// As Pulsar, a deleted topic takes its schema with it. A partition's schema belongs to its
	// partitioned topic, which the admin layer deletes as a whole.
	if s.schema != nil && !name.IsPartition() {
		if _, err := s.schema.Delete(ctx, name, true); err != nil && !errors.Is(err, schema.ErrNotFound) {
			return fmt.Errorf("topic deleted, but not its schema: %w", err)
		}
	}
	return nil
}

func (s topicService) TopicStats(ctx context.Context, topic string, opts adminapi.GetStatsOptions) (adminapi.TopicStats, error) {
	if s.member != nil {
		// A topic another broker owns (a partitioned topic's stats asked here).
		if name, err := parseAdminTopic(topic); err == nil {
			if base, remote, err := s.member.remoteTopic(name); remote {
				if err != nil {
					return adminapi.TopicStats{}, err
				}
				return s.member.remoteStats(ctx, base, name, opts)
			}
		}
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return adminapi.TopicStats{}, err
	}
	out := adminTopicStats(t.Stats())
	if s.repl != nil {
		// This cluster's own replicators apart from the clusters replicating into this topic; the
		// inbound connections come from the replicator producers attached here (read before
		// ExcludePublishers clears them).
		outbound, inbound := s.repl.AdminStats(topic)
		out.Replication, out.InboundReplication = replication.SplitInbound(outbound, inbound, out.Publishers)
		addSubscriptionSyncStats(s.repl, topic, &out)
	}
	if opts.ExcludePublishers {
		out.Publishers = nil
	}
	if opts.ExcludeConsumers {
		for name, sub := range out.Subscriptions {
			sub.Consumers = nil
			out.Subscriptions[name] = sub
		}
	}
	return out, nil
}

func (s topicService) InternalStats(ctx context.Context, topic string) (adminapi.PersistentTopicInternalStats, error) {
	if o, ok := s.elsewhere(topic); ok {
		return forwarded[adminapi.PersistentTopicInternalStats](ctx, o, http.MethodGet, "/internalStats", nil)
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return adminapi.PersistentTopicInternalStats{}, err
	}
	return adminInternalStats(t.InternalStats()), nil
}

func messageID(p mtypes.Position, name naming.TopicName) adminapi.MessageID {
	return adminapi.MessageID{LedgerID: p.LedgerID, EntryID: p.EntryID, PartitionIndex: name.PartitionIndex, BatchIndex: -1}
}

func (s topicService) LastMessageID(ctx context.Context, topic string) (adminapi.MessageID, error) {
	if o, ok := s.elsewhere(topic); ok {
		return forwarded[adminapi.MessageID](ctx, o, http.MethodGet, "/lastMessageId", nil)
	}
	t, name, err := s.topic(ctx, topic)
	if err != nil {
		return adminapi.MessageID{}, err
	}
	return messageID(t.LastPosition(), name), nil
}

func (s topicService) MessageIDByTimestamp(ctx context.Context, topic string, ts int64) (adminapi.MessageID, error) {
	if o, ok := s.elsewhere(topic); ok {
		return forwarded[adminapi.MessageID](ctx, o, http.MethodGet, "/messageid/"+strconv.FormatInt(ts, 10), nil)
	}
	t, name, err := s.topic(ctx, topic)
	if err != nil {
		return adminapi.MessageID{}, err
	}
	p, err := t.MessageIDByTimestamp(ctx, ts)
	if err != nil {
		return adminapi.MessageID{}, adminErr(err, nil)
	}
	return messageID(p, name), nil
}

func (s topicService) Unload(ctx context.Context, topic string) error {
	if o, ok := s.elsewhere(topic); ok {
		return o.do(ctx, http.MethodPut, "/unload", nil)
	}
	name, err := parseAdminTopic(topic)
	if err != nil {
		return err
	}
	return adminErr(s.broker.UnloadTopic(ctx, name), nil)
}

func (s topicService) Subscriptions(ctx context.Context, topic string) ([]string, error) {
	if o, ok := s.elsewhere(topic); ok {
		return forwarded[[]string](ctx, o, http.MethodGet, "/subscriptions", nil)
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return nil, err
	}
	return t.Subscriptions(), nil
}

func position(id adminapi.MessageID) mtypes.Position {
	return mtypes.Position{LedgerID: id.LedgerID, EntryID: id.EntryID}
}

func (s topicService) CreateSubscription(ctx context.Context, topic, sub string, start adminapi.MessageID, replicated bool, props map[string]string) error {
	if s.member != nil {
		// A topic another broker owns (a partitioned topic's subscription created here).
		if name, err := parseAdminTopic(topic); err == nil {
			if base, remote, err := s.member.remoteTopic(name); remote {
				if err != nil {
					return err
				}
				return s.member.remoteCreateSubscription(ctx, base, name, sub, start, replicated, props)
			}
		}
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return err
	}
	return adminErr(t.CreateSubscriptionWithProperties(ctx, sub, position(start), replicated, props), admin.ErrSubscriptionExists)
}

var _ admin.SubscriptionProperties = topicService{}

func (s topicService) SubscriptionProperties(ctx context.Context, topic, sub string) (map[string]string, error) {
	if o, ok := s.elsewhere(topic); ok {
		return forwarded[map[string]string](ctx, o, http.MethodGet, subscriptionPath(sub, "/properties"), nil)
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return nil, err
	}
	props, err := t.SubscriptionProperties(sub)
	if err != nil {
		return nil, adminErr(err, nil)
	}
	if props == nil {
		props = map[string]string{}
	}
	return props, nil
}

func (s topicService) SetSubscriptionProperties(ctx context.Context, topic, sub string, props map[string]string) error {
	if o, ok := s.elsewhere(topic); ok {
		if props == nil {
			props = map[string]string{}
		}
		return o.do(ctx, http.MethodPut, subscriptionPath(sub, "/properties"), props)
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return err
	}
	return adminErr(t.SetSubscriptionProperties(ctx, sub, props), nil)
}

func (s topicService) DeleteSubscription(ctx context.Context, topic, sub string, force bool) error {
	if s.member != nil {
		if name, err := parseAdminTopic(topic); err == nil {
			if base, remote, err := s.member.remoteTopic(name); remote {
				if err != nil {
					return err
				}
				return s.member.remoteDeleteSubscription(ctx, base, name, sub, force)
			}
		}
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return err
	}
	return adminErr(t.DeleteSubscription(ctx, sub, force), admin.ErrSubscriptionBusy)
}

func (s topicService) ResetCursor(ctx context.Context, topic, sub string, id adminapi.MessageID) error {
	if o, ok := s.elsewhere(topic); ok {
		return o.do(ctx, http.MethodPost, subscriptionPath(sub, "/resetcursor"), id)
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return err
	}
	return adminErr(t.ResetSubscription(ctx, sub, position(id)), nil)
}

func (s topicService) ResetCursorToTime(ctx context.Context, topic, sub string, ts int64) error {
	if o, ok := s.elsewhere(topic); ok {
		return o.do(ctx, http.MethodPost, subscriptionPath(sub, "/resetcursor/"+strconv.FormatInt(ts, 10)), nil)
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return err
	}
	return adminErr(t.ResetSubscriptionByTime(ctx, sub, ts), nil)
}

func (s topicService) SkipMessages(ctx context.Context, topic, sub string, n int64) error {
	if o, ok := s.elsewhere(topic); ok {
		return o.do(ctx, http.MethodPost, subscriptionPath(sub, "/skip/"+strconv.FormatInt(n, 10)), nil)
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return err
	}
	return adminErr(t.Skip(ctx, sub, int(n)), nil)
}

func (s topicService) ClearBacklog(ctx context.Context, topic, sub string) error {
	if o, ok := s.elsewhere(topic); ok {
		return o.do(ctx, http.MethodPost, subscriptionPath(sub, "/skip_all"), nil)
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return err
	}
	return adminErr(t.SkipAll(ctx, sub), nil)
}

func (s topicService) ExpireMessages(ctx context.Context, topic, sub string, seconds int64) error {
	if o, ok := s.elsewhere(topic); ok {
		if seconds < 0 {
			return errNegativeSeconds(seconds)
		}
		return o.do(ctx, http.MethodPost, subscriptionPath(sub, "/expireMessages/"+strconv.FormatInt(seconds, 10)), nil)
	}
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return err
	}
	if seconds < 0 {
		return errNegativeSeconds(seconds)
	}
	return adminErr(t.ExpireMessages(ctx, sub, durationOf(seconds, time.Second)), nil)
}

func (s topicService) PeekMessage(ctx context.Context, topic, sub string, n int) (adminapi.RawMessage, error) {
	if o, ok := s.elsewhere(topic); ok {
		if n < 1 {
			return adminapi.RawMessage{}, errPeekPosition(n)
		}
		return o.rawMessage(ctx, subscriptionPath(sub, "/position/"+strconv.Itoa(n)))
	}
	t, name, err := s.topic(ctx, topic)
	if err != nil {
		return adminapi.RawMessage{}, err
	}
	if n < 1 {
		return adminapi.RawMessage{}, errPeekPosition(n)
	}
	e, found, err := t.PeekEntry(ctx, sub, n)
	if errors.Is(err, broker.ErrSubscriptionNotFound) && t.Ledger() != nil {
		// Pulsar peeks a subscription that does not exist like a reader from the first entry
		// (pulsaradmin's TestPeekMessagesWithProperties relies on it).
		e, found, err := nthEntry(ctx, t.Ledger(), n)
		if err != nil {
			return adminapi.RawMessage{}, adminErr(err, nil)
		}
		if !found {
			return adminapi.RawMessage{}, fmt.Errorf("%w: the topic holds fewer than %d entries", admin.ErrMessageNotFound, n)
		}
		return rawMessage(e, name)
	}
	if err != nil {
		return adminapi.RawMessage{}, adminErr(err, nil)
	}
	if !found {
		return adminapi.RawMessage{}, fmt.Errorf("%w: the backlog holds fewer than %d entries", admin.ErrMessageNotFound, n)
	}
	return rawMessage(e, name)
}

// nthEntry returns the n-th (1-based) stored entry, reading in bounded chunks so that peeking far
// into a topic of large messages never holds more than one chunk.
func nthEntry(ctx context.Context, l *storage.Ledger, n int) (mtypes.Entry, bool, error) {
	const chunkEntries, chunkBytes = 64, 8 << 20
	from := l.FirstPosition()
	for n > 0 {
		es, err := l.Read(ctx, from, min(n, chunkEntries), chunkBytes)
		if err != nil {
			return mtypes.Entry{}, false, err
		}
		if len(es) == 0 {
			return mtypes.Entry{}, false, nil
		}
		if len(es) >= n {
			return es[n-1], true, nil
		}
		n -= len(es)
		last := es[len(es)-1].Position
		from = mtypes.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	}
	return mtypes.Entry{}, false, nil
}

func (s topicService) GetMessageByID(ctx context.Context, topic string, ledgerID, entryID int64) (adminapi.RawMessage, error) {
	if o, ok := s.elsewhere(topic); ok {
		return o.rawMessage(ctx, "/ledger/"+strconv.FormatInt(ledgerID, 10)+"/entry/"+strconv.FormatInt(entryID, 10))
	}
	t, name, err := s.topic(ctx, topic)
	if err != nil {
		return adminapi.RawMessage{}, err
	}
	e, err := t.ReadEntry(ctx, mtypes.Position{LedgerID: ledgerID, EntryID: entryID})
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return adminapi.RawMessage{}, fmt.Errorf("%w: %d:%d", admin.ErrMessageNotFound, ledgerID, entryID)
		}
		return adminapi.RawMessage{}, adminErr(err, nil)
	}
	return rawMessage(e, name)
}

// rawMessage decodes a stored entry for the admin API.
func rawMessage(e mtypes.Entry, name naming.TopicName) (adminapi.RawMessage, error) {
	parts, err := wire.ParseEntry(e.Data)
	if err != nil {
		return adminapi.RawMessage{}, fmt.Errorf("entry %s: %w", e.Position, err)
	}
	md, err := wire.DecodeMetadata(e.Data)
	if err != nil {
		return adminapi.RawMessage{}, fmt.Errorf("entry %s: %w", e.Position, err)
	}
	m := adminapi.RawMessage{
		ID:               messageID(e.Position, name),
		Payload:          parts.Body,
		PublishTime:      int64(md.GetPublishTime()),
		EventTime:        int64(md.GetEventTime()),
		Batched:          md.NumMessagesInBatch != nil,
		NumBatchMessages: int(md.GetNumMessagesInBatch()),
		PartitionKey:     md.GetPartitionKey(),
		ProducerName:     md.GetProducerName(),
		SequenceID:       int64(md.GetSequenceId()),
		ReplicatedFrom:   md.GetReplicatedFrom(),
		Compression:      md.GetCompression().String(),
		UncompressedSize: int(md.GetUncompressedSize()),
	}
	if len(md.GetProperties()) > 0 {
		m.Properties = make(map[string]string, len(md.GetProperties()))
		for _, kv := range md.GetProperties() {
			m.Properties[kv.GetKey()] = kv.GetValue()
		}
	}
	return m, nil
}

var _ admin.TopicTerminator = topicService{}

// Terminate seals the topic (admin terminate): producers are refused, consumers drain.
func (s topicService) Terminate(ctx context.Context, topic string) (adminapi.MessageID, error) {
	if o, ok := s.elsewhere(topic); ok {
		return forwarded[adminapi.MessageID](ctx, o, http.MethodPost, "/terminate", nil)
	}
	t, name, err := s.topic(ctx, topic)
	if err != nil {
		return adminapi.MessageID{}, err
	}
	p, err := t.Terminate(ctx)
	if err != nil {
		return adminapi.MessageID{}, adminErr(err, nil)
	}
	return messageID(p, name), nil
}

// TranslateFrom implements admin.PositionTranslator through the replication manager.
func (s topicService) TranslateFrom(ctx context.Context, topic, cluster string, origin adminapi.MessageID, atOrBefore bool) (local, mapped adminapi.MessageID, exact, found bool, err error) {
	_, name, err := s.topic(ctx, topic) // loads the topic, and with it its inbound index
	if err != nil {
		return local, mapped, false, false, err
	}
	if s.repl == nil {
		return local, mapped, false, false, nil
	}
	m, ok := s.repl.TranslateFrom(name.String(), cluster, position(origin), atOrBefore)
	if !ok {
		return local, mapped, false, false, nil
	}
	local = messageID(m.Local, name)
	mapped = adminapi.MessageID{LedgerID: m.Origin.LedgerID, EntryID: m.Origin.EntryID, PartitionIndex: origin.PartitionIndex}
	return local, mapped, m.Exact, true, nil
}

// ReceiveAdvertisement implements admin.AdvertisementService.
func (s topicService) ReceiveAdvertisement(_ context.Context, adv adminapi.ReplicationAdvertisement) error {
	if s.repl == nil {
		return errors.New("replication is not running on this broker")
	}
	return s.repl.ReceiveAdvertisement(adv)
}

// SourceStates implements admin.AdvertisementService: it loads each advertised topic first, so that
// its inbound index says what arrived.
func (s topicService) SourceStates(ctx context.Context, namespace string) ([]adminapi.SourceTopicState, error) {
	if s.repl == nil {
		return nil, nil
	}
	for _, topic := range s.repl.AdvertisedTopics(namespace) {
		_, _, _ = s.topic(ctx, topic) // a topic that does not exist here: nothing arrived
	}
	return s.repl.SourceStates(namespace), nil
}
